//! cairn-wal: a checksummed, segmented, append-only log with group commit.
//!
//! ```text
//!   append(payload) ──lock──> pending chunks (LSNs assigned in order):
//!        │   small record: framed under the lock into the last chunk
//!        │   large record: reserve a slot, unlock, frame it (CRC + copy), lock, fill the slot
//!        │ (waits first while pending >= max_pending_bytes: backpressure)
//!        │ Sync: wait until durable_lsn >= my LSN          │ Async: return at once
//!        v                                                 v
//!   syncer thread: take the pending chunks up to the first unfilled slot ─> write them at
//!        the segment's end (pwritev; O_DIRECT: copied into an aligned buffer) ─> fdatasync
//!        ─> durable_lsn = last LSN of the batch ─> wake waiters, call listeners
//!   (writers that arrive while one fdatasync runs share the next one: group commit, no sleep)
//!
//!   spare thread, once the tail is half full: hand out a kept file (below), or create
//!        "next-….spare", preallocate (zero fill), fdatasync ─> ready
//!   syncer, when a batch does not fit the tail: rename the ready spare to "<first LSN>.wal",
//!        write header + batch, fdatasync, fsync the directory, then acknowledge
//!   truncate_before: rename dropped segments to spare names (up to reuse_segments kept,
//!        header zeroed) or delete them
//! ```
//!
//! Every write ends with an end marker (16 zero bytes) after its records, so a scan stops
//! before whatever a reused file held. Threads blocked in [`Log::wait_durable`] are woken by
//! LSN, in a fan-out (see the `waiters` module).
//!
//! Segments are files named by their first LSN, preallocated, each with a header carrying the
//! log's random id; every record carries a CRC32C over that id, its header and its payload (the
//! format is in [`format`] and docs/FORMATS.md). The next segment is prepared by a background
//! thread, so a writer never waits for a segment's preallocation unless the disk cannot keep
//! up. With [`LogOptions::direct_io`] the tail is written with O_DIRECT in whole 4 KiB blocks
//! (see [`DirectBuf`]). Recovery on [`Log::open`] finds the end of the log and applies the
//! caller's [`RecoveryMode`]; it never silently cuts the middle of a log.
//! A failed write or fdatasync poisons the log: nothing after it is acknowledged, every waiter
//! gets the error, and it is never retried.
//!
//! Non-goals: no compression, no record types (payloads are opaque), no replication.

pub mod fault;
pub mod format;
pub mod fs;
mod recovery;
mod waiters;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

pub use fs::{FileSystem, LogFile, RealFs, DIRECT_ALIGN};
pub use recovery::{read_records, scan_dir, DirScan, SegmentReport};

/// A record's sequence number: 1 for the first record of a log, then +1 per record.
pub type Lsn = u64;

/// When an append is acknowledged, and so what a power loss can take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// `append` returns only after an fdatasync that covers the record returned: a power loss
    /// loses no acknowledged record.
    Sync,
    /// `append` returns once the record is buffered; the buffer is written and fdatasync'd at
    /// least every `flush_interval` and whenever it holds `flush_bytes`. A power loss loses at
    /// most the records acknowledged during the last `flush_interval` (plus the time of one
    /// write + fdatasync). `wait_durable` closes the window for a chosen LSN.
    ///
    /// Backpressure bounds that window in bytes too: while the buffer holds
    /// `max_pending_bytes`, `append` waits until the syncer takes it, so at most
    /// `max_pending_bytes` (plus one record) is buffered while one batch of the same bound is
    /// being written: a power loss loses at most about 2 x `max_pending_bytes` of
    /// acknowledged records, and memory stays bounded when appends outrun the disk.
    Async,
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
    pub durability: Durability,
    /// Async: the longest time a record stays buffered.
    pub flush_interval: Duration,
    /// Async: flush as soon as this many bytes are buffered.
    pub flush_bytes: usize,
    /// Both modes: an append waits while this many bytes are buffered and not yet taken by
    /// the syncer (backpressure; see [`Durability::Async`]). A record larger than this is
    /// still accepted once the buffer is empty.
    pub max_pending_bytes: usize,
    /// Size of a segment file; a batch that does not fit starts a new segment.
    pub segment_bytes: u64,
    /// Largest payload accepted: at most 4 GiB - 1 (the format's length field has 32 bits;
    /// [`Log::open`] refuses more).
    pub max_record_bytes: usize,
    pub recovery: RecoveryMode,
    pub prealloc: Prealloc,
    /// Write the tail segment with O_DIRECT ([`FileSystem::open_direct`]): whole 4 KiB
    /// blocks from an aligned buffer, skipping the page cache. Falls back to buffered writes
    /// where the file system refuses O_DIRECT (EINVAL, e.g. tmpfs).
    ///
    /// Off by default: on the 2-core shared VM (ext4 on virtio) where it was measured
    /// (`cairn-wal-bench --quick`, ZeroFill, noisy), neither mode won overall. O_DIRECT vs
    /// buffered, entries/s: Sync 1 thread 100 B 8375 vs 7272, 1 KiB 4791-5565 vs
    /// 2257-5954; 64 committers x 100 B 120843 vs 126861; Async 1 KiB 205-342K vs
    /// 522-665K; Async 1 MiB 586-906 vs 294-553. The server logs in async mode, where
    /// buffered wins for small records.
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
    /// (docs/BENCHMARKS.md has the measurement).
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
    #[error("I/O error on {path}: {message}")]
    Io { path: String, message: String },
    #[error("no space left on device writing {path}")]
    NoSpace { path: String },
    #[error("the log stopped accepting writes after an earlier failure: {cause}")]
    Poisoned { cause: String },
    #[error("corrupt log: {path} at offset {offset}: {why}")]
    Corrupt {
        path: String,
        offset: u64,
        why: &'static str,
    },
    #[error("record of {size} bytes is over the limit of {max}")]
    TooLarge { size: usize, max: usize },
    #[error("the log is closed")]
    Closed,
    #[error("invalid log options: {0}")]
    BadOptions(String),
}

