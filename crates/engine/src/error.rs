//! [`WriteError`]: the one list of why a write was refused or not acknowledged, which every
//! front end words its own way (memcached: `SERVER_ERROR writes refused: ...`; gRPC: a status
//! code with the same reason).
//!
//! ```text
//!   admit()        LogFailed, NotPrimary        nothing changed; the client may go elsewhere
//!   resolve(key)   FlashRead                    nothing changed; the client may retry
//!   the store      Store (-I too large, -M full) nothing changed (a set also drops the old
//!                                               value, as memcached does)
//!   acknowledged() NotSafe, Replication         changed, but not safe: never acknowledged
//! ```
//!
//! Non-goals: the wording (each front end's), command outcomes such as NOT_FOUND or a
//! failed compare (the front end's meaning of its commands).

use cairn_persist::PersistError;
use cairn_store::StoreError;
use cairn_wal::WalError;

/// Why a write did not happen, or happened and may not be acknowledged.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// Refused before it ran: the command log failed (an append, an fdatasync, a full disk),
    /// and no write is taken any more.
    #[error("{0}")]
    LogFailed(WalError),
    /// Refused before it ran by the replication gate: this node is a replica, or a primary
    /// whose lease lapsed. The gate's own words.
    #[error("{0}")]
    NotPrimary(String),
    /// Refused before it ran: the key's item may be on flash, and its read could not be done
    /// (the reader stopping, a busy ring); running the command would take the key for absent.
    #[error("{0}")]
    FlashRead(std::io::Error),
    /// The store refused the value: larger than the item size limit (`-I`), or no memory for
    /// it with eviction off (`-M`).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Applied, but the log could not make it safe (it failed, or the append did): the reply
    /// must not acknowledge it.
    #[error("{0}")]
    NotSafe(PersistError),
    /// Applied and safe here, but the replication gate withheld the acknowledgement: sync
    /// replication found no replica holding it in time, or the lease lapsed meanwhile.
    #[error("{0}")]
    Replication(String),
}

impl WriteError {
    /// Whether the write was refused before it ran, so nothing changed.
    pub fn refused(&self) -> bool {
        !matches!(self, WriteError::NotSafe(_) | WriteError::Replication(_))
    }
}

impl From<PersistError> for WriteError {
    /// A failed wait for an acknowledgement.
    fn from(e: PersistError) -> WriteError {
        match e {
            PersistError::Replication(why) => WriteError::Replication(why),
            e => WriteError::NotSafe(e),
        }
    }
}
