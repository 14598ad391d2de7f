//! The one clock of requests: the wall clock in unix seconds as of its last tick, read by
//! every front end (memcached, gRPC, a replica's apply) through [`Clock::now`].
//!
//! ```text
//!   cairn-clock thread ── just after each whole second ──> TICKED (an atomic)
//!   Clock::now() = TICKED (one relaxed load) + the seconds tests moved it ahead
//! ```
//!
//! Non-goals: latencies (they measure with `Instant`); the wall clock itself
//! (`cairn_store::now_unix`, for what truly needs it: recovery, checkpoints).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use cairn_store::{now_unix, UnixSecs};

/// The time requests run at: [`ticked_now_unix`], plus the seconds a test moved it ahead.
#[derive(Debug, Default)]
pub struct Clock {
    /// Seconds this server's clock runs ahead of the wall clock: 0, except in tests that need
    /// time to pass (as memcached's debug builds do with `debugtime`); see [`Clock::now`].
    ahead_secs: AtomicU32,
}

impl Clock {
    /// The time in unix seconds, as commands, TTLs and last access times use it: the ticked
    /// clock ([`ticked_now_unix`]), not a wall clock read per request.
    #[inline]
    pub fn now(&self) -> UnixSecs {
        ticked_now_unix().saturating_add(self.ahead_secs.load(Ordering::Relaxed))
    }

    /// Moves this clock `secs` ahead of the wall clock (tests of TTLs and last access times,
    /// which must not sleep).
    pub fn advance(&self, secs: u32) {
        self.ahead_secs.fetch_add(secs, Ordering::Relaxed);
    }
}

/// The wall clock in unix seconds as of its last tick: memcached's `current_time`, which its
/// clock event sets once a second, so that a request reads a number instead of the clock.
/// Reading the wall clock (`SystemTime::now`) costs tens of ns on this machine's virtual TSC
/// and a request read it two or three times; this is one relaxed load. Seconds are all
/// commands need (expiry, last access); latencies keep measuring with `Instant`. Before
/// [`start_clock`] (a store used without a server) it reads the wall clock.
#[inline]
pub fn ticked_now_unix() -> UnixSecs {
    match TICKED.load(Ordering::Relaxed) {
        0 => now_unix(),
        now => now,
    }
}

static TICKED: AtomicU32 = AtomicU32::new(0);

/// Starts the thread (`cairn-clock`, once per process) that sets [`ticked_now_unix`] just
/// after each whole second of the wall clock.
pub fn start_clock() -> std::io::Result<()> {
    static STARTED: OnceLock<Result<(), String>> = OnceLock::new();
    let started = STARTED.get_or_init(|| {
        TICKED.store(now_unix(), Ordering::Relaxed);
        let tick = || loop {
            let wall = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            TICKED.store(wall.as_secs() as u32, Ordering::Relaxed);
            let to_next_second = 1_000_000_000 - u64::from(wall.subsec_nanos());
            std::thread::sleep(std::time::Duration::from_nanos(to_next_second + 100_000));
        };
        std::thread::Builder::new()
            .name("cairn-clock".into())
            .spawn(tick)
            .map(drop)
            .map_err(|e| {
                TICKED.store(0, Ordering::Relaxed);
                format!("cannot start the clock thread: {e}")
            })
    });
    started.clone().map_err(std::io::Error::other)
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    /// The ticked clock starts at the wall clock's second and moves on by itself (polled
    /// with a deadline: it ticks once a second).
    #[test]
    fn the_ticked_clock_follows_the_wall_clock() {
        start_clock().unwrap();
        let first = ticked_now_unix();
        assert!(first.abs_diff(now_unix()) <= 1, "{first} vs {}", now_unix());
        let deadline = Instant::now() + std::time::Duration::from_secs(30);
        while ticked_now_unix() == first {
            assert!(
                Instant::now() < deadline,
                "the clock stood still at {first}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(ticked_now_unix().abs_diff(now_unix()) <= 1);
    }

    #[test]
    fn a_clock_moved_ahead_stays_ahead() {
        let clock = Clock::default();
        let before = clock.now();
        clock.advance(100);
        assert!(clock.now() >= before + 100);
    }
}
