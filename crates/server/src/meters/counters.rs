//! The counters bumped by connections and commands (`cmd_get`, `get_hits`, `bytes_read`...):
//! memcached's names, reset by `stats reset`.
//!
//! ```text
//!   a request ─> bump(&ctx.counters.cmd_get) ─> this thread's ThreadCounts (PerThread cell)
//!   stats / scrape ─> COUNTERS: (name, description, sum over the cells)
//! ```
//!
//! Counters are kept per thread ([`PerThread`]) and added up when read: a request bumps several
//! of them, and one shared atomic per counter would bounce its cache line between the cores on
//! every request. Each cell is a relaxed atomic (a thread may share its cell with another one
//! when there are more threads than cells); readers only need a recent value.
//!
//! Non-goals: the store's and the log's figures, which their layers count.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::per_thread::PerThread;

macro_rules! counters {
    ($( $field:ident : $doc:literal ),* $(,)?) => {
        /// One thread's counts of the counters bumped by connections and commands.
        #[derive(Default)]
        pub struct ThreadCounts {
            $( #[doc = $doc] pub $field: AtomicU64, )*
        }

        /// (name, description, reader) of every counter, in `stats` order.
        pub const COUNTERS: &[(&str, &str, fn(&Counters) -> u64)] = &[
            $( (stringify!($field), $doc, |c: &Counters| c.sum(|t| &t.$field)), )*
        ];

        impl Counters {
            /// `stats reset` (an addition racing with it may survive, as in memcached).
            pub fn reset(&self) {
                for t in self.threads.all() {
                    $( t.$field.store(0, Relaxed); )*
                }
            }
        }
    };
}

/// Counters bumped by connections and commands, reset by `stats reset`: one block of counts
/// per thread, so that a request's bumps stay in its own thread's cache lines.
///
/// `bump(&ctx.counters.cmd_get)` bumps this thread's count (`Counters` dereferences to the
/// calling thread's [`ThreadCounts`]); read a total with [`Counters::sum`] or [`COUNTERS`],
/// never through that dereference, which sees one thread's share.
#[derive(Default)]
pub struct Counters {
    threads: PerThread<ThreadCounts>,
}

impl Counters {
    /// A counter's total over every thread.
    pub fn sum(&self, field: impl Fn(&ThreadCounts) -> &AtomicU64) -> u64 {
        self.threads
            .all()
            .fold(0u64, |sum, t| sum.wrapping_add(field(t).load(Relaxed)))
    }
}

impl std::ops::Deref for Counters {
    type Target = ThreadCounts;

    /// The calling thread's counts, to bump.
    fn deref(&self) -> &ThreadCounts {
        self.threads.mine()
    }
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
    accept_errors: "Failed accepts (out of file descriptors and the like); the listener backs off.",
    tls_handshake_failures: "Connections dropped because their TLS handshake failed or timed out.",
    auth_failures: "Authentication attempts (-Y) with a user or password not in the file.",
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meters::per_thread::CELLS;

    /// Counts from many threads add up, and a reset clears every thread's cell.
    #[test]
    fn per_thread_counters_add_up() {
        let c = std::sync::Arc::new(Counters::default());
        let threads: Vec<_> = (0..CELLS + 3)
            .map(|i| {
                let c = std::sync::Arc::clone(&c);
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        bump(&c.cmd_get);
                    }
                    add(&c.bytes_read, i as u64);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let n = (CELLS + 3) as u64;
        assert_eq!(c.sum(|t| &t.cmd_get), 1000 * n);
        assert_eq!(c.sum(|t| &t.bytes_read), n * (n - 1) / 2);
        let read = COUNTERS
            .iter()
            .find(|(name, _, _)| *name == "cmd_get")
            .unwrap()
            .2;
        assert_eq!(read(&c), 1000 * n);
        c.reset();
        assert_eq!(c.sum(|t| &t.cmd_get), 0);
    }
}
