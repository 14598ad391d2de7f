//! The syncer thread: takes the pending records, writes them at the tail's end, makes them
//! durable as the mode says, and advances the three watermarks.
//!
//! ```text
//!   loop:  lock ─> what next?
//!            poisoned ─────────────────────────────> exit
//!            written > durable, and sync mode (after a switch), or async and due, or a
//!              fence waits, or closing ─────────────> fdatasync ─> durable = written
//!            records ready ─> take them ─> taken = last
//!              sync:  write durably (RWF_DSYNC, or write + fdatasync) ─> written = durable
//!              async: write ─> written = last
//!            closing, nothing left ────────────────> exit
//!            quiet for `release_after` since the last append ─> buffers back to the OS
//!            else wait (async with unsynced bytes: until the flush interval is up)
//! ```
//!
//! Writes never overlap: each is made under the writer lock (by the syncer, or in async mode
//! by a helper), so each write's first record can be flagged as the start of a write when
//! everything before it is durable (recovery relies on it). The syncer's fdatasync runs
//! without the writer lock: in async mode helpers go on writing (and acknowledging) while it
//! runs, instead of every request appended meanwhile waiting for the disk's flush (before,
//! each periodic fdatasync stalled the written mark, and so every async acknowledgement, for
//! its whole duration). The fdatasync covers what was written when it began (the written mark
//! read then); writes made during it are not flagged (`written > durable` when they begin)
//! and wait for the next one, which is due at once if they took the flush interval's time.
//! Helpers stop writing once `flush_bytes` were written during one fdatasync; so a slow disk
//! still fills the pending buffer, and callers that ask for [`crate::Log::room`] wait (see
//! docs/ARCHITECTURE.md on backpressure).

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::WalError;
use crate::format;
use crate::fs::{LogFile, DIRECT_ALIGN};
use crate::marks::{Lsn, Marks};
use crate::options::Durability;
use crate::pending::{free_buffers_kept, Chunk, PendingBuf};
use crate::shared::{Shared, State, Writer};
use crate::tail::Tail;

/// Runs when the syncer stops, however it stops: a panic poisons the log, and everyone still
/// waiting is woken to see that nothing more will advance.
struct SyncerExit(Arc<Shared>);

impl Drop for SyncerExit {
    fn drop(&mut self) {
        let sh = &self.0;
        if std::thread::panicking() {
            sh.state
                .lock()
                .poisoned
                .get_or_insert(WalError::SyncerPanicked);
        }
        sh.syncer_stopped.store(true, Ordering::SeqCst);
        sh.taken.wake_all();
        sh.written.wake_all();
        sh.durable.wake_all();
    }
}

/// What the writer does next.
enum Work {
    /// Write these chunks (LSNs `first..=last`, `bytes` of records); durably if `durable`.
    Write {
        batch: Vec<Chunk>,
        first: Lsn,
        last: Lsn,
        bytes: usize,
        durable: bool,
    },
}

/// An fdatasync taken on under the writer lock and made after it was let go (see the module
/// doc).
pub(crate) struct OutsideSync {
    file: Arc<dyn LogFile>,
    path: Arc<Path>,
    /// The written mark when it began: what it makes durable.
    to: Lsn,
    /// `State::bytes_written` when it began.
    bytes_at: u64,
}

/// Which calls a write made, for the latency histograms.
enum Timed {
    /// A write, then (if Some) an fdatasync.
    Write { write_us: u64, sync_us: Option<u64> },
    /// One `pwritev2(RWF_DSYNC)`.
    Dsync { us: u64 },
}

/// Zeros that pad an async write on a direct tail to a block's end.
static ZERO_BLOCK: [u8; DIRECT_ALIGN] = [0; DIRECT_ALIGN];

/// When the syncer last saw new appends, for handing the buffers of a burst back to the
/// operating system once the log is quiet ([`crate::LogOptions::release_after`]).
struct Quiet {
    /// `State::next_lsn` when last seen.
    next_lsn: Lsn,
    /// When it was first seen at that value.
    since: Instant,
    /// The buffers went back since the last append.
    released: bool,
}

impl Quiet {
    /// Notes the appends up to `next_lsn`; the time left until the buffers go back (zero:
    /// now), or None when they already went back after the last append.
    fn release_in(&mut self, next_lsn: Lsn, after: Duration) -> Option<Duration> {
        if next_lsn != self.next_lsn {
            self.next_lsn = next_lsn;
            self.since = Instant::now();
            self.released = false;
        }
        (!self.released).then(|| after.saturating_sub(self.since.elapsed()))
    }
}

