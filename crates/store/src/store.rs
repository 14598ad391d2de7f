//! The store: its shards, the key hash that picks one, the numbering of changes (CAS
//! uniques, revisions, the report to the sink), the memory limit, stats and visits.
//!
//! ```text
//!   Store { shards: [Mutex<Shard>] } ── shard = hash(key) >> 32 % n
//!     ├─ reads (read.rs), one key's changes (entry.rs), flush_all (flush.rs),
//!     │  the flash tier's side (flash_ops.rs): each an `impl Store` of its own module
//!     └─ shards call back (shard::StoreCalls): hash, report, CAS and revision bases
//! ```
//!
//! Non-goals: no I/O, no protocol text, no clock of its own.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use crate::config::StoreConfig;
use crate::flash::FlashTier;
use crate::segment::{self, meta_of, DEAD};
use crate::shard::{self, Shard, StoreCalls};
use crate::types::{
    DeleteReason, ItemMeta, Mutation, MutationSink, Revision, StoreStats, UnixSecs,
};

/// The cache. Cheap to share behind an `Arc`; all methods take `&self`.
pub struct Store {
    /// Settings as given.
    pub(crate) config: StoreConfig,
    /// Independently locked parts; a key's shard is chosen by its hash.
    pub(crate) shards: Box<[Mutex<Shard>]>,
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
    pub(crate) scheduled_flush: Mutex<Option<UnixSecs>>,
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

    pub(crate) fn shard_index(&self, hash: u64) -> usize {
        // The high bits pick the shard; hashbrown uses the low and top-7 bits inside it.
        (hash >> 32) as usize % self.shards.len()
    }

    pub(crate) fn shard(&self, hash: u64) -> MutexGuard<'_, Shard> {
        self.shards[self.shard_index(hash)].lock()
    }

    /// The shard (0..shard_count) that holds `key`: work split by shard never touches one key
    /// from two threads (parallel log replay relies on it).
    pub fn shard_of(&self, key: &[u8]) -> usize {
        self.shard_index(self.hash(key))
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

    pub(crate) fn next_cas(&self) -> u64 {
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
    pub(crate) fn env(&self, now: UnixSecs) -> shard::Env<'_> {
        shard::Env { now, store: self }
    }

    /// Removes an expired item found by a lookup, reports and counts it.
    pub(crate) fn expire(&self, shard: &mut Shard, hash: u64, key: &[u8], now: UnixSecs) {
        let _ = shard.remove_reported(hash, key, DeleteReason::Expired, &self.env(now));
    }
}

/// What a shard calls back into the store for, while it makes room or removes items.
impl StoreCalls for Store {
    fn hash(&self, key: &[u8]) -> u64 {
        Store::hash(self, key)
    }

    fn report(&self, m: &Mutation<'_>) -> Revision {
        Store::report(self, m)
    }

    fn cas_floor(&self) -> u64 {
        Store::cas_floor(self)
    }

    fn newest_revision(&self) -> Revision {
        Store::newest_revision(self)
    }
}

/// Calls `f` with every live item in RAM of a locked shard.
pub(crate) fn visit_ram(shard: &Shard, now: UnixSecs, f: &mut impl FnMut(&[u8], &[u8], &ItemMeta)) {
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
