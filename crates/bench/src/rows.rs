//! What the ARCUS suite measured, as plain data: a [`Row`] per phase and target, with the
//! log's durable writes ([`LogSync`]) and the throughput while a checkpoint ran
//! ([`CheckpointDip`]), and a [`Recovery`] per restart after `kill -9`. The suite fills them,
//! the report's tables, the JSON and the charts read them.
//!
//! ```text
//!   suite::arcus (measure) ─> Row, Recovery ─┬─> report (summary, tables) ─> results.md
//!                                            ├─> serde ─> results.json
//!                                            └─> chart ─> *.svg
//! ```
//!
//! Non-goals: computing or rendering anything; this file holds types only.

/// One measured phase of one target.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Row {
    /// The target's name (`cairn off`, `memcached`, `redis always`, ...).
    pub target: String,
    /// The phase: `insert`, `retrieval`, `mixed 1:9`, ...
    pub scenario: String,
    /// Which repeat of the run (0-based).
    pub repeat: usize,
    /// Successful ops per second over the phase.
    pub ops_per_sec: f64,
    /// Latency of successful ops in milliseconds: mean and percentiles.
    pub avg_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    /// Error replies, not counted in `ops_per_sec` nor in the latencies.
    pub errors: u64,
    /// `errors` over all replies.
    pub error_rate: f64,
    /// Server CPU seconds (user + system, from procfs) over the phase.
    pub server_cpu_secs: f64,
    /// Server CPU (user + system, from procfs) per successful op, in microseconds.
    pub server_cpu_us_per_op: f64,
    /// CPU seconds the load generator used over the phase.
    pub load_generator_cpu_secs: f64,
    /// How long the phase lasted.
    pub secs: f64,
    /// The server's resident memory after the insert phase, MiB.
    pub rss_after_insert_mib: f64,
    /// (RSS after the insert - RSS before it) / keys.
    pub bytes_per_item: f64,
    /// ops in each second of the phase
    pub timeline_ops: Vec<u64>,
    /// (start, end) seconds into the phase of a checkpoint taken during it
    pub checkpoint_window: Option<(f64, f64)>,
    /// throughput while that checkpoint ran against the rest of the phase (None: no
    /// checkpoint, or the phase too short to tell)
    pub checkpoint_dip: Option<CheckpointDip>,
    /// cairn async/sync: the log's durable writes (None for other targets)
    pub log_sync: Option<LogSync>,
}

/// The log's durable writes as the server itself timed them (`stats persistence`): with
/// O_DIRECT each is one `pwritev2(RWF_DSYNC)` (`log_dsync_write_*`), without it an fdatasync
/// (`fdatasync_*`); whichever the server did more of in the phase.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LogSync {
    /// The median durable write in microseconds, over every one since the server started:
    /// for the first phase (insert), that phase's alone.
    pub p50_us: f64,
    /// Durable writes during the phase.
    pub count: u64,
    /// Log records appended during the phase (`log_appended_lsn`): records per durable
    /// write is the group commit's batch.
    pub records: u64,
}

/// What one restart after `kill -9` recovered.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Recovery {
    /// The target's name.
    pub target: String,
    /// Which repeat of the run (0-based).
    pub repeat: usize,
    /// The server's own figure (`stats persistence` recovery_ms): snapshot load and log
    /// replay, in whole milliseconds.
    pub recovery_ms: u64,
    /// From spawning the new process to its `cairn listening` line: what a client waits.
    pub restart_to_ready_ms: f64,
    /// Live items after recovery (`recovered_items`).
    pub recovered_items: u64,
    /// Log records replayed after the snapshot (`recovered_log_records`).
    pub recovered_log_records: u64,
    /// recovered_items / recovery_ms; None when recovery took under a millisecond.
    pub items_per_sec: Option<f64>,
}

/// Throughput while a checkpoint ran against throughput in the rest of the phase.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct CheckpointDip {
    /// How long the checkpoint took: end - start of its window.
    pub checkpoint_secs: f64,
    /// The whole seconds of the phase (0-based) that overlap the window, warm-up excluded:
    /// `during_ops_per_sec` is their mean.
    pub seconds_overlapped: Vec<usize>,
    /// Mean ops in the seconds the checkpoint overlapped.
    pub during_ops_per_sec: f64,
    /// Mean ops in the other whole seconds after the warm-up second.
    pub steady_ops_per_sec: f64,
    /// during / steady: 1 is no dip, 0.5 is half the throughput while checkpointing.
    pub during_over_steady: f64,
    /// The checkpoint took less than one second, so every overlapped second also holds normal
    /// traffic and the ratio understates the dip.
    pub shorter_than_one_second: bool,
}
