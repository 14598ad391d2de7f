//! Cache-line prefetch hints for events that fell out of every cache: the one a thread keeps
//! as its spare (written over by its next event) and the history's next oldest (read when it
//! falls).
//!
//! ```text
//!   spare kept (crate::spare) ── prefetch(its bytes) ──> next event written over them
//!   history trimmed (crate::history) ── prefetch_event(next oldest) ──> next trim reads it
//! ```
//!
//! Non-goals: anything the program sees: a hint changes no value.

use std::sync::Arc;

use crate::event::Event;

/// Asks the CPU to bring in the cache lines of the `len` bytes at `start` ahead of their
/// use. An event falls off the ring long after it was made, out of every cache: the one a
/// thread keeps as its spare is written over by the thread's next event, and the ring's
/// next oldest is read when it falls (its size). Without the hint each was a miss on the
/// request path (docs/decisions/0018-events-prefetched-before-reuse.md). A hint
/// only: it changes nothing the program sees, and does nothing off x86_64.
pub(crate) fn prefetch(start: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        const LINE: usize = 64;
        let first = start.wrapping_sub(start as usize % LINE);
        let lines = (start as usize % LINE + len).div_ceil(LINE);
        for line in 0..lines {
            // SAFETY: a prefetch never faults and reads nothing the program sees; the
            // address is only computed (`wrapping_add`), never dereferenced.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(first.wrapping_add(line * LINE).cast()) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (start, len);
}

/// [`prefetch`] of an event's `Arc`: its two counts and the event's fields.
pub(crate) fn prefetch_event(e: &Arc<Event>) {
    let counts = 2 * size_of::<usize>();
    let fields = Arc::as_ptr(e).cast::<u8>();
    prefetch(fields.wrapping_sub(counts), counts + size_of::<Event>());
}
