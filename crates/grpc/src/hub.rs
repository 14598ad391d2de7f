//! The watch hub: every mutation with its revision, in revision order, published only once it
//! can no longer be lost, and kept in an in-memory history ring bounded in bytes.
//!
//! ```text
//!   persistence on:  store ─ shard lock ─> LogSink ── append ─> LSN ──> Hub::on_logged(LSN, m)
//!                    (a LogObserver; calls from different shards may come out of order) │
//!                    log syncer ── safe mark (durable / written) ───> Hub::on_safe      │
//!                                                                               v
//!                    pending: slot per revision after `published` ── filled prefix ≤ safe ─┐
//!   persistence off: store ─ shard lock ─> Hub::on_mutation: revision = counter + 1 ───────┤
//!                    (assigned and published in one critical section: already in order)   v
//!                    ring: events in revision order, oldest dropped past `limit_bytes` ──> readers
//!                    `published` (atomic; a Notify only while a reader waits): readers wake and
//!                    pull from the ring
//! ```
//!
//! Readers (watch streams) pull: each keeps a cursor and reads `[cursor, published]` from the
//! ring when woken, so a slow reader only holds an old cursor, never a queue in the hub. A
//! cursor older than the ring is served from the command log (persistence on) or gets
//! [`ReadError::Compacted`].
//!
//! Why "published" never covers a revision a crash can take back: with persistence on, the
//! revision is the log LSN, and the hub publishes revision r only when every LSN up to r has
//! been handed to it (each LSN is a mutation or a bookkeeping record, so the slots fill without
//! holes) and the log says r is safe in the mode in force (durable in sync mode, handed to the
//! kernel in async mode). After a crash the log restarts past what it holds, so a published
//! revision is never handed out twice (a power loss in async mode may take back the last ones,
//! as it takes back acknowledged writes).

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use cairn_persist::record::Record;
use cairn_persist::{LogObserver, Mode, Persistence};
use cairn_store::{DeleteReason, ItemMeta, Mutation, MutationSink, PrevItem, Revision};
use parking_lot::{Mutex, RwLock};
use tokio::sync::Notify;

use crate::pb;
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
    at: u32,
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
    value: Span,
    pub flags: u32,
    pub exptime: u32,
    pub cas: u64,
    pub stale: bool,
    pub mod_revision: Revision,
}

/// One published mutation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub revision: Revision,
    pub kind: EventKind,
    /// The new item of a Put.
    pub item: Option<ItemState>,
    /// The item before the mutation, if there was one (None for events read from the log,
    /// which does not keep it).
    pub prev: Option<ItemState>,
    /// The event as a `cairn.v1.Event` on the wire, made once here and copied into the
    /// response of every watch that sends it (crate::wire). The key and the values are
    /// stretches of it, so it is the event's only buffer.
    wire: Wire,
    /// The key's stretch of `wire` (empty for a flush).
    key: Span,
    /// `wire[prev_at..tail_at]` is the prev_kv field (empty without a previous item); a
    /// watch without prev_kv sends `wire` without it.
    prev_at: u32,
    tail_at: u32,
}

/// An event's bytes. Up to [`CHUNKED_MIN`] bytes, an allocation of their own, which glibc
/// malloc takes from the thread's cache. Longer, a stretch of a chunk that the thread making
/// events fills in order ([`CHUNK`]): a chunk is one allocation for many events, freed when
/// the last of them is. Why: events fall off the ring in the order they were made, and the
/// longer ones, freed one by one, left malloc's arena with free blocks of every size to sort
/// through on the request path (memslap's sets of 0.25-4.8 KB values, gRPC on: malloc's
/// functions 1.8 us a set; docs/decisions/0019-large-watch-events-in-chunks.md).
///
/// A chunked event's `Bytes` is boxed, so that `Wire` takes no more room in the event than a
/// `Box<[u8]>` (16 bytes, not 24 or 40): the ring's small events stay as small as they were.
#[derive(Clone, Debug)]
enum Wire {
    Own(Box<[u8]>),
    Chunked(Box<Bytes>),
}

/// Events longer than this take their bytes from the thread's chunk: glibc's per-thread
/// cache holds blocks up to 1,032 bytes.
const CHUNKED_MIN: usize = 1024;

/// A chunk's size. An event longer than a quarter of it gets a chunk of its own length, so
/// that a chunk's unused end is at most a quarter of it.
const CHUNK_BYTES: usize = 64 << 10;

thread_local! {
    /// The room left in this thread's chunk: each event is encoded at its start and split
    /// off. The chunk's memory stays allocated until every event in it is dropped.
    static CHUNK: std::cell::RefCell<BytesMut> = std::cell::RefCell::new(BytesMut::new());
}

