//! The store's vocabulary: items and their metadata, read outcomes, mutations and the sink
//! that observes them, and the store's counters.
//!
//! ```text
//!   Store ── every change, under the shard lock ──> MutationSink::on_mutation(&Mutation)
//!                                                     └─> Revision (ItemMeta::mod_revision)
//!   Store::get ──> ReadOutcome<Item { value, meta: ItemMeta }>
//! ```
//!
//! Non-goals: no behaviour here, only the types other crates and the store's modules share.

/// Unix time in whole seconds, as passed in by the caller.
pub type UnixSecs = u32;

/// The number of a mutation: increasing in the order mutations are reported (per key, in
/// apply order).
pub type Revision = u64;

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
    ///
    /// [`Entry::update_meta`]: crate::Entry::update_meta
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

/// Result of [`Store::get`] (a copy of the item), or of [`Store::get_with`] (what its
/// closure returned).
///
/// [`Store::get`]: crate::Store::get
/// [`Store::get_with`]: crate::Store::get_with
#[derive(Debug, PartialEq, Eq)]
pub enum ReadOutcome<T = Item> {
    Hit(T),
    Miss,
    /// The key existed but had expired (memcached counts these as `get_expired` and misses).
    Expired,
}
