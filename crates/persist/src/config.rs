//! [`PersistConfig`]: the persistence layer's settings, ARCUS's names where it has them.
//!
//! Non-goals: parsing them (the server's `Config` maps its flags onto these).

use std::path::PathBuf;
use std::sync::Arc;

use cairn_wal::FileSystem;

use crate::mode::Mode;

/// The default of [`PersistConfig::max_pending_bytes`]: 16 MiB.
pub const DEFAULT_MAX_PENDING_BYTES: usize = 16 << 20;

/// Persistence settings (ARCUS's names where it has them).
#[derive(Clone)]
pub struct PersistConfig {
    pub mode: Mode,
    /// Where snapshots and the manifest live (ARCUS `data_path`).
    pub data_path: PathBuf,
    /// Where the command log lives (ARCUS `logs_path`; may be another disk).
    pub logs_path: PathBuf,
    /// Async mode: the longest time a write stays only in memory.
    pub async_flush_ms: u64,
    /// Checkpoint when the log is at least this % of the snapshot size (ARCUS
    /// `chkpt_interval_pct_snapshot`)...
    pub chkpt_interval_pct_snapshot: u64,
    /// ...and at least this many MiB (ARCUS `chkpt_interval_min_logsize`).
    pub chkpt_interval_min_logsize_mb: u64,
    /// Snapshot write rate limit in MiB/s (0 = unlimited), so serving keeps its speed.
    pub checkpoint_rate_mb_s: u64,
    /// Size of a log segment file.
    pub segment_bytes: u64,
    /// Write the log with O_DIRECT (see `cairn_wal::LogOptions::direct_io`).
    pub direct_io: bool,
    /// Run the log's syncer under SCHED_BATCH (see `cairn_wal::LogOptions::syncer_batch_sched`).
    pub syncer_batch_sched: bool,
    /// Log bytes waiting for the disk past which writers wait for room (see
    /// `cairn_wal::LogOptions::max_pending_bytes`; [`DEFAULT_MAX_PENDING_BYTES`]).
    pub max_pending_bytes: usize,
    /// The file system (the real disk, or a fault-injecting one in tests).
    pub fs: Arc<dyn FileSystem>,
    /// The flash tier, if one is on: checkpoints record its entries (not their values) and
    /// recovery restores those it can still trust (see `cairn_flash`'s checkpoint notes).
    pub flash: Option<Arc<cairn_flash::Flash>>,
}
