//! The newest published revision, and the readers waiting for it to move. A publish is two
//! atomics; the `Notify` is touched only while a reader is counted as waiting
//! (docs/decisions/0016-the-hub-wakes-readers-only-while-one-waits.md).
//!
//! ```text
//!   writer (hub) ── set(r): store revision (SeqCst) ── waiting > 0? ──> notify_waiters
//!   reader (crate::subscriber) ── changed_from(seen): register with notify, count itself in
//!       `waiting`, load revision (SeqCst) ── != seen? return : sleep until notified, again
//! ```
//!
//! Non-goals: what is published (crate::hub) and where a reader reads it (crate::history).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use cairn_store::Revision;
use tokio::sync::Notify;

/// See the module doc.
pub(crate) struct Published {
    /// The newest published revision.
    revision: AtomicU64,
    /// Wakes readers waiting for `published` to move; taken only while `waiting` > 0, so
    /// that a write nobody waits for pays two atomics, not a lock (tokio 1.54's watch
    /// channel took nine a write: 5-8% of a persistence-off set's CPU,
    /// docs/decisions/0016-the-hub-wakes-readers-only-while-one-waits.md).
    notify: Notify,
    /// Readers between registering with `notify` and being woken
    /// ([`Published::changed_from`]).
    waiting: AtomicUsize,
}

impl Published {
    /// Published up to `start`, no reader waiting.
    pub(crate) fn new(start: Revision) -> Published {
        Published {
            revision: AtomicU64::new(start),
            notify: Notify::new(),
            waiting: AtomicUsize::new(0),
        }
    }

    /// The newest published revision: every event up to it can be read.
    #[inline]
    pub(crate) fn get(&self) -> Revision {
        self.revision.load(Ordering::Acquire)
    }

    /// The newest published revision, for the one who moves it (under the lock that orders
    /// the moves).
    pub(crate) fn get_relaxed(&self) -> Revision {
        self.revision.load(Ordering::Relaxed)
    }

    /// Moves `published` and wakes the readers waiting for it.
    ///
    /// SeqCst on both sides (here: store, then load `waiting`; in
    /// [`Published::changed_from`]: register, add to `waiting`, then load `published`): in
    /// their one total order either this load sees the reader counted, and wakes it, or the
    /// reader's load comes after this store, and sees the new revision without sleeping.
    pub(crate) fn set(&self, revision: Revision) {
        self.revision.store(revision, Ordering::SeqCst);
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.notify.notify_waiters();
        }
    }

    /// Waits until the published revision is no longer `seen`. Cancel safe: dropped, it
    /// leaves no count behind.
    pub(crate) async fn changed_from(&self, seen: Revision) {
        loop {
            let notified = self.notify.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            let _counted = Waiting::count(&self.waiting);
            if self.revision.load(Ordering::SeqCst) != seen {
                return;
            }
            notified.await;
        }
    }

    /// Readers waiting now (for tests).
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }
}

/// One reader counted in [`Published::waiting`] while it lives.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn count(waiting: &'a AtomicUsize) -> Waiting<'a> {
        waiting.fetch_add(1, Ordering::SeqCst);
        Waiting(waiting)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