impl WalError {
    pub(crate) fn io(path: &Path, e: std::io::Error) -> WalError {
        if e.raw_os_error() == Some(libc::ENOSPC) {
            WalError::NoSpace {
                path: path.display().to_string(),
            }
        } else {
            WalError::Io {
                path: path.display().to_string(),
                message: e.to_string(),
            }
        }
    }
}

/// Figures for `stats` and the benchmark.
#[derive(Clone, Debug)]
pub struct LogStats {
    /// fdatasync calls made.
    pub fsync_count: u64,
    /// Median and 99th percentile fdatasync latency in microseconds.
    pub fsync_latency_us_p50: u64,
    pub fsync_latency_us_p99: u64,
    /// Bytes handed to write() in total.
    pub bytes_written: u64,
    /// Highest LSN assigned.
    pub appended_lsn: Lsn,
    /// Highest LSN known durable.
    pub durable_lsn: Lsn,
    /// Bytes appended and not yet durable: buffered, or in the batch being written (after a
    /// failed write, that batch stays counted: it never became durable).
    pub pending_bytes: u64,
    /// Appends that had to wait because `max_pending_bytes` were buffered (backpressure).
    pub backpressure_waits: u64,
    /// Segment switches that had to wait for the spare thread to finish preparing the file.
    pub spare_waits: u64,
    /// Segments that reused the file of a truncated one (see [`LogOptions::reuse_segments`]).
    pub segments_reused: u64,
    /// Segment files in the log.
    pub segments: usize,
    /// Bytes of all segment files (their preallocated size).
    pub log_bytes: u64,
    /// The failure that poisoned the log, if any.
    pub poisoned: Option<String>,
    /// Every batch's write + fdatasync latency in microseconds (the server's Prometheus
    /// histogram is read from it).
    pub fsync_latency_us: hdrhistogram::Histogram<u64>,
    /// Bytes of every batch written (group-commit batch size).
    pub batch_bytes: hdrhistogram::Histogram<u64>,
}

/// Called by the syncer after every batch with the new durable LSN, or with the error that
/// poisoned the log.
pub type DurableListener = Box<dyn Fn(Result<Lsn, &WalError>) + Send + Sync>;

/// Records of at least this many bytes are framed (checksummed and copied) by their appender
/// outside the state lock, in a slot reserved in LSN order, so that other appenders and the
/// syncer do not wait for the lock meanwhile (records after the slot still wait for it to be
/// filled before they are written); smaller records are framed under the lock, which costs
/// less than a second lock round.
const FRAME_OUTSIDE_LOCK_BYTES: usize = 64 << 10;

/// A run of appended records, in LSN order, waiting for the syncer.
enum Chunk {
    /// Records framed under the state lock, back to back: LSNs `first..=last`.
    Framed {
        bytes: Vec<u8>,
        first: Lsn,
        last: Lsn,
    },
    /// One large record, framed by its appender outside the lock: `None` until it is.
    Slot { lsn: Lsn, record: Option<Vec<u8>> },
}

impl Chunk {
    fn first(&self) -> Lsn {
        match self {
            Chunk::Framed { first, .. } => *first,
            Chunk::Slot { lsn, .. } => *lsn,
        }
    }

    fn last(&self) -> Lsn {
        match self {
            Chunk::Framed { last, .. } => *last,
            Chunk::Slot { lsn, .. } => *lsn,
        }
    }

    /// The framed bytes; empty for an unfilled slot (which the syncer never takes).
    fn bytes(&self) -> &[u8] {
        match self {
            Chunk::Framed { bytes, .. } => bytes,
            Chunk::Slot { record, .. } => record.as_deref().unwrap_or_default(),
        }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            Chunk::Framed { bytes, .. } => bytes,
            Chunk::Slot { record, .. } => record.as_deref_mut().unwrap_or_default(),
        }
    }

    fn is_filled(&self) -> bool {
        !matches!(self, Chunk::Slot { record: None, .. })
    }
}

struct State {
    /// Records not yet handed to the syncer, oldest first. The syncer takes the chunks before
    /// the first unfilled slot, so the log never gets a hole.
    pending: Vec<Chunk>,
    /// Bytes of the records in `pending`, filled or not.
    pending_bytes: usize,
    /// Bytes of the batch the syncer is writing (0 between batches).
    writing_bytes: usize,
    /// Emptied `Chunk::Framed` buffers, handed back by the syncer for reuse.
    free_buffers: Vec<Vec<u8>>,
    /// The LSN the next append gets.
    next_lsn: Lsn,
    /// Highest LSN a caller is blocked on (async mode flushes early for it).
    waiting_for: Lsn,
    /// Set once a write or fdatasync failed.
    poisoned: Option<WalError>,
    /// Set by `close`: the syncer flushes what is left and exits.
    closing: bool,
    /// (first LSN, path) of every segment, oldest first.
    segments: Vec<(Lsn, PathBuf)>,
    /// Latency of each fdatasync in microseconds.
    fsync_us: hdrhistogram::Histogram<u64>,
    /// Bytes of each batch written.
    batch_bytes: hdrhistogram::Histogram<u64>,
    bytes_written: u64,
    /// See [`LogStats::backpressure_waits`].
    backpressure_waits: u64,
    /// See [`LogStats::spare_waits`].
    spare_waits: u64,
}

