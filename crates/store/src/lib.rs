//! cairn-store: the in-memory cache, synchronous and protocol-agnostic.
//!
//! API CONTRACT (fixed; the server is written against it). Bodies are filled in by the store work.
//!
//! ```text
//!   server command files (get, set, cas, incr, meta ...)
//!        |  Store::get / Store::entry(key, now, |e: &mut Entry| ...)
//!        v
//!   Store ── shard = hash(key) % n ──> Mutex<Shard { index, segments, lru/fifo state }>
//!                                          |  every mutation calls
//!                                          v
//!                                     MutationSink::on_mutation(&Mutation)  (under the shard lock,
//!                                     so per-key log order == apply order; persistence hooks here)
//! ```
//!
//! Non-goals: no I/O, no protocol text, no clocks of its own (callers pass `now`, unix seconds).

use std::sync::Arc;

/// Unix time in whole seconds, as passed in by the caller.
pub type UnixSecs = u32;

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
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            memory_limit_bytes: 64 << 20,
            evict_when_full: true,
            item_size_max_bytes: 1 << 20,
            shard_count: 64,
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
    /// Unix seconds of the last access (get/touch/store); may be coarse.
    pub last_access: UnixSecs,
    /// Whether the item was fetched since it was stored (meta `h`).
    pub fetched: bool,
    /// Marked stale by meta invalidate (`md I` / `ms I`); meta `X`/`W` semantics.
    pub stale: bool,
    /// A win token was already handed out for this item (meta `Z`).
    pub win_sent: bool,
}

/// A copy of a live item, returned by reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    /// The value, copied out of item memory under the shard lock.
    pub value: Vec<u8>,
    pub meta: ItemMeta,
}

/// What a mutation did, reported to the [`MutationSink`] under the shard lock.
#[derive(Debug)]
pub enum Mutation<'a> {
    /// The key now holds exactly this item (set/add/append/incr/touch/meta-change ...).
    Stored {
        key: &'a [u8],
        value: &'a [u8],
        meta: ItemMeta,
    },
    /// The key was removed by a client (delete, md without I).
    Deleted { key: &'a [u8] },
    /// Everything was flushed (flush_all, after its delay elapsed).
    Flushed,
}

/// A hook observing every client-visible mutation (persistence, watch streams).
/// Evictions and expiry are NOT reported: they are cache policy, not client writes.
pub trait MutationSink: Send + Sync {
    fn on_mutation(&self, mutation: &Mutation<'_>);
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
}

/// The cache. Cheap to share behind an `Arc`; all methods take `&self`.
pub struct Store {
    _private: (),
}

impl Store {
    pub fn new(_config: StoreConfig, _sink: Option<Arc<dyn MutationSink>>) -> Store {
        todo!()
    }

    /// Looks up a live item, copying it out. Expired items are removed lazily (counted in the
    /// returned `ReadOutcome::Expired`). Marks the item fetched and updates its last access
    /// (does not report a mutation).
    pub fn get(&self, _key: &[u8], _now: UnixSecs) -> ReadOutcome {
        todo!()
    }

    /// Runs `f` with exclusive access to one key's slot (the shard lock is held during `f`).
    /// All conditional writes (add/replace/cas/append/incr/touch/meta) are built on this.
    pub fn entry<R>(&self, _key: &[u8], _now: UnixSecs, _f: impl FnOnce(&mut Entry<'_>) -> R) -> R {
        todo!()
    }

    /// Removes every item now (flush_all). Reports `Mutation::Flushed`.
    pub fn flush_all(&self) {
        todo!()
    }

    /// Reclaims memory of expired items; call periodically from a background task. Returns how
    /// many items were reclaimed. Bounded work per call (`max_items`).
    pub fn reclaim_expired(&self, _now: UnixSecs, _max_items: usize) -> usize {
        todo!()
    }

    pub fn stats(&self) -> StoreStats {
        todo!()
    }

    /// The settings this store was built with.
    pub fn config(&self) -> &StoreConfig {
        todo!()
    }
}

/// Result of [`Store::get`].
#[derive(Debug, PartialEq, Eq)]
pub enum ReadOutcome {
    Hit(Item),
    Miss,
    /// The key existed but had expired (memcached counts these as `get_expired` and misses).
    Expired,
}

/// Exclusive access to one key inside [`Store::entry`].
pub struct Entry<'s> {
    _p: std::marker::PhantomData<&'s ()>,
}

impl Entry<'_> {
    /// The live item, if any (an expired one is treated as absent and reclaimed).
    /// Returns a copy; `value_len` is available cheaply via `meta_and_len`.
    pub fn item(&self) -> Option<Item> {
        todo!()
    }

    /// Meta and value length of the live item without copying the value.
    pub fn peek(&self) -> Option<(ItemMeta, usize)> {
        todo!()
    }

    /// Whether the lookup found an expired item (for `get_expired` / `expired_unfetched` stats).
    pub fn was_expired(&self) -> bool {
        todo!()
    }

    /// Stores a value built from `parts` concatenated (so append/prepend need no extra copy).
    /// `cas`: None = assign a fresh unique; Some(c) = explicit (meta `E`).
    /// Resets fetched/stale/win_sent. Fails with `TooLarge` if over `item_size_max_bytes`, with
    /// `OutOfMemory` if full and eviction is off (or nothing can be evicted). Returns the meta.
    pub fn store(
        &mut self,
        _parts: &[&[u8]],
        _flags: u32,
        _exptime: UnixSecs,
        _cas: Option<u64>,
    ) -> Result<ItemMeta, StoreError> {
        todo!()
    }

    /// Changes metadata of the live item in place (touch, stale marking, win flag, fetched bit).
    /// Reports a `Mutation::Stored` only if `exptime`, `stale` or `cas` changed (client-visible).
    /// Returns false if there is no live item.
    pub fn update_meta(&mut self, _f: impl FnOnce(&mut ItemMeta)) -> bool {
        todo!()
    }

    /// Removes the live item; returns whether one existed. Reports `Mutation::Deleted`.
    pub fn delete(&mut self) -> bool {
        todo!()
    }
}
