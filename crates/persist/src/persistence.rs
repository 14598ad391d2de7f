//! [`Persistence`], the running persistence layer: the recovered store, its command log and
//! the settings that change at run time.
//!
//! ```text
//!   Persistence { store ──LogSink──> log }     open.rs: recovery builds it
//!                                              durability.rs: room, acknowledged, safe marks
//!                                              checkpoint.rs: snapshots and the ARCUS trigger
//!                                              history.rs: old records for the watch
//!                                              gate.rs: the replication gate it consults
//!                                              stats.rs: its figures
//! ```
//!
//! Non-goals: each of those concerns, in the module named beside it.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use cairn_store::Store;
use cairn_wal::{Log, Lsn};
use parking_lot::Mutex;

use crate::config::PersistConfig;
use crate::error::PersistError;
use crate::gate::ReplicationGate;
use crate::mode::Mode;
use crate::sink::{LogObserver, LogSink};
use crate::stats::{arcus_time, PersistStats};

/// The running persistence layer.
pub struct Persistence {
    /// The settings it was opened with (the ARCUS trigger's and the mode's current values
    /// are below).
    pub(crate) config: PersistConfig,
    /// The command log.
    pub(crate) log: Arc<Log>,
    /// The store's mutation sink: appends each mutation's record, tells the observers.
    pub(crate) sink: Arc<LogSink>,
    /// The recovered store.
    pub(crate) store: Arc<Store>,
    /// Sync or Async (switchable at run time).
    pub(crate) mode: AtomicU8,
    /// Checkpoint and recovery figures (`stats persistence`).
    pub(crate) stats: Mutex<PersistStats>,
    /// Held while a checkpoint runs.
    pub(crate) checkpoint_running: Mutex<()>,
    /// Readers of old log records ([`Persistence::read_history`]) hold it shared; dropping
    /// log segments holds it exclusively, since a dropped segment's file may be reused.
    pub(crate) history: parking_lot::RwLock<()>,
    /// Log bytes after the snapshot that recovery found (replayed at open): they count
    /// toward the next checkpoint like bytes written since.
    pub(crate) log_bytes_recovered: u64,
    /// [`Persistence::log_bytes_written`] when the last checkpoint started (for the ARCUS
    /// trigger).
    pub(crate) log_bytes_at_checkpoint: AtomicU64,
    /// ARCUS trigger settings, changeable at run time.
    pub(crate) pct_snapshot: AtomicU64,
    pub(crate) min_logsize_mb: AtomicU64,
    /// The cluster layer's condition on acknowledgements and refusal of client writes (see
    /// [`ReplicationGate`]); unset without replication.
    pub(crate) replication: std::sync::OnceLock<Arc<dyn ReplicationGate>>,
    /// This process's hold on the data folder when the log lives elsewhere (the log holds
    /// its own folder): a second process on the same folder is refused at start.
    pub(crate) _data_lock: Option<cairn_wal::FolderLock>,
}

impl Persistence {
    /// The recovered store, with logging switched on.
    pub fn store(&self) -> Arc<Store> {
        Arc::clone(&self.store)
    }

    pub fn mode(&self) -> Mode {
        match self.mode.load(Ordering::Relaxed) {
            x if x == Mode::Sync as u8 => Mode::Sync,
            _ => Mode::Async,
        }
    }

