//! cairn-store: the in-memory cache, synchronous and protocol-agnostic.
//!
//! ```text
//!   server command files (get, set, cas, incr, meta ...)
//!        |  Store::get / Store::entry(key, now, |e: &mut Entry| ...)
//!        v
//!   Store ── shard = hash(key) % n ──> Mutex<Shard { index, segments, lru/fifo state }>
//!                                          |  every mutation calls
//!                                          v
//!                                     MutationSink::on_mutation(&Mutation) -> revision
//!                                     (under the shard lock, so per-key log order == apply order;
//!                                     persistence and the watch hub hook here)
//! ```
//!
//! Every mutation has a revision, handed back by the sink (the command log's LSN with
//! persistence on, a counter without it; the store's own counter when there is no sink), and
//! every item keeps the revision of the mutation that made it (`ItemMeta::mod_revision`).
//! Removals the store decides itself, expiry and eviction for good, are mutations too; moves
//! (second chance, compaction, to flash and back) are not.
//!
//! Non-goals: no I/O, no protocol text, no clocks of its own (callers pass `now`, unix seconds).

pub mod flash;
mod flash_index;
mod segment;
mod shard;

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

pub use flash::{FlashLoc, FlashTier};
use segment::{DEAD, FETCHED, STALE, WIN_SENT};
use shard::{Alloc, Loc, Shard};

/// Unix time in whole seconds, as passed in by the caller.
pub type UnixSecs = u32;

/// The number of a mutation: increasing in the order mutations are reported (per key, in
/// apply order).
pub type Revision = u64;

/// Settings fixed at construction.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// Total bytes items may occupy (memcached `-m` in bytes), counting index + item memory.
    pub memory_limit_bytes: u64,
    /// true: evict to make room (default). false (`-M`): refuse with `StoreError::OutOfMemory`.
    pub evict_when_full: bool,
    /// Largest key + value + overhead accepted (memcached `-I`, default 1 MiB).
    pub item_size_max_bytes: usize,
    /// Number of independently locked shards (power of two).
    pub shard_count: usize,
    /// Seed of the key hash. None: a random one. The flash tier keeps its seed on the device,
    /// since a checkpoint records flash entries by hash bits.
    pub hash_seed: Option<u64>,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            memory_limit_bytes: 64 << 20,
            evict_when_full: true,
            item_size_max_bytes: 1 << 20,
            shard_count: 64,
            hash_seed: None,
        }
    }
}

/// Errors of store operations that clients can cause.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StoreError {
    #[error("object too large for cache")]
    TooLarge,
    #[error("out of memory storing object")]
    OutOfMemory,
}

/// The metadata of a live item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ItemMeta {
    /// Opaque 32-bit client flags.
    pub flags: u32,
    /// Absolute expiry in unix seconds; 0 = never.
    pub exptime: UnixSecs,
    /// 64-bit CAS unique, assigned by the store on every store unless set explicitly.
    pub cas: u64,
    /// Unix seconds of the last access: a store, a get, a touch, or a meta command that bumps
    /// (exact for an hour of its segment's life, then within 1/2048 of the segment's age; see
    /// `segment::encode_access`). Written by [`Entry::update_meta`] when changed.
    pub last_access: UnixSecs,
    /// Whether the item was fetched since it was stored (meta `h`).
    pub fetched: bool,
    /// Marked stale by meta invalidate (`md I` / `ms I`); meta `X`/`W` semantics.
    pub stale: bool,
    /// A win token was already handed out for this item (meta `Z`).
    pub win_sent: bool,
    /// The revision of the mutation that made this state of the item (0 in the meta a
    /// mutation report carries: the sink assigns it).
    pub mod_revision: Revision,
}

/// A copy of a live item, returned by reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    /// The value, copied out of item memory under the shard lock.
    pub value: Vec<u8>,
    pub meta: ItemMeta,
}

/// Why an item was removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteReason {
    /// A client deleted it (delete, md without I).
    Client,
    /// Its expiry time passed and the store removed it (on access or by the reclaim sweep).
    Expired,
    /// It was dropped for good to make room.
    Evicted,
}

/// An item as it was before a mutation (for watchers that ask for the previous value).
#[derive(Clone, Copy, Debug)]
pub struct PrevItem<'a> {
    pub value: &'a [u8],
    pub meta: ItemMeta,
}