impl Wire {
    /// Encodes `fields`: up to [`CHUNKED_MIN`] bytes into `reuse` (an old event's bytes,
    /// when they have the encoding's exact length: an event of the same shape, see
    /// [`make_event`]) or else bytes of their own; longer, into this thread's chunk.
    fn encode(fields: &EventFields<'_>, reuse: Box<[u8]>) -> (Wire, EventLayout) {
        let len = fields.len();
        if len <= CHUNKED_MIN {
            let mut bytes = if reuse.len() == len {
                let mut bytes = Vec::from(reuse);
                bytes.clear();
                bytes
            } else {
                #[cfg(test)]
                FRESH_ALLOCATIONS.with(|c| c.set(c.get() + 1));
                Vec::with_capacity(len)
            };
            let layout = fields.encode_into(&mut bytes);
            // Made with its exact length, so this keeps the allocation.
            return (Wire::Own(bytes.into_boxed_slice()), layout);
        }
        if len > CHUNK_BYTES / 4 {
            let mut own = BytesMut::with_capacity(len);
            let layout = fields.encode_into(&mut own);
            return (Wire::Chunked(Box::new(own.freeze())), layout);
        }
        CHUNK.with_borrow_mut(|chunk| {
            if chunk.capacity() < len {
                *chunk = BytesMut::with_capacity(CHUNK_BYTES);
            }
            let layout = fields.encode_into(chunk);
            (
                Wire::Chunked(Box::new(chunk.split_to(len).freeze())),
                layout,
            )
        })
    }

    /// Bytes the event's wire holds in memory: its own allocation as malloc holds it, or its
    /// stretch of a chunk and the box of its `Bytes`.
    fn held_bytes(&self) -> usize {
        match self {
            Wire::Own(b) => malloc_bytes(b.len()),
            Wire::Chunked(b) => b.len() + malloc_bytes(size_of::<Bytes>()),
        }
    }
}

impl Default for Wire {
    fn default() -> Wire {
        Wire::Own(Box::default())
    }
}

impl std::ops::Deref for Wire {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Wire::Own(b) => b,
            Wire::Chunked(b) => b,
        }
    }
}

/// Two events' bytes are equal when they hold the same bytes, wherever they are.
impl PartialEq for Wire {
    fn eq(&self, other: &Wire) -> bool {
        **self == **other
    }
}

impl Eq for Wire {}

/// Memory an event holds besides its wire bytes' allocation, for the ring's bound, counted
/// as the allocator sees it so that `--watch-history-mb` bounds the real memory:
/// - the `Arc<Event>` allocation (two counts and the event);
/// - the ring's slot (one pointer).
const EVENT_FIXED_BYTES: usize =
    malloc_bytes(2 * size_of::<usize>() + size_of::<Event>()) + size_of::<Arc<Event>>();

/// What glibc malloc holds for a request of `n` bytes: `n` and its 8 B header, rounded up to
/// 16 B, at least 32 B.
const fn malloc_bytes(n: usize) -> usize {
    let held = (n + 8).div_ceil(16) * 16;
    if held < 32 {
        32
    } else {
        held
    }
}

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

impl Event {
    /// Builds the event of a store mutation; None for a mutation that is no event (a
    /// scheduled flush: its effect comes later as a Flush).
    pub fn from_mutation(m: &Mutation<'_>, revision: Revision) -> Option<Event> {
        Event::from_mutation_in(m, revision, Box::default())
    }

