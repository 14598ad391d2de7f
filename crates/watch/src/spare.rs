//! Events reused where they were made: an event that falls off the history becomes its
//! thread's spare, and the thread's next event is written into it (its `Arc`, and its bytes
//! when the length fits), instead of a free and two new allocations
//! (docs/decisions/0017-watch-events-reused-and-freed-where-made.md).
//!
//! ```text
//!   history trim / fallen events taken by a writer ── keep_as_spare ──> SPARE (one a thread,
//!                                                                      at most 1 KiB)
//!   mutation ── make_event ── SPARE held by no reader? ──> rewritten in place
//!                             else ──────────────────────> Event::from_mutation, new Arc
//! ```
//!
//! Non-goals: which events fall (crate::history, crate::hub).

use std::cell::Cell;
use std::sync::Arc;

use cairn_store::{Mutation, Revision};

use crate::event::{Event, Shape};
use crate::event_bytes::Wire;
#[cfg(test)]
use crate::event_bytes::FRESH_ALLOCATIONS;
use crate::prefetch::prefetch;

thread_local! {
    /// An event that fell off the ring on this thread, kept to become this thread's next
    /// event ([`make_event`]), so that its two allocations are reused instead of freed and
    /// made again. Outside the ring's bound: one small event a thread at most.
    static SPARE: Cell<Option<Arc<Event>>> = const { Cell::new(None) };
}

/// Events up to this size go to the writers (and become a thread's spare); a larger one is
/// freed where it falls.
pub(crate) const FALLEN_MAX_EVENT_BYTES: usize = 1024;

/// Keeps `e`, an event off the ring, as this thread's spare if it is small and the thread
/// has none; else drops it.
pub(crate) fn keep_as_spare(e: Arc<Event>) {
    if e.size_bytes() > FALLEN_MAX_EVENT_BYTES {
        return;
    }
    SPARE.with(|s| match s.take() {
        None => {
            // The thread's next event is written over these bytes.
            prefetch(e.wire.as_ptr(), e.wire.len());
            s.set(Some(e));
        }
        spare => s.set(spare),
    });
}

/// The event of `m` at `revision`, made in this thread's spare event when it has one that no
/// reader holds any more: its `Arc` is reused, and its bytes when the new event has their
/// length (an event of the same shape: same key and value lengths). Freeing an old event
/// and making a new one cost about 3.5% of a SYNC set's server CPU (the old one is out of
/// the caches, and with the server's one malloc arena every free beyond the thread's cache
/// takes the arena's lock; docs/decisions/0017-watch-events-reused-and-freed-where-made.md).
pub(crate) fn make_event(m: &Mutation<'_>, revision: Revision, shape: Shape) -> Option<Arc<Event>> {
    let mut spare = SPARE.with(Cell::take);
    let Some(old) = spare.as_mut().and_then(Arc::get_mut) else {
        #[cfg(test)]
        FRESH_ALLOCATIONS.with(|c| c.set(c.get() + 1));
        return Event::from_mutation_in(m, revision, Box::default(), shape).map(Arc::new);
    };
    let reuse = match std::mem::take(&mut old.wire) {
        Wire::Own(b) => b,
        Wire::Chunked(_) => Box::default(),
    };
    match Event::from_mutation_in(m, revision, reuse, shape) {
        Some(e) => {
            *old = e;
            spare
        }
        None => None,
    }
}
