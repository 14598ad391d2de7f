//! One watch of a stream ([`Watcher`]): its range and filters, its cursor (every event
//! before it was sent or filtered out), its initial-state phase; and what it takes from a
//! step's read of the history: the events of one response ([`EventBatch`]), a run or the
//! positions it matched, sharing the read with the stream's other watches.
//!
//! ```text
//!   step: read = history[from..] (one Arc<Vec>, shared) ──> for each ready watch:
//!     take(read[start..]) ── wants(e)? ── ≤ MAX_EVENTS_PER_RESPONSE, ≤ MAX_BYTES_PER_RESPONSE
//!       ──> EventBatch { watch_id, revision, prev_kv, Picked { read, Run | Each } }
//!       ──> cursor = past what was looked at
//!   EventBatch::encode ──> cairn.v1.WatchResponse from the events' own bytes (crate::wire)
//! ```
//!
//! Non-goals: the stream's stepping and its other responses (crate::stream).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use bytes::BufMut;
use cairn_store::Revision;

use crate::event::{Event, EventKind};
use crate::filter::KeyRange;
use crate::limits::{MAX_BYTES_PER_RESPONSE, MAX_EVENTS_PER_RESPONSE};
use crate::step_read::StepRead;
use crate::wire;

/// A response of events, written from the bytes the hub made for each event once
/// (crate::wire).
pub struct EventBatch {
    /// The watch the events are for.
    pub(crate) watch_id: i64,
    /// header.revision: every event of the watch up to it was sent.
    pub(crate) revision: Revision,
    /// Send each event's previous item (the prev_kv part of its bytes).
    pub(crate) prev_kv: bool,
    /// The events, in revision order.
    pub(crate) events: Picked,
}

/// The events of one response: picked from what one step read from the ring, which every
/// response of that step shares (one reference count a response, not one an event: with 100
/// watches on a prefix, a write is 100 responses of one event each).
pub(crate) struct Picked {
    /// What the step read, shared by its responses.
    pub(crate) read: Arc<StepRead>,
    /// The events of `read` this response holds.
    pub(crate) which: Which,
}

pub(crate) enum Which {
    /// `read[from..to]`: every event of a stretch matched (a prefix watch on a busy prefix).
    Run(usize, usize),
    /// These positions of `read`, in order.
    Each(Vec<u32>),
}

impl EventBatch {
    /// Events in this response.
    #[inline]
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether the response holds no event (a batch always holds one).
    pub fn is_empty(&self) -> bool {
        self.events.len() == 0
    }

    /// The bytes [`EventBatch::encode`] writes.
    pub fn encoded_len(&self, history_id: u64) -> usize {
        let parts = self.events.parts(self.prev_kv);
        wire::events_response_len(self.watch_id, self.revision, history_id, parts)
    }

    /// Writes the response as `cairn.v1.WatchResponse`, `history_id` in its header: the same
    /// bytes prost writes for the message the events make (crate::wire; the tests compare
    /// them).
    pub fn encode(&self, buf: &mut impl BufMut, history_id: u64) {
        let parts = self.events.parts(self.prev_kv);
        wire::put_events_response(buf, self.watch_id, self.revision, history_id, parts);
    }
}

impl Picked {
    #[inline]
    fn len(&self) -> usize {
        match &self.which {
            Which::Run(from, to) => to - from,
            Which::Each(at) => at.len(),
        }
    }

    // Inline (as the rest of what a response's encoding calls): the adapter, in another
    // crate, encodes every response through it.
    /// The positions in the step's read of the events of this response.
    #[inline]
    fn positions(&self) -> impl Iterator<Item = usize> + '_ {
        let (run, each) = match &self.which {
            Which::Run(from, to) => (*from..*to, &[][..]),
            Which::Each(at) => (0..0, &at[..]),
        };
        run.chain(each.iter().map(|&i| i as usize))
    }

    /// The encoded parts of this response's events ([`StepRead::parts`]).
    #[inline]
    fn parts(&self, prev_kv: bool) -> impl Iterator<Item = [&[u8]; 2]> {
        self.positions().map(move |i| self.read.parts(i, prev_kv))
    }
}

/// One watch of a stream.
pub(crate) struct Watcher {
    /// The keys it covers.
    pub(crate) range: KeyRange,
    /// Leave Put events out.
    pub(crate) no_put: bool,
    /// Leave Delete and Flush events out.
    pub(crate) no_delete: bool,
    /// Send each event's previous item.
    pub(crate) prev_kv: bool,
    /// Send a progress response when idle and caught up, every progress interval.
    pub(crate) progress_notify: bool,
    /// The next revision to look at: every event before it was sent (or filtered out).
    pub(crate) cursor: Revision,
    /// While the initial state is being sent: its revision R, and the flag that stops the
    /// scan if the watch is canceled.
    pub(crate) initial: Option<(Revision, Arc<AtomicBool>)>,
    /// Something was sent since the last progress tick.
    pub(crate) sent_since_tick: bool,
    /// The event at this revision could not be made whole (its record is gone): the stream
    /// cancels the watch, compacted (crate::resolve).
    pub(crate) missing: Option<Revision>,
}

