//! The persistence layer's figures for `stats persistence`.

use cairn_wal::Lsn;

/// Figures shown by `stats persistence`.
#[derive(Default, Clone, Debug)]
pub struct PersistStats {
    pub checkpoints_done: u64,
    pub checkpoints_failed: u64,
    /// Failures since the last checkpoint that succeeded (ARCUS `last_chkpt_failure_count`).
    pub checkpoints_failed_in_a_row: u64,
    pub last_checkpoint_start_unix: u64,
    pub last_checkpoint_duration_ms: u64,
    pub last_checkpoint_status: String,
    pub last_checkpoint_items: u64,
    pub snapshot_bytes: u64,
    pub snapshot_lsn: Lsn,
    pub recovery_ms: u64,
    pub recovered_items: u64,
    pub recovered_log_records: u64,
    /// Items left out at recovery because they no longer fit the store's limits.
    pub recovery_dropped_items: u64,
    /// Flash entries recovery put back in the index (their items stayed on flash).
    pub recovered_flash_items: u64,
    /// Replayed log records recovery put straight on flash (newer records of their shard
    /// would have evicted them from RAM; see `replay`).
    pub recovery_replayed_to_flash: u64,
    /// Flash entries of the snapshot recovery could not trust (their segment was rewritten,
    /// the tier is gone or reshaped): lost, as if evicted.
    pub recovery_flash_dropped: u64,
    /// Where recovery_ms went: opening the log (finding its end), reading the flash
    /// segments' headers the checkpoints name, loading the snapshot, replaying the log.
    pub recovery_log_open_ms: u64,
    pub recovery_flash_pins_ms: u64,
    pub recovery_snapshot_ms: u64,
    pub recovery_replay_ms: u64,
}

/// A Unix time as ARCUS prints it in `stats persistence`: `YYYYMMDDhhmmss` (UTC here;
/// ARCUS uses local time), or `0` for "never".
pub(crate) fn arcus_time(unix: u64) -> String {
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
