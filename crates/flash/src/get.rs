//! The get path: a key's item read from flash, confirmed under the shard lock, and moved
//! back to RAM when it is hot (within a bound) or about to change.
//!
//! ```text
//!   get ──Store::lookup──> FlashLoc(s) ──fetch──> buffered segment: copy under the lock
//!                                           └──> device: one read of its blocks (reader) ─>
//!                                                checksum, key ─> Fetch::Item
//!        ──Store::flash_found: still indexed there? not expired? ─> serve (or promote)
//! ```
//!
//! A damaged or unreadable copy is forgotten (a miss, never wrong bytes); a read that could
//! not be done is a miss this once, and changes nothing.
//!
//! Non-goals: no device reads of its own (the `reader` engines do them), no index (the
//! store's is the only one).

use std::io;
use std::sync::atomic::Ordering::Relaxed;

use cairn_store::{FlashFound, FlashLoc, FlashTier, Item, Lookup, Promote, ReadOutcome, Store};

use crate::format::{self, BLOCK};
use crate::reader;
use crate::segments::{Inner, SegState};
use crate::tier::Flash;

/// Promotions allowed: one per this many items written to flash, plus a start allowance.
const PROMOTE_EVERY: u64 = 16;
const PROMOTE_ALLOWANCE: u64 = 1000;

/// Whether [`Flash::get`] moves a flash hit back to RAM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Promotion {
    /// When it was read from flash before, within the bound of [`Flash::may_promote`].
    IfHot,
    /// Always: a command is about to change the item under the shard lock.
    Always,
}

/// Lookups a read retries when the item moved while it was being read.
const LOOKUP_TRIES: usize = 4;

/// What [`Flash::fetch`] found.
#[derive(Debug)]
pub enum Fetch {
    Item(Item),
    /// The location holds another key (a shared hash tag).
    Absent,
    /// The bytes failed their checksum: a miss.
    Damaged,
    /// The device failed the read: a miss; the segment is being dropped.
    Failed,
    /// The read was not done ([`reader::is_device_error`] is false): nothing is known of the
    /// item, and nothing changes.
    NotRead(io::Error),
}

impl Flash {
    /// Reads `key`'s item at `loc`: from a buffer not yet written, else with one device read.
    pub async fn fetch(&self, key: &[u8], loc: FlashLoc) -> Fetch {
        let seg = self.seg_of(loc.block());
        let len = loc.nblocks() as usize * BLOCK;
        let buffered = {
            let inner = self.inner.lock();
            self.buffered(&inner, loc).map(<[u8]>::to_vec)
        };
        let found = match buffered {
            Some(bytes) => {
                self.counters.flash_buffered_reads.fetch_add(1, Relaxed);
                self.decode(&bytes, loc, key)
            }
            None => {
                let _slot = self.read_slots.acquire().await;
                self.counters.flash_device_reads.fetch_add(1, Relaxed);
                let offset = u64::from(loc.block()) * BLOCK as u64;
                let own = &self.counters.flash_reads_own_ring;
                match self.reader.read(offset, len, own).await {
                    Ok(buf) => self.decode(&buf, loc, key),
                    Err(e) => {
                        if self.read_failed(seg, &e) {
                            Fetch::Failed
                        } else {
                            Fetch::NotRead(e)
                        }
                    }
                }
            }
        };
        let c = &self.counters;
        match &found {
            Fetch::Item(_) => c.get_extstore.fetch_add(1, Relaxed),
            Fetch::Absent => c.miss_from_extstore.fetch_add(1, Relaxed),
            Fetch::Damaged => c.badcrc_from_extstore.fetch_add(1, Relaxed),
            Fetch::Failed | Fetch::NotRead(_) => 0,
        };
        found
    }

    /// A read of `key` through RAM and flash, as `get` answers it: looks the key up, reads
    /// each flash location that may hold it (usually one read), and confirms under the shard
    /// lock that the copy read is still the key's current one (else looks up again). A damaged
    /// or unreadable copy is forgotten: a miss, never wrong bytes. A read that could not be
    /// done is a miss this once, and the copy stays. `promotion` says whether a hit found on
    /// flash moves back to RAM.
    pub async fn get(
        &self,
        store: &Store,
        key: &[u8],
        now: u32,
        promotion: Promotion,
    ) -> ReadOutcome {
        self.get_noting_others(store, key, now, promotion, &mut Vec::new())
            .await
            .unwrap_or(ReadOutcome::Miss)
    }

    /// Brings `key`'s item back to RAM if it is on flash, so that a command that reads and
    /// changes it (a store, delete, touch, compare) runs on it under the shard lock with RAM
    /// semantics. Flash entries that share the key's hash tag but were read and found to hold
    /// other keys are spared by the command that follows (else a store of the key would
    /// remove them, unable to tell them from the key's own copy in RAM). Every front end
    /// calls it before such a command.
    ///
    /// An error: a read that could not be done (see [`Fetch::NotRead`]); the item may still
    /// be on flash, so the command must not run (it would take the key for absent).
    pub async fn bring_to_ram(&self, store: &Store, key: &[u8], now: u32) -> io::Result<()> {
        if store.flash_candidates(key).is_empty() {
            return Ok(());
        }
        let mut others = Vec::new();
        self.get_noting_others(store, key, now, Promotion::Always, &mut others)
            .await?;
        store.spare_flash(key, &others);
        Ok(())
    }

