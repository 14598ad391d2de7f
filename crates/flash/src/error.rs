//! The tier's error at start.
//!
//! Non-goals: errors once running are not returned but handled where they happen (a failed
//! write or read drops its segment, see `writer` and `get`), and counted.

use std::io;

use crate::device::OpenError;

/// Errors of the tier at start.
#[derive(Debug, thiserror::Error)]
pub enum FlashError {
    #[error(transparent)]
    Open(#[from] OpenError),
    #[error("flash path {path}: {source}")]
    Io { path: String, source: io::Error },
}
