//! The persistence layer's figures, as numbers and settings: [`PersistStats`], read by
//! [`crate::Persistence::stats`]. Each layer returns its own struct; the server renders them,
//! as `stats persistence` (ARCUS's names and formats first) and on the Prometheus endpoint.
//!
//! ```text
//!   open.rs ───────> RecoveryStats (once, at start)      ┐
//!   checkpoint.rs ─> CheckpointStats (under a lock)      ├─> Persistence::stats() ─> PersistStats
//!   cairn-wal ─────> LogStats (Log::stats)               │       └─> cairn-server's stats/
//!   settings in force, mode, write refusal ──────────────┘
//! ```
//!
//! Non-goals: names, units and text formats (ARCUS's `YYYYMMDDhhmmss`, `true`/`false`): the
//! rendering side's.

use std::path::PathBuf;

use cairn_wal::{LogStats, Lsn};

use crate::mode::Mode;

/// Everything `stats persistence` shows, read at one moment.
#[derive(Clone, Debug)]
pub struct PersistStats {
    /// The mode in force: sync or async (a running layer is never off).
    pub mode: Mode,
    /// Where snapshots and the manifest live (ARCUS `data_path`).
    pub data_path: PathBuf,
    /// Where the command log lives (ARCUS `logs_path`).
    pub logs_path: PathBuf,
    /// The async mode's longest time a write stays only in memory (the setting, whatever the
    /// mode in force; see [`PersistStats::loss_window_ms`]).
    pub async_flush_ms: u64,
    /// The ARCUS checkpoint trigger in force: the log's size as a % of the snapshot's...
    pub chkpt_interval_pct_snapshot: u64,
    /// ...and its least size, in MiB.
    pub chkpt_interval_min_logsize_mb: u64,
    /// Snapshot write rate limit in MiB/s (0 = none).
    pub checkpoint_rate_mb_s: u64,
    /// A checkpoint is running.
    pub checkpoint_in_progress: bool,
    /// Log bytes written since the last checkpoint started (those recovery replayed count).
    pub log_bytes_since_checkpoint: u64,
    /// Client writes are refused (the log failed, or this node is a replica).
    pub writes_refused: bool,
    /// The command log's own figures.
    pub log: LogStats,
    /// Checkpoints since start, and the newest snapshot.
    pub checkpoints: CheckpointStats,
    /// What the last start's recovery did.
    pub recovery: RecoveryStats,
}

impl PersistStats {
    /// The longest time an acknowledged write may stay only in memory: the flush interval in
    /// async mode, 0 in sync mode.
    pub fn loss_window_ms(&self) -> u64 {
        if self.mode == Mode::Async {
            self.async_flush_ms
        } else {
            0
        }
    }
}

/// How the last checkpoint ended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum CheckpointStatus {
    /// No checkpoint since start.
    #[default]
    None,
    Succeeded,
    /// Failed, with the error's text.
    Failed(String),
}

/// Checkpoints since start, and the newest snapshot (the one recovery loaded, until the first
/// checkpoint).
#[derive(Default, Clone, Debug)]
pub struct CheckpointStats {
    /// Checkpoints that succeeded.
    pub checkpoints_done: u64,
    /// Checkpoints that failed.
    pub checkpoints_failed: u64,
    /// Failures since the last checkpoint that succeeded (ARCUS `last_chkpt_failure_count`).
    pub checkpoints_failed_in_a_row: u64,
    /// Unix time the last checkpoint started (0: none yet).
    pub last_checkpoint_start_unix: u64,
    /// How long the last checkpoint took.
    pub last_checkpoint_duration_ms: u64,
    /// How the last checkpoint ended.
    pub last_checkpoint_status: CheckpointStatus,
    /// Items (and flash entries) in the last checkpoint.
    pub last_checkpoint_items: u64,
    /// Size of the newest snapshot.
    pub snapshot_bytes: u64,
    /// The LSN the newest snapshot covers (0: none).
    pub snapshot_lsn: Lsn,
}

/// What the last start's recovery did, and where its time went.
#[derive(Default, Clone, Debug)]
pub struct RecoveryStats {
    /// The whole recovery's time.
    pub recovery_ms: u64,
    /// Live items once recovery was done.
    pub recovered_items: u64,
    /// Log records replayed after the snapshot.
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
    /// The snapshot recovery loaded (0: none) and its size: the newest snapshot until the
    /// first checkpoint ([`CheckpointStats::snapshot_lsn`] and `snapshot_bytes` start there).
    pub snapshot_lsn: Lsn,
    pub snapshot_bytes: u64,
}
