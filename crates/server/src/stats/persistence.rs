//! The `stats persistence` block, rendered from the persistence layer's figures
//! ([`cairn_persist::PersistStats`]): ARCUS's fields first, with its names and formats (ARCUS's
//! tools read them), cairn's own after, each with its Prometheus name, kind and unit.
//!
//! ```text
//!   Persistence::stats() ─> PersistStats { settings, log: LogStats, checkpoints, recovery }
//!        ─> Readings: `stats` shows ARCUS's text (`true`, `20201222182102`, ms),
//!                     the endpoint the number in the metric's unit (1, seconds)
//! ```
//!
//! **Adding a figure:** a field of `PersistStats` (or of the log's `LogStats`) in its crate,
//! and one line here with its names, kind and description.
//!
//! Non-goals: reading the figures (cairn-persist does).

use cairn_persist::{CheckpointStatus, Mode};

use super::reading::{Kind, Reading, Readings, Value};
use crate::Ctx;

/// The `stats persistence` block: persistence's own figures, and the age of the last
/// checkpoint.
pub fn persistence(ctx: &Ctx) -> Vec<Reading> {
    let mut r = Readings::default();
    let Some(p) = ctx.persist() else {
        r.text("use_persistence", "Persistence is off.", "off");
        r.text("mode", "Persistence mode.", "off");
        return r.0;
    };
    let s = p.stats();
    let (l, c, rec) = (&s.log, &s.checkpoints, &s.recovery);
    // ARCUS's fields first, with its names and formats; cairn's own follow.
    r.flag(
        "use_persistence",
        "persistence_enabled",
        "1 when persistence is on.",
        true,
        ("on", "off"),
    );
    r.text(
        "data_path",
        "Where snapshots go.",
        s.data_path.display().to_string(),
    );
    r.text(
        "logs_path",
        "Where the command log goes.",
        s.logs_path.display().to_string(),
    );
    r.flag(
        "async_logging",
        "async_logging",
        "1 in async mode, 0 in sync mode.",
        s.mode == Mode::Async,
        ("true", "false"),
    );
    r.gauge(
        "chkpt_interval_pct_snapshot",
        "Checkpoint when the log reaches this % of the snapshot...",
        s.chkpt_interval_pct_snapshot,
    );
    r.scaled(
        "chkpt_interval_min_logsize",
        "chkpt_interval_min_logsize_bytes",
        Kind::Gauge,
        "...and at least this size.",
        s.chkpt_interval_min_logsize_mb,
        1048576.0,
    );
    r.text(
        "recovery_elapsed_time_sec",
        "ARCUS: recovery time in whole seconds (see recovery_duration_seconds).",
        (rec.recovery_ms / 1000).to_string(),
    );
    r.flag(
        "last_chkpt_in_progress",
        "checkpoint_in_progress",
        "1 while a checkpoint runs.",
        s.checkpoint_in_progress,
        ("true", "false"),
    );
    r.renamed(
        "last_chkpt_failure_count",
        "checkpoint_failures_in_a_row",
        Kind::Gauge,
        "Checkpoint failures since the last one that succeeded.",
        Value::Int(c.checkpoints_failed_in_a_row),
    );
    r.text(
        "last_chkpt_start_time",
        "ARCUS: start of the last checkpoint, as text.",
        arcus_time(c.last_checkpoint_start_unix),
    );
    r.text(
        "last_chkpt_elapsed_time_sec",
        "ARCUS: last checkpoint's duration in whole seconds.",
        (c.last_checkpoint_duration_ms / 1000).to_string(),
    );
    r.text(
        "last_chkpt_snapshot_filesize_bytes",
        "ARCUS: size of the last snapshot (see snapshot_bytes).",
        c.snapshot_bytes.to_string(),
    );
    r.text(
        "current_command_log_filesize_bytes",
        "ARCUS: log bytes since the last checkpoint (see log_bytes_since_checkpoint).",
        s.log_bytes_since_checkpoint.to_string(),
    );
    r.text("mode", "Persistence mode.", s.mode.name());
    r.scaled(
        "loss_window_ms",
        "loss_window_seconds",
        Kind::Gauge,
        "Longest time an acknowledged write may stay only in memory.",
        s.loss_window_ms(),
        0.001,
    );
    r.scaled(
        "checkpoint_rate_mb_s",
        "checkpoint_rate_limit_bytes_per_second",
        Kind::Gauge,
        "Snapshot write rate limit (0 = none).",
        s.checkpoint_rate_mb_s,
        1048576.0,
    );
    r.gauge(
        "log_segments",
        "Segment files in the command log.",
        l.segments as u64,
    );
    r.gauge(
        "log_file_bytes",
        "Bytes of the log's segment files (preallocated size).",
        l.log_bytes,
    );
    r.gauge(
        "log_bytes_since_checkpoint",
        "Log bytes written since the last checkpoint.",
        s.log_bytes_since_checkpoint,
    );
    r.gauge(
        "log_appended_lsn",
        "Highest log sequence number assigned.",
        l.appended_lsn,
    );
    r.gauge(
        "log_written_lsn",
        "Highest log sequence number handed to the kernel (survives a crash of the process).",
        l.written_lsn,
    );
    r.gauge(
        "log_durable_lsn",
        "Highest log sequence number fdatasync'd (survives a power loss).",
        l.durable_lsn,
    );
    r.gauge(
        "log_pending_bytes",
        "Log bytes appended and not yet written (in sync mode: not yet durable).",
        l.pending_bytes,
    );
    r.counter(
        "log_backpressure_waits",
        "Writes that waited for room in the log's pending buffer (a slow disk).",
        l.backpressure_waits,
    );
    r.gauge(
        "log_batch_records_p50",
        "Median records per log batch (group commit).",
        l.batch_records_p50,
    );
    r.gauge(
        "log_batch_records_p99",
        "99th percentile records per log batch.",
        l.batch_records_p99,
    );
    // Each call timed alone: a plain write of a batch, an fdatasync, and (O_DIRECT in sync
    // mode) a write that is made durable in the same call (pwritev2 RWF_DSYNC).
    r.renamed(
        "log_write_count",
        "log_writes",
        Kind::Counter,
        "Plain writes of a log batch (async mode; sync mode without O_DIRECT).",
        Value::Int(l.write.count),
    );
    r.scaled(
        "log_write_latency_us_p50",
        "log_write_latency_p50_seconds",
        Kind::Gauge,
        "Median latency of a plain write of a log batch, timed alone.",
        l.write.p50_us,
        1e-6,
    );
    r.scaled(
        "log_write_latency_us_p99",
        "log_write_latency_p99_seconds",
        Kind::Gauge,
        "99th percentile latency of a plain write of a log batch.",
        l.write.p99_us,
        1e-6,
    );
    r.renamed(
        "fdatasync_count",
        "fdatasyncs",
        Kind::Counter,
        "fdatasync calls of the command log.",
        Value::Int(l.fdatasync.count),
    );
    r.scaled(
        "fdatasync_latency_us_p50",
        "fdatasync_latency_p50_seconds",
        Kind::Gauge,
        "Median fdatasync latency since start, the fdatasync call alone.",
        l.fdatasync.p50_us,
        1e-6,
    );
    r.scaled(
        "fdatasync_latency_us_p99",
        "fdatasync_latency_p99_seconds",
        Kind::Gauge,
        "99th percentile fdatasync latency since start.",
        l.fdatasync.p99_us,
        1e-6,
    );
    r.renamed(
        "log_dsync_write_count",
        "log_dsync_writes",
        Kind::Counter,
        "Log batches written and made durable by one pwritev2(RWF_DSYNC) (sync mode, O_DIRECT).",
        Value::Int(l.dsync_write.count),
    );
    r.scaled(
        "log_dsync_write_latency_us_p50",
        "log_dsync_write_latency_p50_seconds",
        Kind::Gauge,
        "Median latency of a pwritev2(RWF_DSYNC) of a log batch: the write and the cache flush.",
        l.dsync_write.p50_us,
        1e-6,
    );
    r.scaled(
        "log_dsync_write_latency_us_p99",
        "log_dsync_write_latency_p99_seconds",
        Kind::Gauge,
        "99th percentile latency of a pwritev2(RWF_DSYNC) of a log batch.",
        l.dsync_write.p99_us,
        1e-6,
    );
    r.counter("log_staged_writes", "Of the pwritev2(RWF_DSYNC) log writes, those whose records were copied into a staging buffer first (a batch of several chunks, or the first in a new segment).", l.staged_writes);
    r.counter(
        "log_buffer_releases",
        "Times the log went quiet after writes and handed its buffers back to the operating system.",
        l.buffer_releases,
    );
    r.gauge(
        "snapshot_lsn",
        "Log sequence number the newest snapshot covers.",
        c.snapshot_lsn,
    );
    r.gauge(
        "snapshot_bytes",
        "Size of the newest snapshot.",
        c.snapshot_bytes,
    );
    r.renamed(
        "checkpoints_done",
        "checkpoints",
        Kind::Counter,
        "Checkpoints that succeeded.",
        Value::Int(c.checkpoints_done),
    );
    r.renamed(
        "checkpoints_failed",
        "checkpoint_failures",
        Kind::Counter,
        "Checkpoints that failed.",
        Value::Int(c.checkpoints_failed),
    );
    r.renamed(
        "last_checkpoint_start",
        "last_checkpoint_start_timestamp_seconds",
        Kind::Gauge,
        "Unix time the last checkpoint started (0: none yet).",
        Value::Int(c.last_checkpoint_start_unix),
    );
    r.scaled(
        "last_checkpoint_duration_ms",
        "last_checkpoint_duration_seconds",
        Kind::Gauge,
        "Duration of the last checkpoint.",
        c.last_checkpoint_duration_ms,
        0.001,
    );
    r.text(
        "last_checkpoint_status",
        "How the last checkpoint ended.",
        status_text(&c.last_checkpoint_status),
    );
    r.gauge(
        "last_checkpoint_items",
        "Items in the last checkpoint.",
        c.last_checkpoint_items,
    );
    r.scaled(
        "recovery_ms",
        "recovery_duration_seconds",
        Kind::Gauge,
        "Time the last start spent recovering.",
        rec.recovery_ms,
        0.001,
    );
    r.gauge(
        "recovered_items",
        "Items recovered at start.",
        rec.recovered_items,
    );
    r.gauge(
        "recovered_log_records",
        "Log records replayed at start.",
        rec.recovered_log_records,
    );
    r.gauge(
        "recovery_dropped_items",
        "Items recovery dropped (too large to replay).",
        rec.recovery_dropped_items,
    );
    r.gauge(
        "recovered_flash_items",
        "Flash entries recovery put back in the index (their items stayed on flash).",
        rec.recovered_flash_items,
    );
    r.gauge("recovery_replayed_to_flash", "Replayed log records recovery put straight on flash (newer records of their shard would have evicted them from RAM).", rec.recovery_replayed_to_flash);
    r.gauge(
        "recovery_flash_dropped",
        "Flash entries of the snapshot recovery could not trust (lost, as if evicted).",
        rec.recovery_flash_dropped,
    );
    r.scaled(
        "recovery_log_open_ms",
        "recovery_log_open_seconds",
        Kind::Gauge,
        "Time the last start's recovery spent opening the log (finding its end).",
        rec.recovery_log_open_ms,
        0.001,
    );
    r.scaled("recovery_flash_pins_ms", "recovery_flash_pins_seconds", Kind::Gauge, "Time the last start's recovery spent reading the headers of the flash segments checkpoints name.", rec.recovery_flash_pins_ms, 0.001);
    r.scaled(
        "recovery_snapshot_ms",
        "recovery_snapshot_seconds",
        Kind::Gauge,
        "Time the last start's recovery spent loading the snapshot.",
        rec.recovery_snapshot_ms,
        0.001,
    );
    r.scaled(
        "recovery_replay_ms",
        "recovery_replay_seconds",
        Kind::Gauge,
        "Time the last start's recovery spent replaying the log after the snapshot.",
        rec.recovery_replay_ms,
        0.001,
    );
    r.flag(
        "writes_refused",
        "writes_refused",
        "1 once the log failed and writes are refused.",
        s.writes_refused,
        ("yes", "no"),
    );
    let last_start = c.last_checkpoint_start_unix;
    if last_start > 0 {
        r.renamed(
            "last_checkpoint_age",
            "last_checkpoint_age_seconds",
            Kind::Gauge,
            "Seconds since the last checkpoint started.",
            Value::Int(u64::from(cairn_engine::now_unix()).saturating_sub(last_start)),
        );
    }
    r.0
}

