//! cairn-store: the in-memory cache, synchronous and protocol-agnostic.
//!
//! ```text
//!   front ends' commands (get, set, cas, incr, meta, gRPC Set ...), writes through
//!   cairn-engine's Tx
//!        |  Store::get / Store::entry_reporting(key, now, |e: &mut Entry| ...) -> (r, revision)
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
//! every item keeps the revision of the mutation that made it (`ItemMeta::mod_revision`). The
//! `_reporting` calls also hand the newest revision of the caller's own changes back to it:
//! with a log, the LSN its acknowledgement waits for.
//! Removals the store decides itself, expiry and eviction for good, are mutations too; moves
//! (second chance, compaction, to flash and back) are not.
//!
//! Non-goals: no I/O, no protocol text, no clocks of its own (callers pass `now`, unix seconds;
//! [`now_unix`] is the wall clock in that base, defined here once for the crates above).

//! The modules, one concern each:
//!
//! ```text
//!   store       the Store: shards, key hash, CAS and revisions, memory limit, stats, visits
//!   read        get, get_with, lookup            entry      Store::entry and Entry (writes)
//!   flush       flush_all, scheduled flushes     flash_ops  the flash tier's side of the Store
//!   shard       one shard: index, segment FIFO, eviction, expiry sweep
//!   segment     item memory and the item layout  flash      FlashLoc, the FlashTier seam
//!   flash_index a shard's flash entries          types      items, mutations, stats
//!   config      StoreConfig                      error      StoreError
//!   clock       now_unix, the wall clock (never read by the store itself)
//! ```

mod clock;
mod config;
mod entry;
mod error;
pub mod flash;
mod flash_index;
mod flash_ops;
mod flush;
mod read;
mod segment;
mod shard;
mod store;
mod types;

pub use clock::now_unix;
pub use config::StoreConfig;
pub use entry::Entry;
pub use error::StoreError;
pub use flash::{FlashLoc, FlashTier};
pub use flash_ops::{FlashFound, Promote, Reclaimed};
pub use read::Lookup;
pub use store::Store;
pub use types::{
    DeleteReason, Item, ItemMeta, Mutation, MutationSink, PrevItem, ReadOutcome, Revision,
    StoreStats, UnixSecs,
};

#[cfg(test)]
mod tests;
