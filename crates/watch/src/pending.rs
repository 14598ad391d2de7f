//! Revisions handed to a hub fed by the command log and not yet published: a slot per
//! revision after `published`, filled as the log's observer calls arrive (from different
//! shards, so out of order), cut off as a prefix once filled and safe; and the buffers a
//! drain keeps between drains.
//!
//! ```text
//!   on_logged(lsn) / on_no_event(lsn) ──> slots[lsn - base] = Event | NoEvent
//!   drain: filled prefix ≤ safe ──> Publishing::ready ──> history ring
//!          events that fell off the ring ──> Publishing::fallen ──> Pending::fallen (at most
//!          FALLEN_MAX) ──> taken by the writers (crate::spare)
//! ```
//!
//! Non-goals: the order of locks and the publishing itself (crate::hub).

use std::collections::VecDeque;
use std::sync::Arc;

use cairn_store::Revision;

use crate::event::Event;

/// A revision's slot while it waits to be published.
pub(crate) enum Slot {
    /// Not handed to the hub yet.
    Waiting,
    /// A revision that carries no event (a bookkeeping record, a scheduled flush).
    NoEvent,
    /// A revision's event, to go to the ring.
    Event(Arc<Event>),
}

/// Revisions after `published`, in order, until they can be published.
pub(crate) struct Pending {
    /// slots[i] holds revision `base + i`.
    pub(crate) slots: VecDeque<Slot>,
    /// The revision of `slots[0]`: published + 1.
    pub(crate) base: Revision,
    /// The first revision the history keeps (see `Hub::activate`): earlier ones handed over
    /// are ignored.
    pub(crate) start: Revision,
    /// Small events that fell off the ring in a drain, left for the writers to reuse or free
    /// (see [`Hub::fill`](crate::hub::Hub)); at most [`FALLEN_MAX`].
    pub(crate) fallen: Vec<Arc<Event>>,
}

/// How many fallen events wait for the writers; a drain frees the rest itself.
pub(crate) const FALLEN_MAX: usize = 4096;

/// A drain's buffers, kept between drains with their room so that a drain allocates nothing.
#[derive(Default)]
pub(crate) struct Publishing {
    /// The ready slots cut off the pending ones.
    pub(crate) ready: VecDeque<Slot>,
    /// Events that fell off the ring, on their way to [`Pending::fallen`].
    pub(crate) fallen: Vec<Arc<Event>>,
}
