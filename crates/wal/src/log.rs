//! [`Log`], the log's public face: open (recovery, then the syncer and spare threads),
//! append, wait for the marks, read back, truncate, stats, close.
//!
//! ```text
//!   Log::open ─> lock the folder ─> recovery::recover ─> Shared ─> open the tail
//!             ─> start cairn-wal-spare (segment::spare_loop) and cairn-wal-sync (syncer)
//!   append / append_parts ─> appender          room / written / durable ─> waiters (Reach)
//! ```
//!
//! Non-goals: the work itself, which the modules named above do on [`Shared`].

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

use crate::error::{poisoned, WalError};
use crate::format;
use crate::fs::{self, FileSystem, FolderLock};
use crate::index::Index;
use crate::marks::{Listener, Lsn};
use crate::options::{Durability, LogOptions};
use crate::pending::MAX_CHUNK_BYTES;
use crate::recovery::{self, read_records};
use crate::shared::{Shared, State, Writer};
use crate::spare::{create_segment, Spare, SpareState};
use crate::stats::{latency, LogHistograms, LogStats};
use crate::waiters::{block_on, Reach, Watermark};

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

/// An open log. Appends may come from many threads at once.
pub struct Log {
    shared: Arc<Shared>,
    syncer: Mutex<Option<JoinHandle<()>>>,
    spare_maker: Mutex<Option<JoinHandle<()>>>,
}

/// A random id, never 0 (a log's id, a history's id).
pub fn random_id() -> u64 {
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
        let write_window =
            (opts.flush_bytes + opts.max_pending_bytes + MAX_CHUNK_BYTES + opts.max_record_bytes)
                as u64
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
        let last = next_lsn - 1;
        let first = segments.first().map_or(1, |s| s.0);
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
                buffer_releases: 0,
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
            first: AtomicU64::new(first),
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
            index: Mutex::new(Index::default()),
        });
        let tail_first = shared
            .state
            .lock()
            .segments
            .last()
            .expect("the tail is a segment")
            .0;
        let mut tail = shared.open_tail(tail_path, tail_first, tail_end, tail_version)?;
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
        *shared.writer.lock() = Some(Writer {
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
    /// mode. See [`crate::writes_before_sleeping`].
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

    /// Calls `f` for every record with `from <= LSN <= upto` that was handed to the kernel (at
    /// most the written mark: in sync mode the durable one), in order, until `f` returns false.
    /// A segment's read starts at the sparse index's last point at or before `from`
    /// (`crate::index`), so a record anywhere in a segment costs a read of at most
    /// the index's stride (32 KiB) before it. A `from` older than the first segment
    /// gives the first segment's records (the caller sees the LSN it did not ask for).
    /// A [`Log::truncate_before`] must not run meanwhile (the caller's lock).
    pub fn read_range<E: From<WalError>>(
        &self,
        from: Lsn,
        upto: Lsn,
        f: impl FnMut(Lsn, &[u8]) -> Result<bool, E>,
    ) -> Result<(), E> {
        let upto = upto.min(self.written_lsn());
        if from > upto {
            return Ok(());
        }
        self.shared.read_range(from, upto, f)
    }

    /// The LSN of the oldest record the log holds (its first segment's first).
    pub fn first_lsn(&self) -> Lsn {
        self.shared.first.load(Ordering::Acquire)
    }

    /// Points in the sparse LSN -> offset index (`crate::index`), over every segment.
    pub fn index_points(&self) -> usize {
        self.shared.index.lock().points()
    }

    /// Deletes whole segments whose records all have LSN < `lsn` (never the newest segment),
    /// or keeps up to [`LogOptions::reuse_segments`] of them for reuse. Returns how many left
    /// the log. A [`Log::read_from`] or [`Log::read_range`] running at the same time must not
    /// read below `lsn`: a kept file is overwritten once reused.
    pub fn truncate_before(&self, lsn: Lsn) -> Result<usize, WalError> {
        self.shared.truncate_before(lsn)
    }

    pub fn stats(&self) -> LogStats {
        let sh = &self.shared;
        let (segments_reused, spare_preparing) = {
            let sp = sh.spare.lock();
            let busy = matches!(sp.state, SpareState::Wanted | SpareState::Preparing);
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
            buffer_releases: st.buffer_releases,
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
