//! cairn-wal: a checksummed, segmented, append-only log with group commit.
//!
//! ```text
//!   append(payload parts) ──lock──> pending chunks (LSNs assigned in order); never waits
//!        │   small record: framed under the lock into the last chunk          [appender]
//!        │   large record: reserve a slot, unlock, frame it (CRC + copy), lock, fill the slot
//!        v
//!   syncer thread: take the pending chunks up to the first unfilled slot ─> taken mark
//!        Sync:  write them at the segment's end and make them durable in one go
//!               (O_DIRECT: one pwritev2 with RWF_DSYNC; else pwritev + fdatasync)
//!               ─> written = durable = last LSN of the batch
//!        Async: write them (pwritev, page cache) ─> written = last LSN; fdatasync at least
//!               every flush_interval, or at once for a fence ─> durable
//!        ─> wake the waiters each mark covers, call the listeners                [syncer]
//!   async, a thread that writes before it sleeps (`writes_before_sleeping`): its appends
//!        do not wake the syncer; before it sleeps it calls `Log::write_ready`: if the writer
//!        lock is free, it writes what is ready (one pwritev, no fdatasync, never a new
//!        segment) ─> written ─> wakes its waiters itself; if not, it wakes the syncer
//!   (writers that arrive while one batch is written share the next one: group commit, no
//!    sleep)
//!
//!   spare thread, once the tail is half full: hand out a kept file, or create
//!        "next-….spare", preallocate (zero fill), fdatasync ─> ready               [segment]
//!   syncer, when a batch does not fit the tail: rename the ready spare to "<first LSN>.wal",
//!        write header + batch, make it durable, fsync the directory, then acknowledge
//!   truncate_before: rename dropped segments to spare names (up to reuse_segments kept,
//!        header zeroed) or delete them
//! ```
//!
//! The modules follow that picture: [`format`] is the record codec, `segment` the segment
//! files (tail, spare thread, reuse), `appender` the pending buffer, `syncer` the thread that
//! writes it, [`waiters`] the one registry through which threads and async tasks wait for the
//! three watermarks, [`recovery`] the scan on open.
//!
//! **Three watermarks**, each an LSN that only grows:
//! - *taken*: the syncer took every record up to it. Appends never wait; a caller that wants
//!   backpressure waits for [`Log::room`] before it appends (the pending buffer is below
//!   `max_pending_bytes`, or the batch in it was taken).
//! - *written*: handed to the kernel. Survives a crash of the process (kill -9), not a power
//!   loss.
//! - *durable*: fdatasync'd. Survives a power loss.
//!
//! Waiting is never done under a lock of the caller's and never needs a thread: [`Log::written`],
//! [`Log::durable`] and [`Log::room`] are futures ([`Reach`]) that an async task awaits;
//! [`Log::wait_durable`] and [`Log::commit`] block a thread on the same futures.
//!
//! Segments are files named by their first LSN, preallocated, each with a header carrying the
//! log's random id; every record carries a CRC32C over that id, its header and its payload (the
//! format is in [`format`] and docs/FORMATS.md). Every write ends with an end marker (16 zero
//! bytes) after its records, so a scan stops before whatever a reused file held. The next
//! segment is prepared by a background thread, so the syncer never waits for a segment's
//! preallocation unless the disk cannot keep up. With [`LogOptions::direct_io`] the tail is
//! written with O_DIRECT in whole 4 KiB blocks in sync mode. Recovery on [`Log::open`] finds
//! the end of the log and applies the caller's [`RecoveryMode`]; it never silently cuts the
//! middle of a log. A failed write or fdatasync poisons the log: nothing after it is
//! acknowledged, every waiter gets the error, and it is never retried.
//!
//! Non-goals: no compression, no record types (payloads are opaque), no replication.

mod appender;
pub mod format;
pub mod fs;
mod recovery;
mod segment;
mod syncer;
pub mod waiters;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

pub use fs::{DelayedSyncFs, FileSystem, FolderLock, LogFile, RealFs, DIRECT_ALIGN};
pub use recovery::{read_records, scan_dir, DirScan, SegmentReport};
pub use waiters::{block_on, Reach};

use appender::Chunk;
pub use appender::FRAME_OUTSIDE_LOCK_BYTES;
use segment::Spare;
use waiters::Watermark;

