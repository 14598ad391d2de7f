//! Whole events shared between watch streams (persistence on): the last step that made
//! events whole (crate::resolve) leaves its read here, and a stream whose step reads the same
//! revisions copies their bytes instead of making them whole again (a store lookup and an
//! encoding each). So 1,000 streams on one prefix make each event whole about once, not
//! 1,000 times.
//!
//! ```text
//!   stream A's step: resolve ── made events whole itself ──> Recent::offer(its read)
//!   stream B's step: resolve ── Recent::get ──> an event it needs, made whole there (with the
//!       previous item, if B wants it)? ──> its bytes copied : made whole as usual
//! ```
//!
//! An event made whole is the same whoever makes it: its item is the one at its revision
//! (from the store while the key's item has that revision, else from its record), its
//! previous item the one at its previous revision. Bounded: one step's read, kept only while
//! its whole events' bytes are at most [`RECENT_MAX_BYTES`].
//!
//! Non-goals: making events whole (crate::resolve), the step's read (crate::step_read).

use std::sync::Arc;

use parking_lot::Mutex;

use crate::step_read::StepRead;

/// The most bytes of whole events the shared read may hold.
pub(crate) const RECENT_MAX_BYTES: usize = 1 << 20;

/// See the module doc.
#[derive(Default)]
pub(crate) struct Recent {
    /// The last read offered.
    last: Mutex<Option<Arc<StepRead>>>,
}

impl Recent {
    /// The last read offered, if any.
    pub(crate) fn get(&self) -> Option<Arc<StepRead>> {
        self.last.lock().clone()
    }

    /// Keeps `read` for the other streams in place of the last one, if its whole events'
    /// bytes are within the bound.
    pub(crate) fn offer(&self, read: &Arc<StepRead>) {
        if read.made.bytes_len() > RECENT_MAX_BYTES {
            return;
        }
        let old = self.last.lock().replace(Arc::clone(read));
        // Dropped outside the lock.
        drop(old);
    }
}
