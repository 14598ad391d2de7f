//! Every figure the server reports, in one list that both `stats` and the Prometheus endpoint
//! read, so that a figure added here shows up in both.
//!
//! ```text
//!   general(ctx) ──────> Vec<Reading> ──> cmd/stats.rs:  STAT name value        (memcached)
//!   persistence(ctx) ─┤                └─> metrics.rs:  cairn_metric[_total] value (Prometheus)
//!   grpc(ctx) ────────┘
//! ```
//!
//! A [`Reading`] is a name (memcached's), a kind (counter or gauge), a one-line description and
//! a value. Text values (`version`, `mode`) are `stats` only. Counters get `_total` on the
//! endpoint; a reading may give its Prometheus name apart when memcached's name lacks the unit
//! (`uptime` is `cairn_uptime_seconds`).
//!
//! **Adding a stat:** one line in [`general`] (or, for a counter bumped by commands, one line
//! in the `counters!` list below). Persistence figures come from `Persistence::stats()` (the
//! persist crate); each needs a row in [`PERSISTENCE`] with its kind and description, which a
//! test checks.
//!
//! Counters are kept per thread ([`PerThread`]) and added up when read: a request bumps several
//! of them, and one shared atomic per counter would bounce its cache line between the cores on
//! every request. Each cell is a relaxed atomic (a thread may share its cell with another one
//! when there are more threads than cells); readers only need a recent value.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

use crate::Ctx;

/// Whether a figure only grows (until `stats reset` or a restart) or goes up and down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
}

/// A figure's value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Int(u64),
    Float(f64),
    /// Shown by `stats`, not exported.
    Text(String),
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Int(v) => write!(f, "{v}"),
            Value::Float(v) => write!(f, "{v:.6}"),
            Value::Text(v) => f.write_str(v),
        }
    }
}

/// One figure as read now.
#[derive(Clone, Debug)]
pub struct Reading {
    /// The `stats` name (memcached's or ARCUS's where they have one).
    pub name: &'static str,
    /// The Prometheus name, without the `cairn_` prefix and the counters' `_total`.
    pub metric: &'static str,
    pub kind: Kind,
    /// One line for `# HELP`.
    pub help: &'static str,
    /// What `stats` shows.
    pub value: Value,
    /// What the endpoint shows, in the metric's unit (a number); None: `stats` only.
    pub export: Option<Value>,
}

/// Builds a list of readings, in `stats` order.
#[derive(Default)]
pub struct Readings(pub Vec<Reading>);

impl Readings {
    fn push(
        &mut self,
        name: &'static str,
        metric: &'static str,
        kind: Kind,
        help: &'static str,
        value: Value,
    ) {
        let export = match value {
            Value::Text(_) => None,
            ref number => Some(number.clone()),
        };
        self.0.push(Reading {
            name,
            metric,
            kind,
            help,
            value,
            export,
        });
    }

    /// A counter named alike in `stats` and Prometheus.
    pub fn counter(&mut self, name: &'static str, help: &'static str, v: u64) {
        self.push(name, name, Kind::Counter, help, Value::Int(v));
    }

    /// A gauge named alike in `stats` and Prometheus.
    pub fn gauge(&mut self, name: &'static str, help: &'static str, v: u64) {
        self.push(name, name, Kind::Gauge, help, Value::Int(v));
    }

    /// A figure whose Prometheus name differs (to carry its unit).
    pub fn renamed(
        &mut self,
        name: &'static str,
        metric: &'static str,
        kind: Kind,
        help: &'static str,
        v: Value,
    ) {
        self.push(name, metric, kind, help, v);
    }

    /// Text, for `stats` only.
    pub fn text(&mut self, name: &'static str, help: &'static str, v: impl Into<String>) {
        self.push(name, name, Kind::Gauge, help, Value::Text(v.into()));
    }
}

