//! Waiting for the log: the one registry of waiters, used by threads and async tasks alike.
//!
//! ```text
//!   waiter:  Reach(mark, lsn).poll ──> mark >= lsn? Ready : register (lsn, waker) ──> Pending
//!            done or dropped: leave ──> drop its own entry, pass a wake on to FAN_OUT more
//!   syncer:  mark.advance(n) ──> take every entry at <= n out under one lock, wake each
//!            log stops (poisoned, closed, panicked) ──> wake_all: each sees the stop
//!   thread:  block_on(Reach) = poll with a waker that unparks the thread, park, poll again
//! ```
//!
//! The log has three watermarks, each with its own registry of this one kind (see
//! [`crate::Log`]): *taken* (the syncer took the records up to here: room for more appends),
//! *written* (handed to the kernel: survives a crash of this process) and *durable*
//! (fdatasync'd: survives a power loss). A waiter is an entry keyed by (LSN waited for,
//! arrival number) holding a [`Waker`]: an async task's own, or one that unparks a blocked
//! thread ([`block_on`]). Each waiter is woken once, when its own LSN is covered, instead of
//! every waiter on every batch: with group commit most of them belong to the next batch.
//!
//! The thread that advances a mark wakes every waiter it covers, at once. The waiters are
//! mostly connection tasks: waking one is a push onto its thread's queue (on the io_uring
//! engine, an Inbox push, and one eventfd write for a thread that sleeps), so the syncer
//! wakes a whole group's requests on both connection threads in one go. An earlier registry
//! woke [`FAN_OUT`] and let each woken waiter wake more: a chain of hops between the
//! connection threads, each a scheduling delay on 2 shared cores (A/B in
//! docs/decisions/0013-the-waiter-registry.md). A waiter that finds its LSN covered on its own
//! (the mark moved before its wake came) still passes a wake on to up to [`FAN_OUT`] covered
//! others as it leaves, so no entry waits for an advance that already happened.
//!
//! Every entry belongs to a waiter that has not finished (one that finishes or is dropped
//! removes its own entry). A wake that comes after a waiter found its LSN covered on its own
//! is harmless: a waiter always looks at the mark again.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;

use parking_lot::Mutex;

use crate::error::WalError;
use crate::marks::Lsn;

/// Covered waiters a leaving waiter wakes (see the module doc).
pub const FAN_OUT: usize = 8;

/// A key of the registry: (LSN waited for, arrival number).
type Key = (Lsn, u64);

/// An LSN that only grows, and the waiters parked until it reaches theirs.
pub(crate) struct Watermark {
    value: AtomicU64,
    waiters: Mutex<Registry>,
}

/// The entries, sorted by key in a ring buffer: the entries a mark covers are a prefix, and
/// a new entry goes to the back or near it (LSNs are handed out in the order waiters mostly
/// arrive), so that registering, waking a prefix and leaving allocate nothing once the
/// buffer has grown (a `BTreeMap` allocated and freed nodes for them: with the log's syncer
/// freeing what connection threads allocated, about 1% of a SYNC set's server CPU,
/// docs/decisions/0013-the-waiter-registry.md).
#[derive(Default)]
struct Registry {
    waiting: VecDeque<(Key, Waker)>,
    /// Arrival counter that keeps keys unique.
    seq: u64,
    /// The wakers of the last advance, taken out under the lock and woken after it; kept for
    /// their room.
    spare: Vec<Waker>,
}

impl Registry {
    /// Where `key` is, or would go.
    fn find(&self, key: Key) -> Result<usize, usize> {
        // Most lookups are for entries near the back (new ones) or the front (covered ones);
        // a binary search finds both in a few steps.
        self.waiting.binary_search_by(|(k, _)| k.cmp(&key))
    }
}

impl Watermark {
    pub fn new(value: Lsn) -> Watermark {
        Watermark {
            value: AtomicU64::new(value),
            waiters: Mutex::new(Registry::default()),
        }
    }

    pub fn get(&self) -> Lsn {
        self.value.load(Ordering::Acquire)
    }

    /// Raises the mark to `to` (never lowers it) and wakes every waiter it covers.
    pub fn advance(&self, to: Lsn) {
        let now = self.value.fetch_max(to, Ordering::AcqRel).max(to);
        let mut covered = {
            let mut g = self.waiters.lock();
            // The entries above the mark stay.
            let k = g.waiting.partition_point(|((lsn, _), _)| *lsn <= now);
            if k == 0 {
                return;
            }
            let mut covered = std::mem::take(&mut g.spare);
            covered.extend(g.waiting.drain(..k).map(|(_, w)| w));
            covered
        };
        for w in covered.drain(..) {
            w.wake();
        }
        // Give the room back (another advance may have put one there meanwhile: keep one).
        let mut g = self.waiters.lock();
        if g.spare.capacity() < covered.capacity() {
            g.spare = covered;
        }
    }

