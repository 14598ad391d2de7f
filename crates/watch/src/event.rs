//! One published mutation ([`Event`]): its revision, what happened, the item and the item
//! before, all over one buffer holding the event as `cairn.v1.Event` on the wire.
//!
//! ```text
//!   Mutation (store) or Record (command log) ── Event::from_mutation / from_record
//!       └──> wire = [ type, kv ][ prev_kv ][ reason, revision ]   (crate::wire, one buffer:
//!            key, value, prev value = Spans of it                  crate::event_bytes)
//!       └──> a response copies wire_parts(prev_kv), never re-encodes
//!   with persistence, the hub keeps a skeleton (Shape::Skeleton): the key and the revision,
//!       no value: wire = [ type, kv{key, mod_revision} ][ ][ reason, revision ], and the
//!       previous item's revision ──> made whole before it is sent (crate::resolve)
//! ```
//!
//! Non-goals: where events are kept (crate::history) and reused (crate::spare).

use std::sync::Arc;

use cairn_api::pb;
use cairn_persist::record::Record;
use cairn_store::{DeleteReason, ItemMeta, Mutation, PrevItem, Revision};

use crate::event_bytes::{malloc_bytes, Wire};
use crate::wire::{self, EventFields, EventLayout, KeyValueFields};

/// What happened at one revision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// The key holds the event's item.
    Put,
    /// The key was removed.
    Delete(DeleteReason),
    /// Every item was removed (flush_all).
    Flush,
}

/// Where an item's value lies in its event's wire bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Span {
    /// Offset of the first byte.
    at: u32,
    /// Length in bytes.
    len: u32,
}

impl Span {
    fn new(at: usize, len: usize) -> Span {
        Span {
            at: at as u32,
            len: len as u32,
        }
    }

    fn of(self, wire: &[u8]) -> &[u8] {
        &wire[self.at as usize..][..self.len as usize]
    }
}

/// An item's state as an event carries it; its value is [`Event::value`] or
/// [`Event::prev_value`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ItemState {
    /// The value's stretch of the event's bytes.
    value: Span,
    /// The client's flags.
    pub flags: u32,
    /// Absolute expiry in unix seconds (0: never).
    pub exptime: u32,
    /// The CAS unique.
    pub cas: u64,
    /// Marked stale (meta `I`), still served with a win flag.
    pub stale: bool,
    /// The revision of the item's last change.
    pub mod_revision: Revision,
}

/// What an event holds: everything, or (with persistence, in the hub's history) only what
/// names its item, whose value is still in the store or in the command log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    /// The item and the previous item, values included.
    Full,
    /// The key and the revision; the previous item only when `keep_prev` (its record is
    /// older than the command log: nothing else would have it), else its revision.
    Skeleton { keep_prev: bool },
}

impl ItemState {
    /// The item's metadata as the store writes it (`revision`: its mod_revision).
    pub(crate) fn meta(&self, revision: Revision) -> ItemMeta {
        ItemMeta {
            flags: self.flags,
            exptime: self.exptime,
            cas: self.cas,
            last_access: 0,
            fetched: false,
            stale: self.stale,
            win_sent: false,
            mod_revision: revision,
        }
    }
}

/// One published mutation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// The mutation's revision (its log LSN with persistence on).
    pub revision: Revision,
    /// What happened.
    pub kind: EventKind,
    /// The new item of a Put.
    pub item: Option<ItemState>,
    /// The item before the mutation, if there was one and the event holds it (None for
    /// events read from the log, which does not keep it, and for a skeleton's).
    pub prev: Option<ItemState>,
    /// The revision of the item before the mutation (0: there was none). A skeleton names
    /// its previous item by it: the item's record in the command log.
    pub prev_revision: Revision,
    /// A Put whose item (value, flags, expiry, CAS) is not in `wire`: a skeleton's. The
    /// store still holds it while the key's item has this revision; the command log else.
    pub(crate) needs_value: bool,
    /// The new item's value length (0 but for a Put), a skeleton's too.
    pub value_len: u32,
    /// The event as a `cairn.v1.Event` on the wire, made once here and copied into the
    /// response of every watch that sends it (crate::wire). The key and the values are
    /// stretches of it, so it is the event's only buffer.
    pub(crate) wire: Wire,
    /// The key's stretch of `wire` (empty for a flush).
    key: Span,
    /// `wire[prev_at..tail_at]` is the prev_kv field (empty without a previous item); a
    /// watch without prev_kv sends `wire` without it.
    prev_at: u32,
    /// Where the fields after prev_kv (reason, revision) start in `wire`.
    tail_at: u32,
}