fn us_since(t: Instant) -> u64 {
    (t.elapsed().as_micros() as u64).max(1)
}

/// Who is writing: the syncer thread, or a thread that helps in async mode
/// ([`Shared::write_ready`]), which only writes (no fdatasync, no new segment: those can wait
/// on the disk, and a helper must not).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Syncer,
    Helper,
}

impl Shared {
    /// The syncer: writes (and syncs) batches until closed or poisoned.
    pub(crate) fn sync_loop(self: Arc<Self>) {
        let _guard = SyncerExit(Arc::clone(&self));
        if self.opts.syncer_batch_sched {
            batch_sched_for_this_thread();
        }
        let mut quiet = Quiet {
            next_lsn: self.state.lock().next_lsn,
            since: Instant::now(),
            released: true,
        };
        loop {
            // Wait for work under the state lock alone: a helper may write meanwhile. Quiet
            // for `release_after`: the buffers go back to the operating system.
            let release = {
                let mut st = self.state.lock();
                loop {
                    if st.poisoned.is_some() {
                        return;
                    }
                    let sync_mode = self.durability() == Durability::Sync;
                    if self.sync_due(&st, sync_mode)
                        || st.ready_chunks(self.opts.max_pending_bytes) > 0
                    {
                        break false;
                    }
                    // (Not while a helper's write is under way: its records need the last
                    // fdatasync too, and it wakes the syncer when done.)
                    if st.pending.is_empty() && st.closing && self.written.get() >= self.taken.get()
                    {
                        return;
                    }
                    let release_in = quiet.release_in(st.next_lsn, self.opts.release_after);
                    if release_in == Some(Duration::ZERO) {
                        quiet.released = true;
                        st.buffer_releases += 1;
                        break true;
                    }
                    let wait = match st.unsynced_since {
                        Some(t) => Some(self.opts.flush_interval.saturating_sub(t.elapsed())),
                        // Async: records appended by a thread that writes before it sleeps
                        // come without a wake; this is the backstop if it does not.
                        None if !sync_mode => Some(self.opts.flush_interval),
                        None => None,
                    };
                    match wait.into_iter().chain(release_in).min() {
                        Some(d) => drop(self.work_cv.wait_for(&mut st, d)),
                        None => self.work_cv.wait(&mut st),
                    }
                }
            };
            let mut writer = self.writer.lock();
            let w = writer.as_mut().expect("the tail is set at open");
            if release {
                // Taken under the writer lock, so that no helper's write hands buffers back
                // after; unmapped once the state lock is let go, so appenders do not wait.
                let buffers = std::mem::take(&mut self.state.lock().free_buffers);
                drop(buffers);
                if let Some(direct) = w.tail.direct.as_mut() {
                    direct.release();
                }
                continue;
            }
            match self.step(w, Role::Syncer) {
                Err(()) => return,
                Ok(None) => {}
                Ok(Some(sync)) => {
                    drop(writer);
                    if self.sync_outside(sync).is_err() {
                        return;
                    }
                }
            }
        }
    }

    /// Writes what is ready now, from the calling thread, in async mode: one write to the
    /// kernel (no fdatasync), then the written mark and its waiters. A no-op in sync mode,
    /// with nothing pending, or when the batch needs a new segment; when another writer
    /// (the syncer, or another helper) is busy, the syncer is asked to do it instead.
    pub(crate) fn write_ready(&self) {
        if self.pending_bytes.load(Ordering::Acquire) == 0
            || self.durability() != Durability::Async
            || self.syncer_stopped.load(Ordering::Acquire)
        {
            return;
        }
        let Some(mut writer) = self.writer.try_lock() else {
            self.work_cv.notify_one();
            return;
        };
        let w = writer.as_mut().expect("the tail is set at open");
        if let Err(()) = self.step(w, Role::Helper) {
            // The syncer sees the poisoning, exits and wakes every waiter.
            self.work_cv.notify_one();
        }
    }

