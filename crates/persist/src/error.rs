//! The crate's errors: [`PersistError`] for every operation, and [`Unrecoverable`], the
//! reasons recovery refuses to start (which `open` and `replay` both give).
//!
//! Non-goals: the log's own errors ([`cairn_wal::WalError`], wrapped as
//! [`PersistError::Log`]) and history reads' ([`crate::HistoryError`]).

use std::path::{Path, PathBuf};

use cairn_wal::{Lsn, WalError};

/// Errors of persistence.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    #[error("I/O error on {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("corrupt file {} at offset {offset}: {why}", path.display())]
    Corrupt {
        path: PathBuf,
        offset: u64,
        why: &'static str,
    },
    #[error(transparent)]
    Log(#[from] WalError),
    #[error("cannot recover: {0}")]
    Unrecoverable(#[from] Unrecoverable),
    #[error("a checkpoint is already running")]
    Busy,
    /// Safe locally, but the replication gate did not let it be acknowledged (sync
    /// replication: no replica holds it durable in time).
    #[error("replication: {0}")]
    Replication(String),
}

impl PersistError {
    pub(crate) fn io(path: &Path, e: std::io::Error) -> PersistError {
        PersistError::Io {
            path: path.to_path_buf(),
            source: e,
        }
    }
}

/// Why recovery refuses to start: the files on disk cannot rebuild the acknowledged state.
#[derive(Debug, thiserror::Error)]
pub enum Unrecoverable {
    #[error("the manifest names snapshot {snapshot} but it is missing")]
    SnapshotMissing { snapshot: String },
    #[error(
        "no snapshot could be loaded (see the errors above), and the log does not hold every \
         record from the first to {named} (it starts at {} and ends at {last}): the state \
         cannot be rebuilt",
        first.map_or("none".to_string(), |f| f.to_string())
    )]
    NoSnapshotAndNoWholeLog {
        named: Lsn,
        first: Option<Lsn>,
        last: Lsn,
    },
    #[error(
        "the log in {} ends at record {last} but the snapshot was taken at {snapshot}: the \
         log after it is missing (is logs_path right?)",
        dir.display()
    )]
    LogEndsBeforeSnapshot {
        dir: PathBuf,
        last: Lsn,
        snapshot: Lsn,
    },
    #[error("the log starts at record {first} but the snapshot needs it from {needed}")]
    LogStartsAfterSnapshot { first: Lsn, needed: Lsn },
    #[error(
        "the log holds records up to {last} but none after the snapshot at {snapshot} could \
         be read"
    )]
    LogUnreadableAfterSnapshot { last: Lsn, snapshot: Lsn },
    #[error("log record {lsn} does not decode")]
    BadRecord { lsn: Lsn },
}