/// What a mutation did, reported to the [`MutationSink`] under the shard lock.
#[derive(Debug)]
pub enum Mutation<'a> {
    /// The key now holds exactly this item (set/add/append/incr/touch/meta-change ...).
    /// `meta.mod_revision` is 0: the sink assigns the revision.
    Stored {
        key: &'a [u8],
        value: &'a [u8],
        meta: ItemMeta,
        /// The live item in RAM this one replaced, if there was one.
        prev: Option<PrevItem<'a>>,
    },
    /// The key was removed (by a client, by expiry or by eviction).
    Deleted {
        key: &'a [u8],
        reason: DeleteReason,
        /// The item removed, when it was in RAM (a delete may remove only flash copies).
        prev: Option<PrevItem<'a>>,
    },
    /// Everything was flushed (flush_all now, or a scheduled flush whose time came).
    Flushed,
    /// `flush_all <delay>`: everything is to be flushed at unix time `at` unless another
    /// flush_all comes first (it replaces this one, as in memcached).
    FlushScheduled { at: UnixSecs },
}

/// A hook observing every mutation (persistence, watch streams), expiry and eviction for good
/// included. An item moved within the store (second chance, compaction, to flash and back) is
/// not a mutation.
pub trait MutationSink: Send + Sync {
    /// Records the mutation and returns its revision, which must be larger than that of every
    /// mutation reported before it on the same key. `Revision::MAX` means "never durable"
    /// (the log failed): the item is kept in memory but no watcher will ever see it.
    fn on_mutation(&self, mutation: &Mutation<'_>) -> Revision;
}

/// Counters kept by the store (memcached stats names in the docs of each field).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// `curr_items`: live items now.
    pub curr_items: u64,
    /// `total_items`: items ever stored.
    pub total_items: u64,
    /// `bytes`: bytes used by items (key + value + item header).
    pub bytes: u64,
    /// bytes of memory the store holds in total (item memory + index), compared to the limit.
    pub memory_used_bytes: u64,
    /// `limit_maxbytes`.
    pub limit_maxbytes: u64,
    /// `evictions`: live items removed to make room.
    pub evictions: u64,
    /// `expired_unfetched`: expired items reclaimed that were never fetched.
    pub expired_unfetched: u64,
    /// `evicted_unfetched`: evicted items that were never fetched.
    pub evicted_unfetched: u64,
    /// `reclaimed`: expired items whose memory was reclaimed.
    pub reclaimed: u64,
    /// Live items whose copy is on flash (included in `curr_items`).
    pub flash_items: u64,
    /// Items moved from RAM to flash by eviction.
    pub evicted_to_flash: u64,
    /// Flash entries of other keys removed by a store or delete of a key with the same hash
    /// tag because their item could not be read (damaged or an I/O error); also evictions.
    pub flash_tag_drops: u64,
    /// Items brought back from flash to RAM (hot reads, and commands that change an item).
    pub flash_promotions: u64,
    /// `crawler_items_checked`: items the expiry sweep read (segments whose items were all
    /// written without an expiry are skipped unread).
    pub crawler_items_checked: u64,
    /// RAM held by the flash index: the slots its tables allocated (see `flash_index.rs`).
    pub flash_index_bytes: u64,
    /// RAM segments in use (memcached's `total_pages` of its one slab class here).
    pub segments: u64,
    /// Creation time of the oldest RAM segment (0 if none): the oldest item is about this old
    /// (memcached's `items:N:age`).
    pub oldest_segment_created: UnixSecs,
}

/// The cache. Cheap to share behind an `Arc`; all methods take `&self`.
pub struct Store {
    /// Settings as given.
    config: StoreConfig,
    /// Independently locked parts; a key's shard is chosen by its hash.
    shards: Box<[Mutex<Shard>]>,
    /// Hashes keys for shard choice and the index (seeded, see [`StoreConfig::hash_seed`]).
    hasher: foldhash::fast::FixedState,
    /// The memory limit in force: `config.memory_limit_bytes` until `cache_memlimit` changes it.
    memory_limit_bytes: AtomicU64,
    /// The last CAS unique handed out.
    cas: AtomicU64,
    /// Observer of mutations (persistence, watch), if any.
    sink: Option<Arc<dyn MutationSink>>,
    /// The newest revision reported (the base of new segments); the revision counter itself
    /// when there is no sink.
    revision: AtomicU64,
    /// The time of a pending `flush_all <delay>`, if one is scheduled. Its lock also orders
    /// flush mutations: it is taken before any shard lock.
    scheduled_flush: Mutex<Option<UnixSecs>>,
}