thread_local! {
    /// Set by [`writes_before_sleeping`].
    static WRITES_BEFORE_SLEEPING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Declares that the calling thread calls [`Log::write_ready`] on every log it appends to
/// before it goes to sleep (an event loop's worker, from its park hook). Its async-mode
/// appends then do not wake the syncer: the thread writes them itself, as one batch, before
/// it sleeps (if it never does, the syncer takes them within the flush interval). Sync-mode
/// appends wake the syncer as always.
pub fn writes_before_sleeping() {
    WRITES_BEFORE_SLEEPING.with(|c| c.set(true));
}

pub(crate) fn thread_writes_before_sleeping() -> bool {
    WRITES_BEFORE_SLEEPING.with(|c| c.get())
}

/// A record's sequence number: 1 for the first record of a log, then +1 per record.
pub type Lsn = u64;

/// When a record counts as safe, and so what a crash can take. Switchable while the log runs
/// ([`Log::set_durability`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// The syncer writes and makes durable each batch as soon as it takes it; a record is
    /// safe once durable ([`Log::commit`] waits for that). A power loss loses nothing
    /// committed.
    Sync,
    /// The syncer writes each batch to the kernel as soon as it takes it (the *written* mark),
    /// and fdatasyncs at least every `flush_interval` (and whenever `flush_bytes` were written
    /// since the last one, or a caller waits for [`Log::durable`]). A record is safe once
    /// written ([`Log::commit`] waits for that): a crash of the process loses nothing
    /// committed; a power loss loses at most what was written in the last `flush_interval`
    /// (plus the time of one fdatasync).
    Async,
}

impl Durability {
    fn code(self) -> u8 {
        match self {
            Durability::Sync => 0,
            Durability::Async => 1,
        }
    }

    fn from_code(code: u8) -> Durability {
        if code == 0 {
            Durability::Sync
        } else {
            Durability::Async
        }
    }
}

/// What [`Log::open`] does with a record that fails its checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecoveryMode {
    /// Any bad byte is an error, even a torn tail.
    Strict,
    /// A torn record at the end of the newest segment (nothing valid after it) is cut off;
    /// anything else is an error. The default: this is what a crash mid-write leaves.
    TolerateTornTail,
    /// Keep the longest valid prefix; cut everything after the first bad record, in every
    /// segment after it too. For an operator who accepts losing the rest.
    Salvage,
}

/// How a new segment file is prepared (by the spare thread, ahead of time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prealloc {
    /// `set_len` to the segment size: no data blocks written up front, so every fdatasync of
    /// an append also commits the file system's block allocation.
    SetLen,
    /// Write zeros over the whole segment and fdatasync once, so appends overwrite allocated
    /// blocks (a cheaper fdatasync). Costs one extra write of every segment, in the background.
    ZeroFill,
}

/// Settings of a log.
#[derive(Clone, Debug)]
pub struct LogOptions {
    /// The mode at open; [`Log::set_durability`] changes it later.
    pub durability: Durability,
    /// Async: the longest time a written record waits for its fdatasync.
    pub flush_interval: Duration,
    /// Async: fdatasync as soon as this many bytes were written since the last one.
    pub flush_bytes: usize,
    /// [`Log::room`] waits while this many bytes are buffered and not yet taken by the syncer
    /// (backpressure). Appends themselves never wait: a caller that appends without asking
    /// for room may go past it.
    pub max_pending_bytes: usize,
    /// Size of a segment file; a batch that does not fit starts a new segment.
    pub segment_bytes: u64,
    /// Largest payload accepted: at most 4 GiB - 1 (the format's length field has 32 bits;
    /// [`Log::open`] refuses more).
    pub max_record_bytes: usize,
    pub recovery: RecoveryMode,
    pub prealloc: Prealloc,
    /// In sync mode, write the tail segment with O_DIRECT ([`FileSystem::open_direct`]):
    /// whole 4 KiB blocks from an aligned buffer, skipping the page cache, each batch written
    /// and made durable by one `pwritev2(RWF_DSYNC)`. Async mode writes through the page cache
    /// either way (a write there is a copy, not a device round trip). Falls back to buffered
    /// writes where the file system refuses O_DIRECT (EINVAL, e.g. tmpfs).
    ///
    /// Off by default in the library: it is slower for megabyte records on the disk where it
    /// was measured (docs/decisions/0010-o-direct-log-writes-with-rwf-dsync.md); the server
    /// turns it on.
    pub direct_io: bool,
    /// Segments dropped by [`Log::truncate_before`] are kept, up to this many, and become the
    /// next segments instead of new files. A reused file is already allocated and written,
    /// so writing it again needs neither a zero fill nor a metadata change. 0 deletes them.
    /// Kept files are spares (see [`format::spare_name`]): reopening the log removes them.
    pub reuse_segments: usize,
    /// Run the syncer thread under Linux's SCHED_BATCH policy (same share of the CPU, but its
    /// wake-ups do not preempt the thread running on that core). The syncer sleeps and wakes
    /// several times per fdatasync; on a machine whose cores are busy, each such wake-up
    /// otherwise preempts whoever runs there, e.g. a thread serving requests. A hint: where the
    /// policy cannot be set, the log runs the same. Off by default; the server turns it on
    /// (docs/decisions/0011-the-log-syncer-under-sched-batch.md has the measurement).
    pub syncer_batch_sched: bool,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            durability: Durability::Sync,
            flush_interval: Duration::from_millis(100),
            flush_bytes: 4 << 20,
            max_pending_bytes: 16 << 20,
            segment_bytes: 64 << 20,
            max_record_bytes: 16 << 20,
            recovery: RecoveryMode::TolerateTornTail,
            prealloc: Prealloc::SetLen,
            direct_io: false,
            reuse_segments: 2,
            syncer_batch_sched: false,
        }
    }
}

