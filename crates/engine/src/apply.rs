//! Applying a write: the front end's store calls run inside [`Engine::apply`] through a
//! [`Tx`], which keeps the newest revision they were given; that revision (with a log, the
//! LSN of the newest record) is the write's [`Ack`], returned as a value.
//!
//! ```text
//!   apply(|tx| {                                      the front end's meaning of its command
//!       tx.entry(key, now, |e| e.peek / e.store / e.delete ...)
//!           └─ Store::entry_reporting: shard lock ─> mutation sink ─> log record, hub
//!              ─> its revision (the LSN) ─> tx keeps the newest
//!       tx.flush_all() ...
//!   }) ──> (what the closure returned, Ack)            Ack::NONE without a log
//! ```
//!
//! Removals the store decides itself (an expired item found, an eviction to make room) are
//! not the write's and need no acknowledgement: a write that evicted has a later record of its
//! own, and an expired item stays expired after a crash. So a read that expires an item
//! never waits. A failed append gives the revision `Revision::MAX`: an [`Ack`] that is never
//! acknowledged.
//!
//! Non-goals: waiting (crate::acknowledge); refusing (crate::admit).

use std::cell::Cell;

use cairn_persist::Ticket;
use cairn_store::{Entry, Revision, Store, UnixSecs};

use crate::engine::Engine;

/// What a write's reply waits for: the newest log record its changes were given (none
/// without a log, or for a write that changed nothing). Acks merge, so a memcached connection
/// waits once for a pipelined batch of requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ack(pub(crate) Ticket);

impl Ack {
    /// Nothing to wait for.
    pub const NONE: Ack = Ack(Ticket::NONE);

    /// Whether there is nothing to wait for.
    #[inline]
    pub fn is_empty(self) -> bool {
        self.0.is_empty()
    }

    /// Both acks' writes.
    #[inline]
    pub fn merge(self, other: Ack) -> Ack {
        Ack(self.0.merge(other.0))
    }
}

/// A write's handle on the store inside [`Engine::apply`]: the store calls that change
/// something go through it, and it keeps the newest revision they were given.
pub struct Tx<'e> {
    /// The engine's store.
    store: &'e Store,
    /// The newest revision of this write's own changes so far (0: none).
    revision: Cell<Revision>,
}

impl Tx<'_> {
    /// [`Store::entry`]: runs `f` with exclusive access to one key; its changes join the
    /// write's acknowledgement.
    #[inline]
    pub fn entry<R>(&self, key: &[u8], now: UnixSecs, f: impl FnOnce(&mut Entry<'_>) -> R) -> R {
        let (r, revision) = self.store.entry_reporting(key, now, f);
        self.keep(revision);
        r
    }

    /// [`Store::flush_all`], joining the write's acknowledgement.
    pub fn flush_all(&self) {
        self.keep(self.store.flush_all_reporting());
    }

    /// [`Store::schedule_flush`], joining the write's acknowledgement.
    pub fn schedule_flush(&self, at: UnixSecs) {
        self.keep(self.store.schedule_flush_reporting(at));
    }

    /// The store, for what is not a change of this write (reads, visits, settings).
    #[inline]
    pub fn store(&self) -> &Store {
        self.store
    }

    #[inline]
    fn keep(&self, revision: Revision) {
        self.revision.set(self.revision.get().max(revision));
    }
}

impl Engine {
    /// Runs `f`, a write's store calls, and returns what it returned with the write's [`Ack`]
    /// (to await with [`Engine::acknowledged`] before the reply). Synchronous: call
    /// [`Engine::admit`] and [`Engine::resolve`] before, no lock is held after.
    #[inline]
    pub fn apply<R>(&self, f: impl FnOnce(&Tx<'_>) -> R) -> (R, Ack) {
        let tx = Tx {
            store: &self.store,
            revision: Cell::new(0),
        };
        let r = f(&tx);
        // Without a log the revisions are the hub's or the store's count: nothing to wait for.
        let ack = match self.persist {
            Some(_) => Ack(Ticket::from_revision(tx.revision.get())),
            None => Ack::NONE,
        };
        (r, ack)
    }
}