    /// Whether the written records must be fdatasync'd now: in sync mode (after a switch
    /// from async), or async and due, or a fence waits, or the log closes.
    fn sync_due(&self, st: &State, sync_mode: bool) -> bool {
        let durable = self.durable.get();
        if self.written.get() <= durable {
            return false;
        }
        let due = st
            .unsynced_since
            .is_some_and(|t| t.elapsed() >= self.opts.flush_interval)
            || st.unsynced_bytes >= self.opts.flush_bytes;
        sync_mode || due || st.waiting_for > durable || st.closing
    }

    /// One round of the writer (`w` is held): an fdatasync if due (the syncer only), else
    /// the ready records as one batch. Tells the listeners; on failure poisons the log. A due
    /// fdatasync is only taken on here: it comes back as an [`OutsideSync`], for the syncer
    /// to make once it let the writer lock go.
    fn step(&self, w: &mut Writer, role: Role) -> Result<Option<OutsideSync>, ()> {
        let work = {
            let mut st = self.state.lock();
            if st.poisoned.is_some() {
                return Err(());
            }
            let sync_mode = self.durability() == Durability::Sync;
            if role == Role::Helper && sync_mode {
                return Ok(None);
            }
            if role == Role::Syncer && self.sync_due(&st, sync_mode) {
                st.syncing_from = Some(st.bytes_written);
                return Ok(Some(OutsideSync {
                    file: Arc::clone(&w.tail.file),
                    path: Arc::clone(&w.tail.path),
                    to: self.written.get(),
                    bytes_at: st.bytes_written,
                }));
            } else {
                let ready = st.ready_chunks(self.opts.max_pending_bytes);
                if ready == 0 {
                    return Ok(None);
                }
                if st
                    .syncing_from
                    .is_some_and(|from| st.bytes_written - from >= self.opts.flush_bytes as u64)
                {
                    // Enough written during this fdatasync: the rest waits for it.
                    return Ok(None);
                }
                let bytes: usize = st.pending[..ready].iter().map(|c| c.bytes().len()).sum();
                if role == Role::Helper && w.tail.needs_next_segment(bytes, &self.opts) {
                    drop(st);
                    self.work_cv.notify_one();
                    return Ok(None);
                }
                let rest = if ready == st.pending.len() {
                    std::mem::take(&mut w.spare)
                } else {
                    st.pending.split_off(ready)
                };
                let batch = std::mem::replace(&mut st.pending, rest);
                st.unwoken &= !st.pending.is_empty();
                st.pending_bytes -= bytes;
                self.pending_bytes
                    .store(st.pending_bytes, Ordering::Release);
                st.writing_bytes = bytes;
                let first = batch[0].first();
                let last = batch[batch.len() - 1].last();
                let _ = st.hist.batch_records.record(last - first + 1);
                let _ = st.hist.batch_bytes.record((bytes as u64).max(1));
                Work::Write {
                    batch,
                    first,
                    last,
                    bytes,
                    durable: sync_mode,
                }
            }
        };
        let result = match work {
            Work::Write {
                mut batch,
                first,
                last,
                bytes,
                durable,
            } => {
                self.taken.advance(last);
                let result = self.write_batch(&mut w.tail, &mut batch, first, bytes, durable);
                let mut emptied: Vec<PendingBuf> =
                    batch.drain(..).filter_map(Chunk::into_buf).collect();
                w.spare = batch;
                result.map(|timed| {
                    // Before the state below: the syncer, looking at the state, then sees the
                    // write it needs to fdatasync, or is asleep when it is told.
                    self.written.advance(last);
                    let tell_syncer = {
                        let mut st = self.state.lock();
                        st.bytes_written += bytes as u64;
                        st.writing_bytes = 0;
                        st.next_offset = w.tail.offset + st.pending_bytes as u64;
                        // Those not kept (beyond the count, or mapped for a record larger
                        // than a chunk) are unmapped after the lock is let go.
                        let kept = free_buffers_kept(self.opts.max_pending_bytes);
                        let room = kept.saturating_sub(st.free_buffers.len());
                        emptied.retain(PendingBuf::is_standard);
                        st.free_buffers
                            .extend(emptied.drain(..room.min(emptied.len())));
                        match timed {
                            Timed::Write { write_us, sync_us } => {
                                let _ = st.hist.write_us.record(write_us);
                                if let Some(us) = sync_us {
                                    let _ = st.hist.fdatasync_us.record(us);
                                }
                            }
                            Timed::Dsync { us } => {
                                let _ = st.hist.dsync_write_us.record(us);
                            }
                        }
                        if durable {
                            false
                        } else {
                            st.unsynced_bytes += bytes;
                            // The syncer may be asleep: its clock for the fdatasync starts
                            // now, or a fence or `close` waits for this write.
                            let tell = st.unsynced_since.is_none()
                                || st.waiting_for > self.durable.get()
                                || st.closing;
                            st.unsynced_since.get_or_insert_with(Instant::now);
                            tell
                        }
                    };
                    if durable {
                        self.durable.advance(last);
                    } else if tell_syncer && role == Role::Helper {
                        self.work_cv.notify_one();
                    }
                })
            }
        };
        match result {
            Ok(()) => {
                self.tell_listeners(Ok(Marks {
                    written: self.written.get(),
                    durable: self.durable.get(),
                }));
                Ok(None)
            }
            Err(e) => {
                self.state.lock().poisoned = Some(e.clone());
                self.tell_listeners(Err(&e));
                Err(())
            }
        }
    }