/// Errors of the log. Clone, so one failure can be handed to every waiter.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WalError {
    #[error("I/O error on {}: {source}", path.display())]
    Io { path: PathBuf, source: IoCause },
    #[error("no space left on device writing {}", path.display())]
    NoSpace { path: PathBuf },
    #[error("the log stopped accepting writes after an earlier failure: {cause}")]
    Poisoned { cause: Arc<WalError> },
    #[error("corrupt log: {} at offset {offset}: {why}", path.display())]
    Corrupt {
        path: PathBuf,
        offset: u64,
        why: &'static str,
    },
    #[error("record of {size} bytes is over the limit of {max}")]
    TooLarge { size: usize, max: usize },
    #[error("the log is closed")]
    Closed,
    #[error("the log's syncer thread panicked")]
    SyncerPanicked,
    /// Another process holds the folder (see [`FolderLock`]).
    #[error("{} is in use: {holder}; one cairn process per folder", dir.display())]
    Locked { dir: PathBuf, holder: String },
    #[error("invalid log options: max_record_bytes is {max_record_bytes}, over the format's limit of 4294967295 (a 32-bit length)")]
    RecordLimit { max_record_bytes: usize },
}

/// Takes this process's hold on `dir` (created if missing): [`WalError::Locked`] names the
/// process that holds it instead.
pub fn lock_folder(fs: &dyn FileSystem, dir: &Path) -> Result<FolderLock, WalError> {
    fs.create_dir_all(dir).map_err(|e| WalError::io(dir, e))?;
    fs.lock_folder(dir).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock => WalError::Locked {
            dir: dir.to_path_buf(),
            holder: e.to_string(),
        },
        _ => WalError::io(&dir.join(fs::LOCK_FILE), e),
    })
}

impl WalError {
    pub(crate) fn io(path: &Path, e: std::io::Error) -> WalError {
        if e.raw_os_error() == Some(libc::ENOSPC) {
            WalError::NoSpace {
                path: path.to_path_buf(),
            }
        } else {
            WalError::Io {
                path: path.to_path_buf(),
                source: IoCause(Arc::new(e)),
            }
        }
    }
}

/// The operating system's error behind [`WalError::Io`], shared so that the error can be
/// cloned to every waiter. Two are equal when they are of the same kind and errno.
#[derive(Clone, Debug)]
pub struct IoCause(pub Arc<std::io::Error>);

impl std::fmt::Display for IoCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for IoCause {}

impl PartialEq for IoCause {
    fn eq(&self, other: &IoCause) -> bool {
        self.0.kind() == other.0.kind() && self.0.raw_os_error() == other.0.raw_os_error()
    }
}

impl Eq for IoCause {}

/// Median and 99th percentile of one kind of call, in microseconds, and how many were made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallLatency {
    pub count: u64,
    pub p50_us: u64,
    pub p99_us: u64,
}

