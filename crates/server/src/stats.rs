//! Server-wide counters with memcached's names, shared by every connection.
//!
//! Plain relaxed atomics: each counter is independent and readers only need a recent value.
//! The table [`COUNTERS`] gives every counter its `stats` name and a one-line description, which
//! the Prometheus endpoint reuses.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

macro_rules! counters {
    ($( $field:ident : $doc:literal ),* $(,)?) => {
        /// Counters reset by `stats reset`.
        #[derive(Default)]
        pub struct Counters {
            $( #[doc = $doc] pub $field: AtomicU64, )*
        }

        /// (name, description, reader) of every counter, in `stats` order.
        pub const COUNTERS: &[(&str, &str, fn(&Counters) -> u64)] = &[
            $( (stringify!($field), $doc, |c: &Counters| c.$field.load(Relaxed)), )*
        ];

        impl Counters {
            /// `stats reset`.
            pub fn reset(&self) {
                $( self.$field.store(0, Relaxed); )*
            }
        }
    };
}

counters! {
    cmd_get: "Keys looked up by retrieval commands (get, gets, gat, gats, mg).",
    cmd_set: "Storage commands processed (set, add, replace, append, prepend, cas, ms).",
    cmd_flush: "flush_all commands processed.",
    cmd_touch: "Keys touched (touch, gat, gats).",
    cmd_meta: "Meta commands processed.",
    get_hits: "Retrieval lookups that found a live item.",
    get_misses: "Retrieval lookups that found nothing.",
    get_expired: "Retrieval lookups that found an expired item.",
    get_flushed: "Retrieval lookups that found an item invalidated by flush_all.",
    delete_misses: "Deletes of keys that did not exist.",
    delete_hits: "Deletes that removed an item.",
    incr_misses: "incr of a missing key.",
    incr_hits: "incr that changed an item.",
    decr_misses: "decr of a missing key.",
    decr_hits: "decr that changed an item.",
    cas_misses: "cas of a missing key.",
    cas_hits: "cas that stored.",
    cas_badval: "cas refused because the unique did not match.",
    touch_hits: "Touches of an existing item.",
    touch_misses: "Touches of a missing item.",
    store_too_large: "Stores refused because the item exceeded the size limit.",
    store_no_memory: "Stores refused because memory was full and eviction is off.",
    bytes_read: "Bytes read from clients.",
    bytes_written: "Bytes written to clients.",
    total_connections: "Connections accepted since start.",
    rejected_connections: "Connections refused because max_connections was reached.",
    protocol_errors: "Requests answered with ERROR, CLIENT_ERROR or SERVER_ERROR by the parser.",
}

/// Adds one to a counter.
pub fn bump(c: &AtomicU64) {
    c.fetch_add(1, Relaxed);
}

/// Adds `n` to a counter.
pub fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Relaxed);
}
