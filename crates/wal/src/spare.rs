//! The next segment file: the spare thread's mailbox ([`Spare`]) and how a segment file is
//! made (created, preallocated, fdatasync'd) before it joins the log.
//!
//! ```text
//!   Shared::spare: Spare { state: Idle ─> Wanted ─> Preparing ─> Ready(path) | Failed }
//!   prepare_file: create ─> set_len or zero fill ─> fdatasync
//!   create_segment (a new log): prepare_file ─> header ─> fdatasync ─> fsync dir
//! ```
//!
//! Non-goals: the spare thread's loop and the switch to the spare (`crate::segment`).

use std::path::{Path, PathBuf};

use crate::error::WalError;
use crate::format;
use crate::fs::{FileSystem, LogFile};
use crate::marks::Lsn;
use crate::options::{LogOptions, Prealloc};
use crate::pages;

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
    pub made: u64,
    /// Files of truncated segments waiting to be reused: spares with a zeroed header.
    pub reusable: Vec<PathBuf>,
    /// See [`crate::stats::LogStats::segments_reused`].
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
pub(crate) fn prepare_file(
    fs: &dyn FileSystem,
    path: &Path,
    opts: &LogOptions,
) -> Result<Box<dyn LogFile>, WalError> {
    let io = |e| WalError::io(path, e);
    let file = fs.create(path).map_err(io)?;
    match opts.prealloc {
        Prealloc::SetLen => file.set_len(opts.segment_bytes).map_err(io)?,
        Prealloc::ZeroFill => {
            // A mapping, not a Vec (`crate::pages`): it reads as the kernel's zero page, and
            // freeing it leaves malloc's heap as it was.
            let zeros = pages::zeroed(1 << 20);
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