/// The general `stats` block, in memcached's order.
pub fn general(ctx: &Ctx) -> Vec<Reading> {
    let s = ctx.store.stats();
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
    r.gauge(
        "limit_maxbytes",
        "The item memory limit in bytes.",
        s.limit_maxbytes,
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
    r.gauge(
        "rss_bytes",
        "Resident set size of the process.",
        process.rss_bytes,
    );
    crate::flash::readings(ctx, &mut r);
    r.0
}

/// Description of one `stats persistence` figure: (stats name, Prometheus name, kind, scale
/// to the Prometheus unit, help). Values that read as `true`/`yes`/`on` export as 1, their
/// opposites as 0; other text is `stats` only.
type PersistStat = (&'static str, &'static str, Kind, f64, &'static str);

/// Every figure of `Persistence::stats()`, with its kind and description.
pub const PERSISTENCE: &[PersistStat] = &[
    (
        "use_persistence",
        "persistence_enabled",
        Kind::Gauge,
        1.0,
        "1 when persistence is on.",
    ),
    ("data_path", "", Kind::Gauge, 1.0, "Where snapshots go."),
    (
        "logs_path",
        "",
        Kind::Gauge,
        1.0,
        "Where the command log goes.",
    ),
    (
        "async_logging",
        "async_logging",
        Kind::Gauge,
        1.0,
        "1 in async mode, 0 in sync mode.",
    ),
    (
        "chkpt_interval_pct_snapshot",
        "chkpt_interval_pct_snapshot",
        Kind::Gauge,
        1.0,
        "Checkpoint when the log reaches this % of the snapshot...",
    ),
    (
        "chkpt_interval_min_logsize",
        "chkpt_interval_min_logsize_bytes",
        Kind::Gauge,
        1048576.0,
        "...and at least this size.",
    ),
    (
        "recovery_elapsed_time_sec",
        "",
        Kind::Gauge,
        1.0,
        "ARCUS: recovery time in whole seconds (see recovery_duration_seconds).",
    ),
    (
        "last_chkpt_in_progress",
        "checkpoint_in_progress",
        Kind::Gauge,
        1.0,
        "1 while a checkpoint runs.",
    ),
    (
        "last_chkpt_failure_count",
        "checkpoint_failures_in_a_row",
        Kind::Gauge,
        1.0,
        "Checkpoint failures since the last one that succeeded.",
    ),
    (
        "last_chkpt_start_time",
        "",
        Kind::Gauge,
        1.0,
        "ARCUS: start of the last checkpoint, as text.",
    ),
    (
        "last_chkpt_elapsed_time_sec",
        "",
        Kind::Gauge,
        1.0,
        "ARCUS: last checkpoint's duration in whole seconds.",
    ),
    (
        "last_chkpt_snapshot_filesize_bytes",
        "",
        Kind::Gauge,
        1.0,
        "ARCUS: size of the last snapshot (see snapshot_bytes).",
    ),
    (
        "current_command_log_filesize_bytes",
        "",
        Kind::Gauge,
        1.0,
        "ARCUS: log bytes since the last checkpoint (see log_bytes_since_checkpoint).",
    ),
    ("mode", "", Kind::Gauge, 1.0, "Persistence mode."),
    (
        "loss_window_ms",
        "loss_window_seconds",
        Kind::Gauge,
        0.001,
        "Longest time an acknowledged write may stay only in memory.",
    ),
    (
        "checkpoint_rate_mb_s",
        "checkpoint_rate_limit_bytes_per_second",
        Kind::Gauge,
        1048576.0,
        "Snapshot write rate limit (0 = none).",
    ),
    (
        "log_segments",
        "log_segments",
        Kind::Gauge,
        1.0,
        "Segment files in the command log.",
    ),
    (
        "log_file_bytes",
        "log_file_bytes",
        Kind::Gauge,
        1.0,
        "Bytes of the log's segment files (preallocated size).",
    ),
    (
        "log_bytes_since_checkpoint",
        "log_bytes_since_checkpoint",
        Kind::Gauge,
        1.0,
        "Log bytes written since the last checkpoint.",
    ),
    (
        "log_appended_lsn",
        "log_appended_lsn",
        Kind::Gauge,
        1.0,
        "Highest log sequence number assigned.",
    ),
    (
        "log_written_lsn",
        "log_written_lsn",
        Kind::Gauge,
        1.0,
        "Highest log sequence number handed to the kernel (survives a crash of the process).",
    ),
    (
        "log_durable_lsn",
        "log_durable_lsn",
        Kind::Gauge,
        1.0,
        "Highest log sequence number fdatasync'd (survives a power loss).",
    ),
    (
        "log_pending_bytes",
        "log_pending_bytes",
        Kind::Gauge,
        1.0,
        "Log bytes appended and not yet written (in sync mode: not yet durable).",
    ),
    (
        "log_backpressure_waits",
        "log_backpressure_waits",
        Kind::Counter,
        1.0,
        "Writes that waited for room in the log's pending buffer (a slow disk).",
    ),
    (
        "log_batch_records_p50",
        "log_batch_records_p50",
        Kind::Gauge,
        1.0,
        "Median records per log batch (group commit).",
    ),
    (
        "log_batch_records_p99",
        "log_batch_records_p99",
        Kind::Gauge,
        1.0,
        "99th percentile records per log batch.",
    ),
    (
        "log_write_count",
        "log_writes",
        Kind::Counter,
        1.0,
        "Plain writes of a log batch (async mode; sync mode without O_DIRECT).",
    ),
    (
        "log_write_latency_us_p50",
        "log_write_latency_p50_seconds",
        Kind::Gauge,
        1e-6,
        "Median latency of a plain write of a log batch, timed alone.",
    ),
    (
        "log_write_latency_us_p99",
        "log_write_latency_p99_seconds",
        Kind::Gauge,
        1e-6,
        "99th percentile latency of a plain write of a log batch.",
    ),
    (
        "fdatasync_count",
        "fdatasyncs",
        Kind::Counter,
        1.0,
        "fdatasync calls of the command log.",
    ),
    (
        "fdatasync_latency_us_p50",
        "fdatasync_latency_p50_seconds",
        Kind::Gauge,
        1e-6,
        "Median fdatasync latency since start, the fdatasync call alone.",
    ),
    (
        "fdatasync_latency_us_p99",
        "fdatasync_latency_p99_seconds",
        Kind::Gauge,
        1e-6,
        "99th percentile fdatasync latency since start.",
    ),
    (
        "log_dsync_write_count",
        "log_dsync_writes",
        Kind::Counter,
        1.0,
        "Log batches written and made durable by one pwritev2(RWF_DSYNC) (sync mode, O_DIRECT).",
    ),
    (
        "log_dsync_write_latency_us_p50",
        "log_dsync_write_latency_p50_seconds",
        Kind::Gauge,
        1e-6,
        "Median latency of a pwritev2(RWF_DSYNC) of a log batch: the write and the cache flush.",
    ),
    (
        "log_dsync_write_latency_us_p99",
        "log_dsync_write_latency_p99_seconds",
        Kind::Gauge,
        1e-6,
        "99th percentile latency of a pwritev2(RWF_DSYNC) of a log batch.",
    ),
    (
        "log_staged_writes",
        "log_staged_writes",
        Kind::Counter,
        1.0,
        "Of the pwritev2(RWF_DSYNC) log writes, those whose records were copied into a staging buffer first (a batch of several chunks, or the first in a new segment).",
    ),
    (
        "snapshot_lsn",
        "snapshot_lsn",
        Kind::Gauge,
        1.0,
        "Log sequence number the newest snapshot covers.",
    ),
    (
        "snapshot_bytes",
        "snapshot_bytes",
        Kind::Gauge,
        1.0,
        "Size of the newest snapshot.",
    ),
    (
        "checkpoints_done",
        "checkpoints",
        Kind::Counter,
        1.0,
        "Checkpoints that succeeded.",
    ),
    (
        "checkpoints_failed",
        "checkpoint_failures",
        Kind::Counter,
        1.0,
        "Checkpoints that failed.",
    ),
    (
        "last_checkpoint_start",
        "last_checkpoint_start_timestamp_seconds",
        Kind::Gauge,
        1.0,
        "Unix time the last checkpoint started (0: none yet).",
    ),
    (
        "last_checkpoint_duration_ms",
        "last_checkpoint_duration_seconds",
        Kind::Gauge,
        0.001,
        "Duration of the last checkpoint.",
    ),
    (
        "last_checkpoint_status",
        "",
        Kind::Gauge,
        1.0,
        "How the last checkpoint ended.",
    ),
    (
        "last_checkpoint_items",
        "last_checkpoint_items",
        Kind::Gauge,
        1.0,
        "Items in the last checkpoint.",
    ),
    (
        "recovery_ms",
        "recovery_duration_seconds",
        Kind::Gauge,
        0.001,
        "Time the last start spent recovering.",
    ),
    (
        "recovered_items",
        "recovered_items",
        Kind::Gauge,
        1.0,
        "Items recovered at start.",
    ),
    (
        "recovered_log_records",
        "recovered_log_records",
        Kind::Gauge,
        1.0,
        "Log records replayed at start.",
    ),
    (
        "recovery_dropped_items",
        "recovery_dropped_items",
        Kind::Gauge,
        1.0,
        "Items recovery dropped (too large to replay).",
    ),
    (
        "recovered_flash_items",
        "recovered_flash_items",
        Kind::Gauge,
        1.0,
        "Flash entries recovery put back in the index (their items stayed on flash).",
    ),
    (
        "recovery_replayed_to_flash",
        "recovery_replayed_to_flash",
        Kind::Gauge,
        1.0,
        "Replayed log records recovery put straight on flash (newer records of their shard would have evicted them from RAM).",
    ),
    (
        "recovery_flash_dropped",
        "recovery_flash_dropped",
        Kind::Gauge,
        1.0,
        "Flash entries of the snapshot recovery could not trust (lost, as if evicted).",
    ),
    (
        "recovery_log_open_ms",
        "recovery_log_open_seconds",
        Kind::Gauge,
        0.001,
        "Time the last start's recovery spent opening the log (finding its end).",
    ),
    (
        "recovery_flash_pins_ms",
        "recovery_flash_pins_seconds",
        Kind::Gauge,
        0.001,
        "Time the last start's recovery spent reading the headers of the flash segments checkpoints name.",
    ),
    (
        "recovery_snapshot_ms",
        "recovery_snapshot_seconds",
        Kind::Gauge,
        0.001,
        "Time the last start's recovery spent loading the snapshot.",
    ),
    (
        "recovery_replay_ms",
        "recovery_replay_seconds",
        Kind::Gauge,
        0.001,
        "Time the last start's recovery spent replaying the log after the snapshot.",
    ),
    (
        "writes_refused",
        "writes_refused",
        Kind::Gauge,
        1.0,
        "1 once the log failed and writes are refused.",
    ),
];

/// The `stats grpc` block: the gRPC API's figures and the watch hub's (the grpc crate's list,
/// each with its kind and description).
pub fn grpc(ctx: &Ctx) -> Vec<Reading> {
    let mut r = Readings::default();
    r.text(
        "grpc_listen",
        "Address of the gRPC API, or off.",
        &ctx.config.grpc_listen,
    );
    for f in ctx.grpc_stats.figures(ctx.hub.as_deref()) {
        if f.counter {
            r.counter(f.name, f.help, f.value);
        } else {
            r.gauge(f.name, f.help, f.value);
        }
    }
    r.0
}

/// The `stats persistence` block: persistence's own figures, described by [`PERSISTENCE`], and
/// the age of the last checkpoint.
pub fn persistence(ctx: &Ctx) -> Vec<Reading> {
    let mut r = Readings::default();
    let Some(p) = &ctx.persist else {
        r.text("use_persistence", "Persistence is off.", "off");
        r.text("mode", "Persistence mode.", "off");
        return r.0;
    };
    let mut last_start = 0;
    for (name, text) in p.stats() {
        let row = PERSISTENCE.iter().find(|row| row.0 == name);
        let Some(&(_, metric, kind, scale, help)) = row else {
            // Not described yet (the test `every_persistence_stat_is_described` fails).
            r.text(name, "", text);
            continue;
        };
        let number = match text.as_str() {
            "true" | "yes" | "on" => Some(1),
            "false" | "no" | "off" => Some(0),
            t => t.parse::<u64>().ok(),
        };
        if name == "last_checkpoint_start" {
            last_start = number.unwrap_or(0);
        }
        match number {
            // `stats` keeps the text persist gave, the endpoint the number in its unit.
            Some(n) if !metric.is_empty() => r.0.push(Reading {
                name,
                metric,
                kind,
                help,
                value: Value::Text(text),
                export: Some(if scale == 1.0 {
                    Value::Int(n)
                } else {
                    Value::Float(n as f64 * scale)
                }),
            }),
            _ => r.text(name, help, text),
        }
    }
    if last_start > 0 {
        r.renamed(
            "last_checkpoint_age",
            "last_checkpoint_age_seconds",
            Kind::Gauge,
            "Seconds since the last checkpoint started.",
            Value::Int(u64::from(crate::now_unix()).saturating_sub(last_start)),
        );
    }
    r.0
}

/// CPU time and memory of this process.
pub struct ProcessFigures {
    pub cpu_user_seconds: f64,
    pub cpu_system_seconds: f64,
    pub rss_bytes: u64,
}

/// Reads this process's CPU time and resident size (procfs; zeros if /proc cannot be read).
pub fn process_figures() -> ProcessFigures {
    use procfs::WithCurrentSystemInfo;
    let stat = procfs::process::Process::myself().and_then(|p| p.stat());
    match stat {
        Ok(stat) => {
            let hz = procfs::ticks_per_second() as f64;
            ProcessFigures {
                cpu_user_seconds: stat.utime as f64 / hz,
                cpu_system_seconds: stat.stime as f64 / hz,
                rss_bytes: stat.rss_bytes().get(),
            }
        }
        Err(_) => ProcessFigures {
            cpu_user_seconds: 0.0,
            cpu_system_seconds: 0.0,
            rss_bytes: 0,
        },
    }
}

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

/// Cells of a [`PerThread`] value: more than the threads that serve requests on the machines
/// cairn runs on; past that, threads share cells (still correct, only slower).
pub const CELLS: usize = 16;

/// One value per thread (up to [`CELLS`], then shared), each on its own cache lines, so that
/// threads updating "their" value never write to a line another core holds.
pub struct PerThread<T> {
    cells: [Padded<T>; CELLS],
}

/// Two cache lines (the spatial prefetcher pulls lines in pairs).
#[repr(align(128))]
#[derive(Default)]
struct Padded<T>(T);

impl<T: Default> Default for PerThread<T> {
    fn default() -> Self {
        PerThread {
            cells: std::array::from_fn(|_| Padded::default()),
        }
    }
}

impl<T> PerThread<T> {
    /// This thread's cell.
    pub fn mine(&self) -> &T {
        &self.cells[cell_index()].0
    }

    /// Every cell, to add them up.
    pub fn all(&self) -> impl Iterator<Item = &T> {
        self.cells.iter().map(|c| &c.0)
    }
}

/// This thread's cell number: threads take the next one when they first count something.
fn cell_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static CELL: usize = NEXT.fetch_add(1, Relaxed) % CELLS;
    }
    CELL.with(|c| *c)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// Every figure of `stats persistence` has a row in [`PERSISTENCE`] (kind and description,
    /// hence a metric), and every row is still a figure.
    #[test]
    fn every_persistence_stat_is_described() {
        let dir = tempfile::tempdir().unwrap();
        let config = crate::Config {
            data_dir: dir.path().to_path_buf(),
            log_segment_mb: 2,
            ..crate::Config::default()
        };
        let ctx = crate::Ctx::open(config).unwrap();
        let names: Vec<&str> = ctx
            .persist
            .as_ref()
            .unwrap()
            .stats()
            .iter()
            .map(|s| s.0)
            .collect();
        for name in &names {
            assert!(
                PERSISTENCE.iter().any(|row| row.0 == *name),
                "stats persistence `{name}` has no row in stats::PERSISTENCE"
            );
        }
        for row in PERSISTENCE {
            assert!(
                names.contains(&row.0),
                "PERSISTENCE row `{}` is not a stat",
                row.0
            );
        }
        // Numbers are exported; text is `stats` only.
        let readings = persistence(&ctx);
        let get = |n: &str| readings.iter().find(|r| r.name == n).unwrap().clone();
        assert_eq!(get("recovery_ms").metric, "recovery_duration_seconds");
        assert!(get("log_pending_bytes").export.is_some());
        assert!(get("data_path").export.is_none());
        assert_eq!(get("writes_refused").export, Some(Value::Int(0)));
    }

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
