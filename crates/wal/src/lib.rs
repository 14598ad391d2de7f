//! cairn-wal: a checksummed, segmented, append-only log with group commit.
//!
//! ```text
//!   append(payload) ──lock──> pending buffer (records framed, LSNs assigned in order)
//!        │ Sync: wait until durable_lsn >= my LSN          │ Async: return at once
//!        v                                                 v
//!   syncer thread: take the whole pending buffer ─> write at the segment's end ─> fdatasync
//!        ─> durable_lsn = last LSN of the batch ─> wake waiters, call listeners
//!   (writers that arrive while one fdatasync runs share the next one: group commit, no sleep)
//! ```
//!
//! Segments are files named by their first LSN, preallocated, each with a header carrying the
//! log's random id; every record carries a CRC32C over that id, its header and its payload (the
//! format is in [`format`] and docs/FORMATS.md). Recovery on [`Log::open`] finds the end of the
//! log and applies the caller's [`RecoveryMode`]; it never silently cuts the middle of a log.
//! A failed write or fdatasync poisons the log: nothing after it is acknowledged, every waiter
//! gets the error, and it is never retried.
//!
//! Non-goals: no compression, no record types (payloads are opaque), no replication.

pub mod fault;
pub mod format;
pub mod fs;
mod recovery;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

pub use fs::{FileSystem, LogFile, RealFs};
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

/// How a new segment file is prepared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prealloc {
    /// `set_len` to the segment size: no data blocks written up front.
    SetLen,
    /// Write zeros over the whole segment and fdatasync once, so appends overwrite allocated
    /// blocks.
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
    /// Size of a segment file; a batch that does not fit starts a new segment.
    pub segment_bytes: u64,
    /// Largest payload accepted.
    pub max_record_bytes: usize,
    pub recovery: RecoveryMode,
    pub prealloc: Prealloc,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            durability: Durability::Sync,
            flush_interval: Duration::from_millis(100),
            flush_bytes: 4 << 20,
            segment_bytes: 64 << 20,
            max_record_bytes: 16 << 20,
            recovery: RecoveryMode::TolerateTornTail,
            prealloc: Prealloc::SetLen,
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
#[derive(Clone, Debug, Default)]
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
    /// Bytes buffered and not yet durable.
    pub pending_bytes: u64,
    /// Segment files in the log.
    pub segments: usize,
    /// Bytes of all segment files (their preallocated size).
    pub log_bytes: u64,
    /// The failure that poisoned the log, if any.
    pub poisoned: Option<String>,
}

/// Called by the syncer after every batch with the new durable LSN, or with the error that
/// poisoned the log.
pub type DurableListener = Box<dyn Fn(Result<Lsn, &WalError>) + Send + Sync>;

struct State {
    /// Framed records not yet handed to the syncer.
    pending: Vec<u8>,
    /// LSN of the first record in `pending` (meaningful when it is not empty).
    pending_first: Lsn,
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
    bytes_written: u64,
}

struct Shared {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    opts: LogOptions,
    log_id: u64,
    state: Mutex<State>,
    /// Signalled when `durable_lsn` advances or the log is poisoned.
    durable_cv: Condvar,
    /// Signalled when the syncer may have work.
    work_cv: Condvar,
    durable_lsn: AtomicU64,
    listeners: Mutex<Vec<DurableListener>>,
}

/// An open log. Appends may come from many threads at once.
pub struct Log {
    shared: Arc<Shared>,
    syncer: Mutex<Option<JoinHandle<()>>>,
}