impl Watcher {
    /// header.revision for this watch: every event of it up to this revision was sent (0
    /// while its initial state is under way: nothing can be resumed from before its end).
    pub(crate) fn sent_upto(&self) -> Revision {
        if self.initial.is_some() {
            0
        } else {
            self.cursor - 1
        }
    }

    /// Live (past its initial state) with events published at or after its cursor.
    pub(crate) fn ready(&self, published: Revision) -> bool {
        self.initial.is_none() && self.cursor <= published
    }

    /// The watch's next response from `read[start..]` (events in revision order, none before
    /// the cursor, read up to revision `next` exclusive): the matching events, at most a
    /// response's worth; the cursor moves past what was looked at. None when nothing matched.
    /// `picked` is scratch space.
    ///
    /// A response's worth: at most [`MAX_EVENTS_PER_RESPONSE`] events, and an event joins a
    /// response only if the response stays within [`MAX_BYTES_PER_RESPONSE`] with it, unless
    /// it is the response's first (an event larger than the bound goes alone: a value and its
    /// previous item, each up to the item size limit), so that no response passes the server's
    /// own message limit.
    pub(crate) fn take(
        &mut self,
        id: i64,
        read: &Arc<StepRead>,
        start: usize,
        next: Revision,
        picked: &mut Vec<u32>,
    ) -> Option<EventBatch> {
        let mut cursor = next;
        let mut bytes = 0;
        picked.clear();
        for (i, e) in read.events.iter().enumerate().skip(start) {
            if !self.wants(e) {
                continue;
            }
            if read.needs(i, self.prev_kv) {
                // Not made whole: its record is gone (crate::resolve). Stop before it.
                self.missing = Some(e.revision);
                cursor = e.revision;
                break;
            }
            let len = read.response_len(i, self.prev_kv);
            if !picked.is_empty()
                && (picked.len() == MAX_EVENTS_PER_RESPONSE || bytes + len > MAX_BYTES_PER_RESPONSE)
            {
                cursor = e.revision;
                break;
            }
            bytes += len;
            picked.push(i as u32);
        }
        self.cursor = cursor;
        let (&first, &last) = (picked.first()?, picked.last()?);
        self.sent_since_tick = true;
        let which = if (last - first) as usize + 1 == picked.len() {
            Which::Run(first as usize, last as usize + 1)
        } else {
            Which::Each(picked.clone())
        };
        Some(EventBatch {
            watch_id: id,
            revision: cursor - 1,
            prev_kv: self.prev_kv,
            events: Picked {
                read: Arc::clone(read),
                which,
            },
        })
    }

    pub(crate) fn wants(&self, e: &Event) -> bool {
        match e.kind {
            EventKind::Put => !self.no_put && self.range.matches(e.key()),
            EventKind::Delete(_) => !self.no_delete && self.range.matches(e.key()),
            EventKind::Flush => !self.no_delete,
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    #[test]
    fn a_watch_takes_a_run_or_the_positions_it_matched() {
        use cairn_store::{ItemMeta, Mutation};
        let meta = ItemMeta {
            flags: 0,
            exptime: 0,
            cas: 1,
            last_access: 0,
            fetched: false,
            stale: false,
            win_sent: false,
            mod_revision: 0,
        };
        let keys: [&[u8]; 5] = [b"a1", b"b1", b"a2", b"a3", b"b2"];
        let read: Vec<Arc<Event>> = keys
            .iter()
            .zip(1..)
            .map(|(key, rev)| {
                let m = Mutation::Stored {
                    key,
                    value: b"v",
                    meta,
                    prev: None,
                };
                Arc::new(Event::from_mutation(&m, rev).unwrap())
            })
            .collect();
        let read = Arc::new(StepRead::new(read));
        let watcher = |prefix: &[u8]| Watcher {
            range: KeyRange::Prefix(Bytes::copy_from_slice(prefix)),
            no_put: false,
            no_delete: false,
            prev_kv: false,
            progress_notify: false,
            cursor: 1,
            initial: None,
            sent_since_tick: false,
            missing: None,
        };
        let mut scratch = Vec::new();
        let taken = |w: &mut Watcher, start, scratch: &mut Vec<u32>| {
            let EventBatch {
                events, revision, ..
            } = w.take(7, &read, start, 6, scratch)?;
            let keys: Vec<Vec<u8>> = events
                .positions()
                .map(|i| events.read.events[i].key().to_vec())
                .collect();
            Some((keys, revision, matches!(events.which, Which::Run(..))))
        };
        let mut a = watcher(b"a");
        let (keys, revision, run) = taken(&mut a, 0, &mut scratch).unwrap();
        assert_eq!(keys, [b"a1".to_vec(), b"a2".to_vec(), b"a3".to_vec()]);
        assert_eq!((revision, a.cursor, run), (5, 6, false));
        let mut all = watcher(b"");
        let (keys, _, run) = taken(&mut all, 2, &mut scratch).unwrap();
        assert_eq!(keys.len(), 3);
        assert!(run, "every event from position 2 on matched: one run");
        let mut none = watcher(b"c");
        assert!(taken(&mut none, 0, &mut scratch).is_none());
        assert_eq!(none.cursor, 6, "the cursor moves past what was looked at");
    }
}