    /// Switches between sync and async acknowledgement (off needs a restart).
    pub fn set_mode(&self, mode: Mode) -> Result<(), &'static str> {
        if mode == Mode::Off {
            return Err("persistence cannot be switched off while running");
        }
        self.mode.store(mode as u8, Ordering::Relaxed);
        self.log.set_durability(mode.log_durability());
        tracing::info!("persistence mode is now {}", mode.name());
        Ok(())
    }

    /// Blocks until everything logged so far is durable (not from an async task).
    pub fn sync(&self) -> Result<(), PersistError> {
        Ok(self.log.sync()?)
    }

    /// Registers an observer of every logged mutation (see [`LogObserver`]).
    pub fn add_observer(&self, o: Arc<dyn LogObserver>) {
        self.sink.add_observer(o);
    }

    /// The highest LSN assigned so far: a revision beyond it has not happened yet.
    pub fn appended_lsn(&self) -> Lsn {
        self.log.appended_lsn()
    }

    /// The ARCUS checkpoint trigger's `chkpt_interval_pct_snapshot` in force.
    pub fn chkpt_interval_pct_snapshot(&self) -> u64 {
        self.pct_snapshot.load(Ordering::Relaxed)
    }

    /// The ARCUS checkpoint trigger's `chkpt_interval_min_logsize` (MiB) in force.
    pub fn chkpt_interval_min_logsize_mb(&self) -> u64 {
        self.min_logsize_mb.load(Ordering::Relaxed)
    }

    pub fn set_chkpt_interval_pct_snapshot(&self, v: u64) {
        self.pct_snapshot.store(v, Ordering::Relaxed);
    }

    pub fn set_chkpt_interval_min_logsize_mb(&self, v: u64) {
        self.min_logsize_mb.store(v, Ordering::Relaxed);
    }

    /// Log bytes since the snapshot recovery started from, given the log's own count of
    /// bytes written: those recovery replayed plus those written since.
    pub(crate) fn log_bytes_written(&self, written_since_open: u64) -> u64 {
        self.log_bytes_recovered + written_since_open
    }

    /// Log bytes written since the last checkpoint started. Saturating: a checkpoint that
    /// started after `written_since_open` was read may have moved the mark past it.
    pub(crate) fn log_bytes_since_checkpoint(&self, written_since_open: u64) -> u64 {
        self.log_bytes_written(written_since_open)
            .saturating_sub(self.log_bytes_at_checkpoint.load(Ordering::Relaxed))
    }

    /// Makes everything logged durable and stops the log (graceful shutdown).
    pub fn close(&self) -> Result<(), PersistError> {
        self.log.close()?;
        Ok(())
    }
}

impl Persistence {
    /// The command log's own figures, with its latency and batch-size histograms.
    pub fn log_stats(&self) -> cairn_wal::LogStats {
        self.log.stats()
    }

