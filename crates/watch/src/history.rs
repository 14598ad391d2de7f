//! The history in memory: published events in revision order, bounded in bytes, the oldest
//! dropped first. Its interface is small on purpose (push, trim, a read of a revision range,
//! three figures), so that how the history holds its events can change behind it.
//!
//! ```text
//!   hub (crate::hub) ── push(event) ──> [ first ... published ] ── trim(limit) ──> fall(oldest)
//!   readers ── events(from, upto, max) ──> events, next revision; or Compacted(first)
//! ```
//!
//! Non-goals: locking (the hub holds it under an `RwLock`), numbering and publishing
//! (crate::hub), events older than it (crate::log_reader reads them from the command log).

use std::collections::VecDeque;
use std::sync::Arc;

use cairn_store::Revision;

use crate::event::Event;
use crate::prefetch::prefetch_event;

/// The history in memory.
pub(crate) struct Ring {
    /// The events, oldest first, in revision order.
    events: VecDeque<Arc<Event>>,
    /// What the events hold in memory ([`Event::size_bytes`]), against the bound.
    bytes: usize,
    /// The oldest revision the ring can answer for: every event from it to `published` is in
    /// `events` (earlier ones were dropped, or came before the hub started).
    first: Revision,
}

/// Why a read from the ring gave nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadError {
    /// The history in memory starts at this revision; the cursor is older.
    Compacted(Revision),
}

impl Ring {
    /// An empty ring that answers for revisions from `first` on.
    pub(crate) fn new(first: Revision) -> Ring {
        Ring {
            events: VecDeque::new(),
            bytes: 0,
            first,
        }
    }

    /// The oldest revision the ring can answer for.
    pub(crate) fn first(&self) -> Revision {
        self.first
    }

    /// Events in the ring.
    pub(crate) fn len(&self) -> usize {
        self.events.len()
    }

    /// Bytes the ring's events hold ([`Event::size_bytes`]), what its bound counts.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Events with `from <= revision <= upto`, at most `max` of them, in revision order, and
    /// the revision to continue from. Compacted if `from` is older than the ring.
    pub(crate) fn events(
        &self,
        from: Revision,
        upto: Revision,
        max: usize,
    ) -> Result<(Vec<Arc<Event>>, Revision), ReadError> {
        if from < self.first {
            return Err(ReadError::Compacted(self.first));
        }
        let start = self.events.partition_point(|e| e.revision < from);
        let mut out = Vec::new();
        for e in self.events.range(start..) {
            if e.revision > upto {
                break;
            }
            if out.len() == max {
                let next = e.revision;
                return Ok((out, next));
            }
            out.push(Arc::clone(e));
        }
        Ok((out, upto + 1))
    }

    /// Appends an event (the caller trims the ring after: [`Ring::trim`]).
    pub(crate) fn push(&mut self, e: Arc<Event>) {
        self.bytes += e.size_bytes();
        self.events.push_back(e);
    }

    /// Takes the oldest events off while the ring holds more than `limit_bytes`, and hands
    /// each to `fall` (which drops it, or keeps it to be freed elsewhere).
    pub(crate) fn trim(&mut self, limit_bytes: usize, mut fall: impl FnMut(Arc<Event>)) {
        while self.bytes > limit_bytes {
            let Some(old) = self.events.pop_front() else {
                break;
            };
            self.bytes -= old.size_bytes();
            self.first = old.revision + 1;
            fall(old);
            // The next to fall, read by the next trim.
            if let Some(next) = self.events.front() {
                prefetch_event(next);
            }
        }
    }
}