    /// Registers a waiter for `lsn`; the caller looks at the mark again afterwards, so a wake
    /// that came first is not missed.
    fn register(&self, lsn: Lsn, waker: &Waker) -> Key {
        let mut g = self.waiters.lock();
        g.seq += 1;
        let key = (lsn, g.seq);
        let at = match g.waiting.back() {
            Some((last, _)) if *last > key => g.find(key).unwrap_or_else(|at| at),
            _ => g.waiting.len(),
        };
        g.waiting.insert(at, (key, waker.clone()));
        key
    }

    /// A waiter polled again: keeps its entry with the waker of this poll.
    fn renew(&self, key: Key, waker: &Waker) {
        let mut g = self.waiters.lock();
        match g.find(key) {
            Ok(at) => {
                let w = &mut g.waiting[at].1;
                if !w.will_wake(waker) {
                    *w = waker.clone();
                }
            }
            Err(at) => g.waiting.insert(at, (key, waker.clone())),
        }
    }

    /// A waiter is done (or gone): drops its entry if a wake did not take it already, and
    /// passes the wake on to up to [`FAN_OUT`] covered others.
    fn leave(&self, key: Key) {
        self.wake(key, self.get());
    }

    fn wake(&self, leaving: Key, mark: Lsn) {
        let mut ready: [Option<Waker>; FAN_OUT] = Default::default();
        {
            let mut g = self.waiters.lock();
            if let Ok(at) = g.find(leaving) {
                g.waiting.remove(at);
            }
            for slot in ready.iter_mut() {
                match g.waiting.front() {
                    Some(((lsn, _), _)) if *lsn <= mark => {
                        *slot = g.waiting.pop_front().map(|(_, w)| w);
                    }
                    _ => break,
                }
            }
        }
        for w in ready.into_iter().flatten() {
            w.wake();
        }
    }

    /// Wakes every waiter: the log stopped, and each sees it.
    pub fn wake_all(&self) {
        let all = std::mem::take(&mut self.waiters.lock().waiting);
        for (_, w) in all {
            w.wake();
        }
    }

    /// Waiters registered now.
    #[cfg(test)]
    pub fn waiting(&self) -> usize {
        self.waiters.lock().waiting.len()
    }
}

/// Where a [`Reach`] looks for whether the log stopped, and why.
pub(crate) trait Stopped: Send + Sync {
    /// `Some(error)` once nothing more will advance (the log was poisoned or closed).
    fn stopped(&self) -> Option<WalError>;
    /// Asks for `lsn` to be made durable soon (async mode fdatasyncs early for a waiter).
    fn request_durable(&self, _lsn: Lsn) {}
}

/// A future that resolves once a watermark reaches an LSN, or with the error that stopped
/// the log first. Cheap when already reached: no lock is taken. Dropping it is always safe.
#[must_use = "a Reach does nothing unless awaited (or passed to block_on)"]
pub struct Reach<'a> {
    pub(crate) mark: &'a Watermark,
    pub(crate) log: &'a dyn Stopped,
    pub(crate) lsn: Lsn,
    /// Call [`Stopped::request_durable`] when the waiter first has to wait.
    pub(crate) asks_durable: bool,
    pub(crate) key: Option<Key>,
}

impl Future for Reach<'_> {
    type Output = Result<(), WalError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if this.mark.get() >= this.lsn {
            return Poll::Ready(this.finish());
        }
        match this.key {
            Some(key) => this.mark.renew(key, cx.waker()),
            None => {
                this.key = Some(this.mark.register(this.lsn, cx.waker()));
                if this.asks_durable {
                    this.log.request_durable(this.lsn);
                }
            }
        }
        // Look again after registering: an advance or a stop just before is not missed.
        if this.mark.get() >= this.lsn {
            return Poll::Ready(this.finish());
        }
        if let Some(e) = this.log.stopped() {
            // The last advance may have come with the stop.
            let reached = this.mark.get() >= this.lsn;
            this.finish().ok();
            return Poll::Ready(if reached { Ok(()) } else { Err(e) });
        }
        Poll::Pending
    }
}

impl Reach<'_> {
    /// Leaves the registry (passing the wake on).
    fn finish(&mut self) -> Result<(), WalError> {
        if let Some(key) = self.key.take() {
            self.mark.leave(key);
        }
        Ok(())
    }
}

impl Drop for Reach<'_> {
    fn drop(&mut self) {
        // A waiter woken and then dropped before it passed the wake on must still pass it.
        self.finish().ok();
    }
}

