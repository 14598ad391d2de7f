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

use std::path::PathBuf;
use std::sync::atomic::Ordering;

use crate::error::WalError;
use crate::format;
use crate::fs::DIRECT_ALIGN;
use crate::marks::Lsn;
use crate::shared::Shared;
use crate::spare::{prepare_file, SpareState};
use crate::tail::{DirectBuf, Tail};

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
    /// newest segment or a spare: recovery drops both. `staging` is the old tail's O_DIRECT
    /// staging buffer, reused (its pages are resident already).
    pub(crate) fn next_segment(
        &self,
        first: Lsn,
        staging: Option<DirectBuf>,
    ) -> Result<Tail, WalError> {
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
        let mut tail = self.open_tail_with(
            path,
            first,
            format::HEADER_LEN as u64,
            &header,
            format::VERSION,
            staging,
        )?;
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
        first_lsn: Lsn,
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
        self.open_tail_with(path, first_lsn, offset, &kept, version, None)
    }

    /// Opens `path` as the tail, appending at `offset`; `kept` holds the file's bytes from
    /// `offset` rounded down to a block, which O_DIRECT writes repeat; `version` is the format
    /// version of the segment's header; `staging` an O_DIRECT staging buffer to reuse.
    fn open_tail_with(
        &self,
        path: PathBuf,
        first_lsn: Lsn,
        offset: u64,
        kept: &[u8],
        version: u32,
        staging: Option<DirectBuf>,
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
            let staging = match staging {
                Some(mut b) => {
                    b.keep(kept);
                    b
                }
                None => DirectBuf::new(kept),
            };
            (std::sync::Arc::from(file), Some(staging))
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
            first_lsn,
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

    /// See [`crate::log::Log::truncate_before`].
    pub(crate) fn truncate_before(&self, lsn: Lsn) -> Result<usize, WalError> {
        // One truncation at a time, so the reuse limit holds across concurrent calls.
        let _one = self.truncating.lock();
        let doomed: Vec<PathBuf> = {
            let mut st = self.state.lock();
            let mut n = 0;
            while n + 1 < st.segments.len() && st.segments[n + 1].0 <= lsn {
                n += 1;
            }
            let doomed = st.segments.drain(..n).map(|(_, p)| p).collect();
            if let Some(&(first, _)) = st.segments.first() {
                self.index.lock().drop_before(first);
                self.first.store(first, Ordering::Release);
            }
            doomed
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
