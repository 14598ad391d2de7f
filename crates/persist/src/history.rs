//! Reading old log records back for the gRPC watch: the revisions older than its in-memory
//! history ([`Persistence::read_history`]), and the records of given revisions
//! ([`Persistence::read_revisions`]): an event in memory names its revision (= LSN) only, and
//! a value its item no longer holds comes from its record.
//!
//! ```text
//!   read_history(from, upto) ─(history lock, shared)─> Log::read_range ─> record::decode ─> f
//!   read_revisions([r1 < r2 < ...]) ─> runs of nearby revisions, one Log::read_range each
//!   checkpoint dropping segments ─(history lock, exclusive)─> Log::truncate_before
//! ```
//!
//! `Log::read_range` starts each read at the log's sparse index point before it (cairn-wal's
//! `index`), and reads up to the written mark (the durable one in sync mode): what the watch
//! publishes. Non-goals: the watch itself (cairn-watch).

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

/// How a history read stops inside [`cairn_wal::Log::read_range`].
enum ReadStop {
    /// The first record read had this LSN, past the one asked for.
    Compacted(Lsn),
    Failed(PersistError),
}

impl From<WalError> for ReadStop {
    fn from(e: WalError) -> Self {
        ReadStop::Failed(e.into())
    }
}

impl From<ReadStop> for HistoryError {
    fn from(s: ReadStop) -> Self {
        match s {
            ReadStop::Compacted(first) => HistoryError::Compacted { first },
            ReadStop::Failed(e) => HistoryError::Failed(e),
        }
    }
}

/// Revisions closer than this to the previous one asked for are read in the same run (the
/// records between are read and skipped): fewer reads, each a little longer.
const RUN_GAP: Lsn = 64;

impl Persistence {
    /// Calls `f` with the records from `from` to `upto` (at most the written mark) in order,
    /// at most `max_records` of them or about `max_bytes` of payload, and returns the LSN to
    /// continue from. The watch reads revisions older than its in-memory history this way.
    /// Compacted when a checkpoint already dropped `from`.
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
        self.log
            .read_range::<ReadStop>(from, upto, |lsn, payload| {
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
                Ok(count < max_records && bytes < max_bytes)
            })?;
        Ok(next)
    }

    /// Calls `f` with the record of each revision in `revisions` (in increasing order) that
    /// the log holds, in that order; nearby revisions are read in one run. A revision the log
    /// no longer holds (older than its first record) is skipped: `f` is not called for it.
    pub fn read_revisions(
        &self,
        revisions: &[Lsn],
        mut f: impl FnMut(Lsn, record::Record<'_>),
    ) -> Result<(), HistoryError> {
        debug_assert!(revisions.windows(2).all(|w| w[0] < w[1]));
        let _no_truncation = self.history.read();
        let first = self.log.first_lsn();
        let wanted = &revisions[revisions.partition_point(|&r| r < first)..];
        let mut i = 0;
        while i < wanted.len() {
            let mut j = i + 1;
            while j < wanted.len() && wanted[j] - wanted[j - 1] <= RUN_GAP {
                j += 1;
            }
            let run = &wanted[i..j];
            let mut k = 0;
            self.log
                .read_range::<ReadStop>(run[0], run[run.len() - 1], |lsn, payload| {
                    if lsn == run[k] {
                        let rec = record::decode(payload).ok_or_else(|| {
                            ReadStop::Failed(Unrecoverable::BadRecord { lsn }.into())
                        })?;
                        f(lsn, rec);
                        k += 1;
                    }
                    Ok(k < run.len())
                })?;
            i = j;
        }
        Ok(())
    }

    /// The oldest revision the command log holds: a watch from an older one is compacted.
    pub fn first_lsn(&self) -> Lsn {
        self.log.first_lsn()
    }
}