/// Wakes a thread blocked in [`block_on`].
struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs `f` to completion on this thread, parking it while `f` waits. For the log's blocking
/// calls ([`crate::Log::wait_durable`] and the like); never call it from an async task.
pub fn block_on<F: Future>(f: F) -> F::Output {
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    #[derive(Default)]
    struct Flag(AtomicBool);

    impl Stopped for Flag {
        fn stopped(&self) -> Option<crate::WalError> {
            self.0
                .load(Ordering::Acquire)
                .then_some(crate::WalError::Closed)
        }
    }

    fn reach<'a>(mark: &'a Watermark, log: &'a Flag, lsn: Lsn) -> Reach<'a> {
        Reach {
            mark,
            log,
            lsn,
            asks_durable: false,
            key: None,
        }
    }

    #[test]
    fn covered_threads_are_woken_and_no_other() {
        let mark = Arc::new(Watermark::new(0));
        let flag = Arc::new(Flag::default());
        let spawn = |lsn: Lsn| {
            let (mark, flag) = (Arc::clone(&mark), Arc::clone(&flag));
            std::thread::spawn(move || block_on(reach(&mark, &flag, lsn)))
        };
        let early: Vec<_> = (1..=20).map(spawn).collect();
        let late = spawn(99);
        while mark.waiting() < 21 {
            std::thread::yield_now();
        }
        // The syncer wakes all 20 covered ones at once.
        mark.advance(20);
        for t in early {
            t.join().unwrap().unwrap();
        }
        assert_eq!(mark.waiting(), 1, "99 is still waiting");
        assert!(!late.is_finished());
        flag.0.store(true, Ordering::Release);
        mark.wake_all();
        assert_eq!(late.join().unwrap(), Err(crate::WalError::Closed));
    }

    /// Counts its wakes.
    #[derive(Default)]
    struct Count(AtomicU64);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A waiter for each LSN, polled once (pending) with a waker that counts its wakes.
    #[allow(clippy::type_complexity)]
    fn pending_waiters<'a>(
        mark: &'a Watermark,
        flag: &'a Flag,
        lsns: impl IntoIterator<Item = Lsn>,
    ) -> (Vec<Pin<Box<Reach<'a>>>>, Vec<Arc<Count>>) {
        let (mut waiters, mut counts) = (Vec::new(), Vec::new());
        for lsn in lsns {
            let mut w = Box::pin(reach(mark, flag, lsn));
            let count = Arc::<Count>::default();
            let waker = Waker::from(Arc::clone(&count));
            assert!(w
                .as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending());
            waiters.push(w);
            counts.push(count);
        }
        (waiters, counts)
    }

    fn wakes(counts: &[Arc<Count>]) -> Vec<u64> {
        counts.iter().map(|c| c.0.load(Ordering::Relaxed)).collect()
    }

    #[test]
    fn an_advance_wakes_every_covered_waiter_itself_and_no_other() {
        let mark = Watermark::new(0);
        let flag = Flag::default();
        let (mut waiters, counts) = pending_waiters(&mark, &flag, 1..=3 * FAN_OUT as Lsn);
        // More covered waiters than FAN_OUT, none of them polled after the advance: every
        // covered one is woken by the advance itself, exactly once, and no later one.
        mark.advance(2 * FAN_OUT as Lsn);
        let woken = wakes(&counts);
        assert_eq!(woken[..2 * FAN_OUT], vec![1; 2 * FAN_OUT]);
        assert_eq!(woken[2 * FAN_OUT..], vec![0; FAN_OUT]);
        assert_eq!(mark.waiting(), FAN_OUT);
        // Dropping the woken waiters unpolled leaves the later entries alone.
        let later = waiters.split_off(2 * FAN_OUT);
        drop(waiters);
        assert_eq!(mark.waiting(), FAN_OUT);
        drop(later);
        assert_eq!(mark.waiting(), 0);
    }

    #[test]
    fn waiters_that_arrive_out_of_lsn_order_are_woken_by_their_own_lsn() {
        let mark = Watermark::new(0);
        let flag = Flag::default();
        // Connection threads register in the order they get to it, not in LSN order.
        let lsns: [Lsn; 8] = [5, 2, 9, 2, 7, 1, 8, 3];
        let (mut waiters, counts) = pending_waiters(&mark, &flag, lsns);
        // One in the middle leaves before any advance: only its own entry goes.
        drop(waiters.remove(4));
        assert_eq!(mark.waiting(), 7);
        mark.advance(5);
        let woken = wakes(&counts);
        assert_eq!(
            woken,
            vec![1, 1, 0, 1, 0, 1, 0, 1],
            "LSNs 5, 2, 2, 1 and 3, no other"
        );
        assert_eq!(mark.waiting(), 2, "9 and 8 wait");
        mark.advance(8);
        assert_eq!(counts[6].0.load(Ordering::Relaxed), 1, "8 is woken");
        assert_eq!(counts[2].0.load(Ordering::Relaxed), 0, "9 is not");
        assert_eq!(mark.waiting(), 1);
    }

    #[test]
    fn a_waiter_that_leaves_takes_its_entry_even_behind_a_full_fan_out() {
        let mark = Watermark::new(0);
        let flag = Flag::default();
        let noop = Waker::noop();
        let mut cx = Context::from_waker(noop);
        let mut waiters: Vec<_> = (1..=FAN_OUT as Lsn + 1)
            .map(|lsn| Box::pin(reach(&mark, &flag, lsn)))
            .collect();
        for w in &mut waiters {
            assert!(w.as_mut().poll(&mut cx).is_pending());
        }
        // The mark moves without a wake (as between a store and its wake); the last waiter
        // finds it covered on its own and takes the FAN_OUT entries in front of it too.
        mark.value.store(FAN_OUT as Lsn + 1, Ordering::Release);
        let mut last = waiters.pop().unwrap();
        assert!(last.as_mut().poll(&mut cx).is_ready());
        assert_eq!(mark.waiting(), 0);
    }
}
