//! What the log's threads share: [`Shared`] (appenders, the syncer, the spare thread and
//! [`crate::Log`] hold it in an `Arc`) and [`State`], under its one lock.
//!
//! ```text
//!   Log ──Arc<Shared>──> appender (append_parts)      pending chunks, next LSN  [State]
//!                        syncer    (sync_loop, ...)    the tail                  [Writer]
//!                        spare thread (spare_loop)     the next segment file     [Spare]
//!                        waiters: taken / written / durable watermarks
//! ```
//!
//! The methods each part runs are in its own module (`appender`, `syncer`, `segment`); only
//! the few every part calls are here. Non-goals: the public API (`crate::log`).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use crate::error::{poisoned, WalError};
use crate::fs::{FileSystem, FolderLock};
use crate::marks::{Listener, Lsn};
use crate::options::{Durability, LogOptions};
use crate::pending::{Chunk, PendingBuf};
use crate::spare::Spare;
use crate::stats::LogHistograms;
use crate::tail::Tail;
use crate::waiters::{self, Reach, Watermark};

/// Everything appenders, the syncer and the spare thread share.
pub(crate) struct Shared {
    /// The file system the log's files are on.
    pub(crate) fs: Arc<dyn FileSystem>,
    /// The log's folder.
    pub(crate) dir: PathBuf,
    /// This process's hold on `dir`, for as long as the log is open.
    pub(crate) _folder_lock: FolderLock,
    /// The options it was opened with (`durability` aside: see below).
    pub(crate) opts: LogOptions,
    /// The log's random id, in every segment header and record CRC.
    pub(crate) log_id: u64,
    /// Random per open, in spare file names: a spare of an earlier open never collides.
    pub(crate) nonce: u64,
    /// The mode in force ([`Durability::code`]).
    pub(crate) durability: AtomicU8,
    pub(crate) state: Mutex<State>,
    /// Bytes in `State::pending`, readable without the lock (for [`crate::Log::room`]).
    pub(crate) pending_bytes: AtomicUsize,
    /// The last LSN assigned, readable without the lock.
    pub(crate) appended: AtomicU64,
    /// The first LSN of the oldest segment (`State::segments`), readable without the lock:
    /// set at open and when `truncate_before` drops segments.
    pub(crate) first: AtomicU64,
    /// The three watermarks (see the crate doc), each with its waiters.
    pub(crate) taken: Watermark,
    pub(crate) written: Watermark,
    pub(crate) durable: Watermark,
    /// Set once the syncer stopped (closed, poisoned or panicked): waiters stop waiting.
    pub(crate) syncer_stopped: AtomicBool,
    /// Signalled when the syncer may have work.
    pub(crate) work_cv: Condvar,
    /// Called after every advance of a mark (see [`Listener`]).
    pub(crate) listeners: Mutex<Vec<Listener>>,
    /// The next segment, prepared ahead by the spare thread.
    pub(crate) spare: Mutex<Spare>,
    /// Signalled on every change of `spare`.
    pub(crate) spare_cv: Condvar,
    /// Held by `truncate_before` for its whole run.
    pub(crate) truncating: Mutex<()>,
    /// See [`crate::LogStats::backpressure_waits`].
    pub(crate) backpressure_waits: AtomicU64,
    /// The tail and whoever writes it: the syncer, or a helper in async mode (see
    /// [`crate::Log::write_ready`]). Set at open. Taken before `state`, never after.
    pub(crate) writer: Mutex<Option<Writer>>,
    /// Where records are in their segments, sparsely (`crate::index`): noted by the writer
    /// after each write, read by [`crate::Log::read_range`]. Taken alone, briefly.
    pub(crate) index: Mutex<crate::index::Index>,
}

/// What the one writer owns (under `Shared::writer`): the tail segment. The syncer holds it
/// for each write or fdatasync, a helper ([`Shared::write_ready`]) for its write.
pub(crate) struct Writer {
    pub tail: Tail,
    /// The batch vector of the last write, kept for its allocation.
    pub spare: Vec<Chunk>,
}