/// Figures for `stats`, metrics and the benchmark.
#[derive(Clone, Debug)]
pub struct LogStats {
    /// Plain writes of a batch (no sync in the call): async mode, and sync mode without
    /// O_DIRECT (where an fdatasync follows each).
    pub write: CallLatency,
    /// fdatasync calls alone (the write before each is in `write`).
    pub fdatasync: CallLatency,
    /// O_DIRECT batches written and made durable by one `pwritev2(RWF_DSYNC)`: the write and
    /// the device's cache flush in one call, timed together (there is no separate fdatasync
    /// to time).
    pub dsync_write: CallLatency,
    /// O_DIRECT durable writes whose records were copied into the staging buffer first
    /// (a batch of more than one chunk, or the first batch in a new segment); the others
    /// (`dsync_write.count` minus these) went from the pending buffer itself.
    pub staged_writes: u64,
    /// Records per batch the syncer took: median and 99th percentile.
    pub batch_records_p50: u64,
    pub batch_records_p99: u64,
    /// Bytes handed to write() in total.
    pub bytes_written: u64,
    /// Highest LSN assigned.
    pub appended_lsn: Lsn,
    /// Highest LSN handed to the kernel.
    pub written_lsn: Lsn,
    /// Highest LSN known durable.
    pub durable_lsn: Lsn,
    /// Bytes appended and not yet taken care of: buffered, or in the batch being written (in
    /// sync mode: written and made durable; after a failed write, that batch stays counted).
    pub pending_bytes: u64,
    /// Times [`Log::room`] found the pending buffer full (backpressure).
    pub backpressure_waits: u64,
    /// Segment switches that had to wait for the spare thread to finish preparing the file.
    pub spare_waits: u64,
    /// Segments that reused the file of a truncated one (see [`LogOptions::reuse_segments`]).
    pub segments_reused: u64,
    /// Whether the spare thread is asked for, or busy making, the next segment file.
    pub spare_preparing: bool,
    /// Segment files in the log.
    pub segments: usize,
    /// Bytes of all segment files (their preallocated size).
    pub log_bytes: u64,
    /// The failure that poisoned the log, if any.
    pub poisoned: Option<WalError>,
    /// The whole distributions behind the figures above (for Prometheus histograms).
    pub histograms: LogHistograms,
}

/// Distributions kept by the syncer, one value per call or batch since open.
#[derive(Clone, Debug)]
pub struct LogHistograms {
    /// Microseconds of each plain write of a batch ([`LogStats::write`]).
    pub write_us: hdrhistogram::Histogram<u64>,
    /// Microseconds of each fdatasync alone ([`LogStats::fdatasync`]).
    pub fdatasync_us: hdrhistogram::Histogram<u64>,
    /// Microseconds of each `pwritev2(RWF_DSYNC)` ([`LogStats::dsync_write`]).
    pub dsync_write_us: hdrhistogram::Histogram<u64>,
    /// Bytes of records in each batch the syncer took (group commit).
    pub batch_bytes: hdrhistogram::Histogram<u64>,
    /// Records in each batch.
    pub batch_records: hdrhistogram::Histogram<u64>,
}

/// The marks after an advance, as listeners see them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Marks {
    /// Highest LSN handed to the kernel.
    pub written: Lsn,
    /// Highest LSN fdatasync'd.
    pub durable: Lsn,
}

/// Called after every advance of the written or durable mark, or with the error that poisoned
/// the log. It runs on the thread that advanced it: the syncer, or in async mode a thread in
/// [`Log::write_ready`]. Keep it short and never block in it.
pub type Listener = Box<dyn Fn(Result<Marks, &WalError>) + Send + Sync>;

/// Everything appenders, the syncer and the spare thread share.
pub(crate) struct Shared {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    /// This process's hold on `dir`, for as long as the log is open.
    _folder_lock: FolderLock,
    opts: LogOptions,
    log_id: u64,
    /// Random per open, in spare file names: a spare of an earlier open never collides.
    nonce: u64,
    /// The mode in force ([`Durability::code`]).
    durability: AtomicU8,
    state: Mutex<State>,
    /// Bytes in `State::pending`, readable without the lock (for [`Log::room`]).
    pending_bytes: AtomicUsize,
    /// The last LSN assigned, readable without the lock.
    appended: AtomicU64,
    taken: Watermark,
    written: Watermark,
    durable: Watermark,
    /// Set once the syncer stopped (closed, poisoned or panicked): waiters stop waiting.
    syncer_stopped: AtomicBool,
    /// Signalled when the syncer may have work.
    work_cv: Condvar,
    listeners: Mutex<Vec<Listener>>,
    /// The next segment, prepared ahead by the spare thread.
    spare: Mutex<Spare>,
    /// Signalled on every change of `spare`.
    spare_cv: Condvar,
    /// Held by `truncate_before` for its whole run.
    truncating: Mutex<()>,
    /// See [`LogStats::backpressure_waits`].
    backpressure_waits: AtomicU64,
    /// The tail and whoever writes it: the syncer, or a helper in async mode (see
    /// [`Log::write_ready`]). Set at open. Taken before `state`, never after.
    writer: Mutex<Option<syncer::Writer>>,
}

