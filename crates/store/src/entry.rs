//! Exclusive access to one key: [`Store::entry`] holds the key's shard lock while the
//! caller's closure reads and changes the key through an [`Entry`]. Every conditional write
//! (add, replace, cas, append, incr, touch, the meta commands) is built on it.
//!
//! ```text
//!   Store::entry(key, now, |e| ...) ── shard lock ──> expired item removed first
//!     e.item / e.peek ─────────────> the live item in RAM
//!     e.store / e.update_meta ─────> a new copy (room made by eviction) ─> Mutation::Stored
//!     e.delete ────────────────────> RAM copy, or the key's own flash copy ─> Mutation::Deleted
//!   (each report gives the revision, kept in the item; the newest the entry's own changes
//!    got comes back to the caller of Store::entry_reporting: what its acknowledgement waits
//!    for)
//! ```
//!
//! Non-goals: no flash reads (the caller brings a flash item to RAM first, see
//! `Store::spare_flash` and `Promote::Always`).

use parking_lot::MutexGuard;

use crate::error::StoreError;
use crate::flash;
use crate::segment::{self, meta_of, state_of, FETCHED, STALE, WIN_SENT};
use crate::shard::{self, Alloc, Loc, Shard};
use crate::store::Store;
use crate::types::{DeleteReason, Item, ItemMeta, Mutation, PrevItem, Revision, UnixSecs};

impl Store {
    /// Runs `f` with exclusive access to one key's slot (the shard lock is held during `f`).
    /// All conditional writes (add/replace/cas/append/incr/touch/meta) are built on this.
    pub fn entry<R>(&self, key: &[u8], now: UnixSecs, f: impl FnOnce(&mut Entry<'_>) -> R) -> R {
        self.entry_reporting(key, now, f).0
    }

    /// [`Store::entry`], also returning the revision of the newest change `f` made through
    /// the entry (the sink's answer: 0 when it changed nothing, `Revision::MAX` when the sink
    /// failed). Removals the store decides itself on the way (an expired item found, an
    /// eviction to make room) are not the caller's changes and do not count: nobody waits
    /// for them (a write that evicted has a later record of its own, and an expired item
    /// stays expired after a crash). This is how a write learns what its acknowledgement
    /// waits for, as a value (cairn-engine's `Tx`).
    pub fn entry_reporting<R>(
        &self,
        key: &[u8],
        now: UnixSecs,
        f: impl FnOnce(&mut Entry<'_>) -> R,
    ) -> (R, Revision) {
        let hash = self.hash(key);
        let mut shard = self.shard(hash);
        let mut expired = false;
        if let Some(loc) = shard.find(hash, key) {
            let h = shard.header(loc);
            if h.exptime != 0 && h.exptime <= now {
                self.expire(&mut shard, hash, key, now);
                expired = true;
            }
        }
        let mut entry = Entry {
            store: self,
            shard,
            key,
            hash,
            now,
            expired,
            revision: 0,
        };
        let r = f(&mut entry);
        flash::clear_spared();
        (r, entry.revision)
    }
}

/// Exclusive access to one key inside [`Store::entry`].
pub struct Entry<'s> {
    /// The store (settings, CAS uniques, the mutation report).
    pub(crate) store: &'s Store,
    /// The key's shard, locked for the entry's life.
    pub(crate) shard: MutexGuard<'s, Shard>,
    /// The key.
    pub(crate) key: &'s [u8],
    /// Its hash.
    pub(crate) hash: u64,
    /// Unix seconds now, as the caller passed it.
    pub(crate) now: UnixSecs,
    /// The lookup found the key's item expired (and removed it).
    pub(crate) expired: bool,
    /// The newest revision the sink gave a change made through this entry (0: none yet;
    /// `Revision::MAX` once the sink failed): see [`Store::entry_reporting`].
    pub(crate) revision: Revision,
}

impl Entry<'_> {
    fn loc(&self) -> Option<Loc> {
        self.shard.find(self.hash, self.key)
    }

    /// Keeps the revision the sink gave one of this entry's own changes, for the caller
    /// ([`Store::entry_reporting`]), and returns it.
    fn own(&mut self, rev: Revision) -> Revision {
        self.revision = self.revision.max(rev);
        rev
    }

