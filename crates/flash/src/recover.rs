//! Recovery's side of the flash tier: which segments a checkpoint named are kept after a
//! restart, and which of the snapshot's flash entries may be restored. Why that is safe is
//! argued in `checkpoint`.
//!
//! ```text
//!   pins files of the snapshots recovery may load
//!     └─> recover_pins: read each named segment's header (PIN_READERS threads); same seq:
//!           kept, Sealed and pinned; else its items are lost, as if evicted
//!   snapshot of LSN `after`
//!     ├─> items_past(after): items of kept segments with a revision past `after` (replay
//!     │     makes them again: their entries are left out)
//!     └─> trusts(entries): restore an entry only if its (segment, seq) was kept
//! ```
//!
//! Non-goals: no reading of pins files or snapshots (persistence does it).

use std::sync::atomic::Ordering::Relaxed;

use cairn_store::FlashLoc;

use crate::checkpoint::Pin;
use crate::device::AlignedBuf;
use crate::format::{self, SegmentHeader, BLOCK};
use crate::segments::SegState;
use crate::tier::Flash;

/// Threads reading the named segments' headers at recovery (see [`Flash::recover_pins`]).
const PIN_READERS: usize = 16;

/// An item [`Flash::items_past`] found.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PastItem {
    /// The seq of the segment it is in.
    pub seq: u64,
    /// Its first device block, and how many it spans (as in its `FlashLoc`).
    pub block: u32,
    pub nblocks: u32,
    pub key: Vec<u8>,
}

impl Flash {
    /// Recovery, before a snapshot is loaded: keeps the segments `pins` names whose header
    /// still carries the named seq, pinned until a checkpoint no longer names them. Returns
    /// how many were kept. Must run before anything is admitted.
    pub fn recover_pins(&self, pins: &[Pin]) -> usize {
        if !self.trust_existing {
            return 0;
        }
        let mut wanted: Vec<Pin> = pins
            .iter()
            .copied()
            .filter(|p| u64::from(p.segment) < self.superblock.segment_count)
            .collect();
        // Each (segment, seq) once; a segment's header holds one seq, so at most one of the
        // pins naming a segment is kept. Two pins of one (segment, seq) name the same bytes;
        // an older pins file may not know their largest revision (0).
        wanted.sort_unstable();
        wanted.dedup_by(|later, kept| {
            let same = (later.segment, later.seq) == (kept.segment, kept.seq);
            if same {
                kept.max_revision = kept.max_revision.max(later.max_revision);
            }
            same
        });
        // The header reads (one 4 KiB read per named segment, a thousand at 10M items) are
        // made PIN_READERS at a time: one after another they were waits on the device in a
        // row (92 ms at 10M items on an idle disk, 250 ms at 3M on a busy one).
        let per = wanted.len().div_ceil(PIN_READERS).max(1);
        let mut kept: Vec<Pin> = std::thread::scope(|s| {
            let readers: Vec<_> = wanted
                .chunks(per)
                .map(|part| {
                    s.spawn(move || {
                        let mut block = AlignedBuf::new(BLOCK);
                        part.iter()
                            .filter(|p| {
                                self.device
                                    .read_at(self.seg_offset(p.segment), &mut block)
                                    .is_ok()
                                    && SegmentHeader::decode(&block)
                                        .is_some_and(|h| h.segment == p.segment && h.seq == p.seq)
                            })
                            .copied()
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            readers
                .into_iter()
                .flat_map(|r| r.join().expect("a pin reader panicked"))
                .collect()
        });
        // Oldest first: flash eviction takes `sealed` from the front.
        kept.sort_unstable_by_key(|p| p.seq);
        let mut inner = self.inner.lock();
        for &pin in &kept {
            let seg = pin.segment;
            inner.free.retain(|&f| f != seg);
            let s = &mut inner.segs[seg as usize];
            s.state = SegState::Sealed;
            s.seq = pin.seq;
            s.pinned = true;
            s.max_exptime = u32::MAX;
            s.min_revision = 0;
            s.max_revision = pin.max_revision;
            inner.sealed.push_back(seg);
        }
        kept.len()
    }

    /// Recovery, after [`Flash::recover_pins`], before the snapshot of LSN `after` is loaded:
    /// the items of the kept segments with a revision past `after`. An entry of that
    /// snapshot that points at one is better left out (the per-item form of
    /// [`Flash::checkpoint_entry`]'s rule). The checkpoint recorded the entry under its shard
    /// lock, so the item's revision r was handed out before the copy ended, at or before the
    /// L1 up to which the log was made durable before the snapshot became current: record r
    /// is in the log that replay reads from `after` on, and makes the item again. Restored,
    /// the entry would be found under the key's tag when record r is replayed, and read from
    /// the device under the shard lock to tell whose it is (31.9K such reads at 10M items,
    /// made while the replay's cores idled). Items past L1 (no entry points at them) are
    /// returned too and simply match nothing. Only segments whose pins file gave a largest
    /// revision past `after` are read, whole (a few at the checkpoint's boundary),
    /// PIN_READERS at a time; one that cannot be read gives nothing (its entries stay, as
    /// before).
    pub fn items_past(&self, after: u64) -> Vec<PastItem> {
        let segs: Vec<(u32, u64)> = {
            let inner = self.inner.lock();
            inner
                .segs
                .iter()
                .enumerate()
                .filter(|(_, s)| s.pinned && s.state == SegState::Sealed && s.max_revision > after)
                .map(|(i, s)| (i as u32, s.seq))
                .collect()
        };
        let per = segs.len().div_ceil(PIN_READERS).max(1);
        std::thread::scope(|s| {
            let readers: Vec<_> = segs
                .chunks(per)
                .map(|part| {
                    s.spawn(move || {
                        let mut buf = AlignedBuf::new(self.config.segment_bytes as usize);
                        let mut found = Vec::new();
                        for &(seg, seq) in part {
                            if self.device.read_at(self.seg_offset(seg), &mut buf).is_err() {
                                continue;
                            }
                            let Some(h) = SegmentHeader::decode(&buf[..BLOCK])
                                .filter(|h| h.segment == seg && h.seq == seq)
                            else {
                                continue;
                            };
                            let used = h.used_blocks.min(self.blocks_per_seg);
                            for (block, nblocks, it) in format::segment_items(&buf, used) {
                                if it.meta.mod_revision > after {
                                    found.push(PastItem {
                                        seq,
                                        block: self.device_block(seg, block),
                                        nblocks,
                                        key: it.key.to_vec(),
                                    });
                                }
                            }
                        }
                        found
                    })
                })
                .collect();
            readers
                .into_iter()
                .flat_map(|r| r.join().expect("a segment reader panicked"))
                .collect()
        })
    }

    /// Recovery starts (true) or ends (false): see `recovering`.
    pub fn set_recovering(&self, on: bool) {
        self.recovering.store(on, Relaxed);
    }

    /// For each (entry, seq): whether recovery may restore an entry at that place recorded
    /// with that seq (its segment was kept by [`Flash::recover_pins`] with that seq). One hold
    /// of the tier's lock for all.
    pub fn trusts(&self, entries: &[(FlashLoc, u64)]) -> Vec<bool> {
        let inner = self.inner.lock();
        entries
            .iter()
            .map(|&(loc, seq)| {
                inner
                    .segs
                    .get(self.seg_of(loc.block()) as usize)
                    .is_some_and(|s| {
                        s.pinned
                            && s.seq == seq
                            && s.state == SegState::Sealed
                            && self.trust_existing
                    })
            })
            .collect()
    }
}
