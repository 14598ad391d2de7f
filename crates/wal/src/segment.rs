//! Segment files: the tail the syncer writes, the spare thread that prepares the next one,
//! and truncation that drops (or keeps for reuse) old ones.
//!
//! ```text
//!   spare thread, once the tail is half full: hand out a kept file, or create
//!        "next-….spare", preallocate (zero fill), fdatasync ─> ready
//!   syncer, when a batch does not fit the tail: rename the ready spare to "<first LSN>.wal",
//!        header + batch, make it durable, fsync the directory, then acknowledge
//!   truncate_before: rename dropped segments to spare names (up to reuse_segments kept,
//!        header zeroed) or delete them
//! ```

use std::path::{Path, PathBuf};

use crate::fs::{FileSystem, LogFile, DIRECT_ALIGN};
use crate::{format, LogOptions, Lsn, Prealloc, Shared, WalError};

/// The segment the syncer appends to.
pub(crate) struct Tail {
    /// The file, opened with O_DIRECT when `direct` is set. Shared with the syncer's
    /// fdatasync, which runs without the writer lock.
    pub file: std::sync::Arc<dyn LogFile>,
    /// With O_DIRECT: a second handle through the page cache, for async mode's writes.
    pub buffered: Option<Box<dyn LogFile>>,
    pub path: std::sync::Arc<Path>,
    /// Where the next batch is written.
    pub offset: u64,
    /// The segment was just renamed into place: fsync the directory after its first batch,
    /// before that batch is acknowledged.
    pub dir_sync_due: bool,
    /// Set with `direct_io`: the staging buffer of O_DIRECT writes.
    pub direct: Option<DirectBuf>,
    /// The spare thread was asked for the segment after this one.
    pub spare_requested: bool,
    /// Format version of the segment: from 2 on, the first record of each write is flagged.
    pub version: u32,
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
/// (identical data) is what the page cache does for a buffered append, too. Async mode writes
/// a direct tail through the page cache from the same block start (kept bytes first), so the
/// kept bytes stay what the file holds whichever way a batch went.
pub(crate) struct DirectBuf {
    /// Owns the memory; `raw[start..]` is the aligned part.
    raw: Vec<u8>,
    start: usize,
    /// Bytes at the aligned start: the partly written last block (tail offset % 4096).
    pub kept: usize,
}

impl DirectBuf {
    pub fn new(kept: &[u8]) -> DirectBuf {
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

    /// The kept bytes: the file's last, partly written block.
    pub fn kept_bytes(&self) -> &[u8] {
        &self.raw[self.start..self.start + self.kept]
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
    pub fn stage(&mut self, parts: &[&[u8]]) -> &[u8] {
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
    pub fn advance(&mut self, batch_len: usize) {
        let used = self.kept + batch_len;
        let block = used / DIRECT_ALIGN * DIRECT_ALIGN;
        self.raw
            .copy_within(self.start + block..self.start + used, self.start);
        self.kept = used - block;
    }

    /// After the kept bytes and then `records` (`len` bytes in all) were written through the
    /// page cache: keeps the new partly written last block, copied from the end of `records`
    /// (at most one block, not the batch).
    pub fn absorb(&mut self, records: &[&[u8]], len: usize) {
        let used = self.kept + len;
        let keep = used % DIRECT_ALIGN;
        let mut last = [0u8; DIRECT_ALIGN];
        // Fill `last[..keep]` from the end of kept ++ records.
        let mut need = keep;
        for part in records
            .iter()
            .rev()
            .chain(std::iter::once(&self.kept_bytes()))
        {
            if need == 0 {
                break;
            }
            let n = need.min(part.len());
            last[need - n..need].copy_from_slice(&part[part.len() - n..]);
            need -= n;
        }
        self.raw[self.start..self.start + keep].copy_from_slice(&last[..keep]);
        self.kept = keep;
    }
}

/// Where the spare thread is with the next segment file.
pub(crate) enum SpareState {
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
pub(crate) struct Spare {
    pub state: SpareState,
    /// Set by `close` once the syncer has stopped: the spare thread exits.
    pub stop: bool,
    /// Spares made since open; numbers their file names.
    made: u64,
    /// Files of truncated segments waiting to be reused: spares with a zeroed header.
    reusable: Vec<PathBuf>,
    /// See [`crate::LogStats::segments_reused`].
    pub reused: u64,
}

impl Spare {
    pub fn new() -> Spare {
        Spare {
            state: SpareState::Idle,
            stop: false,
            made: 0,
            reusable: Vec::new(),
            reused: 0,
        }
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
pub(crate) fn create_segment(
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

impl Tail {
    /// Drops the tail's clean cached pages, on a direct tail (`LogOptions::direct_io`): its
    /// sync writes bypass the cache anyway, and its async writes (through the page cache)
    /// are whole blocks, which need no read of what the file holds. Why: the spare's zero fill
    /// (1 MiB writes) or recovery's read-ahead leave the file cached in large folios, and each
    /// small buffered write into a large folio walks every block of it (ext4's
    /// `block_write_begin` and `block_commit_write`: 0.25 us per insert in the profile of
    /// ASYNC inserts, docs/decisions/0015-async-writes-in-whole-blocks-on-an-uncached-tail.md);
    /// written after the drop, the pages come in folios the size of the writes.
    pub fn drop_cache(&self) {
        if self.direct.is_some() {
            self.file.drop_cache();
        }
    }

    /// Whether a batch of `records` bytes (and its end marker) does not fit this segment, so
    /// that it starts the next one. A batch larger than a whole segment goes into the
    /// current one if nothing is written there yet.
    pub fn needs_next_segment(&self, records: usize, opts: &LogOptions) -> bool {
        let marked_len = (records + format::END_MARKER.len()) as u64;
        self.offset > format::HEADER_LEN as u64 && self.offset + marked_len > opts.segment_bytes
    }
}

impl Shared {
    /// Asks the spare thread for the next segment once the tail is half full: early enough
    /// that the switch does not wait for it, late enough that a log which never fills its
    /// first segment never has a spare file.
    pub(crate) fn maybe_request_spare(&self, tail: &mut Tail) {
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
    /// with the first batch, which is made durable and followed by a directory fsync before
    /// anything in it is acknowledged as durable). A crash in between leaves a headerless
    /// newest segment or a spare: recovery drops both.
    pub(crate) fn next_segment(&self, first: Lsn) -> Result<Tail, WalError> {
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
        } else {
            // The spare's zeros (or a reused file's old records) are clean in the page cache,
            // in large folios: drop them (see `Tail::drop_cache`).
            tail.file.drop_cache();
        }
        tail.dir_sync_due = true;
        Ok(tail)
    }

    /// Opens an existing segment as the tail, appending at `offset` (after recovery).
    pub(crate) fn open_tail(
        &self,
        path: PathBuf,
        offset: u64,
        version: u32,
    ) -> Result<Tail, WalError> {
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
        let mut buffered = None;
        let (file, direct) = if self.opts.direct_io {
            let file = match self.fs.open_direct(&path) {
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => self.fs.open(&path),
                other => other,
            }
            .map_err(io)?;
            buffered = Some(self.fs.open(&path).map_err(io)?);
            (std::sync::Arc::from(file), Some(DirectBuf::new(kept)))
        } else {
            (std::sync::Arc::from(self.fs.open(&path).map_err(io)?), None)
        };
        Ok(Tail {
            file,
            buffered,
            path: path.into(),
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
    pub(crate) fn spare_loop(self: std::sync::Arc<Self>) {
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

    /// See [`crate::Log::truncate_before`].
    pub(crate) fn truncate_before(&self, lsn: Lsn) -> Result<usize, WalError> {
        // One truncation at a time, so the reuse limit holds across concurrent calls.
        let _one = self.truncating.lock();
        let doomed: Vec<PathBuf> = {
            let mut st = self.state.lock();
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
            let mut sp = self.spare.lock();
            if sp.reusable.len() + keep.len() < self.opts.reuse_segments {
                sp.made += 1;
                let spare = self.dir.join(format::spare_name(self.nonce, sp.made));
                drop(sp);
                self.fs.rename(p, &spare).map_err(|e| WalError::io(p, e))?;
                keep.push(spare);
            } else {
                drop(sp);
                self.fs.remove(p).map_err(|e| WalError::io(p, e))?;
            }
        }
        if !doomed.is_empty() {
            self.fs
                .sync_dir(&self.dir)
                .map_err(|e| WalError::io(&self.dir, e))?;
        }
        for spare in keep {
            // A reused file keeps its old records; zeroing the header makes it look like a
            // new spare, so a crash after it is renamed to a segment name and before its
            // first batch leaves a headerless newest segment, which recovery drops.
            let zeroed = self.fs.open(&spare).and_then(|file| {
                file.write_at(0, &[0u8; format::HEADER_LEN])?;
                file.sync_data()
            });
            match zeroed {
                Ok(()) => self.spare.lock().reusable.push(spare),
                Err(e) => {
                    // Not reusable: let it go like a deleted segment (a leftover spare is
                    // removed by the next open anyway).
                    let _ = self.fs.remove(&spare);
                    return Err(WalError::io(&spare, e));
                }
            }
        }
        Ok(doomed.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absorb_keeps_the_last_partial_block_of_kept_and_records() {
        let kept: Vec<u8> = (0..100u8).collect();
        let mut d = DirectBuf::new(&kept);
        // Records that end inside the same block: the new kept block holds both.
        d.absorb(&[b"abc", b"de"], 5);
        let mut want = kept.clone();
        want.extend_from_slice(b"abcde");
        assert_eq!(d.kept_bytes(), &want[..]);
        // Records that cross a block end: only what lies past it is kept.
        let big = vec![7u8; DIRECT_ALIGN];
        d.absorb(&[&big[..10], &big[10..]], DIRECT_ALIGN);
        assert_eq!(d.kept_bytes(), &vec![7u8; 105][..]);
        // Exactly at a block end: nothing kept.
        let rest = vec![9u8; DIRECT_ALIGN - 105];
        d.absorb(&[&rest], rest.len());
        assert!(d.kept_bytes().is_empty());
    }
}