    /// [`Flash::get`], also noting in `others` the locations read that held other keys
    /// (a shared hash tag) in sealed segments, with their seq, for [`Store::spare_flash`].
    /// An error: a read that could not be done, which changed nothing.
    pub async fn get_noting_others(
        &self,
        store: &Store,
        key: &[u8],
        now: u32,
        promotion: Promotion,
        others: &mut Vec<(FlashLoc, u64)>,
    ) -> io::Result<ReadOutcome> {
        'lookup: for _ in 0..LOOKUP_TRIES {
            others.clear();
            let locs = match store.lookup(key, now) {
                Lookup::Done(outcome) => return Ok(outcome),
                Lookup::Flash(locs) => locs,
            };
            for loc in locs {
                let seq_before = self.sealed_seq(loc);
                let mut item = match self.fetch(key, loc).await {
                    Fetch::Item(item) => item,
                    Fetch::Absent => {
                        // Only if its segment was sealed before the read: then it held the
                        // bytes read, and can take no new copy of the key.
                        if let (Some(a), Some(b)) = (seq_before, self.sealed_seq(loc)) {
                            if a == b {
                                others.push((loc, a));
                            }
                        }
                        continue;
                    }
                    Fetch::Damaged | Fetch::Failed => {
                        store.flash_forget(key, loc);
                        continue;
                    }
                    Fetch::NotRead(e) => return Err(e),
                };
                item.meta.last_access = now;
                let promote = match promotion {
                    Promotion::Always => Promote::Always,
                    Promotion::IfHot => Promote::IfHot(loc.fetched() && self.may_promote()),
                };
                match store.flash_found(key, loc, &item, now, promote) {
                    FlashFound::Served | FlashFound::Promoted => {
                        item.meta.fetched = true;
                        return Ok(ReadOutcome::Hit(item));
                    }
                    FlashFound::Expired => return Ok(ReadOutcome::Expired),
                    FlashFound::NotCurrent => continue 'lookup,
                }
            }
            return Ok(ReadOutcome::Miss);
        }
        Ok(ReadOutcome::Miss)
    }

    /// The blocks of `loc` while its segment is still in a buffer (open, or waiting for its
    /// write), else None.
    pub(crate) fn buffered<'a>(&self, inner: &'a Inner, loc: FlashLoc) -> Option<&'a [u8]> {
        let seg = self.seg_of(loc.block());
        let bytes = match &inner.open {
            Some(o) if o.seg == seg => &o.buf[..],
            _ => &inner.queued.iter().find(|(s, _)| *s == seg)?.1[..],
        };
        let at = (loc.block() - self.device_block(seg, 0)) as usize * BLOCK;
        Some(&bytes[at..(at + loc.nblocks() as usize * BLOCK).min(bytes.len())])
    }

    fn decode(&self, bytes: &[u8], loc: FlashLoc, key: &[u8]) -> Fetch {
        match format::find_item(bytes, loc.nblocks(), key) {
            format::Found::Item(it) => Fetch::Item(Item {
                value: it.value.to_vec(),
                meta: it.meta,
            }),
            format::Found::Absent => Fetch::Absent,
            format::Found::Damaged => Fetch::Damaged,
        }
    }

    /// A read of segment `seg` failed. Returns whether it was the device's own error
    /// ([`reader::is_device_error`]): then the segment is dropped (its entries removed by the
    /// writer thread). Else the read was not done, and only counted.
    pub(crate) fn read_failed(&self, seg: u32, e: &io::Error) -> bool {
        if !reader::is_device_error(e) {
            self.counters.flash_reads_not_done.fetch_add(1, Relaxed);
            return false;
        }
        self.counters.extstore_io_errors.fetch_add(1, Relaxed);
        let mut inner = self.inner.lock();
        let s = &mut inner.segs[seg as usize];
        if s.state == SegState::Sealed {
            tracing::error!("flash read failed in segment {seg} ({e}): dropping the segment");
            s.state = SegState::Failed;
            inner.sealed.retain(|&x| x != seg);
            inner.to_drop.push(seg);
            self.work.notify_one();
        }
        true
    }

    /// Whether one more promotion to RAM is within the bound (one per 16 items written to
    /// flash, after a start allowance): promotions make RAM evict, so they cost flash writes.
    pub fn may_promote(&self) -> bool {
        let c = &self.counters;
        let allowed = c.extstore_objects_written.load(Relaxed) / PROMOTE_EVERY + PROMOTE_ALLOWANCE;
        if c.flash_promotions_allowed.load(Relaxed) < allowed {
            c.flash_promotions_allowed.fetch_add(1, Relaxed);
            true
        } else {
            false
        }
    }
}