    /// The live item, if any (an expired one is treated as absent and reclaimed).
    pub fn item(&self) -> Option<Item> {
        let loc = self.loc()?;
        let seg = self.shard.seg(loc.slot);
        let h = seg.header(loc.offset as usize);
        Some(Item {
            value: seg.value(&h).to_vec(),
            meta: meta_of(&h, seg, loc.offset as usize),
        })
    }

    /// Meta and value length of the live item without copying the value.
    pub fn peek(&self) -> Option<(ItemMeta, usize)> {
        let loc = self.loc()?;
        let seg = self.shard.seg(loc.slot);
        let h = seg.header(loc.offset as usize);
        Some((meta_of(&h, seg, loc.offset as usize), h.value_len))
    }

    /// Whether the lookup found an expired item (for `get_expired` / `expired_unfetched` stats).
    pub fn was_expired(&self) -> bool {
        self.expired
    }

    /// Stores a value built from `parts` concatenated (so append/prepend need no extra copy).
    /// `cas`: None = assign a fresh unique; Some(c) = explicit (meta `E`).
    /// Resets fetched/stale/win_sent; the last access becomes `now`. Fails with `TooLarge` if
    /// over `item_size_max_bytes`, with `OutOfMemory` if full and eviction is off (or nothing
    /// can be evicted). Returns the meta.
    pub fn store(
        &mut self,
        parts: &[&[u8]],
        flags: u32,
        exptime: UnixSecs,
        cas: Option<u64>,
    ) -> Result<ItemMeta, StoreError> {
        self.store_inner(parts, flags, exptime, cas, 0, self.now, None)
    }