    /// `stats persistence` lines: (name, value). ARCUS's fields come first, with its names and
    /// formats; cairn's own follow.
    pub fn stats(&self) -> Vec<(&'static str, String)> {
        let l = self.log.stats();
        let s = self.stats.lock().clone();
        let mode = self.mode();
        let since_checkpoint = self.log_bytes_since_checkpoint(l.bytes_written);
        let yes_no = |b: bool| if b { "true" } else { "false" }.to_string();
        vec![
            ("use_persistence", "on".into()),
            ("data_path", self.config.data_path.display().to_string()),
            ("logs_path", self.config.logs_path.display().to_string()),
            ("async_logging", yes_no(mode == Mode::Async)),
            (
                "chkpt_interval_pct_snapshot",
                self.chkpt_interval_pct_snapshot().to_string(),
            ),
            (
                "chkpt_interval_min_logsize",
                self.chkpt_interval_min_logsize_mb().to_string(),
            ),
            (
                "recovery_elapsed_time_sec",
                (s.recovery_ms / 1000).to_string(),
            ),
            (
                "last_chkpt_in_progress",
                yes_no(self.checkpoint_running.is_locked()),
            ),
            (
                "last_chkpt_failure_count",
                s.checkpoints_failed_in_a_row.to_string(),
            ),
            (
                "last_chkpt_start_time",
                arcus_time(s.last_checkpoint_start_unix),
            ),
            (
                "last_chkpt_elapsed_time_sec",
                (s.last_checkpoint_duration_ms / 1000).to_string(),
            ),
            (
                "last_chkpt_snapshot_filesize_bytes",
                s.snapshot_bytes.to_string(),
            ),
            (
                "current_command_log_filesize_bytes",
                since_checkpoint.to_string(),
            ),
            ("mode", mode.name().into()),
            (
                "loss_window_ms",
                if mode == Mode::Async {
                    self.config.async_flush_ms
                } else {
                    0
                }
                .to_string(),
            ),
            (
                "checkpoint_rate_mb_s",
                self.config.checkpoint_rate_mb_s.to_string(),
            ),
            ("log_segments", l.segments.to_string()),
            ("log_file_bytes", l.log_bytes.to_string()),
            ("log_bytes_since_checkpoint", since_checkpoint.to_string()),
            ("log_appended_lsn", l.appended_lsn.to_string()),
            ("log_written_lsn", l.written_lsn.to_string()),
            ("log_durable_lsn", l.durable_lsn.to_string()),
            ("log_pending_bytes", l.pending_bytes.to_string()),
            ("log_backpressure_waits", l.backpressure_waits.to_string()),
            ("log_batch_records_p50", l.batch_records_p50.to_string()),
            ("log_batch_records_p99", l.batch_records_p99.to_string()),
            // Each call timed alone: a plain write of a batch, an fdatasync, and (O_DIRECT in
            // sync mode) a write that is made durable in the same call (pwritev2 RWF_DSYNC).
            ("log_write_count", l.write.count.to_string()),
            ("log_write_latency_us_p50", l.write.p50_us.to_string()),
            ("log_write_latency_us_p99", l.write.p99_us.to_string()),
            ("fdatasync_count", l.fdatasync.count.to_string()),
            ("fdatasync_latency_us_p50", l.fdatasync.p50_us.to_string()),
            ("fdatasync_latency_us_p99", l.fdatasync.p99_us.to_string()),
            ("log_dsync_write_count", l.dsync_write.count.to_string()),
            (
                "log_dsync_write_latency_us_p50",
                l.dsync_write.p50_us.to_string(),
            ),
            (
                "log_dsync_write_latency_us_p99",
                l.dsync_write.p99_us.to_string(),
            ),
            ("log_staged_writes", l.staged_writes.to_string()),
            ("snapshot_lsn", s.snapshot_lsn.to_string()),
            ("snapshot_bytes", s.snapshot_bytes.to_string()),
            ("checkpoints_done", s.checkpoints_done.to_string()),
            ("checkpoints_failed", s.checkpoints_failed.to_string()),
            (
                "last_checkpoint_start",
                s.last_checkpoint_start_unix.to_string(),
            ),
            (
                "last_checkpoint_duration_ms",
                s.last_checkpoint_duration_ms.to_string(),
            ),
            (
                "last_checkpoint_status",
                if s.last_checkpoint_status.is_empty() {
                    "none".into()
                } else {
                    s.last_checkpoint_status.replace(' ', "_")
                },
            ),
            ("last_checkpoint_items", s.last_checkpoint_items.to_string()),
            ("recovery_ms", s.recovery_ms.to_string()),
            ("recovered_items", s.recovered_items.to_string()),
            ("recovered_log_records", s.recovered_log_records.to_string()),
            (
                "recovery_dropped_items",
                s.recovery_dropped_items.to_string(),
            ),
            ("recovered_flash_items", s.recovered_flash_items.to_string()),
            (
                "recovery_replayed_to_flash",
                s.recovery_replayed_to_flash.to_string(),
            ),
            (
                "recovery_flash_dropped",
                s.recovery_flash_dropped.to_string(),
            ),
            ("recovery_log_open_ms", s.recovery_log_open_ms.to_string()),
            (
                "recovery_flash_pins_ms",
                s.recovery_flash_pins_ms.to_string(),
            ),
            ("recovery_snapshot_ms", s.recovery_snapshot_ms.to_string()),
            ("recovery_replay_ms", s.recovery_replay_ms.to_string()),
            (
                "writes_refused",
                if self.write_refusal().is_some() {
                    "yes"
                } else {
                    "no"
                }
                .into(),
            ),
        ]
    }
}
