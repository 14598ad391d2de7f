//! The flash tier's side of the store: what the tier (crates/flash) and recovery call to
//! read, confirm, evict, drop, checkpoint and restore flash entries. The entries themselves
//! live in each shard's `FlashIndex` (flash_index.rs); what one is, in flash.rs.
//!
//! ```text
//!   get:        Store::lookup (read.rs) ─> locations ─> device read ─> flash_found: still
//!               indexed there? not expired? ─> served, or promoted to RAM (an Entry store)
//!               damaged or unreadable ─> flash_forget (an eviction, reported)
//!   commands:   flash_candidates, then the tier's read, then spare_flash: entries read and
//!               found to hold other keys are left alone by the Store::entry that follows
//!   writer:     flash_reclaim (flash eviction: reinsert hot, else evict), flash_drop_blocks
//!   checkpoint: visit_shard_with_flash ─> entries recorded; recovery: restore_flash,
//!               replay_to_flash (a replayed store straight to flash)
//! ```
//!
//! Non-goals: no device I/O (the tier's), no RAM eviction to flash (the shard's, through
//! `FlashTier::admit`).

use crate::entry::Entry;
use crate::flash::{self, FlashLoc};
use crate::segment::{self, state_of};
use crate::shard;
use crate::store::{visit_ram, Store};
use crate::types::{DeleteReason, Item, ItemMeta, Mutation, UnixSecs};

impl Store {
    /// Whether RAM evictions go to a flash tier.
    pub fn has_flash(&self) -> bool {
        self.shards[0].lock().tier.is_some()
    }

    /// The flash locations that may hold `key` (no RAM copy exists then); empty if none.
    pub fn flash_candidates(&self, key: &[u8]) -> Vec<FlashLoc> {
        let hash = self.hash(key);
        let shard = self.shard(hash);
        if shard.find(hash, key).is_some() {
            return Vec::new();
        }
        shard.flash_candidates(hash)
    }

    /// After a device read found `key`'s item `item` at `loc` (checksum and key verified):
    /// checks under the shard lock that the index still points there (it may have been
    /// overwritten or deleted while the read ran) and that it has not expired. With
    /// `promote` = Always, or IfHot and the item was read from flash before, the item moves
    /// back to RAM with its CAS and metadata unchanged (not a client mutation: nothing logged).
    pub fn flash_found(
        &self,
        key: &[u8],
        loc: FlashLoc,
        item: &Item,
        now: UnixSecs,
        promote: Promote,
    ) -> FlashFound {
        let hash = self.hash(key);
        let mut shard = self.shard(hash);
        let Some(entry) = shard.flash_mark_fetched(loc) else {
            return FlashFound::NotCurrent;
        };
        let fetched_before = entry.fetched();
        if item.meta.exptime != 0 && item.meta.exptime <= now {
            shard.flash_remove_place(loc);
            shard.counters.reclaimed += 1;
            if !fetched_before && !item.meta.fetched {
                shard.counters.expired_unfetched += 1;
            }
            return FlashFound::Expired;
        }
        let promote = match promote {
            Promote::Always => true,
            Promote::IfHot(allowed) => fetched_before && allowed,
            Promote::Never => false,
        };
        if !promote {
            return FlashFound::Served;
        }
        let m = item.meta;
        let mut entry = Entry {
            store: self,
            shard,
            key,
            hash,
            now,
            expired: false,
            revision: 0,
        };
        let state = state_of(&ItemMeta { fetched: true, ..m });
        // The RAM copy first: should it find no room (-M), the flash copy stays; a move back
        // to RAM, not a mutation: the item keeps its revision.
        match entry.store_inner(
            &[&item.value],
            m.flags,
            m.exptime,
            Some(m.cas),
            state,
            m.last_access,
            Some(m.mod_revision),
        ) {
            Ok(_) => {
                entry.shard.flash_remove_place(loc);
                entry.shard.counters.flash_promotions += 1;
                FlashFound::Promoted
            }
            Err(_) => FlashFound::Served,
        }
    }

    /// Forgets the flash copy at `loc` of `key` (a damaged or unreadable item): a miss from now
    /// on. Returns whether the index still pointed there.
    pub fn flash_forget(&self, key: &[u8], loc: FlashLoc) -> bool {
        let hash = self.hash(key);
        let mut shard = self.shard(hash);
        let removed = shard.flash_remove_place(loc);
        if removed {
            shard.evicted_for_good(loc.fetched());
            self.report_flash_eviction(key);
        }
        removed
    }

    /// Reports a key whose only copy, on flash, left for good (under its shard's lock).
    fn report_flash_eviction(&self, key: &[u8]) {
        self.report(&Mutation::Deleted {
            key,
            reason: DeleteReason::Evicted,
            prev: None,
        });
    }

    /// Flash eviction of one item found in a segment being reclaimed: if the index still
    /// points at `loc` and the item was read since it was written, `reinsert` may give it a
    /// new place (hot items get a bounded second chance); otherwise it leaves the cache.
    pub fn flash_reclaim(
        &self,
        key: &[u8],
        block: u32,
        nblocks: u32,
        reinsert: impl FnOnce(u64) -> Option<FlashLoc>,
    ) -> Reclaimed {
        let hash = self.hash(key);
        let loc = FlashLoc::new(hash, block, nblocks);
        let mut shard = self.shard(hash);
        let Some(loc) = shard.flash_get(loc) else {
            return Reclaimed::Dead;
        };
        if loc.fetched() {
            if let Some(new) = reinsert(hash) {
                // Same key, new place: the old segment's live count drops via release.
                shard.flash_remove_place(loc);
                shard.flash_insert(new);
                return Reclaimed::Reinserted;
            }
        }
        shard.flash_remove_place(loc);
        shard.evicted_for_good(loc.fetched());
        self.report_flash_eviction(key);
        Reclaimed::Evicted
    }

