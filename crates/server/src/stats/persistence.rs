//! The `stats persistence` block: the persistence layer's figures, each described by a row
//! of [`PERSISTENCE`] (its Prometheus name, kind, unit and description), and the age of the
//! last checkpoint.
//!
//! ```text
//!   Persistence::stats() ─> (name, text) ─> PERSISTENCE row ─> Reading
//!                                           (stats: the text; endpoint: the number, scaled)
//! ```
//!
//! Non-goals: reading the figures (cairn-persist does).

use super::reading::{Kind, Reading, Readings, Value};
use crate::Ctx;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
