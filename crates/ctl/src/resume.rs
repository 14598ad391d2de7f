//! The watch's resume state: the one number it keeps, the **next revision** it needs (every
//! event of the prefix below it was shown, none at or above it was), fed one `WatchResponse`
//! at a time. No I/O, so the tests drive it with responses of their own.
//!
//! This is the Python client's contract (clients/python/src/cairn/watch.py, `_Resume`, and its
//! README's "What the watch guarantees"), rule for rule:
//!
//! ```text
//!   event                        next = event.revision + 1 (an older event: dropped, counted)
//!   response with events         next = max(next, header.revision + 1)
//!   progress notification        next = max(next, header.revision + 1)
//!   created, watch "from now"    next = header.revision + 1
//!   created, from a revision     ignored: its header is start_revision - 1, nothing sent yet
//!                                (watch.proto)
//!   initial_state_done at R      a Resync of the items received, next = R + 1; a disconnect
//!                                before it starts the state again
//!   canceled{compact_revision}   --relist: create{initial_state} again (a Resync "compacted");
//!                                else the error Compacted
//!   canceled "... in the future" the server lost its history: --relist, or FutureRevision
//!   canceled, another history_id the server is another history (a restart without
//!                                persistence): the same as "in the future"
//! ```
//!
//! The cursor belongs to a history (`header.history_id`, taken from the created response of a
//! watch from now and from initial_state_done): a resume sends it, and a server whose history
//! is another one cancels the watch rather than send other events under the same revisions.
//!
//! Non-goals: the stream, the backoff and the output (`watch.rs`).

use cairn_api::pb;

use crate::error::CtlError;

/// The watch id asked for (one watch per stream).
pub const WATCH_ID: i64 = 1;

/// Why the whole state is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResyncReason {
    /// `--initial-state`.
    Initial,
    /// The history no longer held the next revision (`--relist`).
    Compacted,
    /// The server's history ended before the next revision (`--relist`).
    HistoryLost,
}

impl ResyncReason {
    pub fn name(self) -> &'static str {
        match self {
            ResyncReason::Initial => "initial",
            ResyncReason::Compacted => "compacted",
            ResyncReason::HistoryLost => "history_lost",
        }
    }
}

/// What the watch shows, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    Event(pb::Event),
    /// Every item of the prefix as of `revision`: whatever was shown before no longer holds.
    Resync {
        revision: u64,
        items: Vec<pb::KeyValue>,
        reason: ResyncReason,
        /// With reason Compacted: the oldest revision the server still had.
        compact_revision: u64,
    },
}

#[cfg(test)]
impl Item {
    /// The revision this item brings the watch to.
    pub fn revision(&self) -> u64 {
        match self {
            Item::Event(e) => e.revision,
            Item::Resync { revision, .. } => *revision,
        }
    }
}

/// Why the current stream must end.
#[derive(Debug)]
pub enum Stop {
    /// List the prefix again: reopen at once with `initial_state`.
    Relist,
    /// The watch cannot go on.
    Failed(CtlError),
}

/// The resume state (see the module doc). Invariant: every event of the prefix with a revision
/// below `next_revision` was returned by `on_response`, once, in revision order; none at or
/// above it was.
#[derive(Debug)]
pub struct Resume {
    /// The create request every stream starts from (key, prefix, prev_kv, filters).
    template: pb::WatchCreateRequest,
    /// None: "from now on", until the first created response says where now is.
    pub next_revision: Option<u64>,
    /// The history `next_revision` belongs to (a header's history_id; 0: not known).
    history_id: u64,
    /// The initial state (or a relist) is still to be received.
    need_state: bool,
    /// Why the state is asked for, and the compact revision that made a relist.
    state_reason: ResyncReason,
    compact_revision: u64,
    /// `--relist`: a lost history lists the prefix again instead of failing.
    relist: bool,
    /// The current stream's watch was created.
    created: bool,
    /// Initial items received on the current stream.
    items: Vec<pb::KeyValue>,
    /// Events dropped because they were older than `next_revision` (a server that sent one
    /// twice).
    pub duplicates_dropped: u64,
}

impl Resume {
    pub fn new(
        template: pb::WatchCreateRequest,
        start_revision: Option<u64>,
        initial_state: bool,
        relist: bool,
    ) -> Resume {
        Resume {
            template,
            next_revision: start_revision,
            history_id: 0,
            need_state: initial_state,
            state_reason: ResyncReason::Initial,
            compact_revision: 0,
            relist,
            created: false,
            items: Vec::new(),
            duplicates_dropped: 0,
        }
    }