    /// The syncer's fdatasync, without the writer lock (see the module doc): the durable mark
    /// moves to the written mark read when it began. What helpers wrote meanwhile is left for
    /// the next one, whose clock starts when this one began.
    fn sync_outside(&self, s: OutsideSync) -> Result<(), ()> {
        let started = match self.timed_sync(s.file.as_ref(), &s.path) {
            Ok(started) => started,
            Err(e) => {
                {
                    let mut st = self.state.lock();
                    st.syncing_from = None;
                    st.poisoned = Some(e.clone());
                }
                self.tell_listeners(Err(&e));
                return Err(());
            }
        };
        self.durable.advance(s.to);
        {
            let mut st = self.state.lock();
            st.syncing_from = None;
            let during = st.bytes_written - s.bytes_at;
            if during > 0 {
                st.unsynced_since = Some(started);
                st.unsynced_bytes = during as usize;
            } else {
                st.unsynced_since = None;
                st.unsynced_bytes = 0;
            }
        }
        self.tell_listeners(Ok(Marks {
            written: self.written.get(),
            durable: self.durable.get(),
        }));
        Ok(())
    }

    fn tell_listeners(&self, r: Result<Marks, &WalError>) {
        for l in self.listeners.lock().iter() {
            l(r);
        }
    }

    /// fdatasyncs the tail (everything written to it so far), then moves the durable mark to
    /// `written`, the written mark read before the call.
    fn sync_written(&self, tail: &Tail, written: Lsn) -> Result<(), WalError> {
        self.timed_sync(tail.file.as_ref(), &tail.path)?;
        self.durable.advance(written);
        Ok(())
    }

    /// fdatasyncs `file`, the call alone timed for the `fdatasync` histogram; returns when
    /// it began.
    fn timed_sync(&self, file: &dyn LogFile, path: &Path) -> Result<Instant, WalError> {
        let started = Instant::now();
        file.sync_data().map_err(|e| WalError::io(path, e))?;
        let _ = self
            .state
            .lock()
            .hist
            .fdatasync_us
            .record(us_since(started));
        Ok(started)
    }

    /// Writes one batch at the end of the tail segment (switching to the spare segment if it
    /// does not fit), durably if `durable`. Its first record gets the sync-start flag if it is
    /// the first write since an fdatasync (see [`format`]), and the write carries an end marker after the records (see [`format::END_MARKER`]), which the
    /// next batch overwrites. `records` is the bytes of the batch's records.
    fn write_batch(
        &self,
        tail: &mut Tail,
        batch: &mut [Chunk],
        first: Lsn,
        records: usize,
        durable: bool,
    ) -> Result<Timed, WalError> {
        if tail.needs_next_segment(records, &self.opts) {
            // Records written to the old segment and not yet synced (async mode) must be
            // made durable by its own fdatasync: the next segment's does not cover them.
            let written = self.written.get();
            if written > self.durable.get() {
                self.sync_written(tail, written)?;
            }
            // On failure the staging buffer is gone with the old tail: the log is poisoned then.
            *tail = self.next_segment(first, tail.direct.take())?;
        }
        if tail.version >= 2 && self.written.get() == self.durable.get() {
            format::mark_sync_start(batch[0].bytes_mut());
        }
        let timed = match self.write_in_place(tail, batch, records, durable)? {
            Some(timed) => timed,
            None => {
                let mut parts: Vec<&[u8]> = Vec::with_capacity(batch.len() + 2);
                parts.extend(batch.iter().map(Chunk::bytes));
                parts.push(&format::END_MARKER);
                self.write_marked(tail, &parts, records, durable)?
            }
        };
        self.index
            .lock()
            .note_batch(tail.first_lsn, tail.offset, batch);
        tail.offset += records as u64;
        if std::mem::take(&mut tail.dir_sync_due) {
            self.fs
                .sync_dir(&self.dir)
                .map_err(|e| WalError::io(&self.dir, e))?;
        }
        self.maybe_request_spare(tail);
        Ok(timed)
    }

