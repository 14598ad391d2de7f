//! The lease: how long this node may still act on what ZooKeeper last told it.
//!
//! ```text
//!   member task, every poll:  t = now ─> read the primary lock ─> answered, and the lock
//!                             says what we believe (ours / the primary we follow)
//!                             ─> valid until t + 2/3 × the negotiated session timeout
//!   primary:  client writes refused, and acknowledgements withheld, once it is not valid
//!   replica:  stops confirming the primary's writes once it is not valid
//! ```
//!
//! Why two thirds: ZooKeeper expires a session `timeout` after the last message it received
//! from the client, and only then can another member take the primary lock. The renewal time
//! `t` is taken before the request is sent, so the server heard from us after `t`; a lease
//! that ends at `t + 2/3 timeout` ends before the session can expire, with a third of the
//! timeout to spare for the two machines' clocks running at different speeds (the recipe's
//! rule of thumb). So a primary cut off from ZooKeeper stops acknowledging before anyone else
//! can be elected, and a replica cut off with it stops confirming what it would be alone to
//! hold.
//!
//! The price: a ZooKeeper that does not answer for 2/3 of the session timeout (its own leader
//! election, a long pause) stops writes on a healthy primary until it answers again.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Whether (and until when) this node may act on ZooKeeper's word.
#[derive(Debug)]
pub struct Lease {
    /// Nanoseconds since `origin` until which the lease holds; 0: not held.
    until_ns: AtomicU64,
    origin: Instant,
}

impl Default for Lease {
    fn default() -> Self {
        Lease {
            until_ns: AtomicU64::new(0),
            origin: Instant::now(),
        }
    }
}

impl Lease {
    /// The share of the session timeout a lease lasts from the request that renewed it.
    pub fn length(session_timeout: Duration) -> Duration {
        session_timeout * 2 / 3
    }

    fn ns(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.origin).as_nanos() as u64
    }

    /// ZooKeeper answered a request sent at `sent`: the lease holds until `sent` plus
    /// [`Lease::length`]. Never moves the end back.
    pub fn renew(&self, sent: Instant, session_timeout: Duration) {
        let until = self.ns(sent + Lease::length(session_timeout));
        self.until_ns.fetch_max(until, Ordering::Relaxed);
    }

    /// Ends the lease now (the session ended, the node stepped down).
    pub fn revoke(&self) {
        self.until_ns.store(0, Ordering::Relaxed);
    }

    /// Whether the lease holds now.
    pub fn valid(&self) -> bool {
        self.ns(Instant::now()) < self.until_ns.load(Ordering::Relaxed)
    }

    /// How long ago the lease ended (zero while it holds).
    pub fn expired_for(&self) -> Duration {
        let now = self.ns(Instant::now());
        Duration::from_nanos(now.saturating_sub(self.until_ns.load(Ordering::Relaxed)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_lasts_two_thirds_of_the_timeout_from_the_request() {
        let lease = Lease::default();
        assert!(!lease.valid(), "not held before a renewal");
        let timeout = Duration::from_secs(3);
        lease.renew(Instant::now(), timeout);
        assert!(lease.valid());
        // A renewal sent long ago ends in the past, and does not shorten the lease.
        lease.renew(Instant::now() - Duration::from_secs(10), timeout);
        assert!(lease.valid());
        lease.revoke();
        assert!(!lease.valid());
        let old = Lease::default();
        old.renew(Instant::now() - Duration::from_secs(10), timeout);
        assert!(!old.valid(), "sent 10 s ago: ended 8 s ago");
        assert!(old.expired_for() > Duration::ZERO);
        assert_eq!(Lease::length(timeout), Duration::from_secs(2));
    }
}