/// Where the spare thread is with the next segment file.
enum SpareState {
    /// Not wanted yet: the tail segment is less than half full.
    Idle,
    /// The tail is half full (or the syncer needs a spare now): make one.
    Wanted,
    /// The spare thread is creating and preallocating it.
    Preparing,
    /// A preallocated, synced file, not yet part of the log.
    Ready(PathBuf),
    /// Preparing failed; the syncer poisons the log with this error when it needs the spare.
    Failed(WalError),
}

/// The spare thread's mailbox, guarded by `Shared::spare`.
struct Spare {
    state: SpareState,
    /// Set by `close` once the syncer has stopped: the spare thread exits.
    stop: bool,
    /// Spares made since open; numbers their file names.
    made: u64,
    /// Files of truncated segments waiting to be reused: spares with a zeroed header.
    reusable: Vec<PathBuf>,
    /// See [`LogStats::segments_reused`].
    reused: u64,
}

struct Shared {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    opts: LogOptions,
    log_id: u64,
    /// Random per open, in spare file names: a spare of an earlier open never collides.
    nonce: u64,
    state: Mutex<State>,
    /// Threads in `wait_durable`, woken when `durable_lsn` covers them or the syncer stops.
    waiters: waiters::Waiters,
    /// Set once the syncer stopped (closed, poisoned or panicked): waiters stop waiting.
    syncer_stopped: AtomicBool,
    /// Signalled when the syncer may have work.
    work_cv: Condvar,
    /// Signalled when the syncer takes the pending buffer, or the log stops: appends held back
    /// by `max_pending_bytes` look again.
    taken_cv: Condvar,
    durable_lsn: AtomicU64,
    listeners: Mutex<Vec<DurableListener>>,
    /// The next segment, prepared ahead by the spare thread.
    spare: Mutex<Spare>,
    /// Signalled on every change of `spare`.
    spare_cv: Condvar,
    /// Held by `truncate_before` for its whole run.
    truncating: Mutex<()>,
}

/// An open log. Appends may come from many threads at once.
pub struct Log {
    shared: Arc<Shared>,
    syncer: Mutex<Option<JoinHandle<()>>>,
    spare_maker: Mutex<Option<JoinHandle<()>>>,
}

/// The segment the syncer appends to.
struct Tail {
    file: Box<dyn LogFile>,
    path: PathBuf,
    /// Where the next batch is written.
    offset: u64,
    /// The segment was just renamed into place: fsync the directory after its first batch,
    /// before that batch is acknowledged.
    dir_sync_due: bool,
    /// Set with `direct_io`: the staging buffer of O_DIRECT writes.
    direct: Option<DirectBuf>,
    /// The spare thread was asked for the segment after this one.
    spare_requested: bool,
    /// Format version of the segment: from 2 on, the first record of each write is flagged.
    version: u32,
}

/// The aligned staging buffer of O_DIRECT writes: O_DIRECT needs 4 KiB-aligned memory, file
/// offsets and lengths, while records end anywhere.
///
/// ```text
///   file:   ... | block k                         | block k+1 ...
///               [kept      ][batch ........................][zeros to a block end]
///               ^ tail offset rounded down to 4 KiB
///                           ^ tail offset
/// ```
///
/// Each batch is written from the start of the block holding the tail offset: the bytes of
/// that block already on disk (kept here, never read back), then the batch, then zeros up to a
/// block boundary. Zeros after the last record are the format's end of log, so the padding
/// reads as "no more records" and the next batch overwrites it. Rewriting the kept bytes
/// (identical data) is what the page cache does for a buffered append, too.
struct DirectBuf {
    /// Owns the memory; `raw[start..]` is the aligned part.
    raw: Vec<u8>,
    start: usize,
    /// Bytes at the aligned start: the partly written last block (tail offset % 4096).
    kept: usize,
}

impl DirectBuf {
    fn new(kept: &[u8]) -> DirectBuf {
        assert!(kept.len() < DIRECT_ALIGN, "only a partial block is kept");
        let mut b = DirectBuf {
            raw: Vec::new(),
            start: 0,
            kept: 0,
        };
        b.reserve(1 << 20);
        b.raw[b.start..b.start + kept.len()].copy_from_slice(kept);
        b.kept = kept.len();
        b
    }

    /// Makes room for `len` aligned bytes, keeping the kept block.
    fn reserve(&mut self, len: usize) {
        if self.raw.len() - self.start >= len {
            return;
        }
        let len = len.max(2 * (self.raw.len() - self.start));
        let mut raw = vec![0u8; len + DIRECT_ALIGN];
        let addr = raw.as_ptr() as usize;
        let start = (DIRECT_ALIGN - addr % DIRECT_ALIGN) % DIRECT_ALIGN;
        raw[start..start + self.kept]
            .copy_from_slice(&self.raw[self.start..self.start + self.kept]);
        self.raw = raw;
        self.start = start;
    }