    /// [`Event::from_mutation`], encoded into `reuse` when it has the length (an old event's
    /// bytes, see [`make_event`]).
    fn from_mutation_in(m: &Mutation<'_>, revision: Revision, reuse: Box<[u8]>) -> Option<Event> {
        use pb::event::{DeleteReason as R, EventType as T};
        Some(match m {
            Mutation::Stored {
                key,
                value,
                meta,
                prev,
            } => {
                let fields = EventFields {
                    kind: T::Put as i32,
                    kv: Some(kv_fields(key, value, meta, revision)),
                    prev_kv: prev
                        .as_ref()
                        .map(|p| kv_fields(key, p.value, &p.meta, p.meta.mod_revision)),
                    reason: R::None as i32,
                    revision,
                };
                Event::build(
                    revision,
                    EventKind::Put,
                    &fields,
                    key.len(),
                    Some((value.len(), meta)),
                    prev.as_ref(),
                    reuse,
                )
            }
            Mutation::Deleted { key, reason, prev } => {
                let r = match reason {
                    DeleteReason::Client => R::Client,
                    DeleteReason::Expired => R::Expired,
                    DeleteReason::Evicted => R::Evicted,
                };
                let fields = EventFields {
                    kind: T::Delete as i32,
                    kv: Some(KeyValueFields {
                        key,
                        value: &[],
                        flags: 0,
                        expires_at: 0,
                        cas: 0,
                        mod_revision: revision,
                        stale: false,
                    }),
                    prev_kv: prev
                        .as_ref()
                        .map(|p| kv_fields(key, p.value, &p.meta, p.meta.mod_revision)),
                    reason: r as i32,
                    revision,
                };
                let kind = EventKind::Delete(*reason);
                Event::build(
                    revision,
                    kind,
                    &fields,
                    key.len(),
                    None,
                    prev.as_ref(),
                    reuse,
                )
            }
            Mutation::Flushed => Event::flush(revision, reuse),
            Mutation::FlushScheduled { .. } => return None,
        })
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

    fn flush(revision: Revision, reuse: Box<[u8]>) -> Event {
        use pb::event::{DeleteReason as R, EventType as T};
        let fields = EventFields {
            kind: T::Flush as i32,
            kv: None,
            prev_kv: None,
            reason: R::Flushed as i32,
            revision,
        };
        Event::build(revision, EventKind::Flush, &fields, 0, None, None, reuse)
    }

    /// The event of a command log record read back at `lsn` (history older than the ring);
    /// None for a record that is no event. The log keeps no previous items.
    pub fn from_record(rec: &Record<'_>, lsn: Revision) -> Option<Event> {
        Event::from_mutation(&rec.to_mutation(lsn), lsn)
    }

    /// The encoded parts of this event a response carries ([`crate::wire::event_parts`]):
    /// the whole event with `prev_kv`, else the event without its previous item.
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

thread_local! {
    /// An event that fell off the ring on this thread, kept to become this thread's next
    /// event ([`make_event`]), so that its two allocations are reused instead of freed and
    /// made again. Outside the ring's bound: one small event a thread at most.
    static SPARE: Cell<Option<Arc<Event>>> = const { Cell::new(None) };
}

#[cfg(test)]
thread_local! {
    /// Allocations made for events on this thread: the test of [`make_event`] counts them
    /// (malloc hands a freed block straight back, so addresses would not tell).
    pub(crate) static FRESH_ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

/// Keeps `e`, an event off the ring, as this thread's spare if it is small and the thread
/// has none; else drops it.
fn keep_as_spare(e: Arc<Event>) {
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

/// Asks the CPU to bring in the cache lines of the `len` bytes at `start` ahead of their
/// use. An event falls off the ring long after it was made, out of every cache: the one a
/// thread keeps as its spare is written over by the thread's next event, and the ring's
/// next oldest is read when it falls (its size). Without the hint each was a miss on the
/// request path (docs/decisions/0018-events-prefetched-before-reuse.md). A hint
/// only: it changes nothing the program sees, and does nothing off x86_64.
fn prefetch(start: *const u8, len: usize) {
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
fn prefetch_event(e: &Arc<Event>) {
    let counts = 2 * size_of::<usize>();
    let fields = Arc::as_ptr(e).cast::<u8>();
    prefetch(fields.wrapping_sub(counts), counts + size_of::<Event>());
}

/// The event of `m` at `revision`, made in this thread's spare event when it has one that no
/// reader holds any more: its `Arc` is reused, and its bytes when the new event has their
/// length (an event of the same shape: same key and value lengths). Freeing an old event
/// and making a new one cost about 3.5% of a SYNC set's server CPU (the old one is out of
/// the caches, and with the server's one malloc arena every free beyond the thread's cache
/// takes the arena's lock; docs/decisions/0017-watch-events-reused-and-freed-where-made.md).
fn make_event(m: &Mutation<'_>, revision: Revision) -> Option<Arc<Event>> {
    let mut spare = SPARE.with(Cell::take);
    let Some(old) = spare.as_mut().and_then(Arc::get_mut) else {
        #[cfg(test)]
        FRESH_ALLOCATIONS.with(|c| c.set(c.get() + 1));
        return Event::from_mutation(m, revision).map(Arc::new);
    };
    let reuse = match std::mem::take(&mut old.wire) {
        Wire::Own(b) => b,
        Wire::Chunked(_) => Box::default(),
    };
    match Event::from_mutation_in(m, revision, reuse) {
        Some(e) => {
            *old = e;
            spare
        }
        None => None,
    }
}

/// A revision's slot while it waits to be published.
enum Slot {
    /// Not handed to the hub yet.
    Waiting,
    /// A revision that carries no event (a bookkeeping record, a scheduled flush).
    NoEvent,
    Event(Arc<Event>),
}

/// Revisions after `published`, in order, until they can be published.
struct Pending {
    /// slots[i] holds revision `base + i`.
    slots: VecDeque<Slot>,
    /// The revision of `slots[0]`: published + 1.
    base: Revision,
    /// Small events that fell off the ring in a drain, left for the writers to reuse or free
    /// (see [`Hub::fill`]); at most [`FALLEN_MAX`].
    fallen: Vec<Arc<Event>>,
}

/// How many fallen events wait for the writers; a drain frees the rest itself.
const FALLEN_MAX: usize = 4096;

/// Events up to this size go to the writers (and become a thread's spare); a larger one is
/// freed where it falls.
const FALLEN_MAX_EVENT_BYTES: usize = 1024;

/// A drain's buffers, kept between drains with their room so that a drain allocates nothing.
#[derive(Default)]
struct Publishing {
    /// The ready slots cut off the pending ones.
    ready: VecDeque<Slot>,
    /// Events that fell off the ring, on their way to [`Pending::fallen`].
    fallen: Vec<Arc<Event>>,
}

/// The history in memory.
struct Ring {
    events: VecDeque<Arc<Event>>,
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

/// Figures for stats.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HubStats {
    pub published_revision: Revision,
    pub history_first_revision: Revision,
    pub history_events: u64,
    pub history_bytes: u64,
    pub history_limit_bytes: u64,
    /// Revisions handed to the hub and not yet published (waiting to be safe).
    pub pending_revisions: u64,
}

/// See the module doc.
pub struct Hub {
    pending: Mutex<Pending>,
    /// Held by a drain from cutting the ready prefix until it is in the ring, so that drains
    /// publish in revision order (persistence on only); it holds the drain's buffers.
    publishing: Mutex<Publishing>,
    ring: RwLock<Ring>,
    /// The newest published revision.
    published: AtomicU64,
    /// Persistence on: the log is safe up to here. Off: unused (everything is safe at once).
    safe: AtomicU64,
    /// True without persistence: the hub assigns revisions itself ([`MutationSink`]).
    counting: bool,
    /// Wakes readers waiting for `published` to move; taken only while `waiting` > 0, so
    /// that a write nobody waits for pays two atomics, not a lock (tokio 1.54's watch
    /// channel took nine a write: 5-8% of a persistence-off set's CPU,
    /// docs/decisions/0016-the-hub-wakes-readers-only-while-one-waits.md).
    notify: Notify,
    /// Readers between registering with `notify` and being woken ([`Subscriber::changed`]).
    waiting: AtomicUsize,
    /// The ring's bound.
    limit_bytes: usize,
}

impl Hub {
    fn new(start: Revision, limit_bytes: usize, counting: bool) -> Hub {
        Hub {
            publishing: Mutex::new(Publishing::default()),
            pending: Mutex::new(Pending {
                slots: VecDeque::new(),
                base: start + 1,
                fallen: Vec::new(),
            }),
            ring: RwLock::new(Ring {
                events: VecDeque::new(),
                bytes: 0,
                first: start + 1,
            }),
            published: AtomicU64::new(start),
            safe: AtomicU64::new(start),
            counting,
            notify: Notify::new(),
            waiting: AtomicUsize::new(0),
            limit_bytes,
        }
    }

    /// A hub for a server without persistence: it numbers mutations itself, from 1, and is
    /// the store's [`MutationSink`].
    pub fn counting(limit_bytes: usize) -> Arc<Hub> {
        Arc::new(Hub::new(0, limit_bytes, true))
    }

    /// A hub fed by `persist`'s command log: it observes every logged mutation and follows the
    /// log's safe mark. Call before serving (no mutation may run meanwhile): it makes what
    /// recovery left durable and starts after it.
    pub fn attach(persist: &Arc<Persistence>, limit_bytes: usize) -> Result<Arc<Hub>, String> {
        persist.sync().map_err(|e| e.to_string())?;
        let start = persist.durable_lsn();
        let hub = Arc::new(Hub::new(start, limit_bytes, false));
        persist.add_observer(Arc::clone(&hub) as Arc<dyn LogObserver>);
        // The syncer calls this after every advance; the mark depends on the mode in force.
        let (h, p) = (Arc::clone(&hub), Arc::downgrade(persist));
        persist.on_advance(Box::new(move |r| {
            if let (Ok(marks), Some(p)) = (r, p.upgrade()) {
                h.on_safe(match p.mode() {
                    Mode::Sync => marks.durable,
                    _ => marks.written,
                });
            }
        }));
        Ok(hub)
    }

    /// The newest published revision: every event up to it can be read.
    pub fn published(&self) -> Revision {
        self.published.load(Ordering::Acquire)
    }

    /// A reader of `published` that can wait for it to move.
    pub fn subscribe(self: &Arc<Self>) -> Subscriber {
        Subscriber {
            seen: self.published(),
            hub: Arc::clone(self),
        }
    }

    /// Moves `published` and wakes the readers waiting for it.
    ///
    /// SeqCst on both sides (here: store, then load `waiting`; in [`Subscriber::changed`]:
    /// register, add to `waiting`, then load `published`): in their one total order either
    /// this load sees the reader counted, and wakes it, or the reader's load comes after
    /// this store, and sees the new revision without sleeping.
    fn set_published(&self, revision: Revision) {
        self.published.store(revision, Ordering::SeqCst);
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.notify.notify_waiters();
        }
    }

    /// The oldest revision the in-memory history can answer for.
    pub fn first_in_memory(&self) -> Revision {
        self.ring.read().first
    }

    /// Events with `from <= revision <= upto`, at most `max` of them, in revision order, and
    /// the revision to continue from. Compacted if `from` is older than the ring.
    pub fn read(
        &self,
        from: Revision,
        upto: Revision,
        max: usize,
    ) -> Result<(Vec<Arc<Event>>, Revision), ReadError> {
        let ring = self.ring.read();
        if from < ring.first {
            return Err(ReadError::Compacted(ring.first));
        }
        let start = ring.events.partition_point(|e| e.revision < from);
        let mut out = Vec::new();
        for e in ring.events.range(start..) {
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

    pub fn stats(&self) -> HubStats {
        let pending = self.pending.lock().slots.len() as u64;
        let ring = self.ring.read();
        HubStats {
            published_revision: self.published(),
            history_first_revision: ring.first,
            history_events: ring.events.len() as u64,
            history_bytes: ring.bytes as u64,
            history_limit_bytes: self.limit_bytes as u64,
            pending_revisions: pending,
        }
    }

    /// Puts what `revision` holds into its slot and publishes what became ready.
    fn fill(&self, revision: Revision, slot: Slot) {
        let mut p = self.pending.lock();
        assert!(
            revision >= p.base,
            "revision {revision} handed to the hub twice (published up to {})",
            p.base - 1
        );
        let i = (revision - p.base) as usize;
        while p.slots.len() <= i {
            p.slots.push_back(Slot::Waiting);
        }
        p.slots[i] = slot;
        let late = revision <= self.safe.load(Ordering::Acquire) && i == 0;
        // Take an event that fell off the ring, here on the thread that made this one: it
        // becomes this thread's next event ([`make_event`]). Events are made on the
        // connection threads and fall off on the log's syncer, and with the server's one
        // malloc arena a free on another thread than the allocation's takes the arena's lock
        // (docs/decisions/0017-watch-events-reused-and-freed-where-made.md). One a revision
        // keeps up with one falling off per revision; past half the bound a writer takes two,
        // and frees the second.
        let second = p.fallen.len() > FALLEN_MAX / 2;
        let fallen = [p.fallen.pop(), if second { p.fallen.pop() } else { None }];
        // The next writer's: made on the log's syncer's core, read on this one.
        if let Some(next) = p.fallen.last() {
            prefetch_event(next);
        }
        drop(p);
        for e in fallen.into_iter().flatten() {
            keep_as_spare(e);
        }
        if late {
            // Safe before it was handed over (the syncer was quick): publish it now.
            self.drain();
        }
    }

    /// Publishes the filled prefix of the pending slots that is safe. The pending lock (which
    /// writers take under their shard lock) is held only to cut the prefix off; the ring is
    /// filled after, and `publishing` keeps concurrent drains in order.
    fn drain(&self) {
        let mut publishing = self.publishing.lock();
        let Publishing { ready, fallen } = &mut *publishing;
        let published = {
            let mut p = self.pending.lock();
            let safe = self.safe.load(Ordering::Acquire);
            let mut k = 0usize;
            while k < p.slots.len()
                && p.base + k as u64 <= safe
                && !matches!(p.slots[k], Slot::Waiting)
            {
                k += 1;
            }
            if k == 0 {
                return;
            }
            // Move the smaller side. Most of it (all, usually): the slots trade places with
            // the empty buffer, which keeps the room it had, and the rest moves back.
            if k * 2 >= p.slots.len() {
                std::mem::swap(&mut p.slots, ready);
                p.slots.extend(ready.drain(k..));
            } else {
                ready.extend(p.slots.drain(..k));
            }
            p.base += k as u64;
            p.base - 1
        };
        {
            let mut ring = self.ring.write();
            for slot in ready.drain(..) {
                if let Slot::Event(e) = slot {
                    ring.push(e);
                }
            }
            ring.trim(self.limit_bytes, |e| {
                if e.size_bytes() <= FALLEN_MAX_EVENT_BYTES {
                    fallen.push(e);
                }
            });
        }
        self.set_published(published);
        if !fallen.is_empty() {
            let mut p = self.pending.lock();
            let room = FALLEN_MAX.saturating_sub(p.fallen.len());
            let handed = fallen.len().min(room);
            p.fallen.extend(fallen.drain(..handed));
            drop(p);
            // More than may wait for the writers: freed here.
            fallen.clear();
        }
    }
}

impl Ring {
    /// Appends an event (the caller trims the ring after: [`Ring::trim`]).
    fn push(&mut self, e: Arc<Event>) {
        self.bytes += e.size_bytes();
        self.events.push_back(e);
    }

    /// Takes the oldest events off while the ring holds more than `limit_bytes`, and hands
    /// each to `fall` (which drops it, or keeps it to be freed elsewhere).
    fn trim(&mut self, limit_bytes: usize, mut fall: impl FnMut(Arc<Event>)) {
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

/// A reader's view of [`Hub::published`] (a watch stream's, or the batch forwarder's).
#[derive(Clone)]
pub struct Subscriber {
    hub: Arc<Hub>,
    /// The revision last returned by [`Subscriber::latest`].
    seen: Revision,
}

impl Subscriber {
    /// The newest published revision, which [`Subscriber::changed`] then waits to move past.
    pub fn latest(&mut self) -> Revision {
        self.seen = self.hub.published();
        self.seen
    }

    /// Waits until the published revision is no longer the one [`Subscriber::latest`] last
    /// returned. Cancel safe: dropped, it leaves no count behind.
    pub async fn changed(&mut self) {
        loop {
            let notified = self.hub.notify.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            let _counted = Waiting::count(&self.hub.waiting);
            if self.hub.published.load(Ordering::SeqCst) != self.seen {
                return;
            }
            notified.await;
        }
    }
}

/// One reader counted in [`Hub::waiting`] while it lives.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn count(waiting: &'a AtomicUsize) -> Waiting<'a> {
        waiting.fetch_add(1, Ordering::SeqCst);
        Waiting(waiting)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl MutationSink for Hub {
    /// Without persistence the hub is the store's sink: it numbers the mutation and publishes
    /// it at once. The ring's write lock orders all keys (the store holds the key's shard
    /// lock, so per key the order is the apply order): the next revision is `published` + 1,
    /// moved under that lock. One lock a mutation; the pending slots serve only a fed hub.
    fn on_mutation(&self, m: &Mutation<'_>) -> Revision {
        debug_assert!(self.counting, "a fed hub gets mutations from the log");
        let mut ring = self.ring.write();
        let revision = self.published.load(Ordering::Relaxed) + 1;
        if let Some(e) = make_event(m, revision) {
            ring.push(e);
            ring.trim(self.limit_bytes, keep_as_spare);
        }
        self.set_published(revision);
        revision
    }
}

impl LogObserver for Hub {
    fn on_logged(&self, lsn: Revision, m: &Mutation<'_>) {
        let slot = match make_event(m, lsn) {
            Some(e) => Slot::Event(e),
            None => Slot::NoEvent,
        };
        self.fill(lsn, slot);
    }

    fn on_no_event(&self, lsn: Revision) {
        self.fill(lsn, Slot::NoEvent);
    }
}

impl Hub {
    /// Everything up to `lsn` is safe: publish what is ready.
    pub fn on_safe(&self, lsn: Revision) {
        if self.safe.fetch_max(lsn, Ordering::AcqRel) < lsn {
            self.drain();
        }
    }
}

/// The newest revision assigned so far, published or not: a start revision beyond it is in
/// the future.
pub fn newest_assigned(hub: &Hub, persist: Option<&cairn_persist::Persistence>) -> Revision {
    match persist {
        Some(p) => p.appended_lsn(),
        None => hub.published(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(rev: Revision) -> ItemMeta {
        ItemMeta {
            flags: 1,
            exptime: 0,
            cas: 9,
            last_access: 0,
            fetched: false,
            stale: false,
            win_sent: false,
            mod_revision: rev,
        }
    }

    fn put<'a>(key: &'a [u8], value: &'a [u8]) -> Mutation<'a> {
        Mutation::Stored {
            key,
            value,
            meta: meta(0),
            prev: None,
        }
    }

    fn revisions(hub: &Hub, from: Revision) -> Vec<Revision> {
        let (events, _) = hub.read(from, hub.published(), usize::MAX).unwrap();
        events.iter().map(|e| e.revision).collect()
    }

    #[test]
    fn a_fed_hub_publishes_the_safe_filled_prefix_in_order() {
        let hub = Hub::new(10, 1 << 20, false);
        hub.on_logged(12, &put(b"b", b"2"));
        hub.on_safe(12);
        assert_eq!(hub.published(), 10, "11 is not there yet");
        hub.on_logged(11, &put(b"a", b"1"));
        assert_eq!(hub.published(), 12);
        assert_eq!(revisions(&hub, 11), vec![11, 12]);
        hub.on_logged(13, &put(b"c", b"3"));
        hub.on_no_event(14);
        hub.on_logged(15, &Mutation::Flushed);
        assert_eq!(hub.published(), 12, "13.. are not safe yet");
        hub.on_safe(14);
        assert_eq!(hub.published(), 14);
        hub.on_safe(15);
        assert_eq!(revisions(&hub, 11), vec![11, 12, 13, 15]);
        // A ready prefix shorter than the rest (it moves, not the rest).
        for r in 16..=19 {
            hub.on_logged(r, &put(b"d", &[r as u8]));
        }
        hub.on_safe(16);
        assert_eq!(revisions(&hub, 15), vec![15, 16]);
        hub.on_safe(19);
        assert_eq!(revisions(&hub, 15), vec![15, 16, 17, 18, 19]);
        let (e, next) = hub.read(12, 15, 1).unwrap();
        assert_eq!((e[0].revision, next), (12, 13), "max bounds a read");
        assert_eq!(hub.read(10, 15, 9), Err(ReadError::Compacted(11)));
    }

    /// A fed hub's drain leaves the small events that fall off the ring to the writers, who
    /// take one a revision (two past half the bound), and keeps at most `FALLEN_MAX` of them
    /// waiting.
    #[test]
    fn a_fed_hub_leaves_fallen_events_to_the_writers() {
        let size = Event::from_mutation(&put(b"k", &[0]), 1)
            .unwrap()
            .size_bytes();
        let hub = Hub::new(0, 3 * size, false);
        let fallen = |hub: &Hub| hub.pending.lock().fallen.len();
        for r in 1..=10 {
            hub.on_logged(r, &put(b"k", &[r as u8]));
        }
        hub.on_safe(10);
        assert_eq!(revisions(&hub, 8), vec![8, 9, 10]);
        assert_eq!(fallen(&hub), 7, "revisions 1-7 wait for the writers");
        hub.on_logged(11, &put(b"k", &[11]));
        assert_eq!(fallen(&hub), 6, "a writer takes one for its next event");
        let many = FALLEN_MAX as u64 + 100;
        for r in 12..12 + many {
            hub.on_no_event(r);
        }
        for r in 12 + many..12 + 2 * many {
            hub.on_logged(r, &put(b"k", &[0]));
        }
        hub.on_safe(12 + 2 * many);
        assert_eq!(
            fallen(&hub),
            FALLEN_MAX,
            "the drain frees what is past the bound"
        );
        hub.on_no_event(12 + 2 * many + 1);
        assert_eq!(
            fallen(&hub),
            FALLEN_MAX - 2,
            "past half the bound, a writer takes two"
        );
    }

    #[test]
    fn an_event_off_the_ring_becomes_the_threads_next_event_unless_a_reader_holds_it() {
        let one_event = Event::from_mutation(&put(b"a", &[1]), 1)
            .unwrap()
            .size_bytes();
        let hub = Hub::counting(one_event);
        let event = |rev: Revision| hub.read(rev, rev, 1).unwrap().0.remove(0);
        let fresh = || FRESH_ALLOCATIONS.with(Cell::get);
        let made = |hub: &Hub, key: &[u8], value: u8| {
            let before = fresh();
            hub.on_mutation(&put(key, &[value]));
            fresh() - before
        };
        assert_eq!(
            made(&hub, b"a", 1),
            2,
            "the first event: its Arc and its bytes"
        );
        assert_eq!(made(&hub, b"b", 2), 2, "nothing fell off yet");
        // Revision 1 fell off and waits as this thread's spare; 3 is made in it.
        assert_eq!(made(&hub, b"c", 3), 0, "both allocations reused");
        let third = event(3);
        assert_eq!(
            (third.revision, third.key(), third.value()),
            (3, &b"c"[..], Some(&[3][..]))
        );
        // A longer key: the Arc is reused, the bytes are not.
        assert_eq!(made(&hub, b"dd", 4), 1);
        // A reader still holds revision 3 when it falls off: it is not reused, and the
        // reader's event stays as it was.
        assert_eq!(made(&hub, b"e", 5), 2);
        assert_eq!(event(5).key(), b"e");
        assert_eq!(
            (third.revision, third.key(), third.value()),
            (3, &b"c"[..], Some(&[3][..]))
        );
    }

    /// Events longer than [`CHUNKED_MIN`] made on one thread lie one after the other in its
    /// chunk; a short one has bytes of its own, and one past a quarter of a chunk a chunk of
    /// its own, which leaves the thread's chunk as it was.
    #[test]
    fn large_events_are_packed_in_the_threads_chunk() {
        let value = vec![7u8; 2000];
        let event =
            |key: &[u8], value: &[u8], rev| Event::from_mutation(&put(key, value), rev).unwrap();
        let next_to =
            |a: &Event, b: &Event| b.wire.as_ptr() == a.wire.as_ptr().wrapping_add(a.wire.len());
        let a = event(b"a", &value, 1);
        let b = event(b"b", &value, 2);
        assert!(matches!(a.wire, Wire::Chunked(_)));
        assert!(next_to(&a, &b), "b right after a in the chunk");
        assert!(matches!(event(b"c", b"v", 3).wire, Wire::Own(_)));
        let huge = event(b"d", &vec![1u8; CHUNK_BYTES / 2], 4);
        assert!(matches!(huge.wire, Wire::Chunked(_)));
        let c = event(b"e", &value, 5);
        assert!(
            next_to(&b, &c),
            "the huge event took none of the chunk's room"
        );
        assert_eq!(
            (c.key(), c.value(), c.revision),
            (&b"e"[..], Some(&value[..]), 5)
        );
        // Filled up, the chunk is followed by a new one; the old one's events stay whole.
        let rest: Vec<Event> = (0..CHUNK_BYTES / value.len())
            .map(|i| event(b"f", &value, 6 + i as u64))
            .collect();
        assert!(
            rest.windows(2).any(|w| !next_to(&w[0], &w[1])),
            "a second chunk"
        );
        for e in [&a, &b, &c].into_iter().chain(&rest) {
            assert_eq!(e.value(), Some(&value[..]));
        }
        assert_eq!(
            a.size_bytes(),
            EVENT_FIXED_BYTES + a.wire.len() + malloc_bytes(size_of::<Bytes>()),
            "its stretch of the chunk and its box"
        );
        assert_eq!(size_of::<Wire>(), size_of::<Box<[u8]>>());
    }

    #[test]
    fn the_ring_drops_the_oldest_past_its_bound() {
        // Every event here takes the same bytes (one-byte key and value, revisions < 128).
        let size = Event::from_mutation(&put(b"k", &[0]), 1)
            .unwrap()
            .size_bytes();
        let hub = Hub::counting(3 * size);
        for i in 0..10u8 {
            assert_eq!(hub.on_mutation(&put(b"k", &[i])), u64::from(i) + 1);
        }
        assert_eq!(hub.published(), 10);
        assert_eq!(revisions(&hub, 8), vec![8, 9, 10]);
        assert_eq!(hub.read(7, 10, 9), Err(ReadError::Compacted(8)));
        let e = &hub.read(10, 10, 1).unwrap().0[0];
        assert_eq!((e.key(), e.value().unwrap()), (&b"k"[..], &[9u8][..]));
    }

    #[test]
    fn events_carry_the_previous_item() {
        let prev = PrevItem {
            value: b"old",
            meta: meta(4),
        };
        let m = Mutation::Stored {
            key: b"key",
            value: b"new",
            meta: meta(0),
            prev: Some(prev),
        };
        let e = Event::from_mutation(&m, 7).unwrap();
        assert_eq!(e.key(), b"key");
        let revs = (
            e.item.as_ref().unwrap().mod_revision,
            e.prev.as_ref().unwrap().mod_revision,
        );
        assert_eq!(
            (e.value(), e.prev_value(), revs),
            (Some(&b"new"[..]), Some(&b"old"[..]), (7, 4))
        );
        let d = Event::from_mutation(
            &Mutation::Deleted {
                key: b"key",
                reason: DeleteReason::Evicted,
                prev: Some(prev),
            },
            8,
        )
        .unwrap();
        assert_eq!(d.kind, EventKind::Delete(DeleteReason::Evicted));
        assert_eq!(d.prev_value(), Some(&b"old"[..]));
        assert_eq!(d.value(), None);
        assert!(Event::from_mutation(&Mutation::FlushScheduled { at: 5 }, 9).is_none());
    }

    /// Two threads at once, each setting its own one-byte key (0 and 1) to 0, 1, ..
    /// `writes` - 1 (8-byte little-endian values).
    fn write_from_two_threads(hub: &Hub, writes: u64) {
        std::thread::scope(|s| {
            for w in 0..2u8 {
                s.spawn(move || {
                    for i in 0..writes {
                        hub.on_mutation(&put(&[w], &i.to_le_bytes()));
                    }
                });
            }
        });
    }

    /// Two threads writing at once into a counting hub: every revision is handed out once,
    /// the ring holds them in order, and each key's events come in the order of its writes.
    #[test]
    fn concurrent_writers_get_one_revision_each_in_ring_order() {
        const WRITES: u64 = 5_000;
        let hub = Hub::counting(64 << 20);
        write_from_two_threads(&hub, WRITES);
        let (events, _) = hub.read(1, hub.published(), usize::MAX).unwrap();
        let revs: Vec<Revision> = events.iter().map(|e| e.revision).collect();
        assert_eq!(revs, (1..=2 * WRITES).collect::<Vec<_>>());
        for w in 0..2u8 {
            let values: Vec<u64> = events
                .iter()
                .filter(|e| e.key() == [w])
                .map(|e| u64::from_le_bytes(e.value().unwrap().try_into().unwrap()))
                .collect();
            assert_eq!(values, (0..WRITES).collect::<Vec<_>>(), "writer {w}");
        }
    }

    /// Readers waiting for `published` to move while writers on other threads publish: every
    /// reader sees the last revision. A publish that saw no reader counted while one was
    /// about to sleep would leave it asleep at the end (the writers skip the wake-up when
    /// nobody waits).
    #[test]
    fn every_waiting_reader_sees_the_last_revision() {
        const WRITES: u64 = 20_000;
        let hub = Hub::counting(1 << 20);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let readers: Vec<_> = (0..8)
            .map(|_| {
                let mut sub = hub.subscribe();
                rt.spawn(async move {
                    while sub.latest() < 2 * WRITES {
                        sub.changed().await;
                    }
                })
            })
            .collect();
        // Every reader asleep before the first write (a bound, not a wait for a fixed time).
        let since = std::time::Instant::now();
        while hub.waiting.load(Ordering::SeqCst) < readers.len() {
            assert!(since.elapsed().as_secs() < 20, "the readers never waited");
            std::thread::yield_now();
        }
        write_from_two_threads(&hub, WRITES);
        assert_eq!(hub.published(), 2 * WRITES);
        rt.block_on(async {
            for r in readers {
                let done = tokio::time::timeout(std::time::Duration::from_secs(20), r).await;
                done.expect("a reader slept through the last revision")
                    .unwrap();
            }
        });
        assert_eq!(hub.waiting.load(Ordering::SeqCst), 0, "a count left behind");
    }
}