/// State under the log's one lock, held briefly by appenders and the syncer.
pub(crate) struct State {
    /// Records not yet taken by the syncer, oldest first. The syncer takes the chunks before
    /// the first unfilled slot, so the log never gets a hole.
    pub(crate) pending: Vec<Chunk>,
    /// Bytes of the records in `pending`, filled or not.
    pub(crate) pending_bytes: usize,
    /// Bytes of the batch the syncer is writing (0 between batches).
    pub(crate) writing_bytes: usize,
    /// Emptied `Chunk::Framed` buffers, handed back by the syncer for reuse.
    pub(crate) free_buffers: Vec<PendingBuf>,
    /// See [`crate::LogStats::buffer_releases`].
    pub(crate) buffer_releases: u64,
    /// The file offset where the next appended record lands if no new segment starts before
    /// it: the tail's end after the batch being written plus `pending_bytes`. Its block
    /// offset lays a new chunk out for an O_DIRECT write without staging (see
    /// `appender::PendingBuf`); after each write the syncer sets it from the tail again.
    pub(crate) next_offset: u64,
    /// See [`crate::LogStats::staged_writes`].
    pub(crate) staged_writes: u64,
    /// The LSN the next append gets.
    pub(crate) next_lsn: Lsn,
    /// Highest LSN a caller waits to be durable (async mode fdatasyncs early for it).
    pub(crate) waiting_for: Lsn,
    /// Set once a write or fdatasync failed.
    pub(crate) poisoned: Option<WalError>,
    /// Set by `close`: the syncer writes and syncs what is left and exits.
    pub(crate) closing: bool,
    /// (first LSN, path) of every segment, oldest first.
    pub(crate) segments: Vec<(Lsn, PathBuf)>,
    /// Latencies and batch sizes: see [`LogHistograms`].
    pub(crate) hist: LogHistograms,
    /// See [`crate::LogStats::bytes_written`].
    pub(crate) bytes_written: u64,
    /// See [`crate::LogStats::spare_waits`].
    pub(crate) spare_waits: u64,
    /// Async mode: when the oldest written-but-unsynced record was written (the clock of the
    /// next fdatasync), and the bytes written since the last one.
    pub(crate) unsynced_since: Option<std::time::Instant>,
    pub(crate) unsynced_bytes: usize,
    /// While the syncer's fdatasync runs (without the writer lock, so that helpers go on
    /// writing): `bytes_written` when it began. Helpers write during it only until
    /// `flush_bytes` more were written, so async mode's unsynced bytes stay bounded (and a
    /// disk that cannot keep up fills the pending buffer: backpressure).
    pub(crate) syncing_from: Option<u64>,
    /// `pending` holds records appended without waking the syncer (see
    /// [`crate::writes_before_sleeping`]).
    pub(crate) unwoken: bool,
}

impl Shared {
    pub(crate) fn durability(&self) -> Durability {
        Durability::from_code(self.durability.load(Ordering::Relaxed))
    }

    /// The error a waiter gets once the syncer stopped.
    pub(crate) fn stop_error(&self) -> WalError {
        match &self.state.lock().poisoned {
            Some(e) => poisoned(e),
            None => WalError::Closed,
        }
    }

    /// Asks the syncer to make `lsn` durable as soon as it can (async mode's fence).
    pub(crate) fn request_durable(&self, lsn: Lsn) {
        if self.durable.get() >= lsn || self.durability() == Durability::Sync {
            return;
        }
        let mut st = self.state.lock();
        st.waiting_for = st.waiting_for.max(lsn);
        drop(st);
        self.work_cv.notify_one();
    }

    pub(crate) fn reach<'a>(
        &'a self,
        mark: &'a Watermark,
        lsn: Lsn,
        asks_durable: bool,
    ) -> Reach<'a> {
        Reach {
            mark,
            log: self,
            lsn,
            asks_durable,
            key: None,
        }
    }
}

impl waiters::Stopped for Shared {
    fn stopped(&self) -> Option<WalError> {
        self.syncer_stopped
            .load(Ordering::Acquire)
            .then(|| self.stop_error())
    }

    fn request_durable(&self, lsn: Lsn) {
        Shared::request_durable(self, lsn);
    }
}
