//! Admission: an item evicted from RAM is copied into the open segment's buffer, under the
//! caller's shard lock (a memcpy, never I/O); a full buffer is sealed into the write queue.
//!
//! ```text
//!   FlashTier::admit / reinsertion ──append──> open segment buffer (blocks of 4 KiB; no two
//!                                                │  items of a block share a hash tag)
//!                                                │ full: seal (header in block 0)
//!                                                v
//!                     write queue (bounded: full, the item is dropped and counted; recovery
//!                     and the test switch `wait_for_writer` wait for the writer instead)
//! ```
//!
//! Non-goals: no device writes (the writer thread does them, see `writer`).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_store::flash::tag_of;
use cairn_store::{FlashLoc, ItemMeta};

use crate::device::AlignedBuf;
use crate::format::{self, SegmentHeader, BLOCK};
use crate::segments::{Inner, Open, Seg, SegState, FREE_RESERVE};
use crate::tier::Flash;

impl Flash {
    /// Appends an item to the open segment; None if it cannot be taken now.
    pub(crate) fn append(
        &self,
        hash: u64,
        key: &[u8],
        value: &[u8],
        meta: &ItemMeta,
    ) -> Option<FlashLoc> {
        let len = format::item_len(key.len(), value.len());
        let nblocks = if len <= BLOCK {
            1
        } else {
            format::blocks_for(len)
        };
        if nblocks + 1 > self.blocks_per_seg || nblocks > cairn_store::flash::MAX_ITEM_BLOCKS {
            self.counters.flash_too_large.fetch_add(1, Relaxed);
            return None;
        }
        let mut inner = self.inner.lock();
        // During recovery nothing is acknowledged-and-evictable: an item dropped because the
        // writer is slow would be an acknowledged write lost. So a full write queue makes
        // recovery wait for the writer, up to a bound; so does the test switch
        // `wait_for_writer`. Not while the writer takes shard locks (it may need this very
        // one), and not for a free segment: none means the device is full and flash eviction,
        // which takes shard locks, is behind (the item is evicted, as a full cache evicts).
        let patience = Instant::now()
            + if self.config.waits_for_writer() {
                Duration::from_secs(60)
            } else {
                Duration::from_secs(5)
            };
        let may_wait = || {
            (self.recovering.load(Relaxed) || self.config.waits_for_writer())
                && !self.taking_shard_locks.load(Relaxed)
                && Instant::now() < patience
        };
        let mut tries = 0;
        while tries < 2 {
            if inner.open.is_none() && !self.open_segment(&mut inner) {
                break;
            }
            let o = inner.open.as_mut().expect("opened above");
            let (block, off) = if len <= BLOCK {
                if o.off + len > BLOCK || o.block_tags.contains(&tag_of(hash)) {
                    (o.block + 1, 0)
                } else {
                    (o.block, o.off)
                }
            } else if o.off > 0 {
                (o.block + 1, 0)
            } else {
                (o.block, 0)
            };
            if block + nblocks > self.blocks_per_seg {
                if !self.seal(&mut inner) {
                    if may_wait() {
                        self.written.wait_for(&mut inner, Duration::from_millis(50));
                        continue;
                    }
                    break;
                }
                tries += 1;
                continue;
            }
            let at = block as usize * BLOCK + off;
            format::encode_item(&mut o.buf[at..at + len], key, value, meta);
            if block != o.block {
                o.block_tags.clear();
            }
            if len <= BLOCK {
                o.block = block;
                o.off = off + len;
                o.block_tags.push(tag_of(hash));
            } else {
                o.block = block + nblocks;
                o.off = 0;
            }
            o.items += 1;
            let seg = o.seg;
            let s = &mut inner.segs[seg as usize];
            s.live += 1;
            let exp = if meta.exptime == 0 {
                u32::MAX
            } else {
                meta.exptime
            };
            s.max_exptime = s.max_exptime.max(exp);
            s.min_revision = s.min_revision.min(meta.mod_revision);
            s.max_revision = s.max_revision.max(meta.mod_revision);
            self.counters.extstore_objects_written.fetch_add(1, Relaxed);
            self.counters
                .flash_item_bytes_admitted
                .fetch_add((key.len() + value.len()) as u64, Relaxed);
            return Some(FlashLoc::new(hash, self.device_block(seg, block), nblocks));
        }
        self.counters.flash_writer_drops.fetch_add(1, Relaxed);
        None
    }

    /// Opens a free segment for appends; false if none is free (the writer is behind).
    fn open_segment(&self, inner: &mut Inner) -> bool {
        let Some(seg) = inner.free.pop_front() else {
            self.work.notify_one();
            return false;
        };
        if inner.free.len() < FREE_RESERVE {
            self.work.notify_one();
        }
        let seq = inner.next_seq;
        inner.next_seq += 1;
        let s = &mut inner.segs[seg as usize];
        debug_assert_eq!(s.live, 0, "a free segment has no live items");
        *s = Seg {
            state: SegState::Open,
            seq,
            live: 0,
            max_exptime: 0,
            min_revision: u64::MAX,
            max_revision: 0,
            pinned: s.pinned,
            pin_next: s.pin_next,
            reclaiming: false,
        };
        let buf = match inner.spare.pop() {
            Some(mut b) => {
                b.fill(0);
                b
            }
            None => AlignedBuf::new(self.config.segment_bytes as usize),
        };
        inner.open = Some(Open {
            seg,
            buf,
            block: 1,
            off: 0,
            block_tags: Vec::new(),
            items: 0,
        });
        self.counters.extstore_page_allocs.fetch_add(1, Relaxed);
        true
    }

    /// Seals the open segment into the write queue; false if the queue is full.
    pub(crate) fn seal(&self, inner: &mut Inner) -> bool {
        if inner.queued.len() >= self.config.write_queue {
            self.work.notify_one();
            return false;
        }
        let Some(mut o) = inner.open.take() else {
            return true;
        };
        let used_blocks = o.block + u32::from(o.off > 0);
        let seq = inner.segs[o.seg as usize].seq;
        SegmentHeader {
            segment: o.seg,
            seq,
            items: o.items,
            used_blocks,
        }
        .encode(&mut o.buf[..BLOCK]);
        inner.segs[o.seg as usize].state = SegState::Queued;
        inner.queued.push_back((o.seg, Arc::new(o.buf)));
        self.work.notify_one();
        true
    }
}
