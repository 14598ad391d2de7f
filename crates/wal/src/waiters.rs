//! Threads blocked in `Log::wait_durable`, each woken once, when its own LSN is durable.
//!
//! ```text
//!   appender:  register(lsn) ──> durable >= lsn? leave : park ──> (woken) look again
//!              leave(key, durable): drop its own entry if still there, pass the wake on
//!   syncer:    durable_lsn = n ──> wake_some(n): unpark the first FAN_OUT threads at <= n
//!              stops (poisoned, closed, panicked) ──> wake_all
//! ```
//!
//! The wake-ups fan out: the syncer unparks only a few threads and goes back to writing the
//! next batch, and each woken thread unparks a few more. With 64 threads on 2 cores, durable
//! 100-byte appends per second (`cairn-wal-bench --sizes=100`, three runs each, buffered and
//! O_DIRECT): fan-out 2: 169-210K; 8: 196-233K; 64 (the syncer wakes everyone): 188-218K;
//! a condition variable on the state lock, before this registry: 86-145K.
//!
//! A condition variable on the log's state lock would wake every blocked thread on every
//! fdatasync, and each would take the state lock that appenders and the syncer need. Here a
//! thread sleeps until the batch holding its record is durable, and the registry has its own
//! lock. Every entry belongs to a thread that is still waiting (one that returns without being
//! woken removes its own), so each wake reaches a thread that passes it on. A wake that comes
//! after a thread found its LSN durable on its own is harmless: `park` may return early
//! anyway, so a waiter always looks again.

use std::collections::BTreeMap;
use std::thread::Thread;

use parking_lot::Mutex;

use crate::Lsn;

/// Threads each waker unparks (see the module doc).
pub const FAN_OUT: usize = 8;

#[derive(Default)]
pub(crate) struct Waiters {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// By (LSN waited for, arrival number): the ones a durable LSN covers are a prefix.
    waiting: BTreeMap<(Lsn, u64), Thread>,
    seq: u64,
}

impl Waiters {
    /// Registers the current thread as waiting for `lsn`; returns its key for [`Self::leave`].
    /// The caller then checks the durable LSN itself before parking, so a wake that came
    /// first is not missed.
    pub fn register(&self, lsn: Lsn) -> (Lsn, u64) {
        let mut g = self.inner.lock();
        g.seq += 1;
        let key = (lsn, g.seq);
        g.waiting.insert(key, std::thread::current());
        key
    }

    /// A waiter whose LSN is durable is done: drops its entry (if no wake took it already)
    /// and passes the wake-up on to up to [`FAN_OUT`] others.
    pub fn leave(&self, key: (Lsn, u64), durable: Lsn) {
        self.wake(Some(key), durable);
    }

    /// Wakes up to [`FAN_OUT`] of the threads waiting for an LSN <= `durable` (each is
    /// removed); every thread that returns from a wait passes the wake on, so all are woken.
    pub fn wake_some(&self, durable: Lsn) {
        self.wake(None, durable);
    }

    fn wake(&self, leaving: Option<(Lsn, u64)>, durable: Lsn) {
        let mut ready = Vec::with_capacity(FAN_OUT);
        {
            let mut g = self.inner.lock();
            if let Some(key) = leaving {
                g.waiting.remove(&key);
            }
            while ready.len() < FAN_OUT {
                match g.waiting.first_entry() {
                    Some(e) if e.key().0 <= durable => ready.push(e.remove()),
                    _ => break,
                }
            }
        }
        for t in ready {
            t.unpark();
        }
    }

    /// Wakes every waiting thread: the log stopped.
    pub fn wake_all(&self) {
        let all = std::mem::take(&mut self.inner.lock().waiting);
        for t in all.into_values() {
            t.unpark();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    #[test]
    fn covered_threads_wake_each_other_and_no_other() {
        let w = Arc::new(Waiters::default());
        let durable = Arc::new(AtomicU64::new(0));
        let spawn = |lsn: Lsn| {
            let (w, durable) = (Arc::clone(&w), Arc::clone(&durable));
            std::thread::spawn(move || {
                let key = w.register(lsn);
                while durable.load(Ordering::Acquire) < lsn {
                    std::thread::park();
                }
                // What `Log::wait_durable` does on its way out.
                w.leave(key, durable.load(Ordering::Acquire));
            })
        };
        let early: Vec<_> = (1..=5).map(spawn).collect();
        let late = spawn(9);
        while w.inner.lock().waiting.len() < 6 {
            std::thread::yield_now();
        }
        durable.store(5, Ordering::Release);
        w.wake_some(5);
        for t in early {
            t.join().unwrap();
        }
        assert_eq!(w.inner.lock().waiting.len(), 1, "9 is still waiting");
        assert!(!late.is_finished());
        durable.store(9, Ordering::Release);
        w.wake_all();
        late.join().unwrap();
    }

    #[test]
    fn a_waiter_that_leaves_takes_its_entry_even_behind_a_full_fan_out() {
        let w = Waiters::default();
        let keys: Vec<_> = (1..=FAN_OUT as Lsn + 1)
            .map(|lsn| w.register(lsn))
            .collect();
        // The last one found its LSN durable without being woken; the wake it passes on takes
        // the FAN_OUT entries in front of it, and its own goes too.
        w.leave(*keys.last().unwrap(), FAN_OUT as Lsn + 1);
        assert!(w.inner.lock().waiting.is_empty());
    }
}