/// The segment the syncer appends to.
struct Tail {
    file: Box<dyn LogFile>,
    path: PathBuf,
    /// Where the next batch is written.
    offset: u64,
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
        fs.create_dir_all(dir).map_err(|e| WalError::io(dir, e))?;
        let scan = recovery::recover(fs.as_ref(), dir, opts.recovery)?;
        let (log_id, next_lsn, segments, tail) = match scan {
            Some(found) => {
                let file = fs
                    .open(&found.tail_path)
                    .map_err(|e| WalError::io(&found.tail_path, e))?;
                let tail = Tail {
                    file,
                    path: found.tail_path,
                    offset: found.tail_end,
                };
                (found.log_id, found.last_lsn + 1, found.segments, tail)
            }
            None => {
                let log_id = random_id();
                let (file, path) = create_segment(fs.as_ref(), dir, &opts, log_id, 1)?;
                let tail = Tail {
                    file,
                    path: path.clone(),
                    offset: format::HEADER_LEN as u64,
                };
                (log_id, 1, vec![(1, path)], tail)
            }
        };
        let shared = Arc::new(Shared {
            fs,
            dir: dir.to_path_buf(),
            opts,
            log_id,
            state: Mutex::new(State {
                pending: Vec::with_capacity(1 << 20),
                pending_first: next_lsn,
                next_lsn,
                waiting_for: 0,
                poisoned: None,
                closing: false,
                segments,
                fsync_us: hdrhistogram::Histogram::new_with_bounds(1, 60_000_000, 2)
                    .expect("valid bounds"),
                bytes_written: 0,
            }),
            durable_cv: Condvar::new(),
            work_cv: Condvar::new(),
            durable_lsn: AtomicU64::new(next_lsn - 1),
            listeners: Mutex::new(Vec::new()),
        });
        let worker = Arc::clone(&shared);
        let syncer = std::thread::Builder::new()
            .name("cairn-wal-sync".into())
            .spawn(move || worker.sync_loop(tail))
            .map_err(|e| WalError::io(dir, e))?;
        Ok(Log {
            shared,
            syncer: Mutex::new(Some(syncer)),
        })
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
    /// the mode (the caller waits with [`Log::wait_durable`] or a listener).
    pub fn append_nowait(&self, payload: &[u8]) -> Result<Lsn, WalError> {
        let max = self.shared.opts.max_record_bytes;
        if payload.len() > max {
            return Err(WalError::TooLarge {
                size: payload.len(),
                max,
            });
        }
        let mut st = self.shared.state.lock();
        if let Some(e) = &st.poisoned {
            return Err(poisoned(e));
        }
        if st.closing {
            return Err(WalError::Closed);
        }
        let lsn = st.next_lsn;
        st.next_lsn += 1;
        let was_empty = st.pending.is_empty();
        if was_empty {
            st.pending_first = lsn;
        }
        format::encode_record(&mut st.pending, self.shared.log_id, lsn, payload);
        let wake = self.shared.opts.durability == Durability::Sync
            || was_empty
            || st.pending.len() >= self.shared.opts.flush_bytes;
        drop(st);
        if wake {
            self.shared.work_cv.notify_one();
        }
        Ok(lsn)
    }