    /// Lays out kept bytes + `parts` (back to back) + zero padding; returns the aligned bytes
    /// to write at the tail offset rounded down to a block.
    fn stage(&mut self, parts: &[&[u8]]) -> &[u8] {
        let used = self.kept + parts.iter().map(|p| p.len()).sum::<usize>();
        let padded = used.next_multiple_of(DIRECT_ALIGN);
        self.reserve(padded);
        let buf = &mut self.raw[self.start..self.start + padded];
        let mut at = self.kept;
        for p in parts {
            buf[at..at + p.len()].copy_from_slice(p);
            at += p.len();
        }
        buf[used..].fill(0);
        debug_assert_eq!(buf.as_ptr() as usize % DIRECT_ALIGN, 0);
        buf
    }

    /// After the staged bytes of a `batch_len`-byte batch were written: keeps the new partly
    /// written last block.
    fn advance(&mut self, batch_len: usize) {
        let used = self.kept + batch_len;
        let block = used / DIRECT_ALIGN * DIRECT_ALIGN;
        self.raw
            .copy_within(self.start + block..self.start + used, self.start);
        self.kept = used - block;
    }
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
            return Err(WalError::BadOptions(format!(
                "max_record_bytes is {}, over the format's limit of {} (a 32-bit length)",
                opts.max_record_bytes,
                u32::MAX
            )));
        }
        fs.create_dir_all(dir).map_err(|e| WalError::io(dir, e))?;
        // One write holds at most a full pending buffer plus one record, framing and marker.
        let write_window = (opts.max_pending_bytes + opts.max_record_bytes) as u64 + 64;
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
                let path = create_segment(fs.as_ref(), dir, &opts, log_id, 1)?;
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
        let shared = Arc::new(Shared {
            fs,
            dir: dir.to_path_buf(),
            opts,
            log_id,
            nonce: random_id(),
            state: Mutex::new(State {
                pending: Vec::new(),
                pending_bytes: 0,
                writing_bytes: 0,
                free_buffers: Vec::new(),
                next_lsn,
                waiting_for: 0,
                poisoned: None,
                closing: false,
                segments,
                batch_bytes: hdrhistogram::Histogram::new_with_bounds(1, 1 << 40, 2)
                    .expect("histogram bounds"),
                fsync_us: hdrhistogram::Histogram::new_with_bounds(1, 60_000_000, 2)
                    .expect("valid bounds"),
                bytes_written: 0,
                backpressure_waits: 0,
                spare_waits: 0,
            }),
            waiters: waiters::Waiters::default(),
            syncer_stopped: AtomicBool::new(false),
            work_cv: Condvar::new(),
            taken_cv: Condvar::new(),
            durable_lsn: AtomicU64::new(next_lsn - 1),
            listeners: Mutex::new(Vec::new()),
            spare: Mutex::new(Spare {
                state: SpareState::Idle,
                stop: false,
                made: 0,
                reusable: Vec::new(),
                reused: 0,
            }),
            spare_cv: Condvar::new(),
            truncating: Mutex::new(()),
        });
        let mut tail = shared.open_tail(tail_path, tail_end, tail_version)?;
        // Recovery read the tail's records, and they count as durable from here on; after a
        // kill -9 between a write and its fdatasync they may still be only in the page cache
        // (or the disk's cache). Make them durable before anything relies on them.
        tail.file
            .sync_data()
            .map_err(|e| WalError::io(&tail.path, e))?;
        shared.maybe_request_spare(&mut tail);
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
            .spawn(move || shared.sync_loop(tail))
            .map_err(|e| WalError::io(dir, e))?;
        *log.syncer.lock() = Some(syncer);
        Ok(log)
    }

    /// Appends a record and returns its LSN, acknowledging as the durability mode says.
    pub fn append(&self, payload: &[u8]) -> Result<Lsn, WalError> {
        let lsn = self.append_nowait(payload)?;
        if self.shared.opts.durability == Durability::Sync {
            self.wait_durable(lsn)?;
        }
        Ok(lsn)
    }

    /// Buffers a record and returns its LSN without waiting for it to be durable, whatever
    /// the mode (the caller waits with [`Log::wait_durable`] or a listener). Waits first while
    /// `max_pending_bytes` are buffered (backpressure).
    pub fn append_nowait(&self, payload: &[u8]) -> Result<Lsn, WalError> {
        let sh = &self.shared;
        let max = sh.opts.max_record_bytes;
        if payload.len() > max {
            return Err(WalError::TooLarge {
                size: payload.len(),
                max,
            });
        }
        let mut st = sh.state.lock();
        let mut counted = false;
        loop {
            if let Some(e) = &st.poisoned {
                return Err(poisoned(e));
            }
            if st.closing {
                return Err(WalError::Closed);
            }
            if st.pending_bytes < sh.opts.max_pending_bytes {
                break;
            }
            if !counted {
                st.backpressure_waits += 1;
                counted = true;
            }
            sh.work_cv.notify_one();
            sh.taken_cv.wait(&mut st);
        }
        let lsn = st.next_lsn;
        st.next_lsn += 1;
        if payload.len() >= FRAME_OUTSIDE_LOCK_BYTES {
            st.pending.push(Chunk::Slot { lsn, record: None });
            st.pending_bytes += format::RECORD_HEADER_LEN + payload.len();
            drop(st);
            let mut record = Vec::with_capacity(format::RECORD_HEADER_LEN + payload.len());
            format::encode_record(&mut record, sh.log_id, lsn, payload);
            let mut st = sh.state.lock();
            // The slot is still pending: the syncer takes no chunk at or after an unfilled one.
            let at = st.pending.partition_point(|c| c.last() < lsn);
            match st.pending.get_mut(at) {
                Some(Chunk::Slot { record: slot, .. }) => *slot = Some(record),
                _ => unreachable!("the slot of LSN {lsn} left before it was filled"),
            }
            drop(st);
            sh.work_cv.notify_one();
            return Ok(lsn);
        }
        let was_empty = st.pending.is_empty();
        let State {
            pending,
            pending_bytes,
            free_buffers,
            ..
        } = &mut *st;
        let bytes = match pending.last_mut() {
            Some(Chunk::Framed { bytes, last, .. }) => {
                *last = lsn;
                bytes
            }
            _ => {
                pending.push(Chunk::Framed {
                    bytes: free_buffers.pop().unwrap_or_default(),
                    first: lsn,
                    last: lsn,
                });
                match pending.last_mut() {
                    Some(Chunk::Framed { bytes, .. }) => bytes,
                    _ => unreachable!("just pushed"),
                }
            }
        };
        let before = bytes.len();
        format::encode_record(bytes, sh.log_id, lsn, payload);
        *pending_bytes += bytes.len() - before;
        // A sync writer wakes the syncer itself when it starts to wait (`wait_durable`).
        let wake = was_empty || *pending_bytes >= sh.opts.flush_bytes;
        drop(st);
        if wake {
            sh.work_cv.notify_one();
        }
        Ok(lsn)
    }

    /// Blocks until every record up to `lsn` is durable (a fence in async mode).
    pub fn wait_durable(&self, lsn: Lsn) -> Result<(), WalError> {
        let sh = &self.shared;
        if sh.durable_lsn.load(Ordering::Acquire) >= lsn {
            return Ok(());
        }
        {
            let mut st = sh.state.lock();
            st.waiting_for = st.waiting_for.max(lsn);
        }
        sh.work_cv.notify_one();
        let key = sh.waiters.register(lsn);
        loop {
            let durable = sh.durable_lsn.load(Ordering::Acquire);
            if durable >= lsn {
                // Pass the wake-up on (see the waiters module).
                sh.waiters.leave(key, durable);
                return Ok(());
            }
            if sh.syncer_stopped.load(Ordering::Acquire) {
                let st = sh.state.lock();
                if sh.durable_lsn.load(Ordering::Acquire) >= lsn {
                    return Ok(());
                }
                return Err(match &st.poisoned {
                    Some(e) => poisoned(e),
                    None => WalError::Closed,
                });
            }
            std::thread::park();
        }
    }

    /// Asks the syncer to make `lsn` durable as soon as it can, without blocking (a fence for
    /// a caller that learns of durability through [`Log::on_durable`]).
    pub fn request_durable(&self, lsn: Lsn) {
        if self.durable_lsn() >= lsn {
            return;
        }
        let mut st = self.shared.state.lock();
        st.waiting_for = st.waiting_for.max(lsn);
        drop(st);
        self.shared.work_cv.notify_one();
    }

    /// Makes everything appended so far durable.
    pub fn sync(&self) -> Result<(), WalError> {
        let last = self.shared.state.lock().next_lsn - 1;
        self.wait_durable(last)
    }

    /// The highest LSN known durable.
    pub fn durable_lsn(&self) -> Lsn {
        self.shared.durable_lsn.load(Ordering::Acquire)
    }

    /// The highest LSN assigned so far.
    pub fn appended_lsn(&self) -> Lsn {
        self.shared.state.lock().next_lsn - 1
    }

    /// The failure that poisoned the log, if any.
    pub fn poisoned(&self) -> Option<WalError> {
        self.shared.state.lock().poisoned.clone()
    }

    /// Registers a callback run by the syncer after every durable batch (and on poisoning).
    pub fn on_durable(&self, listener: DurableListener) {
        self.shared.listeners.lock().push(listener);
    }

    /// The durability mode.
    pub fn durability(&self) -> Durability {
        self.shared.opts.durability
    }

    /// Calls `f` for every durable record with LSN >= `from`, in order.
    pub fn read_from<E: From<WalError>>(
        &self,
        from: Lsn,
        f: impl FnMut(Lsn, &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let upto = self.durable_lsn();
        let segments = self.shared.state.lock().segments.clone();
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
        let sh = &self.shared;
        // One truncation at a time, so the reuse limit holds across concurrent calls.
        let _one = sh.truncating.lock();
        let doomed: Vec<PathBuf> = {
            let mut st = sh.state.lock();
            let mut n = 0;
            while n + 1 < st.segments.len() && st.segments[n + 1].0 <= lsn {
                n += 1;
            }
            st.segments.drain(..n).map(|(_, p)| p).collect()
        };
        // Renamed to a spare name, a segment leaves the log as surely as when it is removed:
        // recovery removes spares.
        let mut keep = Vec::new();
        for p in &doomed {
            let mut sp = sh.spare.lock();
            if sp.reusable.len() + keep.len() < sh.opts.reuse_segments {
                sp.made += 1;
                let spare = sh.dir.join(format::spare_name(sh.nonce, sp.made));
                drop(sp);
                sh.fs.rename(p, &spare).map_err(|e| WalError::io(p, e))?;
                keep.push(spare);
            } else {
                drop(sp);
                sh.fs.remove(p).map_err(|e| WalError::io(p, e))?;
            }
        }
        if !doomed.is_empty() {
            sh.fs
                .sync_dir(&sh.dir)
                .map_err(|e| WalError::io(&sh.dir, e))?;
        }
        for spare in keep {
            // A reused file keeps its old records; zeroing the header makes it look like a
            // new spare, so a crash after it is renamed to a segment name and before its
            // first batch leaves a headerless newest segment, which recovery drops.
            let zeroed = sh.fs.open(&spare).and_then(|file| {
                file.write_at(0, &[0u8; format::HEADER_LEN])?;
                file.sync_data()
            });
            match zeroed {
                Ok(()) => sh.spare.lock().reusable.push(spare),
                Err(e) => {
                    // Not reusable: let it go like a deleted segment (a leftover spare is
                    // removed by the next open anyway).
                    let _ = sh.fs.remove(&spare);
                    return Err(WalError::io(&spare, e));
                }
            }
        }
        Ok(doomed.len())
    }

    pub fn stats(&self) -> LogStats {
        let segments_reused = self.shared.spare.lock().reused;
        let st = self.shared.state.lock();
        LogStats {
            fsync_count: st.fsync_us.len(),
            fsync_latency_us_p50: st.fsync_us.value_at_quantile(0.5),
            fsync_latency_us_p99: st.fsync_us.value_at_quantile(0.99),
            bytes_written: st.bytes_written,
            appended_lsn: st.next_lsn - 1,
            durable_lsn: self.durable_lsn(),
            pending_bytes: (st.pending_bytes + st.writing_bytes) as u64,
            backpressure_waits: st.backpressure_waits,
            spare_waits: st.spare_waits,
            segments_reused,
            segments: st.segments.len(),
            log_bytes: st.segments.len() as u64 * self.shared.opts.segment_bytes,
            poisoned: st.poisoned.as_ref().map(|e| e.to_string()),
            fsync_latency_us: st.fsync_us.clone(),
            batch_bytes: st.batch_bytes.clone(),
        }
    }

    /// Flushes what is buffered and stops the syncer. Appends after this fail with `Closed`.
    pub fn close(&self) -> Result<(), WalError> {
        let sh = &self.shared;
        sh.state.lock().closing = true;
        sh.work_cv.notify_all();
        sh.taken_cv.notify_all();
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

/// Puts the calling thread under SCHED_BATCH (see [`LogOptions::syncer_batch_sched`]); a
/// failure changes nothing but the scheduling, so it is ignored.
fn batch_sched_for_this_thread() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param that outlives the call; pid 0 is this thread.
    unsafe {
        libc::sched_setscheduler(0, libc::SCHED_BATCH, &param);
    }
}

fn poisoned(e: &WalError) -> WalError {
    match e {
        WalError::Poisoned { .. } => e.clone(),
        other => WalError::Poisoned {
            cause: other.to_string(),
        },
    }
}

/// Creates a file at `path` and preallocates it to the segment size as `opts.prealloc` says,
/// then fdatasyncs it. No header: a spare gets its header when it becomes a segment.
fn prepare_file(
    fs: &dyn FileSystem,
    path: &Path,
    opts: &LogOptions,
) -> Result<Box<dyn LogFile>, WalError> {
    let io = |e| WalError::io(path, e);
    let file = fs.create(path).map_err(io)?;
    match opts.prealloc {
        Prealloc::SetLen => file.set_len(opts.segment_bytes).map_err(io)?,
        Prealloc::ZeroFill => {
            let zeros = vec![0u8; 1 << 20];
            let mut at = 0;
            while at < opts.segment_bytes {
                let n = zeros.len().min((opts.segment_bytes - at) as usize);
                file.write_at(at, &zeros[..n]).map_err(io)?;
                at += n as u64;
            }
        }
    }
    file.sync_data().map_err(io)?;
    Ok(file)
}

/// Creates, preallocates and syncs the first segment of a new log, header included.
fn create_segment(
    fs: &dyn FileSystem,
    dir: &Path,
    opts: &LogOptions,
    log_id: u64,
    first_lsn: Lsn,
) -> Result<PathBuf, WalError> {
    let path = dir.join(format::segment_name(first_lsn));
    let io = |e| WalError::io(&path, e);
    let file = prepare_file(fs, &path, opts)?;
    let header = format::SegmentHeader {
        log_id,
        first_lsn,
        version: format::VERSION,
    }
    .encode();
    file.write_at(0, &header).map_err(io)?;
    file.sync_data().map_err(io)?;
    fs.sync_dir(dir).map_err(|e| WalError::io(dir, e))?;
    Ok(path)
}

/// Runs when the syncer stops, however it stops: a panic poisons the log, and threads still
/// waiting for durability are woken to see that nothing more will become durable.
struct SyncerExit(Arc<Shared>);

impl Drop for SyncerExit {
    fn drop(&mut self) {
        let sh = &self.0;
        if std::thread::panicking() {
            sh.state.lock().poisoned.get_or_insert(WalError::Poisoned {
                cause: "the log's syncer thread panicked".into(),
            });
            sh.taken_cv.notify_all();
        }
        sh.syncer_stopped.store(true, Ordering::Release);
        sh.waiters.wake_all();
    }
}

impl Shared {
    /// The syncer: writes and fdatasyncs batches until closed or poisoned.
    fn sync_loop(self: Arc<Self>, mut tail: Tail) {
        let _guard = SyncerExit(Arc::clone(&self));
        if self.opts.syncer_batch_sched {
            batch_sched_for_this_thread();
        }
        let mut spare: Vec<Chunk> = Vec::new();
        let mut last_flush = Instant::now();
        loop {
            let (mut batch, first, last, bytes) = {
                let mut st = self.state.lock();
                let ready = loop {
                    if st.poisoned.is_some() {
                        return;
                    }
                    if st.pending.is_empty() && st.closing {
                        return;
                    }
                    // Chunks before the first unfilled slot (whose appender is framing it).
                    let ready = st
                        .pending
                        .iter()
                        .position(|c| !c.is_filled())
                        .unwrap_or(st.pending.len());
                    let has = ready > 0;
                    let durable = self.durable_lsn.load(Ordering::Acquire);
                    let urgent = self.opts.durability == Durability::Sync
                        || st.waiting_for > durable
                        || st.pending_bytes >= self.opts.flush_bytes
                        || st.closing;
                    let due = last_flush.elapsed() >= self.opts.flush_interval;
                    // No gathering delay: whatever arrived while the last fdatasync ran goes
                    // now (group commit without a sleep).
                    if has && (urgent || due) {
                        break ready;
                    }
                    if has {
                        let left = self
                            .opts
                            .flush_interval
                            .saturating_sub(last_flush.elapsed());
                        self.work_cv.wait_for(&mut st, left);
                    } else {
                        self.work_cv.wait(&mut st);
                    }
                };
                let rest = if ready == st.pending.len() {
                    std::mem::take(&mut spare)
                } else {
                    st.pending.split_off(ready)
                };
                let batch = std::mem::replace(&mut st.pending, rest);
                let bytes: usize = batch.iter().map(|c| c.bytes().len()).sum();
                st.pending_bytes -= bytes;
                st.writing_bytes = bytes;
                let first = batch[0].first();
                let last = batch[batch.len() - 1].last();
                (batch, first, last, bytes)
            };
            self.taken_cv.notify_all();
            let started = Instant::now();
            let result = self.write_batch(&mut tail, &mut batch, first, bytes);
            let took = started.elapsed();
            let took_us = took.as_micros() as u64;
            last_flush = Instant::now();
            let mut emptied: Vec<Vec<u8>> = Vec::new();
            for chunk in batch.drain(..) {
                if let Chunk::Framed { mut bytes, .. } = chunk {
                    bytes.clear();
                    emptied.push(bytes);
                }
            }
            match result {
                Ok(()) => {
                    {
                        let mut st = self.state.lock();
                        st.bytes_written += bytes as u64;
                        st.writing_bytes = 0;
                        // Two buffers are enough: one being filled while one is written.
                        let room = 2usize.saturating_sub(st.free_buffers.len());
                        st.free_buffers.extend(emptied.into_iter().take(room));
                        let _ = st.fsync_us.record(took_us.max(1));
                        let _ = st.batch_bytes.record((bytes as u64).max(1));
                        self.durable_lsn.store(last, Ordering::Release);
                    }
                    self.waiters.wake_some(last);
                    for l in self.listeners.lock().iter() {
                        l(Ok(last));
                    }
                }
                Err(e) => {
                    self.state.lock().poisoned = Some(e.clone());
                    self.taken_cv.notify_all();
                    for l in self.listeners.lock().iter() {
                        l(Err(&e));
                    }
                    return;
                }
            }
            spare = batch;
        }
    }

    /// Writes one batch at the end of the tail segment (switching to the spare segment if it
    /// does not fit) and fdatasyncs it. Its first record gets the write-start flag, and the
    /// write carries an end marker after the records (see [`format::END_MARKER`]), which the
    /// next batch overwrites. `records` is the bytes of the batch's records.
    fn write_batch(
        &self,
        tail: &mut Tail,
        batch: &mut [Chunk],
        first: Lsn,
        records: usize,
    ) -> Result<(), WalError> {
        let header = format::HEADER_LEN as u64;
        let marked_len = (records + format::END_MARKER.len()) as u64;
        if tail.offset > header && tail.offset + marked_len > self.opts.segment_bytes {
            *tail = self.next_segment(first)?;
        }
        if tail.version >= 2 {
            format::mark_write_start(batch[0].bytes_mut());
        }
        let mut parts: Vec<&[u8]> = batch.iter().map(Chunk::bytes).collect();
        parts.push(&format::END_MARKER);
        self.write_marked(tail, &parts, records)
    }

    /// [`Shared::write_batch`] once the batch is in place: `parts` hold `records` bytes of
    /// records, then the marker.
    fn write_marked(
        &self,
        tail: &mut Tail,
        parts: &[&[u8]],
        records: usize,
    ) -> Result<(), WalError> {
        let io = |e| WalError::io(&tail.path, e);
        match &mut tail.direct {
            Some(d) => {
                // Write and fdatasync in one call (pwritev2 with RWF_DSYNC on the real disk).
                let block_start = tail.offset - d.kept as u64;
                tail.file
                    .write_at_durable(block_start, d.stage(parts))
                    .map_err(io)?;
                d.advance(records);
            }
            None => {
                tail.file
                    .write_vectored_at(tail.offset, parts)
                    .map_err(io)?;
                tail.file.sync_data().map_err(io)?;
            }
        }
        tail.offset += records as u64;
        if std::mem::take(&mut tail.dir_sync_due) {
            self.fs
                .sync_dir(&self.dir)
                .map_err(|e| WalError::io(&self.dir, e))?;
        }
        self.maybe_request_spare(tail);
        Ok(())
    }

    /// Asks the spare thread for the next segment once the tail is half full: early enough
    /// that the switch does not wait for it, late enough that a log which never fills its
    /// first segment never has a spare file.
    fn maybe_request_spare(&self, tail: &mut Tail) {
        if tail.spare_requested || tail.offset < self.opts.segment_bytes / 2 {
            return;
        }
        tail.spare_requested = true;
        let mut sp = self.spare.lock();
        if matches!(sp.state, SpareState::Idle) {
            sp.state = SpareState::Wanted;
            self.spare_cv.notify_all();
        }
    }

    /// Turns the spare into the segment starting at `first`: rename, then the header (written
    /// with the first batch, which `write_batch` follows with fdatasync and a directory fsync).
    /// A crash in between leaves a headerless newest segment or a spare: recovery drops both.
    fn next_segment(&self, first: Lsn) -> Result<Tail, WalError> {
        let spare = self.take_spare()?;
        let path = self.dir.join(format::segment_name(first));
        self.fs
            .rename(&spare, &path)
            .map_err(|e| WalError::io(&spare, e))?;
        self.state.lock().segments.push((first, path.clone()));
        let header = format::SegmentHeader {
            log_id: self.log_id,
            first_lsn: first,
            version: format::VERSION,
        }
        .encode();
        let mut tail =
            self.open_tail_with(path, format::HEADER_LEN as u64, &header, format::VERSION)?;
        if tail.direct.is_none() {
            tail.file
                .write_at(0, &header)
                .map_err(|e| WalError::io(&tail.path, e))?;
        }
        tail.dir_sync_due = true;
        Ok(tail)
    }

    /// Opens an existing segment as the tail, appending at `offset` (after recovery).
    fn open_tail(&self, path: PathBuf, offset: u64, version: u32) -> Result<Tail, WalError> {
        let block_start = offset / DIRECT_ALIGN as u64 * DIRECT_ALIGN as u64;
        let mut kept = vec![0u8; (offset - block_start) as usize];
        if self.opts.direct_io {
            let file = self.fs.open(&path).map_err(|e| WalError::io(&path, e))?;
            let n = file
                .read_at(block_start, &mut kept)
                .map_err(|e| WalError::io(&path, e))?;
            assert_eq!(
                n,
                kept.len(),
                "recovery found records up to the tail offset"
            );
        }
        self.open_tail_with(path, offset, &kept, version)
    }

    /// Opens `path` as the tail, appending at `offset`; `kept` holds the file's bytes from
    /// `offset` rounded down to a block, which O_DIRECT writes repeat; `version` is the format
    /// version of the segment's header.
    fn open_tail_with(
        &self,
        path: PathBuf,
        offset: u64,
        kept: &[u8],
        version: u32,
    ) -> Result<Tail, WalError> {
        let io = |e| WalError::io(&path, e);
        let (file, direct) = if self.opts.direct_io {
            let file = match self.fs.open_direct(&path) {
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => self.fs.open(&path),
                other => other,
            }
            .map_err(io)?;
            (file, Some(DirectBuf::new(kept)))
        } else {
            (self.fs.open(&path).map_err(io)?, None)
        };
        Ok(Tail {
            file,
            path,
            offset,
            dir_sync_due: false,
            direct,
            spare_requested: false,
            version,
        })
    }

    /// Takes the ready spare, waiting for the spare thread if it is not ready yet (or asking
    /// for it if a single batch crossed the whole second half of the tail).
    fn take_spare(&self) -> Result<PathBuf, WalError> {
        let mut sp = self.spare.lock();
        let mut waited = false;
        let path = loop {
            match std::mem::replace(&mut sp.state, SpareState::Idle) {
                SpareState::Ready(path) => break path,
                SpareState::Idle => {
                    sp.state = SpareState::Wanted;
                    self.spare_cv.notify_all();
                }
                SpareState::Failed(e) => {
                    sp.state = SpareState::Failed(e.clone());
                    return Err(e);
                }
                other => {
                    sp.state = other;
                    waited = true;
                    self.spare_cv.wait(&mut sp);
                }
            }
        };
        self.spare_cv.notify_all();
        drop(sp);
        if waited {
            self.state.lock().spare_waits += 1;
        }
        Ok(path)
    }

    /// The spare thread: prepares a spare whenever one is wanted, until `close`.
    fn spare_loop(self: Arc<Self>) {
        let mut sp = self.spare.lock();
        loop {
            if sp.stop {
                return;
            }
            if !matches!(sp.state, SpareState::Wanted) {
                self.spare_cv.wait(&mut sp);
                continue;
            }
            if let Some(path) = sp.reusable.pop() {
                sp.reused += 1;
                sp.state = SpareState::Ready(path);
                self.spare_cv.notify_all();
                continue;
            }
            sp.state = SpareState::Preparing;
            sp.made += 1;
            let path = self.dir.join(format::spare_name(self.nonce, sp.made));
            let result = parking_lot::MutexGuard::unlocked(&mut sp, || {
                prepare_file(self.fs.as_ref(), &path, &self.opts)
            });
            sp.state = match result {
                Ok(_) => SpareState::Ready(path),
                Err(e) => SpareState::Failed(e),
            };
            self.spare_cv.notify_all();
        }
    }
}

#[cfg(test)]
mod tests;