/// State under the log's one lock, held briefly by appenders and the syncer.
struct State {
    /// Records not yet taken by the syncer, oldest first. The syncer takes the chunks before
    /// the first unfilled slot, so the log never gets a hole.
    pending: Vec<Chunk>,
    /// Bytes of the records in `pending`, filled or not.
    pending_bytes: usize,
    /// Bytes of the batch the syncer is writing (0 between batches).
    writing_bytes: usize,
    /// Emptied `Chunk::Framed` buffers, handed back by the syncer for reuse.
    free_buffers: Vec<appender::PendingBuf>,
    /// The file offset where the next appended record lands if no new segment starts before
    /// it: the tail's end after the batch being written plus `pending_bytes`. Its block
    /// offset lays a new chunk out for an O_DIRECT write without staging (see
    /// `appender::PendingBuf`); after each write the syncer sets it from the tail again.
    next_offset: u64,
    /// See [`LogStats::staged_writes`].
    staged_writes: u64,
    /// The LSN the next append gets.
    next_lsn: Lsn,
    /// Highest LSN a caller waits to be durable (async mode fdatasyncs early for it).
    waiting_for: Lsn,
    /// Set once a write or fdatasync failed.
    poisoned: Option<WalError>,
    /// Set by `close`: the syncer writes and syncs what is left and exits.
    closing: bool,
    /// (first LSN, path) of every segment, oldest first.
    segments: Vec<(Lsn, PathBuf)>,
    /// Latencies and batch sizes: see [`LogHistograms`].
    hist: LogHistograms,
    bytes_written: u64,
    /// See [`LogStats::spare_waits`].
    spare_waits: u64,
    /// Async mode: when the oldest written-but-unsynced record was written (the clock of the
    /// next fdatasync), and the bytes written since the last one.
    unsynced_since: Option<std::time::Instant>,
    unsynced_bytes: usize,
    /// While the syncer's fdatasync runs (without the writer lock, so that helpers go on
    /// writing): `bytes_written` when it began. Helpers write during it only until
    /// `flush_bytes` more were written, so async mode's unsynced bytes stay bounded (and a
    /// disk that cannot keep up fills the pending buffer: backpressure).
    syncing_from: Option<u64>,
    /// `pending` holds records appended without waking the syncer (see
    /// [`writes_before_sleeping`]).
    unwoken: bool,
}

impl LogHistograms {
    fn new() -> LogHistograms {
        let h = |max| hdrhistogram::Histogram::new_with_bounds(1, max, 2).expect("valid bounds");
        LogHistograms {
            write_us: h(60_000_000),
            fdatasync_us: h(60_000_000),
            dsync_write_us: h(60_000_000),
            batch_bytes: h(1 << 40),
            batch_records: h(1 << 40),
        }
    }
}

fn latency(h: &hdrhistogram::Histogram<u64>) -> CallLatency {
    CallLatency {
        count: h.len(),
        p50_us: h.value_at_quantile(0.5),
        p99_us: h.value_at_quantile(0.99),
    }
}

impl Shared {
    fn durability(&self) -> Durability {
        Durability::from_code(self.durability.load(Ordering::Relaxed))
    }

    /// The error a waiter gets once the syncer stopped.
    fn stop_error(&self) -> WalError {
        match &self.state.lock().poisoned {
            Some(e) => poisoned(e),
            None => WalError::Closed,
        }
    }

    /// Asks the syncer to make `lsn` durable as soon as it can (async mode's fence).
    fn request_durable(&self, lsn: Lsn) {
        if self.durable.get() >= lsn || self.durability() == Durability::Sync {
            return;
        }
        let mut st = self.state.lock();
        st.waiting_for = st.waiting_for.max(lsn);
        drop(st);
        self.work_cv.notify_one();
    }

