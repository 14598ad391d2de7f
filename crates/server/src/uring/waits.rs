//! Requests on a connection thread waiting for their writes to be safe (durable in sync mode,
//! written in async mode): the thread keeps them, sorted by LSN, and holds one registration in
//! the log's waiter registry for the oldest of them, so a request's wait takes no lock that
//! other threads take too (docs/decisions/0014-one-wait-a-thread.md). Not here: the log's
//! registry itself (cairn-wal) and the acknowledgement (`Persistence::acknowledged`).
//!
//! ```text
//!   connection: until_safe(p, lsn).await ─> SAFE_WAITS.waiting (lsn, waker), in LSN order
//!   run, each turn and after each own log write: settle_safe_waits
//!       ─> wakes the covered ones (the ready list) ─> one Reach for the oldest left
//!   the log's syncer moves the mark ─> MarkWaker ─> Inbox.mark_moved + eventfd (or, on the
//!       thread itself, MARK_WOKEN_HERE)
//! ```

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use super::executor::{Shared, READY};

/// Wakes a connection thread whose requests wait for the log's safe mark ([`SafeWaits`]):
/// the one registration they share in the log's waiter registry holds it.
pub(super) struct MarkWaker(pub(super) Arc<Shared>);

impl Wake for MarkWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // On its own thread (async mode's `write_ready` moved the mark) the loop settles the
        // waits right after; from another thread (the log's syncer) it must wake the thread.
        let owner = Arc::as_ptr(&self.0) as usize;
        if READY.with(|r| r.try_borrow().is_ok_and(|r| r.owner == owner)) {
            MARK_WOKEN_HERE.with(|w| w.set(true));
            return;
        }
        self.0.inbox.lock().mark_moved = true;
        self.0.notify();
    }
}

/// The requests on a connection thread waiting for their writes to be safe ([`until_safe`]),
/// sorted by LSN, with their tasks' wakers. They share one registration in the log's waiter
/// registry, for the oldest of them (`settle_safe_waits`), so that a request's wait takes no
/// lock the other threads take too, and the log's syncer wakes the thread once an advance
/// instead of each request (each was a registry entry, locked three times, and an inbox
/// push: docs/decisions/0014-one-wait-a-thread.md).
#[derive(Default)]
pub(super) struct SafeWaits {
    waiting: VecDeque<(cairn_wal::Lsn, Waker)>,
    /// The log stopped (the shared wait ended with its error): every wait ends, and each
    /// request finds the error in `Persistence::acknowledged`.
    stopped: bool,
}

/// Resolves once `lsn` is safe in the mode in force (or the log stopped). A connection awaits
/// it before `Persistence::acknowledged`, which then finds the mark reached without a wait of
/// its own. At once on a thread that is not one of this engine's (tokio's engine waits in
/// `acknowledged` alone).
pub(crate) fn until_safe(p: &cairn_persist::Persistence, lsn: cairn_wal::Lsn) -> UntilSafe<'_> {
    UntilSafe {
        p,
        lsn,
        registered: false,
    }
}

pub(crate) struct UntilSafe<'a> {
    p: &'a cairn_persist::Persistence,
    lsn: cairn_wal::Lsn,
    registered: bool,
}

impl Future for UntilSafe<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if this.p.safe_lsn() >= this.lsn {
            return Poll::Ready(());
        }
        SAFE_WAITS.with(|w| {
            let mut w = w.borrow_mut();
            let Some(w) = w.as_mut() else {
                return Poll::Ready(());
            };
            if w.stopped {
                return Poll::Ready(());
            }
            // Polled again before its LSN is safe (a stray wake): its entry is still there.
            if !this.registered {
                this.registered = true;
                // A thread's LSNs grow as its requests run, so this is the back, or near it.
                let at = match w.waiting.back() {
                    Some((last, _)) if *last > this.lsn => {
                        w.waiting.partition_point(|(l, _)| *l <= this.lsn)
                    }
                    _ => w.waiting.len(),
                };
                w.waiting.insert(at, (this.lsn, cx.waker().clone()));
            }
            Poll::Pending
        })
    }
}

/// The thread's one registration in the log's waiter registry: the LSN it waits for (the
/// oldest waiting request's) and the wait.
pub(super) type SafeWatch<'p> = Option<(cairn_wal::Lsn, Pin<Box<cairn_wal::Reach<'p>>>)>;

/// Wakes the thread's requests whose writes are safe now, and keeps the thread's one
/// registration for the oldest of the rest, polled with `waker` (a [`MarkWaker`]) when it is
/// made and when that waker was woken (`woken`): in between it stands as it is, and looking
/// at it would take the registry's lock.
pub(super) fn settle_safe_waits<'p>(
    p: &'p cairn_persist::Persistence,
    watch: &mut SafeWatch<'p>,
    waker: &Waker,
    mut woken: bool,
) {
    woken |= MARK_WOKEN_HERE.with(|w| w.take());
    SAFE_WAITS.with(|w| {
        let mut w = w.borrow_mut();
        let Some(w) = w.as_mut() else { return };
        loop {
            let safe = p.safe_lsn();
            while w
                .waiting
                .front()
                .is_some_and(|(lsn, _)| *lsn <= safe || w.stopped)
            {
                if let Some((_, task)) = w.waiting.pop_front() {
                    // Its own thread's task: a push onto the ready list.
                    task.wake();
                }
            }
            let Some(oldest) = w.waiting.front().map(|(lsn, _)| *lsn) else {
                *watch = None;
                return;
            };
            if !matches!(watch, Some((l, _)) if *l == oldest) {
                *watch = Some((oldest, Box::pin(p.safe_reach(oldest))));
            } else if !std::mem::take(&mut woken) {
                return;
            }
            let Some((_, reach)) = watch.as_mut() else {
                return;
            };
            match reach.as_mut().poll(&mut Context::from_waker(waker)) {
                Poll::Pending => return,
                // The mark moved (or the log stopped) since it was read: settle again.
                Poll::Ready(r) => {
                    *watch = None;
                    if r.is_err() {
                        w.stopped = true;
                    }
                }
            }
        }
    })
}

thread_local! {
    /// Set on connection threads with persistence.
    pub(super) static SAFE_WAITS: RefCell<Option<SafeWaits>> = const { RefCell::new(None) };
    /// The thread's [`MarkWaker`] was woken on the thread itself.
    static MARK_WOKEN_HERE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}