/// Smallest memory a shard gets, in segments or in largest items, whichever is more: fewer
/// shards are used for small limits so that each still holds several segments (eviction stays
/// fine-grained) and several of the largest items (a shard evicts to stay in its share, so a
/// share smaller than a few items would evict large items that fit the whole limit).
const MIN_SHARD_SEGMENTS_OR_ITEMS: u64 = 4;

impl Store {
    pub fn new(config: StoreConfig, sink: Option<Arc<dyn MutationSink>>) -> Store {
        Store::with_flash(config, sink, None)
    }

    /// A store whose RAM evictions go to `flash` instead of being dropped.
    pub fn with_flash(
        config: StoreConfig,
        sink: Option<Arc<dyn MutationSink>>,
        flash: Option<Arc<dyn FlashTier>>,
    ) -> Store {
        let min_shard_bytes = MIN_SHARD_SEGMENTS_OR_ITEMS
            * (segment::SEGMENT_SIZE.max(config.item_size_max_bytes) as u64);
        let by_memory = (config.memory_limit_bytes / min_shard_bytes).max(1) as usize;
        let count = config.shard_count.clamp(1, by_memory.max(1));
        let count = if count.is_power_of_two() {
            count
        } else {
            count.next_power_of_two() / 2
        };
        let budget = (config.memory_limit_bytes / count as u64) as usize;
        let shards = (0..count)
            .map(|_| Mutex::new(Shard::new(budget, flash.clone())))
            .collect();
        let seed = config.hash_seed.unwrap_or_else(|| {
            use std::hash::{BuildHasher as _, Hasher as _};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(0);
            h.finish()
        });
        Store {
            memory_limit_bytes: AtomicU64::new(config.memory_limit_bytes),
            config,
            shards,
            hasher: foldhash::fast::FixedState::with_seed(seed),
            cas: AtomicU64::new(0),
            sink,
            revision: AtomicU64::new(0),
            scheduled_flush: Mutex::new(None),
        }
    }

    pub(crate) fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The hash the store files `key` under (its low bits are the flash tag).
    pub fn key_hash(&self, key: &[u8]) -> u64 {
        self.hash(key)
    }

    fn shard_index(&self, hash: u64) -> usize {
        // The high bits pick the shard; hashbrown uses the low and top-7 bits inside it.
        (hash >> 32) as usize % self.shards.len()
    }

