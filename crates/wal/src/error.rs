//! The log's one error enum, [`WalError`], and how a failure poisons the log.
//!
//! ```text
//!   io::Error ─> WalError::io (ENOSPC: NoSpace; else Io with its cause, shared)
//!   a failed write or fdatasync ─> State::poisoned ─> poisoned(e): every later call and
//!                                                     every waiter gets Poisoned { cause }
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;

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
    /// Another process holds the folder (see [`crate::FolderLock`]).
    #[error("{} is in use: {holder}; one cairn process per folder", dir.display())]
    Locked { dir: PathBuf, holder: String },
    #[error("invalid log options: max_record_bytes is {max_record_bytes}, over the format's limit of 4294967295 (a 32-bit length)")]
    RecordLimit { max_record_bytes: usize },
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

/// The error of a poisoned log, from the failure that poisoned it.
pub(crate) fn poisoned(e: &WalError) -> WalError {
    match e {
        WalError::Poisoned { .. } => e.clone(),
        other => WalError::Poisoned {
            cause: Arc::new(other.clone()),
        },
    }
}