/// Memory an event holds besides its wire bytes' allocation, for the ring's bound, counted
/// as the allocator sees it so that `--watch-history-mb` bounds the real memory:
/// - the `Arc<Event>` allocation (two counts and the event);
/// - the ring's slot (one pointer).
pub(crate) const EVENT_FIXED_BYTES: usize =
    malloc_bytes(2 * size_of::<usize>() + size_of::<Event>()) + size_of::<Arc<Event>>();

/// An item's fields as the wire writes them.
fn kv_fields<'a>(
    key: &'a [u8],
    value: &'a [u8],
    meta: &ItemMeta,
    rev: Revision,
) -> KeyValueFields<'a> {
    KeyValueFields {
        key,
        value,
        flags: meta.flags,
        expires_at: meta.exptime,
        cas: meta.cas,
        mod_revision: rev,
        stale: meta.stale,
    }
}

/// What encoding a mutation's event takes: its fields, the previous item it holds, and the
/// previous item's revision (0: there was none).
struct Fields<'a> {
    fields: EventFields<'a>,
    prev: Option<PrevItem<'a>>,
    prev_revision: Revision,
}

/// The fields of `m`'s event at `revision` in `shape`; None for a mutation that is no event
/// (a scheduled flush).
fn fields_of<'a>(m: &Mutation<'a>, revision: Revision, shape: Shape) -> Option<Fields<'a>> {
    use pb::event::{DeleteReason as R, EventType as T};
    let keep_prev = match shape {
        Shape::Full => true,
        Shape::Skeleton { keep_prev } => keep_prev,
    };
    let skeleton = shape != Shape::Full;
    let prev_of = |prev: &Option<PrevItem<'a>>| match prev {
        Some(p) => (p.meta.mod_revision, keep_prev.then_some(*p)),
        None => (0, None),
    };
    // A key alone: a Delete's kv, or a skeleton's.
    let key_only = |key: &'a [u8]| KeyValueFields {
        key,
        value: &[],
        flags: 0,
        expires_at: 0,
        cas: 0,
        mod_revision: revision,
        stale: false,
    };
    let (kind, kv, prev, reason, key) = match m {
        Mutation::Stored {
            key,
            value,
            meta,
            prev,
        } => {
            let kv = if skeleton {
                key_only(key)
            } else {
                kv_fields(key, value, meta, revision)
            };
            (T::Put, Some(kv), prev_of(prev), R::None, *key)
        }
        Mutation::Deleted { key, reason, prev } => {
            let r = match reason {
                DeleteReason::Client => R::Client,
                DeleteReason::Expired => R::Expired,
                DeleteReason::Evicted => R::Evicted,
            };
            (T::Delete, Some(key_only(key)), prev_of(prev), r, *key)
        }
        Mutation::Flushed => (T::Flush, None, (0, None), R::Flushed, &[][..]),
        Mutation::FlushScheduled { .. } => return None,
    };
    let (prev_revision, prev) = prev;
    Some(Fields {
        fields: EventFields {
            kind: kind as i32,
            kv,
            prev_kv: prev
                .as_ref()
                .map(|p| kv_fields(key, p.value, &p.meta, p.meta.mod_revision)),
            reason: reason as i32,
            revision,
        },
        prev,
        prev_revision,
    })
}

/// Encodes the whole event of `m` at `revision` at the end of `out` (a step's buffer of
/// events made whole, crate::read); None for a mutation that is no event.
pub(crate) fn put_whole(
    m: &Mutation<'_>,
    revision: Revision,
    out: &mut Vec<u8>,
) -> Option<EventLayout> {
    let f = fields_of(m, revision, Shape::Full)?;
    out.reserve(f.fields.len());
    Some(f.fields.encode_into(out))
}

impl Event {
    /// Builds the event of a store mutation; None for a mutation that is no event (a
    /// scheduled flush: its effect comes later as a Flush).
    pub fn from_mutation(m: &Mutation<'_>, revision: Revision) -> Option<Event> {
        Event::from_mutation_in(m, revision, Box::default(), Shape::Full)
    }

