//! What the store calls under its shard locks ([`cairn_store::FlashTier`]): admit an item
//! leaving RAM, count entries released or restored, and tell whose item an entry holds.
//!
//! ```text
//!   Store (under a shard lock) ──admit──> append (admit.rs): a memcpy, never I/O
//!                              ──release / restore──> a segment's live count
//!                              ──sealed_seq──> the seq of a written segment
//!                              ──key_at──> the segment buffer, else one device read (rare:
//!                                          the server reads candidates before the lock)
//! ```
//!
//! Non-goals: every call takes only the tier's own short lock, never a shard's.

use std::sync::atomic::Ordering::Relaxed;

use cairn_store::flash::KeyAt;
use cairn_store::{FlashLoc, FlashTier, ItemMeta};

use crate::device::AlignedBuf;
use crate::format::{self, BLOCK};
use crate::segments::{SegState, FREE_RESERVE};
use crate::tier::Flash;

impl FlashTier for Flash {
    fn admit(&self, hash: u64, key: &[u8], value: &[u8], meta: &ItemMeta) -> Option<FlashLoc> {
        self.append(hash, key, value, meta)
    }

    fn release(&self, loc: FlashLoc) {
        let seg = self.seg_of(loc.block());
        let mut inner = self.inner.lock();
        let s = &mut inner.segs[seg as usize];
        s.live = s.live.saturating_sub(1);
        if s.live == 0 && s.state == SegState::Sealed && inner.free.len() < FREE_RESERVE {
            self.work.notify_one();
        }
    }

    fn restore(&self, locs: &[FlashLoc]) {
        let mut inner = self.inner.lock();
        for loc in locs {
            inner.segs[self.seg_of(loc.block()) as usize].live += 1;
        }
    }

    fn key_at(&self, loc: FlashLoc, key: &[u8]) -> KeyAt {
        let whose = |found: format::Found<'_>| match found {
            format::Found::Item(_) => KeyAt::Key,
            format::Found::Absent => KeyAt::Other,
            format::Found::Damaged => KeyAt::Unknown,
        };
        let seg = self.seg_of(loc.block());
        {
            let inner = self.inner.lock();
            if let Some(bytes) = self.buffered(&inner, loc) {
                return whose(format::find_item(bytes, loc.nblocks(), key));
            }
            if inner.segs.get(seg as usize).map(|s| s.state) != Some(SegState::Sealed) {
                return KeyAt::Unknown;
            }
        }
        // Written: while the entry is indexed (the caller holds its shard lock) the segment
        // cannot be reused, so the device holds the item it was written with.
        self.counters.flash_verify_reads.fetch_add(1, Relaxed);
        let mut buf = AlignedBuf::new(loc.nblocks() as usize * BLOCK);
        match self
            .device
            .read_at(u64::from(loc.block()) * BLOCK as u64, &mut buf)
        {
            Ok(()) => whose(format::find_item(&buf, loc.nblocks(), key)),
            // Unknown either way: the entry goes (it may be the key's old copy); only the
            // device's own error drops the segment.
            Err(e) => {
                self.read_failed(seg, &e);
                KeyAt::Unknown
            }
        }
    }

    fn sealed_seq(&self, loc: FlashLoc) -> Option<u64> {
        let seg = self.seg_of(loc.block());
        let inner = self.inner.lock();
        let s = inner.segs.get(seg as usize)?;
        (s.state == SegState::Sealed).then_some(s.seq)
    }
}