    /// Blocks until every record up to `lsn` is durable (a fence in async mode).
    pub fn wait_durable(&self, lsn: Lsn) -> Result<(), WalError> {
        let sh = &self.shared;
        if sh.durable_lsn.load(Ordering::Acquire) >= lsn {
            return Ok(());
        }
        let mut st = sh.state.lock();
        st.waiting_for = st.waiting_for.max(lsn);
        sh.work_cv.notify_one();
        loop {
            if sh.durable_lsn.load(Ordering::Acquire) >= lsn {
                return Ok(());
            }
            if let Some(e) = &st.poisoned {
                return Err(poisoned(e));
            }
            if st.closing && st.pending.is_empty() && sh.durable_lsn.load(Ordering::Acquire) < lsn {
                return Err(WalError::Closed);
            }
            sh.durable_cv.wait(&mut st);
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

    /// Deletes whole segments whose records all have LSN < `lsn` (never the newest segment).
    /// Returns how many were removed.
    pub fn truncate_before(&self, lsn: Lsn) -> Result<usize, WalError> {
        let sh = &self.shared;
        let doomed: Vec<PathBuf> = {
            let mut st = sh.state.lock();
            let mut n = 0;
            while n + 1 < st.segments.len() && st.segments[n + 1].0 <= lsn {
                n += 1;
            }
            st.segments.drain(..n).map(|(_, p)| p).collect()
        };
        for p in &doomed {
            sh.fs.remove(p).map_err(|e| WalError::io(p, e))?;
        }
        if !doomed.is_empty() {
            sh.fs
                .sync_dir(&sh.dir)
                .map_err(|e| WalError::io(&sh.dir, e))?;
        }
        Ok(doomed.len())
    }

    pub fn stats(&self) -> LogStats {
        let st = self.shared.state.lock();
        LogStats {
            fsync_count: st.fsync_us.len(),
            fsync_latency_us_p50: st.fsync_us.value_at_quantile(0.5),
            fsync_latency_us_p99: st.fsync_us.value_at_quantile(0.99),
            bytes_written: st.bytes_written,
            appended_lsn: st.next_lsn - 1,
            durable_lsn: self.durable_lsn(),
            pending_bytes: st.pending.len() as u64,
            segments: st.segments.len(),
            log_bytes: st.segments.len() as u64 * self.shared.opts.segment_bytes,
            poisoned: st.poisoned.as_ref().map(|e| e.to_string()),
        }
    }

    /// Flushes what is buffered and stops the syncer. Appends after this fail with `Closed`.
    pub fn close(&self) -> Result<(), WalError> {
        self.shared.state.lock().closing = true;
        self.shared.work_cv.notify_all();
        if let Some(h) = self.syncer.lock().take() {
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
            cause: other.to_string(),
        },
    }
}

/// Creates, preallocates and syncs a new segment whose first record will be `first_lsn`.
fn create_segment(
    fs: &dyn FileSystem,
    dir: &Path,
    opts: &LogOptions,
    log_id: u64,
    first_lsn: Lsn,
) -> Result<(Box<dyn LogFile>, PathBuf), WalError> {
    let path = dir.join(format::segment_name(first_lsn));
    let io = |e| WalError::io(&path, e);
    let file = fs.create(&path).map_err(io)?;
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
    let header = format::SegmentHeader { log_id, first_lsn }.encode();
    file.write_at(0, &header).map_err(io)?;
    file.sync_data().map_err(io)?;
    fs.sync_dir(dir).map_err(|e| WalError::io(dir, e))?;
    Ok((file, path))
}

impl Shared {
    /// The syncer: writes and fdatasyncs batches until closed or poisoned.
    fn sync_loop(self: Arc<Self>, mut tail: Tail) {
        let mut spare: Vec<u8> = Vec::with_capacity(1 << 20);
        let mut last_flush = Instant::now();
        loop {
            let (batch, first, last) = {
                let mut st = self.state.lock();
                loop {
                    if st.poisoned.is_some() {
                        return;
                    }
                    let has = !st.pending.is_empty();
                    if !has && st.closing {
                        return;
                    }
                    let durable = self.durable_lsn.load(Ordering::Acquire);
                    let urgent = self.opts.durability == Durability::Sync
                        || st.waiting_for > durable
                        || st.pending.len() >= self.opts.flush_bytes
                        || st.closing;
                    let due = last_flush.elapsed() >= self.opts.flush_interval;
                    if has && (urgent || due) {
                        break;
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
                }
                let first = st.pending_first;
                let last = st.next_lsn - 1;
                let batch = std::mem::replace(&mut st.pending, std::mem::take(&mut spare));
                (batch, first, last)
            };
            let started = Instant::now();
            let result = self.write_batch(&mut tail, &batch, first);
            let took_us = started.elapsed().as_micros() as u64;
            last_flush = Instant::now();
            match result {
                Ok(()) => {
                    {
                        let mut st = self.state.lock();
                        st.bytes_written += batch.len() as u64;
                        let _ = st.fsync_us.record(took_us.max(1));
                        self.durable_lsn.store(last, Ordering::Release);
                    }
                    self.durable_cv.notify_all();
                    for l in self.listeners.lock().iter() {
                        l(Ok(last));
                    }
                }
                Err(e) => {
                    self.state.lock().poisoned = Some(e.clone());
                    self.durable_cv.notify_all();
                    for l in self.listeners.lock().iter() {
                        l(Err(&e));
                    }
                    return;
                }
            }
            spare = batch;
            spare.clear();
        }
    }

    /// Writes one batch at the end of the tail segment (starting a new segment if it does
    /// not fit) and fdatasyncs it.
    fn write_batch(&self, tail: &mut Tail, batch: &[u8], first: Lsn) -> Result<(), WalError> {
        let header = format::HEADER_LEN as u64;
        if tail.offset > header && tail.offset + batch.len() as u64 > self.opts.segment_bytes {
            let (file, path) =
                create_segment(self.fs.as_ref(), &self.dir, &self.opts, self.log_id, first)?;
            self.state.lock().segments.push((first, path.clone()));
            *tail = Tail {
                file,
                path,
                offset: header,
            };
        }
        tail.file
            .write_at(tail.offset, batch)
            .map_err(|e| WalError::io(&tail.path, e))?;
        tail.offset += batch.len() as u64;
        tail.file
            .sync_data()
            .map_err(|e| WalError::io(&tail.path, e))
    }
}

#[cfg(test)]
mod tests;
