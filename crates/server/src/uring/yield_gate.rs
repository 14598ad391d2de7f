//! Whether a connection thread's turn may end with a yield of the core: only while yields
//! come back quickly (docs/decisions/0006-a-gated-yield-after-each-turn.md). Pure logic: time
//! is passed in, so it is tested without a clock. Not here: the yield itself (`run.rs`).
//!
//! ```text
//!   run: a turn answered connections ─> open(now)? ─> sched_yield ─> yielded(took, now)
//!        a window of 16 yields with more than 4 slow (> 1 ms) ─> closed for 100 ms .. 6.4 s
//! ```

/// Whether a turn may end with a yield (see `run`): only while yields come back quickly. A
/// yield that took over a millisecond handed the core to something that ran a whole time
/// slice (a busy neighbour, not a client that answers and blocks within microseconds); when
/// more than [`YieldGate::SLOW_MAX`] of a window of [`YieldGate::WINDOW`] yields did, yielding
/// stops for a while: 100 ms, doubling up to 6.4 s while the window after each pause is slow
/// again. The pause shrinks back only after [`YieldGate::FAST_TO_FORGET`] fast windows in a
/// row: right after a pause the yields were cheap for a while even beside busy neighbours (as
/// we read it, the scheduler's penalty for yielding had been paid back by then), so one fast
/// window is no evidence that the neighbours have gone: a first gate that forgot its pause
/// after one still lost a fifth of the requests beside rpc-perf. The kernel's scheduler (EEVDF) moves a yielding
/// thread's deadline back a time slice per yield, so beside busy processes a thread that
/// yields every turn loses its share of the core; beside clients that block, the yield costs
/// nothing and lets them run at once. Time is passed in, so the logic is tested without a
/// clock.
#[derive(Default)]
pub(super) struct YieldGate {
    /// Yields in the current window, and how many of them were slow.
    yields: u32,
    slow: u32,
    /// While set: no yield before this instant.
    closed_until: Option<std::time::Instant>,
    /// The last pause's length (0: none since the last run of fast windows).
    backoff_ms: u64,
    /// Fast windows in a row since the last slow one.
    fast_windows: u32,
}

impl YieldGate {
    const WINDOW: u32 = 16;
    /// Beside cairn-bench at 2x200 slow yields are few and come in clusters (121 over 1 ms
    /// in one 8 s run); a bound of 2 paused the yield for 7-23% of the threads' time there,
    /// a bound of 4 cost 0.94x the CPU a request. Beside rpc-perf 44% were slow: a window
    /// passes 4 about 10% of the time (docs/decisions/0006-a-gated-yield-after-each-turn.md).
    const SLOW_MAX: u32 = 4;
    const SLOW: std::time::Duration = std::time::Duration::from_millis(1);
    const FIRST_PAUSE_MS: u64 = 100;
    const LONGEST_PAUSE_MS: u64 = 6_400;
    const FAST_TO_FORGET: u32 = 8;

    /// May this turn yield? `now` is called only while yielding is paused.
    pub(super) fn open(&mut self, now: impl FnOnce() -> std::time::Instant) -> bool {
        match self.closed_until {
            None => true,
            Some(t) if now() < t => false,
            Some(_) => {
                self.closed_until = None;
                true
            }
        }
    }

    /// Records a yield that took `took`; at the end of a window, pauses yielding from `now`
    /// if too many of its yields were slow.
    pub(super) fn yielded(&mut self, took: std::time::Duration, now: std::time::Instant) {
        self.yields += 1;
        if took > Self::SLOW {
            self.slow += 1;
        }
        if self.yields < Self::WINDOW {
            return;
        }
        if self.slow > Self::SLOW_MAX {
            self.backoff_ms =
                (self.backoff_ms * 2).clamp(Self::FIRST_PAUSE_MS, Self::LONGEST_PAUSE_MS);
            self.closed_until = Some(now + std::time::Duration::from_millis(self.backoff_ms));
            self.fast_windows = 0;
        } else {
            self.fast_windows += 1;
            if self.fast_windows >= Self::FAST_TO_FORGET {
                self.backoff_ms = 0;
            }
        }
        self.yields = 0;
        self.slow = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::YieldGate;
    use std::time::{Duration, Instant};

    const FAST: Duration = Duration::from_micros(20);
    const SLOW: Duration = Duration::from_millis(3);

    /// Records a window of yields, `slow` of them slow, ending at `at`.
    fn window(g: &mut YieldGate, slow: u32, at: Instant) {
        for i in 0..YieldGate::WINDOW {
            g.yielded(if i < slow { SLOW } else { FAST }, at);
        }
    }

    fn never() -> Instant {
        panic!("the clock is read only while yielding is paused")
    }

    #[test]
    fn yield_gate_pauses_after_slow_windows_and_backs_off() {
        let t = Instant::now();
        let ms = Duration::from_millis;
        let mut g = YieldGate::default();
        assert!(g.open(never));
        // Four slow yields of a window are tolerated, and a window not yet full decides
        // nothing.
        window(&mut g, 4, t);
        assert!(g.open(never));
        for _ in 0..YieldGate::WINDOW - 1 {
            g.yielded(SLOW, t);
        }
        assert!(g.open(never));
        g.yielded(SLOW, t);
        // Five or more: paused for 100 ms from the window's end.
        assert!(!g.open(|| t + ms(99)));
        assert!(g.open(|| t + ms(100)));
        assert!(g.open(never), "reopened: the clock is not read again");
        // Slow again after each pause: 200, 400, ... up to 6.4 s.
        let mut at = t + ms(100);
        for pause in [200, 400, 800, 1600, 3200, 6400, 6400] {
            window(&mut g, 5, at);
            assert!(!g.open(|| at + ms(pause - 1)), "pause {pause} ms");
            assert!(g.open(|| at + ms(pause)), "pause {pause} ms");
            at += ms(pause);
        }
        // One fast window is not enough to forget the back-off (right after a pause, yields
        // are cheap even beside busy neighbours): the next slow window pauses 6.4 s again.
        window(&mut g, 0, at);
        assert!(g.open(never));
        window(&mut g, YieldGate::WINDOW, at);
        assert!(!g.open(|| at + ms(6399)));
        assert!(g.open(|| at + ms(6400)));
        at += ms(6400);
        // Eight fast windows in a row are: the next slow one pauses 100 ms.
        for _ in 0..YieldGate::FAST_TO_FORGET {
            window(&mut g, 0, at);
            assert!(g.open(never));
        }
        window(&mut g, YieldGate::WINDOW, at);
        assert!(!g.open(|| at + ms(99)));
        assert!(g.open(|| at + ms(100)));
    }
}