    fn reach<'a>(&'a self, mark: &'a Watermark, lsn: Lsn, asks_durable: bool) -> Reach<'a> {
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

/// An open log. Appends may come from many threads at once.
pub struct Log {
    shared: Arc<Shared>,
    syncer: Mutex<Option<JoinHandle<()>>>,
    spare_maker: Mutex<Option<JoinHandle<()>>>,
}

fn random_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish() | 1
}

impl Log {
    /// Opens (or creates) the log in `dir`, recovering its end as `opts.recovery` says.
    pub fn open(fs: Arc<dyn FileSystem>, dir: &Path, opts: LogOptions) -> Result<Log, WalError> {
        if u32::try_from(opts.max_record_bytes).is_err() {
            return Err(WalError::RecordLimit {
                max_record_bytes: opts.max_record_bytes,
            });
        }
        let folder_lock = lock_folder(fs.as_ref(), dir)?;
        // The writes between two fdatasyncs: under `flush_bytes` before the last batch, which
        // holds at most `max_pending_bytes` plus one chunk (see `syncer`), with its marker.
        let write_window = (opts.flush_bytes
            + opts.max_pending_bytes
            + appender::MAX_CHUNK_BYTES
            + opts.max_record_bytes) as u64
            + 64;
        let scan = recovery::recover(fs.as_ref(), dir, opts.recovery, write_window)?;
        let (log_id, next_lsn, segments, tail_path, tail_end, tail_version) = match scan {
            Some(found) => (
                found.log_id,
                found.last_lsn + 1,
                found.segments,
                found.tail_path,
                found.tail_end,
                found.tail_version,
            ),
            None => {
                let log_id = random_id();
                let path = segment::create_segment(fs.as_ref(), dir, &opts, log_id, 1)?;
                (
                    log_id,
                    1,
                    vec![(1, path.clone())],
                    path,
                    format::HEADER_LEN as u64,
                    format::VERSION,
                )
            }
        };
        let last = next_lsn - 1;
        let shared = Arc::new(Shared {
            fs,
            dir: dir.to_path_buf(),
            _folder_lock: folder_lock,
            durability: AtomicU8::new(opts.durability.code()),
            opts,
            log_id,
            nonce: random_id(),
            state: Mutex::new(State {
                pending: Vec::new(),
                pending_bytes: 0,
                writing_bytes: 0,
                free_buffers: Vec::new(),
                next_offset: 0,
                staged_writes: 0,
                next_lsn,
                waiting_for: 0,
                poisoned: None,
                closing: false,
                segments,
                hist: LogHistograms::new(),
                bytes_written: 0,
                spare_waits: 0,
                unsynced_since: None,
                unsynced_bytes: 0,
                syncing_from: None,
                unwoken: false,
            }),
            pending_bytes: AtomicUsize::new(0),
            appended: AtomicU64::new(last),
            taken: Watermark::new(last),
            written: Watermark::new(last),
            durable: Watermark::new(last),
            syncer_stopped: AtomicBool::new(false),
            work_cv: Condvar::new(),
            listeners: Mutex::new(Vec::new()),
            spare: Mutex::new(Spare::new()),
            spare_cv: Condvar::new(),
            truncating: Mutex::new(()),
            backpressure_waits: AtomicU64::new(0),
            writer: Mutex::new(None),
        });
        let mut tail = shared.open_tail(tail_path, tail_end, tail_version)?;
        shared.state.lock().next_offset = tail.offset;
        // Recovery read the tail's records, and they count as durable from here on; after a
        // kill -9 between a write and its fdatasync they may still be only in the page cache
        // (or the disk's cache). Make them durable before anything relies on them.
        tail.file
            .sync_data()
            .map_err(|e| WalError::io(&tail.path, e))?;
        // Recovery read it into the page cache (large folios): see `Tail::drop_cache`.
        tail.drop_cache();
        shared.maybe_request_spare(&mut tail);
        *shared.writer.lock() = Some(syncer::Writer {
            tail,
            spare: Vec::new(),
        });
        let worker = Arc::clone(&shared);
        let spare_maker = std::thread::Builder::new()
            .name("cairn-wal-spare".into())
            .spawn(move || worker.spare_loop())
            .map_err(|e| WalError::io(dir, e))?;
        let log = Log {
            shared: Arc::clone(&shared),
            syncer: Mutex::new(None),
            spare_maker: Mutex::new(Some(spare_maker)),
        };
        let syncer = std::thread::Builder::new()
            .name("cairn-wal-sync".into())
            .spawn(move || shared.sync_loop())
            .map_err(|e| WalError::io(dir, e))?;
        *log.syncer.lock() = Some(syncer);
        Ok(log)
    }