    /// The create request of the next stream: from where the watch is.
    pub fn create_request(&mut self) -> pb::WatchRequest {
        let mut c = self.template.clone();
        c.watch_id = WATCH_ID;
        if self.need_state {
            c.initial_state = true;
            c.start_revision = 0;
        } else {
            c.initial_state = false;
            c.start_revision = self.next_revision.unwrap_or(0);
            c.history_id = if c.start_revision == 0 {
                0
            } else {
                self.history_id
            };
        }
        self.created = false;
        self.items.clear();
        pb::WatchRequest {
            request_union: Some(pb::watch_request::RequestUnion::CreateRequest(c)),
        }
    }

    /// Whether the current stream's watch was created (the server accepted it).
    pub fn created(&self) -> bool {
        self.created
    }

    /// What the response gives, in order; [`Stop`] when the stream must end.
    pub fn on_response(&mut self, r: pb::WatchResponse) -> Result<Vec<Item>, Stop> {
        if r.watch_id != WATCH_ID {
            // The stream's own progress response (-1), or another watch: nothing of ours.
            return Ok(Vec::new());
        }
        if r.canceled {
            return Err(self.canceled(&r));
        }
        let (header, history_id) = r.header.map_or((0, 0), |h| (h.revision, h.history_id));
        if r.created {
            self.created = true;
            if !self.need_state && self.next_revision.is_none() {
                // "From now on": the server's cursor is header.revision + 1.
                self.next_revision = Some(header + 1);
            }
            if !self.need_state && history_id != 0 {
                self.history_id = history_id;
            }
            return Ok(Vec::new());
        }
        if self.need_state {
            self.items.extend(r.initial_items);
            if !r.initial_state_done {
                return Ok(Vec::new());
            }
            self.need_state = false;
            self.next_revision = Some(header + 1);
            self.history_id = history_id;
            return Ok(vec![Item::Resync {
                revision: header,
                items: std::mem::take(&mut self.items),
                reason: self.state_reason,
                compact_revision: self.compact_revision,
            }]);
        }
        let Some(mut next) = self.next_revision else {
            // No cursor before the created response: a server that broke the order.
            return Err(Stop::Failed(CtlError::WatchCanceled(
                "events came before the watch was created".into(),
            )));
        };
        let mut out = Vec::new();
        let carried_events = !r.events.is_empty();
        for e in r.events {
            if e.revision < next {
                self.duplicates_dropped += 1;
                continue;
            }
            next = e.revision + 1;
            out.push(Item::Event(e));
        }
        if carried_events || r.progress_notify {
            // Every event up to the header was sent.
            next = next.max(header + 1);
        }
        self.next_revision = Some(next);
        Ok(out)
    }

    fn canceled(&mut self, r: &pb::WatchResponse) -> Stop {
        let needed = self.next_revision.unwrap_or(0);
        let theirs = r.header.as_ref().map_or(0, |h| h.history_id);
        let lost = if self.history_id != 0 && theirs != 0 && theirs != self.history_id {
            // Another history than the one the cursor belongs to: its revisions are other
            // events.
            true
        } else {
            // The protocol names this case in the reason's words only (watch.proto has no
            // field for it); the Python client reads the same words.
            r.compact_revision == 0 && r.cancel_reason.contains("in the future")
        };
        if !self.need_state && lost {
            if self.relist {
                return self.relist_now(ResyncReason::HistoryLost, 0);
            }
            return Stop::Failed(CtlError::FutureRevision {
                needed,
                reason: r.cancel_reason.clone(),
            });
        }
        if r.compact_revision > 0 {
            if self.relist {
                return self.relist_now(ResyncReason::Compacted, r.compact_revision);
            }
            return Stop::Failed(CtlError::Compacted {
                needed,
                compact_revision: r.compact_revision,
            });
        }
        let reason = if r.cancel_reason.is_empty() {
            "canceled by the server".to_string()
        } else {
            r.cancel_reason.clone()
        };
        Stop::Failed(CtlError::WatchCanceled(reason))
    }

    fn relist_now(&mut self, reason: ResyncReason, compact_revision: u64) -> Stop {
        self.need_state = true;
        self.state_reason = reason;
        self.compact_revision = compact_revision;
        Stop::Relist
    }
}

#[cfg(test)]
#[path = "resume_tests.rs"]
mod tests;
