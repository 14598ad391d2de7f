//! The mutation seam: every client-visible change of the store becomes a log record.
//!
//! ```text
//!   Store::entry(..) ── shard lock held ──> LogSink::on_mutation(&Mutation)
//!        record::encode_head(head) ──> Log::append_parts([head, value]) ──> LSN
//!        ──> observers (lsn, &Mutation)      (still under the shard lock)
//!        ──> the LSN joins this thread's ticket (see crate::durability)
//! ```
//!
//! Nothing here waits: the append takes the log's lock for the time of one copy and returns
//! (the log never waits for the disk in an append). A slow disk therefore never holds a shard
//! lock; the front end waits for the ticket afterwards, with no lock held.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use cairn_store::{Mutation, MutationSink};
use cairn_wal::{Log, Lsn, WalError};
use parking_lot::{Mutex, RwLock};

use crate::record;

/// Sees every logged mutation with its LSN, under the store's shard lock: for one key, calls
/// come in LSN order. It must be quick and must never block (it holds up every reader of that
/// shard). Registered with [`crate::Persistence::add_observer`]; a watch hub is one.
pub trait LogObserver: Send + Sync {
    fn on_logged(&self, lsn: Lsn, mutation: &Mutation<'_>);
}

thread_local! {
    /// The highest LSN appended by mutations on this thread since the ticket was last taken
    /// (`Lsn::MAX` after a failed append).
    pub(crate) static TICKET_LSN: Cell<Lsn> = const { Cell::new(0) };
    /// Where a record's head (everything but the value) is encoded; reused.
    static HEAD: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
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
}

impl MutationSink for LogSink {
    fn on_mutation(&self, m: &Mutation<'_>) {
        if !self.recording.load(Ordering::Relaxed) {
            return;
        }
        let appended = HEAD.with(|h| {
            let mut head = h.borrow_mut();
            let value = record::encode_head(&mut head, m);
            self.log.append_parts(&[&head, value])
        });
        match appended {
            Ok(lsn) => {
                TICKET_LSN.with(|c| c.set(c.get().max(lsn)));
                if self.observed.load(Ordering::Acquire) {
                    for o in self.observers.read().iter() {
                        o.on_logged(lsn, m);
                    }
                }
            }
            Err(e) => {
                let mut failed = self.failed.lock();
                if failed.is_none() {
                    tracing::error!("command log append failed, refusing writes: {e}");
                    *failed = Some(e);
                }
                self.refusing.store(true, Ordering::SeqCst);
                // The front end answers with an error instead of acknowledging.
                TICKET_LSN.with(|c| c.set(Lsn::MAX));
            }
        }
    }
}