    /// Buffers a record and returns its LSN. Never waits for the disk, whatever the mode or
    /// the buffer's fill: a caller that wants backpressure awaits [`Log::room`] first, and one
    /// that wants its record safe awaits [`Log::written`] or [`Log::durable`] after.
    pub fn append(&self, payload: &[u8]) -> Result<Lsn, WalError> {
        self.shared.append_parts(&[payload])
    }

    /// [`Log::append`] of a payload given in parts, framed back to back as one record (no
    /// copy of the parts is made before the one into the pending buffer).
    pub fn append_parts(&self, parts: &[&[u8]]) -> Result<Lsn, WalError> {
        self.shared.append_parts(parts)
    }

    /// Async mode: writes the records appended so far to the kernel from the calling thread
    /// (one write, no fdatasync) and wakes whoever waits for them, if no other write is under
    /// way; otherwise the syncer does it. A thread that serves many writers (an event loop)
    /// calls it before it goes to sleep: the batch of everything its writers appended meanwhile
    /// then costs one write and no thread hop to the syncer and back. Never waits for the disk
    /// to flush (no fdatasync, no new segment: those stay with the syncer); a no-op in sync
    /// mode. See [`writes_before_sleeping`].
    pub fn write_ready(&self) {
        self.shared.write_ready();
    }

    /// Waits for room (blocking), appends, then waits until the record is safe in the mode in
    /// force: durable (sync) or written (async). For callers on threads of their own.
    pub fn commit(&self, payload: &[u8]) -> Result<Lsn, WalError> {
        self.wait_room()?;
        let lsn = self.append(payload)?;
        match self.durability() {
            Durability::Sync => block_on(self.durable(lsn))?,
            Durability::Async => block_on(self.written(lsn))?,
        }
        Ok(lsn)
    }

    /// `None` when the pending buffer has room (below `max_pending_bytes`); otherwise a future
    /// that resolves when the syncer has taken what is buffered now. Call it again after: a
    /// loop `while let Some(r) = log.room() { r.await? }` waits until there is room.
    pub fn room(&self) -> Option<Reach<'_>> {
        let sh = &self.shared;
        if sh.pending_bytes.load(Ordering::Acquire) < sh.opts.max_pending_bytes {
            return None;
        }
        sh.backpressure_waits.fetch_add(1, Ordering::Relaxed);
        // Wake the syncer in case it waits for the flush interval.
        sh.work_cv.notify_one();
        let appended = sh.appended.load(Ordering::Acquire);
        Some(sh.reach(&sh.taken, appended, false))
    }

    /// Blocks while the pending buffer is full (see [`Log::room`]).
    pub fn wait_room(&self) -> Result<(), WalError> {
        while let Some(room) = self.room() {
            block_on(room)?;
        }
        Ok(())
    }

