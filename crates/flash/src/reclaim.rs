//! Flash eviction: frees one segment when the writer runs low on free ones. The FIFO of
//! sealed segments is taken oldest first, skipping those a checkpoint names.
//!
//! ```text
//!   sealed FIFO ──pick: no live item (no read) > all expired > the oldest──> victim
//!     victim read whole ──each item still indexed──> Store::flash_reclaim
//!        read since written, within REINSERT_FRACTION of the segment: append again (admit.rs)
//!        else: evicted for good (reported as an eviction)
//!     entries the read could not account for ──> removed by a scan
//!     victim ──> Free, or Retired while a checkpoint names it
//! ```
//!
//! Non-goals: no compaction of live data beyond reinsertion, no TRIM.

use std::sync::atomic::Ordering::Relaxed;

use cairn_store::{now_unix, Reclaimed, Store};

use crate::device::AlignedBuf;
use crate::format::{self, SegmentHeader, BLOCK};
use crate::segments::{Seg, SegState};
use crate::tier::Flash;

/// Of a reclaimed segment, at most this fraction of its bytes is reinserted.
const REINSERT_FRACTION: u64 = 4;

impl Flash {
    /// Frees one segment by flash eviction. False if none may be freed now.
    pub(crate) fn reclaim_one(&self, store: &Store) -> bool {
        let now = now_unix();
        let victim = {
            let mut inner = self.inner.lock();
            let usable = |s: &Seg| !s.pinned && !s.pin_next;
            let pick = |f: &dyn Fn(&Seg) -> bool| {
                inner
                    .sealed
                    .iter()
                    .position(|&x| usable(&inner.segs[x as usize]) && f(&inner.segs[x as usize]))
            };
            let at = pick(&|s| s.live == 0)
                .or_else(|| pick(&|s| s.max_exptime <= now))
                .or_else(|| pick(&|_| true));
            let Some(at) = at else {
                self.counters.flash_pinned_stalls.fetch_add(1, Relaxed);
                return false;
            };
            let seg = inner.sealed.remove(at).expect("position found");
            let s = &mut inner.segs[seg as usize];
            if s.live == 0 {
                s.state = SegState::Free;
                inner.free.push_back(seg);
                self.counters.extstore_page_reclaims.fetch_add(1, Relaxed);
                drop(inner);
                self.written.notify_all();
                return true;
            }
            s.reclaiming = true;
            seg
        };
        self.counters.extstore_page_evictions.fetch_add(1, Relaxed);
        let mut buf = AlignedBuf::new(self.config.segment_bytes as usize);
        match self.device.read_at(self.seg_offset(victim), &mut buf) {
            Ok(()) => {
                let used = SegmentHeader::decode(&buf[..BLOCK])
                    .filter(|h| h.segment == victim)
                    .map_or(0, |h| h.used_blocks.min(self.blocks_per_seg));
                let mut budget = self.config.segment_bytes / REINSERT_FRACTION;
                for (block, nblocks, it) in format::segment_items(&buf, used) {
                    let loc_block = self.device_block(victim, block);
                    let mut meta = it.meta;
                    meta.fetched = false;
                    let r = store.flash_reclaim(it.key, loc_block, nblocks, |hash| {
                        if (it.len as u64) > budget {
                            return None;
                        }
                        let new = self.append(hash, it.key, it.value, &meta)?;
                        budget -= it.len as u64;
                        Some(new)
                    });
                    match r {
                        Reclaimed::Evicted => {
                            self.counters.extstore_objects_evicted.fetch_add(1, Relaxed)
                        }
                        Reclaimed::Reinserted => {
                            self.counters.flash_objects_reinserted.fetch_add(1, Relaxed)
                        }
                        Reclaimed::Dead => 0,
                    };
                }
            }
            Err(e) => {
                tracing::error!("flash read of segment {victim} for eviction failed: {e}");
                self.counters.extstore_io_errors.fetch_add(1, Relaxed);
            }
        }
        if self.inner.lock().segs[victim as usize].live > 0 {
            // Entries the read could not account for (damage, an I/O error): a scan removes
            // them, since the segment is about to hold other items.
            let first = self.device_block(victim, 0);
            let n = store.flash_drop_blocks(first..first + self.blocks_per_seg);
            self.counters.extstore_objects_evicted.fetch_add(n, Relaxed);
        }
        let mut inner = self.inner.lock();
        let s = &mut inner.segs[victim as usize];
        s.reclaiming = false;
        debug_assert_eq!(s.live, 0, "an evicted segment keeps no entries");
        if s.pinned || s.pin_next {
            s.state = SegState::Retired;
        } else {
            s.state = SegState::Free;
            inner.free.push_back(victim);
        }
        drop(inner);
        self.written.notify_all();
        true
    }
}