/// How the last checkpoint ended, as one word: `none`, `success` or `failed:_<why>` (spaces
/// as underscores, so that a `STAT` line keeps three fields).
fn status_text(status: &CheckpointStatus) -> String {
    match status {
        CheckpointStatus::None => "none".into(),
        CheckpointStatus::Succeeded => "success".into(),
        CheckpointStatus::Failed(why) => format!("failed: {why}").replace(' ', "_"),
    }
}

/// A Unix time as ARCUS prints it in `stats persistence`: `YYYYMMDDhhmmss` (UTC here;
/// ARCUS uses local time), or `0` for "never".
fn arcus_time(unix: u64) -> String {
    if unix == 0 {
        return "0".into();
    }
    let (days, secs) = (unix / 86_400, unix % 86_400);
    // Civil date from days since 1970-01-01 (the proleptic Gregorian calendar).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}{:02}{:02}{:02}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arcus_time_is_utc_digits() {
        assert_eq!(arcus_time(0), "0");
        assert_eq!(arcus_time(1_608_661_262), "20201222182102");
        assert_eq!(arcus_time(951_782_400), "20000229000000");
    }

    #[test]
    fn a_checkpoint_status_is_one_word() {
        assert_eq!(status_text(&CheckpointStatus::None), "none");
        assert_eq!(status_text(&CheckpointStatus::Succeeded), "success");
        assert_eq!(
            status_text(&CheckpointStatus::Failed("no space left".into())),
            "failed:_no_space_left"
        );
    }

    /// The names and their order are what ARCUS's tools and dashboards read: ARCUS's fields
    /// first, then cairn's. Numbers are exported under their metric names; text is `stats`
    /// only.
    #[test]
    fn stats_persistence_names_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let config = crate::Config {
            data_dir: dir.path().to_path_buf(),
            log_segment_mb: 2,
            ..crate::Config::default()
        };
        let ctx = crate::Ctx::open(config).unwrap();
        let readings = persistence(&ctx);
        let names: Vec<&str> = readings.iter().map(|r| r.name).collect();
        assert_eq!(
            names,
            [
                "use_persistence",
                "data_path",
                "logs_path",
                "async_logging",
                "chkpt_interval_pct_snapshot",
                "chkpt_interval_min_logsize",
                "recovery_elapsed_time_sec",
                "last_chkpt_in_progress",
                "last_chkpt_failure_count",
                "last_chkpt_start_time",
                "last_chkpt_elapsed_time_sec",
                "last_chkpt_snapshot_filesize_bytes",
                "current_command_log_filesize_bytes",
                "mode",
                "loss_window_ms",
                "checkpoint_rate_mb_s",
                "log_segments",
                "log_file_bytes",
                "log_bytes_since_checkpoint",
                "log_appended_lsn",
                "log_written_lsn",
                "log_durable_lsn",
                "log_pending_bytes",
                "log_backpressure_waits",
                "log_batch_records_p50",
                "log_batch_records_p99",
                "log_write_count",
                "log_write_latency_us_p50",
                "log_write_latency_us_p99",
                "fdatasync_count",
                "fdatasync_latency_us_p50",
                "fdatasync_latency_us_p99",
                "log_dsync_write_count",
                "log_dsync_write_latency_us_p50",
                "log_dsync_write_latency_us_p99",
                "log_staged_writes",
                "log_buffer_releases",
                "snapshot_lsn",
                "snapshot_bytes",
                "checkpoints_done",
                "checkpoints_failed",
                "last_checkpoint_start",
                "last_checkpoint_duration_ms",
                "last_checkpoint_status",
                "last_checkpoint_items",
                "recovery_ms",
                "recovered_items",
                "recovered_log_records",
                "recovery_dropped_items",
                "recovered_flash_items",
                "recovery_replayed_to_flash",
                "recovery_flash_dropped",
                "recovery_log_open_ms",
                "recovery_flash_pins_ms",
                "recovery_snapshot_ms",
                "recovery_replay_ms",
                "writes_refused",
            ]
        );
        let get = |n: &str| readings.iter().find(|r| r.name == n).unwrap().clone();
        assert_eq!(get("recovery_ms").metric, "recovery_duration_seconds");
        assert!(get("log_pending_bytes").export.is_some());
        assert!(get("data_path").export.is_none());
        assert_eq!(get("writes_refused").export, Some(Value::Int(0)));
        assert_eq!(get("writes_refused").value.to_string(), "no");
        assert_eq!(get("async_logging").value.to_string(), "false");
        assert_eq!(get("last_chkpt_start_time").value.to_string(), "0");
        assert_eq!(get("last_checkpoint_status").value.to_string(), "none");
        assert!(readings.iter().all(|r| !r.help.is_empty()));
        let mut metrics: Vec<&str> = readings
            .iter()
            .filter(|r| r.export.is_some())
            .map(|r| r.metric)
            .collect();
        let n = metrics.len();
        metrics.sort();
        metrics.dedup();
        assert_eq!(metrics.len(), n, "two figures share a metric name");
    }
}
