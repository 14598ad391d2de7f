//! flush_all, now or scheduled: every shard locked at once, so that a flush sits at one point
//! in the mutation order.
//!
//! ```text
//!   flush_all ────────────────────────────────> flush_locked: every shard cleared, Flushed
//!   flush_all <delay> ─ schedule_flush(at) ─> FlushScheduled{at} (replaces an earlier one)
//!   (the `_reporting` forms return the revision, what a front end's acknowledgement awaits)
//!   the caller's timer ─ run_scheduled_flush(at) ─> flush_locked, if still the pending one
//! ```
//!
//! Non-goals: no timer (the caller runs it).

use crate::store::Store;
use crate::types::{Mutation, Revision, UnixSecs};

impl Store {
    /// Removes every item now (flush_all) and cancels a scheduled flush. Reports
    /// `Mutation::Flushed`.
    pub fn flush_all(&self) {
        self.flush_all_reporting();
    }

    /// [`Store::flush_all`], returning the flush's revision (what its acknowledgement waits
    /// for; `Revision::MAX` when the sink failed).
    pub fn flush_all_reporting(&self) -> Revision {
        let mut scheduled = self.scheduled_flush.lock();
        *scheduled = None;
        self.flush_locked()
    }

    /// Every shard is locked at once so the flush sits at one point in the mutation order.
    /// Called with the `scheduled_flush` lock held. Returns the flush's revision.
    fn flush_locked(&self) -> Revision {
        let mut guards: Vec<_> = self.shards.iter().map(|s| s.lock()).collect();
        for g in &mut guards {
            g.clear();
        }
        self.report(&Mutation::Flushed)
    }

    /// `flush_all <delay>`: records that everything is to be flushed at `at`, replacing any
    /// earlier schedule, and reports `Mutation::FlushScheduled`. The caller runs the timer and
    /// calls [`Store::run_scheduled_flush`] when the time comes.
    pub fn schedule_flush(&self, at: UnixSecs) {
        self.schedule_flush_reporting(at);
    }

    /// [`Store::schedule_flush`], returning the schedule's revision (as
    /// [`Store::flush_all_reporting`]).
    pub fn schedule_flush_reporting(&self, at: UnixSecs) -> Revision {
        let mut scheduled = self.scheduled_flush.lock();
        *scheduled = Some(at);
        self.report(&Mutation::FlushScheduled { at })
    }

    /// Flushes everything if the flush scheduled for `at` is still the pending one (no later
    /// flush_all replaced it). Returns whether it flushed.
    pub fn run_scheduled_flush(&self, at: UnixSecs) -> bool {
        let mut scheduled = self.scheduled_flush.lock();
        if *scheduled != Some(at) {
            return false;
        }
        *scheduled = None;
        self.flush_locked();
        true
    }

    /// The time of the pending scheduled flush, if any.
    pub fn scheduled_flush(&self) -> Option<UnixSecs> {
        *self.scheduled_flush.lock()
    }

    /// Runs `f` with the pending scheduled flush while no flush can be scheduled, run or
    /// cancelled (a checkpoint uses it to restate the schedule after its log position).
    pub fn with_scheduled_flush<R>(&self, f: impl FnOnce(Option<UnixSecs>) -> R) -> R {
        let scheduled = self.scheduled_flush.lock();
        f(*scheduled)
    }
}
