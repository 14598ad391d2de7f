//! The one durability path, for every writer (cairn-engine calls it for the memcached
//! connections, the gRPC KV service and a replica's apply): wait for room, mutate the store,
//! then wait until what the request wrote is safe in the mode in force, and only then reply.
//!
//! ```text
//!   front end task (tokio), through cairn-engine:
//!     persist.room().await                 backpressure: parks while the log's buffer is
//!                                          full; no lock held, no thread blocked
//!     store.entry_reporting(..) /          each mutation appends its record under the shard
//!     store.flush_all_reporting()          lock (never waiting); its LSN comes back as the
//!                                          revision of the call
//!     let t = Ticket::from_revision(rev)   the newest of them
//!     persist.acknowledged(t).await?       sync: the durable mark covers t (fdatasync'd)
//!                                          async: the written mark covers t (in the kernel)
//!     reply
//! ```
//!
//! Both waits are futures on the log's one waiter registry ([`cairn_wal::waiters`]): a task
//! that waits is parked, its worker thread serves other connections, and the log's syncer
//! wakes it once its own LSN is covered. Nothing here blocks a thread or holds a lock.
//!
//! A [`Ticket`] is the highest LSN the request's mutations were logged at. The store calls
//! the log through [`crate::sink`] synchronously, under the shard lock, and hands each LSN
//! back to its caller as the mutation's revision (`Store::entry_reporting`), so the ticket is
//! a value the writer holds, not something collected on the side.
//!
//! Copies of a value between the socket and the disk, sync mode with O_DIRECT (the server's
//! default), two:
//! - the kernel's read from the socket lands in the connection's input buffer, and the parser
//!   borrows the value from there (`Request::Store::value` is a `Cow::Borrowed` of the input,
//!   cairn-proto), no copy. On the io_uring engine's multishot receives (the default where
//!   the kernel has them) the kernel's read lands in a buffer the thread provides and each
//!   completion is copied out of it into the connection's arrivals, which become its input
//!   (cairn-server's `uring` module): one more copy, before the two below (two more when a
//!   partial request was left in the input: the arrivals are then copied onto it);
//! - (1) input buffer -> the item in the store's segment (`Entry::store`);
//! - (2) the item -> the log's pending buffer, framed with its CRC under the log's lock
//!   (`Log::append_parts`, the value passed as a part of its own, not copied before);
//! - the pending buffer is 4 KiB-aligned and its records are laid out at the offset within a
//!   disk block where they land (`PendingBuf` in cairn-wal), so the O_DIRECT
//!   `pwritev2(RWF_DSYNC)` is made from it and the device reads it by DMA, no copy. Only the
//!   file's partly written last block (under 4 KiB, once per write, not per value) is copied
//!   in front of the records.
//!
//! Exceptions, each with a third copy into the O_DIRECT staging buffer (`DirectBuf::stage`,
//! counted by `LogStats::staged_writes`): a write whose batch spans more than one chunk of
//! the pending buffer (more than 1 MiB pending, or a record of 64 KiB or more among others),
//! and the first write into a new segment. Async mode (and sync mode without O_DIRECT)
//! writes (2) with `pwritev`: the kernel copies it into the page cache instead.
//!
//! Watermarks for watchers: [`Persistence::safe_lsn`] is the highest LSN that is safe in the
//! mode in force (durable in sync mode, written in async mode), and
//! [`Persistence::on_advance`] calls back after every advance, on the thread that made it (the
//! log's syncer, or a connection thread in [`Persistence::write_ready`], async mode). A
//! revision a watcher was shown up to that mark is never handed out again after a crash of
//! the kind the mode protects against.

use std::sync::atomic::Ordering;

use cairn_wal::{Listener, Lsn, Marks, Reach, WalError};

use crate::error::PersistError;
use crate::gate::ReplicationGate;
use crate::mode::Mode;
use crate::persistence::Persistence;

/// What a request's writes must reach before they are acknowledged: the highest LSN its
/// mutations were logged at, or the mark of a failed append.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ticket {
    /// 0: nothing was written; `Lsn::MAX`: an append failed (never safe).
    lsn: Lsn,
}

impl Ticket {
    /// Nothing to wait for.
    pub const NONE: Ticket = Ticket { lsn: 0 };

    /// Whether the request wrote nothing.
    #[inline]
    pub fn is_empty(self) -> bool {
        self.lsn == 0
    }

    /// Whether an append failed: the write must not be acknowledged.
    #[inline]
    pub fn failed(self) -> bool {
        self.lsn == Lsn::MAX
    }

    /// The LSN to wait for, if any (none for an empty or failed ticket).
    #[inline]
    pub fn lsn(self) -> Option<Lsn> {
        (!self.is_empty() && !self.failed()).then_some(self.lsn)
    }

    /// Both tickets' writes (a connection merges those of a batch of requests).
    #[inline]
    pub fn merge(self, other: Ticket) -> Ticket {
        Ticket {
            lsn: self.lsn.max(other.lsn),
        }
    }

    /// The ticket of writes whose newest revision the store reported as `revision`
    /// (`Store::entry_reporting`, `Store::flush_all_reporting`): with a log, revisions are
    /// LSNs; 0 is nothing written and `Revision::MAX` a failed append (the sink's answer then).
    #[inline]
    pub fn from_revision(revision: cairn_store::Revision) -> Ticket {
        Ticket { lsn: revision }
    }
}