    /// A durable O_DIRECT write of a batch of one chunk laid out for the tail's block offset
    /// (see `appender::PendingBuf`): written from the chunk's own buffer, no staging copy.
    /// `None` when the batch is not such a batch (then it is staged).
    fn write_in_place(
        &self,
        tail: &mut Tail,
        batch: &mut [Chunk],
        records: usize,
        durable: bool,
    ) -> Result<Option<Timed>, WalError> {
        let (Some(d), [chunk], true) = (&mut tail.direct, batch, durable) else {
            return Ok(None);
        };
        let Some(buf) = chunk.buf_mut().filter(|b| b.head() == d.kept) else {
            return Ok(None);
        };
        let started = Instant::now();
        let block_start = tail.offset - d.kept as u64;
        tail.file
            .write_at_durable(block_start, buf.direct_write(d.kept_bytes()))
            .map_err(|e| WalError::io(&tail.path, e))?;
        d.absorb(&[buf.records()], records);
        Ok(Some(Timed::Dsync {
            us: us_since(started),
        }))
    }

    /// [`Shared::write_batch`] once the batch is in place: `parts` hold `records` bytes of
    /// records, then the marker.
    fn write_marked(
        &self,
        tail: &mut Tail,
        parts: &[&[u8]],
        records: usize,
        durable: bool,
    ) -> Result<Timed, WalError> {
        let io = |e| WalError::io(&tail.path, e);
        let started = Instant::now();
        match &mut tail.direct {
            Some(d) if durable => {
                // Write and fdatasync in one call (pwritev2 with RWF_DSYNC on the real disk).
                let block_start = tail.offset - d.kept as u64;
                self.state.lock().staged_writes += 1;
                tail.file
                    .write_at_durable(block_start, d.stage(parts))
                    .map_err(io)?;
                d.advance(records);
                Ok(Timed::Dsync {
                    us: us_since(started),
                })
            }
            Some(d) => {
                // Async on a direct tail: through the page cache, from the same block start
                // as an O_DIRECT write, so the kept bytes (the header, in a new segment) are
                // written too, and to a block's end (zeros after the end marker, as an
                // O_DIRECT write pads): whole blocks, which the kernel writes into the page
                // cache without reading what the file holds there (the tail's cache was
                // dropped, `Tail::drop_cache`).
                let block_start = tail.offset - d.kept as u64;
                let written = d.kept + parts.iter().map(|p| p.len()).sum::<usize>();
                let pad = written.next_multiple_of(DIRECT_ALIGN) - written;
                let mut with_kept: Vec<&[u8]> = Vec::with_capacity(parts.len() + 2);
                with_kept.push(d.kept_bytes());
                with_kept.extend_from_slice(parts);
                with_kept.push(&ZERO_BLOCK[..pad]);
                let file = tail.buffered.as_deref().expect("a direct tail has both");
                file.write_vectored_at(block_start, &with_kept)
                    .map_err(io)?;
                let records_only = &parts[..parts.len() - 1];
                d.absorb(records_only, records);
                Ok(Timed::Write {
                    write_us: us_since(started),
                    sync_us: None,
                })
            }
            None => {
                tail.file
                    .write_vectored_at(tail.offset, parts)
                    .map_err(io)?;
                let write_us = us_since(started);
                let sync_us = if durable {
                    let synced = Instant::now();
                    tail.file.sync_data().map_err(io)?;
                    Some(us_since(synced))
                } else {
                    None
                };
                Ok(Timed::Write { write_us, sync_us })
            }
        }
    }
}

/// Puts the calling thread under SCHED_BATCH (see `LogOptions::syncer_batch_sched`); a
/// failure changes nothing but the scheduling, so it is ignored.
fn batch_sched_for_this_thread() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param that outlives the call; pid 0 is this thread.
    unsafe {
        libc::sched_setscheduler(0, libc::SCHED_BATCH, &param);
    }
}
