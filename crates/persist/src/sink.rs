//! The mutation seam: every change of the store becomes a log record, whose LSN is the
//! mutation's revision.
//!
//! ```text
//!   Store::entry(..) ── shard lock held ──> LogSink::on_mutation(&Mutation) -> revision (LSN)
//!        record::encode_head(head) ──> Log::append_parts([head, value]) ──> LSN
//!        ──> observers (lsn, &Mutation)      (still under the shard lock)
//!        ──> the LSN goes back to the store as the revision, and from there to the caller
//!            of `Store::entry_reporting` (a write's own changes only: nobody waits for the
//!            removals the store decides itself, expiry and eviction), which makes it the
//!            write's [`crate::Ticket`]
//! ```
//!
//! Nothing here waits: the append takes the log's lock for the time of one copy and returns
//! (the log never waits for the disk in an append). A slow disk therefore never holds a shard
//! lock; the front end waits for the ticket afterwards, with no lock held.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use cairn_store::{Mutation, MutationSink, Revision};
use cairn_wal::{Log, Lsn, WalError};
use parking_lot::{Mutex, RwLock};

use crate::record;

/// Sees every logged mutation with its LSN, under the store's shard lock: for one key, calls
/// come in LSN order. It must be quick and must never block (it holds up every reader of that
/// shard). Registered with [`crate::Persistence::add_observer`]; a watch hub is one.
pub trait LogObserver: Send + Sync {
    fn on_logged(&self, lsn: Lsn, mutation: &Mutation<'_>);
    /// `lsn` holds a record of persistence's own, no mutation (a checkpoint restating a
    /// scheduled flush): every LSN is handed to observers once, either way.
    fn on_no_event(&self, _lsn: Lsn) {}
}

thread_local! {
    /// Where a record's head (everything but the value) is encoded; reused.
    static HEAD: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// During recovery: the LSN of the record being replayed, which is the revision the store
    /// gives the item (the sink is not recording then).
    static REPLAY_REVISION: Cell<Lsn> = const { Cell::new(0) };
}

/// Runs `f` (which applies one replayed record or snapshot item to the store) with `revision`
/// as the revision the store gives what `f` changes.
pub(crate) fn with_replay_revision<R>(revision: Lsn, f: impl FnOnce() -> R) -> R {
    REPLAY_REVISION.with(|c| c.set(revision));
    let r = f();
    REPLAY_REVISION.with(|c| c.set(0));
    r
}

/// The mutation hook: turns every client-visible change into a log record.
pub(crate) struct LogSink {
    pub log: Arc<Log>,
    /// Off during recovery (replayed changes are already in the log).
    pub recording: AtomicBool,
    /// The first append error; further writes are refused.
    pub failed: Mutex<Option<WalError>>,
    /// Set once writes are refused (an append failed, or the log was poisoned).
    pub refusing: Arc<AtomicBool>,
    observers: RwLock<Vec<Arc<dyn LogObserver>>>,
    /// Whether `observers` is non-empty, read without the lock.
    observed: AtomicBool,
}

impl LogSink {
    pub fn new(log: Arc<Log>) -> LogSink {
        LogSink {
            log,
            recording: AtomicBool::new(false),
            failed: Mutex::new(None),
            refusing: Arc::new(AtomicBool::new(false)),
            observers: RwLock::new(Vec::new()),
            observed: AtomicBool::new(false),
        }
    }

    pub fn add_observer(&self, o: Arc<dyn LogObserver>) {
        self.observers.write().push(o);
        self.observed.store(true, Ordering::Release);
    }

    /// Appends a record of persistence's own (no mutation), telling observers its LSN holds
    /// no event.
    pub fn append_bookkeeping(&self, payload: &[u8]) -> Result<Lsn, cairn_wal::WalError> {
        let lsn = self.log.append(payload)?;
        if self.observed.load(Ordering::Acquire) {
            for o in self.observers.read().iter() {
                o.on_no_event(lsn);
            }
        }
        Ok(lsn)
    }
}

impl MutationSink for LogSink {
    fn on_mutation(&self, m: &Mutation<'_>) -> Revision {
        if !self.recording.load(Ordering::Relaxed) {
            return REPLAY_REVISION.with(Cell::get);
        }
        let appended = HEAD.with(|h| {
            let mut head = h.borrow_mut();
            let value = record::encode_head(&mut head, m);
            self.log.append_parts(&[&head, value])
        });
        match appended {
            Ok(lsn) => {
                if self.observed.load(Ordering::Acquire) {
                    for o in self.observers.read().iter() {
                        o.on_logged(lsn, m);
                    }
                }
                lsn
            }
            Err(e) => {
                let mut failed = self.failed.lock();
                if failed.is_none() {
                    tracing::error!("command log append failed, refusing writes: {e}");
                    *failed = Some(e);
                }
                self.refusing.store(true, Ordering::SeqCst);
                // No watcher ever sees it, and the front end, whose ticket this revision
                // becomes, answers with an error instead of acknowledging.
                Revision::MAX
            }
        }
    }
}
