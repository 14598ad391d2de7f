//! Reads of one key: a copy of the item, a look at it under the shard lock, or the flash
//! locations that may hold it.
//!
//! ```text
//!   get ──> lookup ──RAM hit──> Item (marked fetched; last access = now)
//!                  └─expired──> removed, reported (DeleteReason::Expired)
//!                  └─not in RAM──> Lookup::Flash(locations with the key's tag): the caller
//!                                  reads them, then Store::flash_found (flash_ops.rs)
//!   get_with ──> the closure sees the item under the shard lock (a reply's encoding)
//! ```
//!
//! Non-goals: no device reads (the flash tier does them), no mutation reports for reads.

use crate::flash::FlashLoc;
use crate::segment::{meta_of, FETCHED};
use crate::store::Store;
use crate::types::{Item, ItemMeta, ReadOutcome, UnixSecs};

impl Store {
    /// Looks up a live item in RAM, copying it out. Expired items are removed lazily (counted
    /// in the returned `ReadOutcome::Expired`). Marks the item fetched (does not report a
    /// mutation). An item on flash is a miss here: see [`Store::lookup`].
    pub fn get(&self, key: &[u8], now: UnixSecs) -> ReadOutcome {
        match self.lookup(key, now) {
            Lookup::Done(outcome) => outcome,
            Lookup::Flash(_) => ReadOutcome::Miss,
        }
    }

    /// [`Store::get`], or the flash locations that may hold the key: the caller reads them
    /// (one device read each, usually one), then confirms with [`Store::flash_found`].
    pub fn lookup(&self, key: &[u8], now: UnixSecs) -> Lookup {
        let hash = self.hash(key);
        let mut shard = self.shard(hash);
        let Some(loc) = shard.find(hash, key) else {
            let candidates = shard.flash_candidates(hash);
            if candidates.is_empty() {
                return Lookup::Done(ReadOutcome::Miss);
            }
            return Lookup::Flash(candidates);
        };
        let h = shard.header(loc);
        if h.exptime != 0 && h.exptime <= now {
            self.expire(&mut shard, hash, key, now);
            return Lookup::Done(ReadOutcome::Expired);
        }
        let seg = shard.seg_mut(loc.slot);
        let item = Item {
            value: seg.value(&h).to_vec(),
            meta: meta_of(&h, seg, loc.offset as usize),
        };
        seg.set_state(loc.offset as usize, h.state | FETCHED);
        seg.set_access(&h, now);
        Lookup::Done(ReadOutcome::Hit(item))
    }

    /// [`Store::get`] without copying the value out: `hit` sees the live item's metadata and
    /// value under the shard lock (keep it short: encoding a reply is what it is for) and its
    /// result is returned. Marks the item fetched as `get` does; an item on flash is a miss.
    pub fn get_with<R>(
        &self,
        key: &[u8],
        now: UnixSecs,
        hit: impl FnOnce(&ItemMeta, &[u8]) -> R,
    ) -> ReadOutcome<R> {
        let hash = self.hash(key);
        let mut shard = self.shard(hash);
        let Some(loc) = shard.find(hash, key) else {
            return ReadOutcome::Miss;
        };
        let h = shard.header(loc);
        if h.exptime != 0 && h.exptime <= now {
            self.expire(&mut shard, hash, key, now);
            return ReadOutcome::Expired;
        }
        let seg = shard.seg_mut(loc.slot);
        let r = hit(&meta_of(&h, seg, loc.offset as usize), seg.value(&h));
        seg.set_state(loc.offset as usize, h.state | FETCHED);
        seg.set_access(&h, now);
        ReadOutcome::Hit(r)
    }
}

impl Store {
    /// The item of `key` in RAM, seen under the shard lock without a trace: it is not marked
    /// fetched, its last access stays, and an expired one is neither removed nor reported.
    /// None when RAM holds no item of the key. The watch reads an event's value this way
    /// (the item still holds it while its `mod_revision` is the event's).
    pub fn peek_with<R>(&self, key: &[u8], f: impl FnOnce(&ItemMeta, &[u8]) -> R) -> Option<R> {
        let hash = self.hash(key);
        let shard = self.shard(hash);
        let loc = shard.find(hash, key)?;
        let h = shard.header(loc);
        let seg = shard.seg(loc.slot);
        Some(f(&meta_of(&h, seg, loc.offset as usize), seg.value(&h)))
    }
}

/// Result of [`Store::lookup`].
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup {
    /// Answered from RAM.
    Done(ReadOutcome),
    /// Not in RAM; these flash locations may hold it (usually one).
    Flash(Vec<FlashLoc>),
}
