//! What one step of a watch stream read ([`StepRead`]): the history's events, and the ones
//! it made whole (persistence on, crate::resolve) encoded one after the other in one buffer
//! of the step, so that making an event whole allocates nothing of its own; every response
//! of the step shares it.
//!
//! ```text
//!   ring/log read: events [e0 e1 e2 ...] (Arc<Event>: full, or skeletons with persistence)
//!   made whole:    whole  [ -  w1 w2 ...]  ──> bytes [ w1's cairn.v1.Event | w2's | ... ]
//!   a response's event i: whole[i]'s bytes if made whole, else events[i]'s own
//! ```
//!
//! Non-goals: which events are made whole and how (crate::resolve), which a watch takes
//! (crate::cursor).

use std::sync::Arc;

use cairn_store::{Mutation, Revision};

use crate::event::{put_whole, Event};
use crate::wire::{self, EventLayout};

/// See the module doc.
pub(crate) struct StepRead {
    /// The events read, in revision order.
    pub(crate) events: Vec<Arc<Event>>,
    /// The ones made whole.
    pub(crate) made: Made,
}

/// The events of a step made whole: where each is, and their bytes.
#[derive(Default)]
pub(crate) struct Made {
    /// Per position of the step's events, the event made whole (empty while none was).
    whole: Vec<Option<WholeAt>>,
    /// The whole events' bytes, one after the other.
    bytes: Vec<u8>,
    /// Events made whole here (not copied from another stream's read, crate::recent).
    made_here: usize,
}

/// Where an event made whole lies in its step's bytes.
#[derive(Clone, Copy)]
struct WholeAt {
    /// Its first byte.
    at: usize,
    /// Its length.
    len: usize,
    /// prev_kv's and the tail's offsets from `at` (crate::wire::EventLayout).
    prev_at: usize,
    tail_at: usize,
    /// It holds the previous item, or there was none: a prev_kv watch can send it.
    with_prev: bool,
}

impl StepRead {
    /// A read whose events go out as they are.
    pub(crate) fn new(events: Vec<Arc<Event>>) -> StepRead {
        StepRead {
            events,
            made: Made::default(),
        }
    }

    /// Whether event `i` must still be made whole before a watch (with `prev_kv` or not)
    /// can send it (see [`Event::needs`]).
    #[inline]
    pub(crate) fn needs(&self, i: usize, prev_kv: bool) -> bool {
        match self.made.at(i) {
            Some(w) => prev_kv && !w.with_prev,
            None => self.events[i].needs(prev_kv),
        }
    }

    /// The position of the event at `revision`, if this read holds it.
    pub(crate) fn position(&self, revision: Revision) -> Option<usize> {
        self.events
            .binary_search_by_key(&revision, |e| e.revision)
            .ok()
    }

    /// Whether this read may hold events from `first` to `last` (revisions).
    pub(crate) fn overlaps(&self, first: Revision, last: Revision) -> bool {
        match (self.events.first(), self.events.last()) {
            (Some(a), Some(b)) => a.revision <= last && b.revision >= first,
            _ => false,
        }
    }

    /// The encoded parts of event `i` a response carries (crate::wire::event_parts).
    #[inline]
    pub(crate) fn parts(&self, i: usize, prev_kv: bool) -> [&[u8]; 2] {
        match self.made.at(i) {
            Some(w) => wire::event_parts(
                &self.made.bytes[w.at..][..w.len],
                w.prev_at,
                w.tail_at,
                prev_kv,
            ),
            None => self.events[i].wire_parts(prev_kv),
        }
    }

    /// Bytes event `i` adds to a response: its field key, its length and its parts.
    #[inline]
    pub(crate) fn response_len(&self, i: usize, prev_kv: bool) -> usize {
        wire::event_field_len(self.parts(i, prev_kv))
    }
}

impl Made {
    /// Makes event `i` (`e`, of a step of `count` events) whole as `m`, its mutation with
    /// the values, at the event's revision: encoded at the end of the bytes. False for a
    /// mutation that is no event (then the event stays as it was).
    pub(crate) fn put(&mut self, count: usize, i: usize, e: &Event, m: &Mutation<'_>) -> bool {
        let with_prev = e.prev_revision == 0
            || matches!(
                m,
                Mutation::Stored { prev: Some(_), .. } | Mutation::Deleted { prev: Some(_), .. }
            );
        let at = self.bytes.len();
        let Some(EventLayout {
            prev_at, tail_at, ..
        }) = put_whole(m, e.revision, &mut self.bytes)
        else {
            return false;
        };
        if self.whole.is_empty() {
            self.whole.resize(count, None);
        }
        self.whole[i] = Some(WholeAt {
            at,
            len: self.bytes.len() - at,
            prev_at,
            tail_at,
            with_prev,
        });
        self.made_here += 1;
        true
    }

    /// Makes event `i` (of `count`) whole as event `j` of `from` was made, another step's
    /// read of the same revision (crate::recent), if it was, and with its previous item when
    /// `prev` asks for it.
    pub(crate) fn copy(
        &mut self,
        count: usize,
        i: usize,
        from: &Made,
        j: usize,
        prev: bool,
    ) -> bool {
        let Some(w) = from.at(j) else {
            return false;
        };
        if prev && !w.with_prev {
            return false;
        }
        if self.whole.is_empty() {
            self.whole.resize(count, None);
        }
        let at = self.bytes.len();
        self.bytes.extend_from_slice(&from.bytes[w.at..][..w.len]);
        self.whole[i] = Some(WholeAt { at, ..w });
        true
    }

    /// Events made whole here, not copied.
    pub(crate) fn made_here(&self) -> usize {
        self.made_here
    }

    /// Bytes of the whole events.
    pub(crate) fn bytes_len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether event `i` was made whole.
    pub(crate) fn has(&self, i: usize) -> bool {
        self.at(i).is_some()
    }

    #[inline]
    fn at(&self, i: usize) -> Option<WholeAt> {
        self.whole.get(i).copied().flatten()
    }
}