    /// Resolves once every record up to `lsn` is handed to the kernel (or with the error that
    /// stopped the log).
    pub fn written(&self, lsn: Lsn) -> Reach<'_> {
        self.shared.reach(&self.shared.written, lsn, false)
    }

    /// Resolves once every record up to `lsn` is durable (or with the error that stopped the
    /// log). In async mode it asks the syncer for an fdatasync at once.
    pub fn durable(&self, lsn: Lsn) -> Reach<'_> {
        self.shared.reach(&self.shared.durable, lsn, true)
    }

    /// Blocks until every record up to `lsn` is durable (a fence in async mode).
    pub fn wait_durable(&self, lsn: Lsn) -> Result<(), WalError> {
        block_on(self.durable(lsn))
    }

    /// Blocks until every record up to `lsn` is handed to the kernel.
    pub fn wait_written(&self, lsn: Lsn) -> Result<(), WalError> {
        block_on(self.written(lsn))
    }

    /// Asks the syncer to make `lsn` durable as soon as it can, without waiting (a fence for
    /// a caller that learns of durability through [`Log::on_advance`]).
    pub fn request_durable(&self, lsn: Lsn) {
        self.shared.request_durable(lsn);
    }

    /// Makes everything appended so far durable.
    pub fn sync(&self) -> Result<(), WalError> {
        self.wait_durable(self.appended_lsn())
    }

    /// The highest LSN known durable.
    pub fn durable_lsn(&self) -> Lsn {
        self.shared.durable.get()
    }

    /// The highest LSN handed to the kernel.
    pub fn written_lsn(&self) -> Lsn {
        self.shared.written.get()
    }

    /// The highest LSN assigned so far.
    pub fn appended_lsn(&self) -> Lsn {
        self.shared.appended.load(Ordering::Acquire)
    }

    /// The failure that poisoned the log, if any.
    pub fn poisoned(&self) -> Option<WalError> {
        self.shared.state.lock().poisoned.clone()
    }

    /// Registers a callback run by the syncer after every advance (and on poisoning).
    pub fn on_advance(&self, listener: Listener) {
        self.shared.listeners.lock().push(listener);
    }

    /// The durability mode in force.
    pub fn durability(&self) -> Durability {
        self.shared.durability()
    }

    /// Switches the mode. From async to sync, the syncer first fdatasyncs what async mode
    /// wrote, so that a durable mark never passes an unsynced record.
    pub fn set_durability(&self, d: Durability) {
        self.shared.durability.store(d.code(), Ordering::Relaxed);
        self.shared.work_cv.notify_one();
    }

    /// The log's random id (in every segment header and record CRC).
    pub fn log_id(&self) -> u64 {
        self.shared.log_id
    }

    /// (first LSN, path) of every segment, oldest first.
    pub fn segments(&self) -> Vec<(Lsn, PathBuf)> {
        self.shared.state.lock().segments.clone()
    }

    /// Calls `f` for every durable record with LSN >= `from`, in order.
    pub fn read_from<E: From<WalError>>(
        &self,
        from: Lsn,
        f: impl FnMut(Lsn, &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let upto = self.durable_lsn();
        let segments = self.segments();
        read_records(
            self.shared.fs.as_ref(),
            &segments,
            self.shared.log_id,
            from,
            upto,
            f,
        )
    }

    /// Deletes whole segments whose records all have LSN < `lsn` (never the newest segment),
    /// or keeps up to [`LogOptions::reuse_segments`] of them for reuse. Returns how many left
    /// the log. A [`Log::read_from`] running at the same time must not read below `lsn`: a
    /// kept file is overwritten once reused.
    pub fn truncate_before(&self, lsn: Lsn) -> Result<usize, WalError> {
        self.shared.truncate_before(lsn)
    }

    pub fn stats(&self) -> LogStats {
        let sh = &self.shared;
        let (segments_reused, spare_preparing) = {
            let sp = sh.spare.lock();
            let busy = matches!(
                sp.state,
                segment::SpareState::Wanted | segment::SpareState::Preparing
            );
            (sp.reused, busy)
        };
        let st = sh.state.lock();
        LogStats {
            write: latency(&st.hist.write_us),
            fdatasync: latency(&st.hist.fdatasync_us),
            dsync_write: latency(&st.hist.dsync_write_us),
            staged_writes: st.staged_writes,
            batch_records_p50: st.hist.batch_records.value_at_quantile(0.5),
            batch_records_p99: st.hist.batch_records.value_at_quantile(0.99),
            bytes_written: st.bytes_written,
            appended_lsn: st.next_lsn - 1,
            written_lsn: sh.written.get(),
            durable_lsn: sh.durable.get(),
            pending_bytes: (st.pending_bytes + st.writing_bytes) as u64,
            backpressure_waits: sh.backpressure_waits.load(Ordering::Relaxed),
            spare_waits: st.spare_waits,
            segments_reused,
            spare_preparing,
            segments: st.segments.len(),
            log_bytes: st.segments.len() as u64 * sh.opts.segment_bytes,
            poisoned: st.poisoned.clone(),
            histograms: st.hist.clone(),
        }
    }

    /// Writes and fdatasyncs what is buffered and stops the syncer. Appends after this fail
    /// with `Closed`.
    pub fn close(&self) -> Result<(), WalError> {
        let sh = &self.shared;
        sh.state.lock().closing = true;
        sh.work_cv.notify_all();
        if let Some(h) = self.syncer.lock().take() {
            let _ = h.join();
        }
        // Only now: the syncer's last batches may need a new segment.
        sh.spare.lock().stop = true;
        sh.spare_cv.notify_all();
        if let Some(h) = self.spare_maker.lock().take() {
            let _ = h.join();
        }
        match self.poisoned() {
            Some(e) => Err(poisoned(&e)),
            None => Ok(()),
        }
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

fn poisoned(e: &WalError) -> WalError {
    match e {
        WalError::Poisoned { .. } => e.clone(),
        other => WalError::Poisoned {
            cause: Arc::new(other.clone()),
        },
    }
}
