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
use crate::stats::{CheckpointStats, PersistStats, RecoveryStats};

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
    /// Checkpoints' figures and the newest snapshot (updated by each checkpoint).
    pub(crate) checkpoints: Mutex<CheckpointStats>,
    /// What recovery did at open.
    pub(crate) recovery: RecoveryStats,
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

    /// The command log's own figures, with its latency and batch-size histograms.
    pub fn log_stats(&self) -> cairn_wal::LogStats {
        self.log.stats()
    }

    /// Every figure of `stats persistence`, read now.
    pub fn stats(&self) -> PersistStats {
        let log = self.log.stats();
        let checkpoints = self.checkpoints.lock().clone();
        PersistStats {
            mode: self.mode(),
            data_path: self.config.data_path.clone(),
            logs_path: self.config.logs_path.clone(),
            async_flush_ms: self.config.async_flush_ms,
            chkpt_interval_pct_snapshot: self.chkpt_interval_pct_snapshot(),
            chkpt_interval_min_logsize_mb: self.chkpt_interval_min_logsize_mb(),
            checkpoint_rate_mb_s: self.config.checkpoint_rate_mb_s,
            checkpoint_in_progress: self.checkpoint_running.is_locked(),
            log_bytes_since_checkpoint: self.log_bytes_since_checkpoint(log.bytes_written),
            writes_refused: self.write_refusal().is_some(),
            log,
            checkpoints,
            recovery: self.recovery.clone(),
        }
    }

    /// Makes everything logged durable and stops the log (graceful shutdown).
    pub fn close(&self) -> Result<(), PersistError> {
        self.log.close()?;
        Ok(())
    }
}