    /// Removes every flash entry whose item starts in `blocks` (a segment dropped after an
    /// I/O error): a scan of every shard, for rare events only. Returns how many.
    pub fn flash_drop_blocks(&self, blocks: std::ops::Range<u32>) -> u64 {
        let mut dropped = 0;
        for s in self.shards.iter() {
            let mut shard = s.lock();
            let mut gone = Vec::new();
            shard.flash.retain(|l| {
                let keep = !blocks.contains(&l.block());
                if !keep {
                    gone.push(l);
                }
                keep
            });
            for loc in gone {
                shard.counters.curr_items -= 1;
                shard.counters.flash_items -= 1;
                if let Some(t) = &shard.tier {
                    t.release(loc);
                }
                shard.evicted_for_good(loc.fetched());
                dropped += 1;
            }
        }
        dropped
    }

    /// [`Store::visit_shard`], and `g` with every flash entry of the shard, under one hold of
    /// its lock (a checkpoint records flash entries instead of their values).
    pub fn visit_shard_with_flash(
        &self,
        index: usize,
        now: UnixSecs,
        mut f: impl FnMut(&[u8], &[u8], &ItemMeta),
        mut g: impl FnMut(FlashLoc),
    ) {
        let shard = self.shards[index].lock();
        visit_ram(&shard, now, &mut f);
        for loc in shard.flash.iter() {
            g(loc);
        }
    }

    /// Recovery: puts back flash entries a checkpoint recorded in shard `index` (the same
    /// shard count as then), under one hold of its lock. The caller checked that the device
    /// still holds those copies.
    pub fn restore_flash(&self, index: usize, locs: &[FlashLoc]) {
        let mut shard = self.shards[index].lock();
        if let Some(t) = &shard.tier {
            t.restore(locs);
        }
        shard.flash.reserve(locs.len());
        for &loc in locs {
            shard.flash_insert(loc);
        }
    }

    /// Recovery only: puts a replayed store of `key` straight on flash, where RAM eviction
    /// would move it once newer items fill its shard, instead of storing it in RAM and moving
    /// it at that eviction (about half the work of a replayed record; see
    /// `cairn_persist::replay`, which calls this only for records that newer ones of the same
    /// shard, at least a shard's RAM of them, follow). Taken only when the shard's RAM is
    /// full (it has no room for another segment: the items now in it, and this one if it
    /// were stored, leave before that much newer data), the item is not expired, evictions
    /// are on (not `-M`), and the tier takes it;
    /// the key's older copies, in RAM or on flash, are removed first, as a store removes
    /// them. `meta` gives flags, exptime, cas, stale and the revision (the record's LSN);
    /// nothing is reported to the sink (recovery does not log what it replays), and the CAS
    /// floor is left to the caller. Returns false when not taken: the caller then stores it
    /// the usual way (its older copies may be gone already, as that store removes them).
    pub fn replay_to_flash(
        &self,
        key: &[u8],
        value: &[u8],
        meta: &ItemMeta,
        now: UnixSecs,
    ) -> bool {
        let hash = self.hash(key);
        let mut shard = self.shard(hash);
        if shard.tier.is_none()
            || !self.config.evict_when_full
            || meta.exptime != 0 && meta.exptime <= now
        {
            return false;
        }
        let size = shard::needed(key, value.len(), meta.flags, meta.exptime);
        if size > self.config.item_size_max_bytes
            || key.len() > u8::MAX as usize
            || shard.memory_used() + size.max(segment::SEGMENT_SIZE) <= shard.budget
        {
            // Room for another segment: the item would stay in RAM.
            return false;
        }
        shard.remove(hash, key);
        shard.flash_remove_key(hash, key);
        let Some(loc) = shard
            .tier
            .as_deref()
            .and_then(|t| t.admit(hash, key, value, meta))
        else {
            return false;
        };
        shard.flash_insert(loc);
        shard.counters.total_items += 1;
        shard.counters.evicted_to_flash += 1;
        true
    }

    /// Tells the next [`Store::entry`] of `key` on this thread that the flash entries at
    /// `locs` (with the key's tag; each with its segment's seq when read, see
    /// [`FlashTier::sealed_seq`]) were read and hold other keys: a store or delete of `key`
    /// leaves them alone instead of removing every entry with the tag.
    ///
    /// [`FlashTier::sealed_seq`]: crate::FlashTier::sealed_seq
    pub fn spare_flash(&self, key: &[u8], locs: &[(FlashLoc, u64)]) {
        if !locs.is_empty() {
            flash::set_spared(
                self.hash(key),
                locs.iter().map(|(l, seq)| (l.place(), *seq)).collect(),
            );
        }
    }
}

/// Whether [`Store::flash_found`] moves the item back to RAM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Promote {
    /// Yes: a command is about to change it, or read it under the shard lock.
    Always,
    /// If it was read from flash before and the bound allows it (the bool).
    IfHot(bool),
    Never,
}

/// Result of [`Store::flash_found`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlashFound {
    /// The read value is current: serve it (it stays on flash).
    Served,
    /// The read value is current and is now in RAM.
    Promoted,
    /// The index no longer points there (overwritten, deleted, moved): look up again.
    NotCurrent,
    /// The item had expired: a miss, and it is gone.
    Expired,
}

/// Result of [`Store::flash_reclaim`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reclaimed {
    /// The copy was no longer indexed.
    Dead,
    /// Hot: written again elsewhere on flash.
    Reinserted,
    /// Left the cache.
    Evicted,
}
