//! Command latency by family ([`Latency`]), kept in atomic bucket counters of our own:
//! prometheus-client's `Histogram` takes a lock on every observation, which every request
//! would contend for.
//!
//! ```text
//!   connection: parsed request ─> Family::of ─> ... reply buffered ─> Latency::observe
//!   scrape (metrics.rs) ─> Latency::read(family) ─> cairn_command_duration_seconds{command}
//! ```
//!
//! Non-goals: the endpoint (`crate::metrics`).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use cairn_proto::Request;

use super::per_thread::PerThread;

/// Command families, the `command` label of `cairn_command_duration_seconds`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    Get,
    Set,
    Delete,
    Arith,
    Touch,
    Flush,
    Meta,
    Stats,
    Admin,
    Other,
}

impl Family {
    pub const ALL: [Family; 10] = [
        Family::Get,
        Family::Set,
        Family::Delete,
        Family::Arith,
        Family::Touch,
        Family::Flush,
        Family::Meta,
        Family::Stats,
        Family::Admin,
        Family::Other,
    ];

    /// The family of a request.
    pub fn of(request: &Request) -> Family {
        match request {
            Request::Get { .. } => Family::Get,
            Request::Store { .. } => Family::Set,
            Request::Delete { .. } => Family::Delete,
            Request::Arith { .. } => Family::Arith,
            Request::Touch { .. } => Family::Touch,
            Request::FlushAll { .. } => Family::Flush,
            Request::Meta(_) => Family::Meta,
            Request::Stats { .. } => Family::Stats,
            Request::Admin { .. } => Family::Admin,
            _ => Family::Other,
        }
    }

    /// The value of the `command` label.
    pub fn label(self) -> &'static str {
        match self {
            Family::Get => "get",
            Family::Set => "set",
            Family::Delete => "delete",
            Family::Arith => "incr_decr",
            Family::Touch => "touch",
            Family::Flush => "flush_all",
            Family::Meta => "meta",
            Family::Stats => "stats",
            Family::Admin => "admin",
            Family::Other => "other",
        }
    }
}

/// Upper bounds of the command latency buckets, in seconds (the last bucket is +Inf).
pub const LATENCY_BOUNDS_S: [f64; 16] = [
    10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 0.1,
    0.25, 1.0, 2.5,
];

/// One histogram: a count per bucket (not cumulative), the sum and the count.
#[derive(Default)]
struct Buckets {
    counts: [AtomicU64; LATENCY_BOUNDS_S.len() + 1],
    sum_ns: AtomicU64,
}

/// Command latency by family: the time from a parsed request to its reply in the output
/// buffer (the wait for the log in SYNC mode is `cairn_log_dsync_write_seconds`'s, or
/// `cairn_log_write_seconds` + `cairn_fdatasync_seconds` without O_DIRECT). Kept per thread
/// and added up at a scrape, as the counters are ([`PerThread`]).
#[derive(Default)]
pub struct Latency {
    threads: PerThread<[Buckets; Family::ALL.len()]>,
}

impl Latency {
    /// Records one command.
    pub fn observe(&self, family: Family, took: Duration) {
        let b = &self.threads.mine()[family as usize];
        let s = took.as_secs_f64();
        let i = LATENCY_BOUNDS_S
            .iter()
            .position(|&bound| s <= bound)
            .unwrap_or(LATENCY_BOUNDS_S.len());
        b.counts[i].fetch_add(1, Relaxed);
        b.sum_ns.fetch_add(took.as_nanos() as u64, Relaxed);
    }

    /// A family's count per bucket (not cumulative) and sum of nanoseconds, over all threads.
    pub fn read(&self, family: Family) -> ([u64; LATENCY_BOUNDS_S.len() + 1], u64) {
        let mut counts = [0u64; LATENCY_BOUNDS_S.len() + 1];
        let mut sum_ns = 0u64;
        for t in self.threads.all() {
            let b = &t[family as usize];
            for (total, c) in counts.iter_mut().zip(&b.counts) {
                *total += c.load(Relaxed);
            }
            sum_ns = sum_ns.wrapping_add(b.sum_ns.load(Relaxed));
        }
        (counts, sum_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_lands_in_the_bucket_of_its_bound() {
        let l = Latency::default();
        l.observe(Family::Get, Duration::from_micros(10));
        l.observe(Family::Get, Duration::from_micros(11));
        l.observe(Family::Get, Duration::from_secs(10));
        // Another thread's observation is added in when read.
        std::thread::scope(|s| {
            s.spawn(|| l.observe(Family::Get, Duration::from_micros(5)));
        });
        let (counts, sum_ns) = l.read(Family::Get);
        assert_eq!(counts[0], 2);
        assert_eq!(counts[1], 1);
        assert_eq!(counts[LATENCY_BOUNDS_S.len()], 1);
        assert_eq!(sum_ns, 10_000_026_000);
        assert_eq!(l.read(Family::Set).0[0], 0);
    }
}
