//! Reading old log records back, for the gRPC watch's revisions older than its in-memory
//! history ([`Persistence::read_history`]).
//!
//! ```text
//!   read_history(from, upto) ─(history lock, shared)─> Log::read_from ─> record::decode ─> f
//!   checkpoint dropping segments ─(history lock, exclusive)─> Log::truncate_before
//! ```
//!
//! Non-goals: the watch itself (cairn-grpc).

use cairn_wal::{Lsn, WalError};

use crate::error::{PersistError, Unrecoverable};
use crate::persistence::Persistence;
use crate::record;

/// Why [`Persistence::read_history`] could not answer.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The log no longer holds `from`: a checkpoint dropped the segments before `first`.
    #[error("the command log starts at record {first}")]
    Compacted { first: Lsn },
    #[error(transparent)]
    Failed(#[from] PersistError),
}

/// How a history read stops inside [`cairn_wal::Log::read_from`].
enum ReadStop {
    /// Enough records (or past `upto`): not an error.
    Full,
    /// The first record read had this LSN, past the one asked for.
    Compacted(Lsn),
    Failed(PersistError),
}

impl From<WalError> for ReadStop {
    fn from(e: WalError) -> Self {
        ReadStop::Failed(e.into())
    }
}

impl Persistence {
    /// Calls `f` with the durable records from `from` to `upto` in order, at most `max_records`
    /// of them or about `max_bytes` of payload, and returns the LSN to continue from. The
    /// watch reads revisions older than its in-memory history this way. Compacted when a
    /// checkpoint already dropped `from`.
    ///
    /// A read scans its first segment from the start (segments have no index), so a reader
    /// far behind pays a scan of up to one segment per call.
    pub fn read_history(
        &self,
        from: Lsn,
        upto: Lsn,
        max_records: usize,
        max_bytes: usize,
        mut f: impl FnMut(Lsn, record::Record<'_>),
    ) -> Result<Lsn, HistoryError> {
        let _no_truncation = self.history.read();
        let mut next = from;
        let mut bytes = 0usize;
        let mut count = 0usize;
        let r = self.log.read_from::<ReadStop>(from, |lsn, payload| {
            if lsn > upto || count >= max_records || bytes >= max_bytes {
                return Err(ReadStop::Full);
            }
            if lsn != next {
                // The first record read is past `from`: the segments holding it are gone.
                return Err(ReadStop::Compacted(lsn));
            }
            let rec = record::decode(payload)
                .ok_or_else(|| ReadStop::Failed(Unrecoverable::BadRecord { lsn }.into()))?;
            f(lsn, rec);
            next = lsn + 1;
            count += 1;
            bytes += payload.len();
            Ok(())
        });
        match r {
            Ok(()) | Err(ReadStop::Full) => Ok(next),
            Err(ReadStop::Compacted(first)) => Err(HistoryError::Compacted { first }),
            Err(ReadStop::Failed(e)) => Err(HistoryError::Failed(e)),
        }
    }
}
