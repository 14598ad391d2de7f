//! The general `stats` block, in memcached's order: the process, connections, the command
//! counters, the store's figures ([`cairn_store::StoreStats`]), then the flash tier's.
//!
//! ```text
//!   Ctx ─> process_figures, counters (COUNTERS), store.stats() ─> Vec<Reading>
//!                                            └─ flash tier's readings (stats::flash)
//! ```
//!
//! Non-goals: `stats settings`, `items`, `slabs`, `sizes` and `conns`, which `cmd/stats.rs`
//! writes directly.

use std::sync::atomic::Ordering::Relaxed;

use super::flash::flash;
use super::process::process_figures;
use super::reading::{Kind, Reading, Readings, Value};
use crate::meters::COUNTERS;
use crate::Ctx;

/// The general `stats` block, in memcached's order.
pub fn general(ctx: &Ctx) -> Vec<Reading> {
    let s = ctx.store().stats();
    let process = process_figures();
    let mut r = Readings::default();
    r.text("pid", "Process id.", std::process::id().to_string());
    r.renamed(
        "uptime",
        "uptime_seconds",
        Kind::Gauge,
        "Seconds since the server started.",
        Value::Int(ctx.started.elapsed().as_secs()),
    );
    r.text(
        "time",
        "The server's clock, Unix seconds.",
        ctx.now().to_string(),
    );
    r.text("version", "Server version.", crate::VERSION);
    r.gauge("pointer_size", "Bits of a pointer.", usize::BITS.into());
    r.renamed(
        "rusage_user",
        "cpu_user_seconds",
        Kind::Counter,
        "User CPU time of the process, in seconds.",
        Value::Float(process.cpu_user_seconds),
    );
    r.renamed(
        "rusage_system",
        "cpu_system_seconds",
        Kind::Counter,
        "System CPU time of the process, in seconds.",
        Value::Float(process.cpu_system_seconds),
    );
    r.gauge(
        "max_connections",
        "Most simultaneous client connections (-c).",
        ctx.config.max_connections as u64,
    );
    r.gauge(
        "curr_connections",
        "Open client connections.",
        ctx.curr_connections.load(Relaxed),
    );
    for (name, help, read) in COUNTERS {
        r.counter(name, help, read(&ctx.counters));
    }
    let history = ctx.hub().map(|h| h.stats());
    let history_limit = history.map_or(0, |h| h.history_limit_bytes);
    r.gauge(
        "limit_maxbytes",
        "The memory limit in bytes (-m): the store's and the watch history's.",
        s.limit_maxbytes + history_limit,
    );
    r.gauge(
        "threads",
        "Worker threads.",
        ctx.config.worker_threads() as u64,
    );
    r.gauge("bytes", "Bytes used by live items.", s.bytes);
    r.gauge("curr_items", "Live items.", s.curr_items);
    r.counter("total_items", "Items ever stored.", s.total_items);
    r.counter(
        "expired_unfetched",
        "Items that expired without being read since they were stored.",
        s.expired_unfetched,
    );
    r.counter(
        "evicted_unfetched",
        "Items evicted without being read since they were stored.",
        s.evicted_unfetched,
    );
    r.counter("evictions", "Live items removed to make room.", s.evictions);
    r.counter(
        "reclaimed",
        "Expired items whose memory was reclaimed.",
        s.reclaimed,
    );
    r.counter(
        "crawler_items_checked",
        "Items the expiry sweep read (segments with no item written with an expiry are skipped).",
        s.crawler_items_checked,
    );
    r.gauge(
        "memory_used_bytes",
        "Bytes of memory the store holds.",
        s.memory_used_bytes,
    );
    if let Some(h) = history {
        // The history is part of -m (limit_maxbytes); `stats grpc` exports these.
        r.stats_only(
            "watch_history_limit_bytes",
            "The watch history's part of limit_maxbytes (watch_history_mb).",
            history_limit,
        );
        r.stats_only(
            "watch_history_bytes",
            "Bytes the watch history holds in memory (0 until the first watch).",
            h.history_bytes,
        );
        r.stats_only(
            "watch_history_events",
            "Events in the watch history in memory.",
            h.history_events,
        );
        r.stats_only(
            "watch_history_first_revision",
            "The oldest revision the watch history in memory holds (0 until the first watch).",
            h.history_first_revision,
        );
    }
    r.gauge(
        "rss_bytes",
        "Resident set size of the process.",
        process.rss_bytes,
    );
    flash(ctx, &mut r);
    r.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every general figure with a number is exported, under a unique name.
    #[test]
    fn general_figures_have_unique_metric_names() {
        let dir = tempfile::tempdir().unwrap();
        let config = crate::Config {
            data_dir: dir.path().to_path_buf(),
            persistence: "off".into(),
            ..crate::Config::default()
        };
        let ctx = crate::Ctx::open(config).unwrap();
        let readings = general(&ctx);
        let mut metrics: Vec<&str> = readings
            .iter()
            .filter(|r| r.export.is_some())
            .map(|r| r.metric)
            .collect();
        let n = metrics.len();
        metrics.sort();
        metrics.dedup();
        assert_eq!(metrics.len(), n, "two figures share a metric name");
        assert!(readings.iter().all(|r| !r.help.is_empty()));
        assert!(process_figures().rss_bytes > 0);
    }
}