    fn shard(&self, hash: u64) -> MutexGuard<'_, Shard> {
        self.shards[self.shard_index(hash)].lock()
    }

    /// The shard (0..shard_count) that holds `key`: work split by shard never touches one key
    /// from two threads (parallel log replay relies on it).
    pub fn shard_of(&self, key: &[u8]) -> usize {
        self.shard_index(self.hash(key))
    }

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

    /// The RAM shard `index` has for its items: its share of the memory limit less what its
    /// indexes take (the flash index of a large tier can take most of it), at least the one
    /// segment a shard always keeps.
    pub fn item_room_bytes(&self, index: usize) -> usize {
        let shard = self.shards[index].lock();
        let indexes = shard.memory_used() - shard.segment_bytes;
        shard
            .budget
            .saturating_sub(indexes)
            .max(segment::SEGMENT_SIZE)
    }

    /// Runs `f` with exclusive access to one key's slot (the shard lock is held during `f`).
    /// All conditional writes (add/replace/cas/append/incr/touch/meta) are built on this.
    pub fn entry<R>(&self, key: &[u8], now: UnixSecs, f: impl FnOnce(&mut Entry<'_>) -> R) -> R {
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
        };
        let r = f(&mut entry);
        flash::clear_spared();
        r
    }

    /// Tells the next [`Store::entry`] of `key` on this thread that the flash entries at
    /// `locs` (with the key's tag; each with its segment's seq when read, see
    /// [`FlashTier::sealed_seq`]) were read and hold other keys: a store or delete of `key`
    /// leaves them alone instead of removing every entry with the tag.
    pub fn spare_flash(&self, key: &[u8], locs: &[(FlashLoc, u64)]) {
        if !locs.is_empty() {
            flash::set_spared(
                self.hash(key),
                locs.iter().map(|(l, seq)| (l.place(), *seq)).collect(),
            );
        }
    }

    /// Removes every item now (flush_all) and cancels a scheduled flush. Reports
    /// `Mutation::Flushed`.
    pub fn flush_all(&self) {
        let mut scheduled = self.scheduled_flush.lock();
        *scheduled = None;
        self.flush_locked();
    }

    /// Every shard is locked at once so the flush sits at one point in the mutation order.
    /// Called with the `scheduled_flush` lock held.
    fn flush_locked(&self) {
        let mut guards: Vec<_> = self.shards.iter().map(|s| s.lock()).collect();
        for g in &mut guards {
            g.clear();
        }
        self.report(&Mutation::Flushed);
    }

    /// `flush_all <delay>`: records that everything is to be flushed at `at`, replacing any
    /// earlier schedule, and reports `Mutation::FlushScheduled`. The caller runs the timer and
    /// calls [`Store::run_scheduled_flush`] when the time comes.
    pub fn schedule_flush(&self, at: UnixSecs) {
        let mut scheduled = self.scheduled_flush.lock();
        *scheduled = Some(at);
        self.report(&Mutation::FlushScheduled { at });
    }

    /// Flushes everything if the flush scheduled for `at` is still the pending one (no later
    /// flush_all replaced it). Returns whether it flushed.
    pub fn run_scheduled_flush(&self, at: UnixSecs) -> bool {
        let mut scheduled = self.scheduled_flush.lock();
        if *scheduled != Some(at) {
            return false;
        }
        *scheduled = None;
        self.flush_locked();
        true
    }

    /// The time of the pending scheduled flush, if any.
    pub fn scheduled_flush(&self) -> Option<UnixSecs> {
        *self.scheduled_flush.lock()
    }

    /// Runs `f` with the pending scheduled flush while no flush can be scheduled, run or
    /// cancelled (a checkpoint uses it to restate the schedule after its log position).
    pub fn with_scheduled_flush<R>(&self, f: impl FnOnce(Option<UnixSecs>) -> R) -> R {
        let scheduled = self.scheduled_flush.lock();
        f(*scheduled)
    }

    /// Reclaims memory of expired items; call periodically from a background task. Returns how
    /// many items were reclaimed. Bounded work per call (`max_items` examined).
    pub fn reclaim_expired(&self, now: UnixSecs, max_items: usize) -> usize {
        let per_shard = (max_items / self.shards.len()).max(1);
        self.shards
            .iter()
            .map(|s| s.lock().reclaim(per_shard, &self.env(now)))
            .sum()
    }

    pub fn stats(&self) -> StoreStats {
        let mut s = StoreStats {
            limit_maxbytes: self.memory_limit_bytes.load(Ordering::Relaxed),
            ..StoreStats::default()
        };
        for shard in self.shards.iter() {
            shard.lock().add_stats(&mut s);
        }
        s
    }

    /// The settings this store was built with (the memory limit may have changed since: see
    /// [`Store::set_memory_limit`]).
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// The smallest limit [`Store::set_memory_limit`] can keep: two segments (or two of the
    /// largest items) per shard, one being written and one to evict.
    pub fn min_memory_limit(&self) -> u64 {
        let per_shard = 2 * segment::SEGMENT_SIZE.max(self.config.item_size_max_bytes) as u64;
        per_shard * self.shards.len() as u64
    }

    /// Changes the memory limit while serving (memcached's `cache_memlimit`): each shard gets
    /// its share. A smaller limit evicts at once, shard by shard, down to the new share (with
    /// evictions off, `-M`, new stores are refused until deletes make room); each shard keeps at
    /// least the segment it is writing to, so a limit below one segment per shard is not met.
    /// The shard count stays the one chosen at start.
    pub fn set_memory_limit(&self, bytes: u64, now: UnixSecs) {
        self.memory_limit_bytes.store(bytes, Ordering::Relaxed);
        let budget = (bytes / self.shards.len() as u64) as usize;
        for shard in self.shards.iter() {
            let mut shard = shard.lock();
            shard.budget = budget;
            if self.config.evict_when_full {
                shard.shrink_to_budget(&self.env(now));
            }
        }
    }

    /// Bytes an item takes in a segment (memcached's `size=` of metadump and `stats sizes`).
    pub fn item_bytes(key: &[u8], value: &[u8], meta: &ItemMeta) -> usize {
        shard::needed(key, value.len(), meta.flags, meta.exptime)
    }

    /// Whether RAM evictions go to a flash tier.
    pub fn has_flash(&self) -> bool {
        self.shards[0].lock().tier.is_some()
    }

    /// Number of shards in use (fewer than configured when memory is small).
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Calls `f` with every live item of shard `index` (0..shard_count), under that shard's
    /// lock: the unit of a fuzzy snapshot, which copies one shard at a time.
    pub fn visit_shard(
        &self,
        index: usize,
        now: UnixSecs,
        mut f: impl FnMut(&[u8], &[u8], &ItemMeta),
    ) {
        visit_ram(&self.shards[index].lock(), now, &mut f);
    }

    /// Makes every CAS unique assigned from now on larger than `cas` (after recovery, so a
    /// restarted server never hands out a unique a client already holds).
    pub fn raise_cas_floor(&self, cas: u64) {
        self.cas.fetch_max(cas, Ordering::Relaxed);
    }

    /// The last CAS unique handed out.
    pub fn cas_floor(&self) -> u64 {
        self.cas.load(Ordering::Relaxed)
    }

    fn next_cas(&self) -> u64 {
        self.cas.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The newest revision reported so far.
    pub fn newest_revision(&self) -> Revision {
        self.revision.load(Ordering::Relaxed)
    }

    /// Reports a mutation to the sink and returns its revision.
    pub(crate) fn report(&self, m: &Mutation<'_>) -> Revision {
        match &self.sink {
            Some(sink) => {
                let rev = sink.on_mutation(m);
                if rev != Revision::MAX {
                    self.revision.fetch_max(rev, Ordering::Relaxed);
                }
                rev
            }
            None => self.revision.fetch_add(1, Ordering::Relaxed) + 1,
        }
    }

    /// What shard operations that make room or remove items need from the store.
    fn env(&self, now: UnixSecs) -> shard::Env<'_> {
        shard::Env { now, store: self }
    }

    /// Removes an expired item found by a lookup, reports and counts it.
    fn expire(&self, shard: &mut Shard, hash: u64, key: &[u8], now: UnixSecs) {
        let _ = shard.remove_reported(hash, key, DeleteReason::Expired, &self.env(now));
    }
}