    /// [`Event::from_mutation`], encoded into `reuse` when it has the length (an old event's
    /// bytes, see [`make_event`](crate::spare::make_event)).
    pub(crate) fn from_mutation_in(
        m: &Mutation<'_>,
        revision: Revision,
        reuse: Box<[u8]>,
        shape: Shape,
    ) -> Option<Event> {
        let f = fields_of(m, revision, shape)?;
        let event = match m {
            Mutation::Stored {
                key, value, meta, ..
            } => {
                let skeleton = shape != Shape::Full;
                let mut e = Event::build(
                    revision,
                    EventKind::Put,
                    &f.fields,
                    key.len(),
                    (!skeleton).then_some((value.len(), meta)),
                    f.prev.as_ref(),
                    reuse,
                );
                e.prev_revision = f.prev_revision;
                e.needs_value = skeleton;
                e.value_len = value.len() as u32;
                e
            }
            Mutation::Deleted { key, reason, .. } => {
                let kind = EventKind::Delete(*reason);
                let mut e = Event::build(
                    revision,
                    kind,
                    &f.fields,
                    key.len(),
                    None,
                    f.prev.as_ref(),
                    reuse,
                );
                e.prev_revision = f.prev_revision;
                e
            }
            Mutation::Flushed => {
                Event::build(revision, EventKind::Flush, &f.fields, 0, None, None, reuse)
            }
            Mutation::FlushScheduled { .. } => return None,
        };
        Some(event)
    }

    /// Encodes `fields` and makes the event around the bytes: key, new item (`item`: its
    /// value's length and its meta, at `revision`) and previous item are slices of them.
    fn build(
        revision: Revision,
        kind: EventKind,
        fields: &EventFields<'_>,
        key_len: usize,
        item: Option<(usize, &ItemMeta)>,
        prev: Option<&PrevItem<'_>>,
        reuse: Box<[u8]>,
    ) -> Event {
        let (wire, w) = Wire::encode(fields, reuse);
        let state = |at: usize, len: usize, meta: &ItemMeta, rev: Revision| ItemState {
            value: Span::new(at, len),
            flags: meta.flags,
            exptime: meta.exptime,
            cas: meta.cas,
            stale: meta.stale,
            mod_revision: rev,
        };
        Event {
            revision,
            kind,
            key: Span::new(w.key_at, key_len),
            item: item.map(|(len, meta)| state(w.value_at, len, meta, revision)),
            prev: prev.map(|p| state(w.prev_value_at, p.value.len(), &p.meta, p.meta.mod_revision)),
            prev_at: w.prev_at as u32,
            tail_at: w.tail_at as u32,
            wire,
            prev_revision: 0,
            needs_value: false,
            value_len: 0,
        }
    }

    /// The key (empty for a flush).
    pub fn key(&self) -> &[u8] {
        self.key.of(&self.wire)
    }

    /// The new item's value (None but for a Put).
    pub fn value(&self) -> Option<&[u8]> {
        self.item.as_ref().map(|i| i.value.of(&self.wire))
    }

    /// The previous item's value, if the event carries one.
    pub fn prev_value(&self) -> Option<&[u8]> {
        self.prev.as_ref().map(|p| p.value.of(&self.wire))
    }

    /// The event of a command log record read back at `lsn` (history older than the ring);
    /// None for a record that is no event. The log keeps no previous items.
    pub fn from_record(rec: &Record<'_>, lsn: Revision) -> Option<Event> {
        Event::from_mutation(&rec.to_mutation(lsn), lsn)
    }

    /// The previous item the event holds, as the store gives one.
    pub(crate) fn prev_held(&self) -> Option<PrevItem<'_>> {
        let p = self.prev.as_ref()?;
        Some(PrevItem {
            value: p.value.of(&self.wire),
            meta: p.meta(p.mod_revision),
        })
    }

    /// Whether the event must be made whole before a watch can send it
    /// ([`crate::resolve`]): a skeleton's value, or (for a watch with `prev_kv`) its
    /// previous item.
    pub(crate) fn needs(&self, prev_kv: bool) -> bool {
        self.needs_value || (prev_kv && self.needs_prev())
    }

    /// Whether a `prev_kv` watch needs the previous item made whole: the event holds only
    /// its revision.
    pub(crate) fn needs_prev(&self) -> bool {
        self.prev.is_none() && self.prev_revision != 0
    }

    /// The encoded parts of this event a response carries ([`crate::wire::event_parts`]):
    /// the whole event with `prev_kv`, else the event without its previous item.
    #[inline]
    pub(crate) fn wire_parts(&self, prev_kv: bool) -> [&[u8]; 2] {
        wire::event_parts(
            &self.wire,
            self.prev_at as usize,
            self.tail_at as usize,
            prev_kv,
        )
    }

    /// Bytes this event holds in memory, allocator overhead included (for the ring's bound).
    /// Left out: the unused end of a chunk, and a chunk's bytes kept after their events
    /// were dropped because a newer event in the same chunk lives on ([`Wire`]): at most
    /// a chunk or two for each thread that makes events.
    pub fn size_bytes(&self) -> usize {
        EVENT_FIXED_BYTES + self.wire.held_bytes()
    }
}

#[cfg(test)]
mod tests;