impl Persistence {
    /// Whether the log's pending buffer has room now (the cheap check before [`Self::room`]).
    pub fn has_room(&self) -> bool {
        self.log.room().is_none()
    }

    /// Resolves once the log's pending buffer is below its bound (at once if it is):
    /// backpressure for a front end, awaited before a write. It parks only the caller's task,
    /// so reads go on. A stopped log ends the wait too (the write is then refused).
    pub async fn room(&self) {
        while let Some(wait) = self.log.room() {
            if wait.await.is_err() {
                return;
            }
        }
    }

    /// Resolves once everything `ticket` covers is safe in the mode in force now: durable
    /// (sync) or handed to the kernel (async). An error means the writes may not be safe and
    /// must not be acknowledged (the log failed, or an append did).
    pub async fn acknowledged(&self, ticket: Ticket) -> Result<(), PersistError> {
        if ticket.failed() {
            return Err(self.refusal());
        }
        let Some(lsn) = ticket.lsn() else {
            return Ok(());
        };
        match self.mode() {
            Mode::Sync => self.log.durable(lsn).await,
            _ => self.log.written(lsn).await,
        }
        .map_err(PersistError::from)?;
        match self.replication.get().and_then(|g| g.reached(lsn)) {
            Some(wait) => wait.await.map_err(PersistError::Replication),
            None => Ok(()),
        }
    }

    /// Async mode: hands what the log holds to the kernel from this thread now, and wakes
    /// the requests waiting for it (see `cairn_wal::Log::write_ready`). A connection thread
    /// calls it before it sleeps, after [`crate::writes_before_sleeping`] at its start: its
    /// requests' writes then go out as one write per round of its event loop, with no hop to
    /// the log's syncer thread and back. Never waits for the disk; a no-op in sync mode.
    pub fn write_ready(&self) {
        self.log.write_ready();
    }

    /// Installs the replication gate (once; later calls are ignored).
    pub fn set_replication_gate(&self, gate: std::sync::Arc<dyn ReplicationGate>) {
        let _ = self.replication.set(gate);
    }

    /// Why the replication gate refuses client writes now (this node is a replica, or a
    /// primary whose lease lapsed), if it does. With [`Self::write_refusal`], what
    /// cairn-engine checks before every client write.
    pub fn replication_refusal(&self) -> Option<String> {
        self.replication.get().and_then(|g| g.refusal())
    }

    /// The log's id (random, kept across restarts): revisions compare within one log only.
    pub fn log_id(&self) -> u64 {
        self.log.log_id()
    }

    /// Resolves once everything `ticket` covers is durable, whatever the mode (a fence: in
    /// async mode it asks for an fdatasync at once).
    pub async fn durable(&self, ticket: Ticket) -> Result<(), PersistError> {
        if ticket.failed() {
            return Err(self.refusal());
        }
        match ticket.lsn() {
            Some(lsn) => self.log.durable(lsn).await.map_err(PersistError::from),
            None => Ok(()),
        }
    }

    /// The highest LSN handed to the kernel (survives a crash of the process).
    pub fn written_lsn(&self) -> Lsn {
        self.log.written_lsn()
    }

    /// The highest LSN fdatasync'd (survives a power loss).
    pub fn durable_lsn(&self) -> Lsn {
        self.log.durable_lsn()
    }

    /// Resolves once `lsn` is safe in the mode in force now (the mark
    /// [`Self::acknowledged`] waits for, without the replication gate), or with the error
    /// that stopped the log. For a front end that keeps one wait for many requests (the
    /// io_uring engine's connection threads).
    pub fn safe_reach(&self, lsn: Lsn) -> Reach<'_> {
        match self.mode() {
            Mode::Sync => self.log.durable(lsn),
            _ => self.log.written(lsn),
        }
    }

    /// The highest LSN safe in the mode in force: what a watcher may be shown.
    pub fn safe_lsn(&self) -> Lsn {
        match self.mode() {
            Mode::Sync => self.log.durable_lsn(),
            _ => self.log.written_lsn(),
        }
    }

    /// Registers a callback run after every advance of the written or durable mark (or once,
    /// with the error, when the log fails). Keep it short and never block in it; read [`Self::safe_lsn`] or pick the mark by [`Self::mode`].
    pub fn on_advance(&self, f: Listener) {
        self.log.on_advance(f);
    }

    /// Why writes are refused, if they are: the error of the failed append, or the one that
    /// poisoned the log. Cheap when they are not: one atomic load.
    pub fn write_refusal(&self) -> Option<WalError> {
        if !self.sink.refusing.load(Ordering::Relaxed) {
            return None;
        }
        let failed = self.sink.failed.lock().clone();
        Some(
            failed
                .or_else(|| self.log.poisoned())
                .unwrap_or(WalError::Closed),
        )
    }

    fn refusal(&self) -> PersistError {
        PersistError::Log(self.write_refusal().unwrap_or(WalError::Closed))
    }

    /// Makes the refusal flag follow the log: called once at open.
    pub(crate) fn watch_log_failure(&self) {
        let refusing = std::sync::Arc::clone(&self.sink.refusing);
        self.log
            .on_advance(Box::new(move |r: Result<Marks, &WalError>| {
                if let Err(e) = r {
                    tracing::error!("command log failed, refusing writes from now on: {e}");
                    refusing.store(true, Ordering::SeqCst);
                }
            }));
    }
}