/// Calls `f` with every live item in RAM of a locked shard.
fn visit_ram(shard: &Shard, now: UnixSecs, f: &mut impl FnMut(&[u8], &[u8], &ItemMeta)) {
    for &slot in &shard.fifo {
        let seg = shard.seg(slot);
        for at in seg.offsets() {
            let h = seg.header(at);
            if h.state & DEAD != 0 || (h.exptime != 0 && h.exptime <= now) {
                continue;
            }
            f(seg.key(&h), seg.value(&h), &meta_of(&h, seg, at));
        }
    }
}

/// The metadata of the item at offset `at` of `seg`, whose header is `h`.
pub(crate) fn meta_of(h: &segment::Header, seg: &segment::Segment, at: usize) -> ItemMeta {
    ItemMeta {
        flags: h.flags,
        exptime: h.exptime,
        cas: seg.cas(at, h),
        last_access: seg.access(h),
        fetched: h.state & FETCHED != 0,
        stale: h.state & STALE != 0,
        win_sent: h.state & WIN_SENT != 0,
        mod_revision: seg.revision(at, h),
    }
}

fn state_of(m: &ItemMeta) -> u8 {
    (if m.fetched { FETCHED } else { 0 })
        | (if m.stale { STALE } else { 0 })
        | (if m.win_sent { WIN_SENT } else { 0 })
}

/// Result of [`Store::get`] (a copy of the item), or of [`Store::get_with`] (what its
/// closure returned).
#[derive(Debug, PartialEq, Eq)]
pub enum ReadOutcome<T = Item> {
    Hit(T),
    Miss,
    /// The key existed but had expired (memcached counts these as `get_expired` and misses).
    Expired,
}

/// Result of [`Store::lookup`].
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup {
    /// Answered from RAM.
    Done(ReadOutcome),
    /// Not in RAM; these flash locations may hold it (usually one).
    Flash(Vec<FlashLoc>),
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

/// Exclusive access to one key inside [`Store::entry`].
pub struct Entry<'s> {
    store: &'s Store,
    shard: MutexGuard<'s, Shard>,
    key: &'s [u8],
    hash: u64,
    now: UnixSecs,
    expired: bool,
}

impl Entry<'_> {
    fn loc(&self) -> Option<Loc> {
        self.shard.find(self.hash, self.key)
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
    fn store_inner(
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
        meta.mod_revision = store.report(&Mutation::Stored {
            key: self.key,
            value: seg.value(&h),
            meta,
            prev,
        });
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
        (removed.is_some() || flash_removed, Some(rev))
    }
}

const _: () = assert!(DEAD != FETCHED);

#[cfg(test)]
mod tests;
