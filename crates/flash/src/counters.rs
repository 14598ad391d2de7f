//! The tier's counters: each a stat of the server's `stats` (memcached extstore names where
//! one exists), with its one-line description.
//!
//! ```text
//!   counters! { name: "description", ... }
//!     ├─> struct Counters { pub name: AtomicU64, ... }     bumped where the event happens
//!     └─> COUNTERS: [(name, description, reader)]          the server renders them all
//! ```
//!
//! Non-goals: no rendering (the server's stats do it), no gauges (see `Flash::usage`).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

macro_rules! counters {
    ($( $field:ident : $doc:literal ),* $(,)?) => {
        /// Counters of the tier.
        #[derive(Default)]
        pub struct Counters {
            $( #[doc = $doc] pub $field: AtomicU64, )*
        }

        /// (name, description, reader) of every counter.
        pub const COUNTERS: &[(&str, &str, fn(&Counters) -> u64)] = &[
            $( (stringify!($field), $doc, |c: &Counters| c.$field.load(Relaxed)), )*
        ];
    };
}

counters! {
    extstore_objects_written: "Items written to flash (evictions and reinsertions).",
    extstore_bytes_written: "Bytes written to the flash device (whole segments).",
    flash_item_bytes_admitted: "Key and value bytes of the items written to flash.",
    extstore_page_allocs: "Flash segments opened for writing.",
    extstore_page_evictions: "Flash segments reclaimed while some of their items were live.",
    extstore_page_reclaims: "Flash segments reclaimed with no live item (no read needed).",
    extstore_objects_evicted: "Items dropped from flash by flash eviction.",
    flash_objects_reinserted: "Hot items written again by flash eviction instead of dropped.",
    flash_writer_drops: "Items evicted from RAM and dropped because the flash writer was behind.",
    flash_too_large: "Items evicted from RAM and dropped because they exceed a flash segment.",
    get_extstore: "Reads from flash that found their item.",
    flash_device_reads: "Reads issued to the flash device for lookups.",
    flash_reads_own_ring: "Device reads a connection's thread submitted to its own io_uring (the io_uring engine's connection ring, or the tokio engine worker's flash ring) and reaped itself (no other thread involved).",
    flash_buffered_reads: "Flash lookups served from a segment not yet written.",
    miss_from_extstore: "Flash reads that did not hold the key (another key's hash tag).",
    badcrc_from_extstore: "Flash reads whose item failed its checksum (answered as a miss).",
    extstore_io_errors: "Flash reads or writes that failed (their segment is dropped).",
    flash_segments_failed: "Flash segments dropped after an I/O error.",
    flash_pinned_stalls: "Times flash eviction waited because a checkpoint still named every old segment.",
    flash_promotions_allowed: "Promotions to RAM the bound allowed.",
    flash_verify_reads: "Device reads under a shard lock to tell whose item a flash entry holds (a store or delete of a key sharing its hash tag, not read before).",
    flash_reads_not_done: "Flash reads that could not be done (reader stopped, ring busy, out of memory): a get answers a miss, a command that changes the item an error, and the item stays (an entry a store of another key with its tag could not check goes, as a damaged one does); no segment is dropped.",
}