    /// Stores with item state bits `state` and last access `access`. `moved`: None for a
    /// mutation (reported to the sink, which gives its revision); Some(revision) for a
    /// promotion from flash, which changes where an item is, not what it is (not reported,
    /// and the item keeps its revision).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn store_inner(
        &mut self,
        parts: &[&[u8]],
        flags: u32,
        exptime: UnixSecs,
        cas: Option<u64>,
        state: u8,
        access: UnixSecs,
        moved: Option<Revision>,
    ) -> Result<ItemMeta, StoreError> {
        let store = self.store;
        let value_len: usize = parts.iter().map(|p| p.len()).sum();
        let size = shard::needed(self.key, value_len, flags, exptime);
        if size > store.config.item_size_max_bytes || self.key.len() > u8::MAX as usize {
            return Err(StoreError::TooLarge);
        }
        let env = store.env(self.now);
        let loc = match self.shard.alloc(size, store.config.evict_when_full, &env) {
            Alloc::At(loc) => loc,
            Alloc::NoRoom => return Err(StoreError::OutOfMemory),
        };
        let cas = self.new_cas(cas);
        // The copy this one replaces, looked up after making room: eviction may have removed
        // it (and reported that), or moved it.
        let prev_loc = self.loc();
        let offset = self.shard.seg_mut(loc.slot).append(
            self.key,
            parts,
            value_len,
            flags,
            exptime,
            cas,
            moved.unwrap_or_else(|| store.newest_revision()),
            state,
            access,
        );
        debug_assert_eq!(offset, loc.offset as usize);
        match moved {
            None => self.shard.link(self.hash, self.key, loc, &env),
            Some(_) => self.shard.link_ram(self.hash, self.key, loc, &env),
        }
        self.shard.counters.total_items += 1;
        let seg = self.shard.seg(loc.slot);
        let h = seg.header(offset);
        let mut meta = meta_of(&h, seg, offset);
        if moved.is_some() {
            return Ok(meta);
        }
        // The replaced copy is dead now but its bytes stay until its segment is freed.
        let prev = prev_loc.map(|p| {
            let seg = self.shard.seg(p.slot);
            let ph = seg.header(p.offset as usize);
            PrevItem {
                value: seg.value(&ph),
                meta: meta_of(&ph, seg, p.offset as usize),
            }
        });
        meta.mod_revision = 0;
        let rev = store.report(&Mutation::Stored {
            key: self.key,
            value: seg.value(&h),
            meta,
            prev,
        });
        meta.mod_revision = self.own(rev);
        self.shard
            .seg_mut(loc.slot)
            .set_revision(offset, &h, meta.mod_revision);
        Ok(meta)
    }

    /// Changes metadata of the live item (touch, stale marking, win flag, fetched bit, last
    /// access), in place, or in a new copy when it gets flags or an expiry it has no room for.
    /// Reports a `Mutation::Stored` only if `exptime`, `stale`, `flags` or `cas` changed.
    /// Returns false if there is no live item (or no memory for the new copy).
    pub fn update_meta(&mut self, f: impl FnOnce(&mut ItemMeta)) -> bool {
        let Some(loc) = self.loc() else {
            return false;
        };
        let at = loc.offset as usize;
        let seg = self.shard.seg(loc.slot);
        let h = seg.header(at);
        let before = meta_of(&h, seg, at);
        let mut after = before;
        f(&mut after);
        after.mod_revision = before.mod_revision;
        if after.flags != before.flags || !segment::Segment::exptime_fits(&h, after.exptime) {
            // Flags and the expiry live in the item's variable part: write a new copy.
            let value = seg.value(&h).to_vec();
            let state = state_of(&after);
            return self
                .store_inner(
                    &[&value],
                    after.flags,
                    after.exptime,
                    Some(after.cas),
                    state,
                    after.last_access,
                    None,
                )
                .is_ok();
        }
        let seg = self.shard.seg_mut(loc.slot);
        seg.set_exptime(&h, after.exptime);
        seg.set_cas(at, &h, after.cas);
        if after.last_access != before.last_access {
            seg.set_access(&h, after.last_access);
        }
        seg.set_state(
            loc.offset as usize,
            (h.state & !(FETCHED | STALE | WIN_SENT)) | state_of(&after),
        );
        let visible = after.exptime != before.exptime
            || after.stale != before.stale
            || after.cas != before.cas;
        if visible {
            let seg = self.shard.seg(loc.slot);
            let value = seg.value(&h);
            let mut meta = after;
            meta.mod_revision = 0;
            // The previous state, for watchers, is the one before the change (same value).
            let rev = self.store.report(&Mutation::Stored {
                key: self.key,
                value,
                meta,
                prev: Some(PrevItem {
                    value,
                    meta: before,
                }),
            });
            let rev = self.own(rev);
            self.shard.seg_mut(loc.slot).set_revision(at, &h, rev);
        }
        true
    }

    /// A CAS unique for a change made through [`Entry::update_meta`] (meta `md I` bumps it):
    /// `explicit` (meta `E`, which raises the floor) or a fresh one.
    pub fn new_cas(&self, explicit: Option<u64>) -> u64 {
        match explicit {
            Some(c) => {
                self.store.raise_cas_floor(c);
                c
            }
            None => self.store.next_cas(),
        }
    }

    /// Removes the live item; returns whether one existed. Reports `Mutation::Deleted`.
    /// The key's flash copy goes too if it has one (the server brings it to RAM first, see
    /// `Promote::Always`, but log replay does not); its removal is logged as well, so a crash
    /// cannot bring it back from a checkpoint.
    pub fn delete(&mut self) -> bool {
        self.delete_revision().0
    }

    /// [`Entry::delete`], also returning the revision of the delete when one was reported.
    pub fn delete_revision(&mut self) -> (bool, Option<Revision>) {
        let env = self.store.env(self.now);
        let removed = self.shard.remove(self.hash, self.key);
        // A key with a RAM copy has none on flash.
        let flash_removed =
            removed.is_none() && self.shard.flash_remove_key(self.hash, self.key).0 > 0;
        if removed.is_none() && !flash_removed {
            return (false, None);
        }
        let prev = removed.map(|(loc, h)| {
            let seg = self.shard.seg(loc.slot);
            PrevItem {
                value: seg.value(&h),
                meta: meta_of(&h, seg, loc.offset as usize),
            }
        });
        let rev = env.store.report(&Mutation::Deleted {
            key: self.key,
            reason: DeleteReason::Client,
            prev,
        });
        let rev = self.own(rev);
        (removed.is_some() || flash_removed, Some(rev))
    }
}
