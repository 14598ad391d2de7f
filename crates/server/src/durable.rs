//! Connections waiting for their writes to become durable, woken in LSN order.
//!
//! ```text
//!   connection: wait(lsn) ──> durable >= lsn? reply now
//!                             else park a oneshot under (lsn, seq) ─┐
//!   log syncer: advance(durable) ──> take every entry with lsn <= durable, wake each once
//!               fail()            ──> wake everyone with "never durable"
//! ```
//!
//! Each waiter is woken once, when its own LSN is covered, instead of every waiter on every
//! fdatasync (what a broadcast would do): with group commit most waiters belong to the next
//! batch, so a broadcast wakes them for nothing.

use std::collections::BTreeMap;

use parking_lot::Mutex;
use tokio::sync::oneshot;

/// The registry of waiting connections; one per server, fed by the log's durable listener.
#[derive(Default)]
pub struct DurableWaiters {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// The highest LSN known durable.
    durable: u64,
    /// Set once the log failed: nothing will become durable any more.
    failed: bool,
    /// Waiters by (LSN waited for, arrival number), so the ready ones are a prefix.
    waiting: BTreeMap<(u64, u64), oneshot::Sender<()>>,
    /// Arrival counter that keeps keys unique.
    seq: u64,
}

impl DurableWaiters {
    /// A registry whose durable LSN starts at `durable` (what recovery left on disk).
    pub fn new(durable: u64) -> DurableWaiters {
        DurableWaiters {
            inner: Mutex::new(Inner {
                durable,
                ..Inner::default()
            }),
        }
    }

    /// Returns true once `lsn` is durable, false if it never will be (the log failed).
    pub async fn wait(&self, lsn: u64) -> bool {
        let woken = {
            let mut g = self.inner.lock();
            if g.durable >= lsn {
                return true;
            }
            if g.failed {
                return false;
            }
            let (tx, rx) = oneshot::channel();
            g.seq += 1;
            let key = (lsn, g.seq);
            g.waiting.insert(key, tx);
            rx
        };
        // Woken by `advance` or `fail` (a dropped sender also ends the wait).
        let _ = woken.await;
        self.inner.lock().durable >= lsn
    }

    /// The log made everything up to `durable` durable: wake the waiters it covers.
    pub fn advance(&self, durable: u64) {
        let ready = {
            let mut g = self.inner.lock();
            g.durable = g.durable.max(durable);
            let first_not_ready = (g.durable.saturating_add(1), 0);
            let later = g.waiting.split_off(&first_not_ready);
            std::mem::replace(&mut g.waiting, later)
        };
        for (_, tx) in ready {
            let _ = tx.send(());
        }
    }

    /// The log failed: wake every waiter (each sees its LSN is not durable).
    pub fn fail(&self) {
        let all = {
            let mut g = self.inner.lock();
            g.failed = true;
            std::mem::take(&mut g.waiting)
        };
        for (_, tx) in all {
            let _ = tx.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn waiters_wake_when_their_lsn_is_covered_and_not_before() {
        let w = Arc::new(DurableWaiters::new(5));
        assert!(w.wait(5).await, "already durable");
        let early = tokio::spawn({
            let w = Arc::clone(&w);
            async move { w.wait(7).await }
        });
        let late = tokio::spawn({
            let w = Arc::clone(&w);
            async move { w.wait(9).await }
        });
        // Let both park (they are woken only by advance/fail, so order does not matter).
        while w.inner.lock().waiting.len() < 2 {
            tokio::task::yield_now().await;
        }
        w.advance(8);
        assert!(early.await.unwrap());
        assert_eq!(w.inner.lock().waiting.len(), 1, "9 is not durable yet");
        w.fail();
        assert!(!late.await.unwrap(), "a failed log makes nothing durable");
        assert!(!w.wait(100).await);
    }
}
