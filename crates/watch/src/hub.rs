//! The watch hub: every mutation with its revision, in revision order, published only once it
//! can no longer be lost, and kept in an in-memory history ring bounded in bytes, from the
//! first watch on (before it, the hub only numbers and publishes revisions: a server nobody
//! watches pays nothing for the history).
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
//! cursor older than the ring is served from the command log (persistence on,
//! crate::log_reader) or gets [`ReadError::Compacted`].
//!
//! What an event in the ring holds: without persistence, everything (the item and the
//! previous item: nothing else keeps a value the store no longer has); with persistence, a
//! skeleton: the key, the revision and the previous item's revision, since the store holds
//! the value while the key's item has the event's revision and the command log holds it
//! always (the record at the revision); crate::resolve makes it whole when a watch sends it.
//! A previous item older than the log's first record (its record is gone) is the one value a
//! skeleton keeps.
//!
//! The history starts ([`Hub::activate`], at the first watch a stream creates; a replica
//! follows through a watch too) empty, at the next revision: without persistence a watch from
//! an earlier revision is compacted; with it, the command log serves it.
//!
//! Why "published" never covers a revision a crash can take back: with persistence on, the
//! revision is the log LSN, and the hub publishes revision r only when every LSN up to r has
//! been handed to it (each LSN is a mutation or a bookkeeping record, so the slots fill without
//! holes) and the log says r is safe in the mode in force (durable in sync mode, handed to the
//! kernel in async mode). After a crash the log restarts past what it holds, so a published
//! revision is never handed out twice (a power loss in async mode may take back the last ones,
//! as it takes back acknowledged writes).
//!
//! The parts, one module each: the events (crate::event, their bytes crate::event_bytes and
//! crate::wire), the ring (crate::history), the pending slots (crate::pending), the
//! published revision and its waiting readers (crate::published, crate::subscriber), events
//! reused as a thread's spare (crate::spare).

use std::collections::VecDeque;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use cairn_persist::{LogObserver, Mode, Persistence};
use cairn_store::{Mutation, MutationSink, Revision};
use parking_lot::{Mutex, RwLock};

use crate::event::{Event, Shape};
use crate::history::{ReadError, Ring};
use crate::pending::{Pending, Publishing, Slot, FALLEN_MAX};
use crate::prefetch::prefetch_event;
use crate::published::Published;
use crate::recent::Recent;
use crate::spare::{keep_as_spare, make_event, FALLEN_MAX_EVENT_BYTES};
use crate::stats::HubStats;

/// See the module doc.
pub struct Hub {
    /// Revisions handed over and not yet published (a fed hub's), and the fallen events
    /// waiting for the writers.
    pending: Mutex<Pending>,
    /// Held by a drain from cutting the ready prefix until it is in the ring, so that drains
    /// publish in revision order (persistence on only); it holds the drain's buffers.
    publishing: Mutex<Publishing>,
    /// The history in memory: readers share it, publishing writes it.
    ring: RwLock<Ring>,
    /// The newest published revision, and the readers waiting for it to move
    /// ([`Subscriber::changed`](crate::Subscriber::changed)).
    pub(crate) published: Published,
    /// Persistence on: the log is safe up to here. Off: unused (everything is safe at once).
    safe: AtomicU64,
    /// True without persistence: the hub assigns revisions itself ([`MutationSink`]).
    counting: bool,
    /// The ring's bound.
    limit_bytes: usize,
    /// The history is kept: set by the first watch ([`Hub::activate`]), never cleared. Until
    /// then no event is made, nothing is held, and a fed hub publishes the safe mark as it is.
    active: AtomicBool,
    /// A fed hub's command log (Weak: the log's observers hold the hub).
    persist: Option<Weak<Persistence>>,
    /// A fed hub: the command log's first LSN when the last drain looked. A skeleton whose
    /// previous item is older keeps that item's value (its record is gone).
    log_first: AtomicU64,
    /// The history the revisions belong to (`ResponseHeader.history_id`): the command log's
    /// id with persistence (the same across restarts), else drawn at start (revisions start
    /// again from 1).
    history_id: u64,
    /// The last step's events made whole, shared by the streams (crate::recent).
    pub(crate) recent: Recent,
}

impl Hub {
    fn new(start: Revision, limit_bytes: usize, counting: bool) -> Hub {
        Hub {
            publishing: Mutex::new(Publishing::default()),
            pending: Mutex::new(Pending {
                slots: VecDeque::new(),
                base: start + 1,
                start: start + 1,
                fallen: Vec::new(),
            }),
            ring: RwLock::new(Ring::new(start + 1)),
            published: Published::new(start),
            safe: AtomicU64::new(start),
            counting,
            limit_bytes,
            active: AtomicBool::new(false),
            persist: None,
            log_first: AtomicU64::new(0),
            history_id: cairn_persist::random_id(),
            recent: Recent::default(),
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
        let mut hub = Hub::new(start, limit_bytes, false);
        hub.persist = Some(Arc::downgrade(persist));
        hub.history_id = persist.log_id();
        let hub = Arc::new(hub);
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

    /// Starts keeping the history, empty, from the next revision assigned; a no-op once it
    /// runs. A watch stream calls it before its first watch reads anything.
    ///
    /// Without persistence, under the ring's lock, which every mutation takes to be numbered.
    /// With it, under the pending lock (which `on_safe` takes while the hub is idle): the flag
    /// is set, then (a SeqCst fence, as every `on_logged` makes before it reads the flag) the
    /// newest LSN assigned, A, is read. Whoever was handed an LSN past A appended after that
    /// read, so its `on_logged` sees the flag and fills its slot; revisions up to A are the
    /// command log's. `published` (the safe mark, while idle) is at most A.
    pub fn activate(&self) {
        if self.active.load(Ordering::Acquire) {
            return;
        }
        if self.counting {
            let mut ring = self.ring.write();
            if !self.active.load(Ordering::Relaxed) {
                *ring = Ring::new(self.published.get_relaxed() + 1);
                self.active.store(true, Ordering::Release);
            }
            return;
        }
        // (No log: a hub fed by hand, in tests; what was published is all that was assigned.)
        let persist = self.persist.as_ref().and_then(Weak::upgrade);
        let mut p = self.pending.lock();
        if self.active.load(Ordering::Relaxed) {
            return;
        }
        self.active.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        let assigned = persist
            .as_ref()
            .map_or(self.published.get(), |l| l.appended_lsn());
        self.log_first.store(
            persist.as_ref().map_or(0, |l| l.first_lsn()),
            Ordering::Relaxed,
        );
        p.slots.clear();
        p.base = assigned + 1;
        p.start = assigned + 1;
        *self.ring.write() = Ring::new(assigned + 1);
        drop(p);
        // What was safe before is published; what comes next waits for its slot.
        self.drain();
    }

    /// The history the revisions belong to (see `ResponseHeader.history_id`).
    pub fn history_id(&self) -> u64 {
        self.history_id
    }

    /// Whether the history is kept (a watch came).
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    /// The newest published revision: every event up to it can be read.
    #[inline]
    pub fn published(&self) -> Revision {
        self.published.get()
    }

    /// The oldest revision the in-memory history can answer for (past the published one while
    /// the history is not kept).
    pub fn first_in_memory(&self) -> Revision {
        if !self.is_active() {
            return self.published() + 1;
        }
        self.ring.read().first()
    }

    /// Events with `from <= revision <= upto`, at most `max` of them, in revision order, and
    /// the revision to continue from. Compacted if `from` is older than the ring.
    pub fn read(
        &self,
        from: Revision,
        upto: Revision,
        max: usize,
    ) -> Result<(Vec<Arc<Event>>, Revision), ReadError> {
        self.ring.read().events(from, upto, max)
    }

    pub fn stats(&self) -> HubStats {
        let pending = self.pending.lock().slots.len() as u64;
        let active = self.is_active();
        let ring = self.ring.read();
        HubStats {
            published_revision: self.published(),
            history_active: active,
            history_first_revision: if active { ring.first() } else { 0 },
            history_events: ring.len() as u64,
            history_bytes: ring.bytes() as u64,
            history_limit_bytes: self.limit_bytes as u64,
            pending_revisions: pending,
        }
    }

    /// Puts what `revision` holds into its slot and publishes what became ready.
    fn fill(&self, revision: Revision, slot: Slot) {
        let mut p = self.pending.lock();
        if revision < p.start {
            // Assigned before the history started (see `activate`): the command log's.
            return;
        }
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
        if let Some(persist) = self.persist.as_ref().and_then(Weak::upgrade) {
            self.log_first.store(persist.first_lsn(), Ordering::Relaxed);
        }
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
                // Revisions before the history started have no slot: safe is enough.
                let upto = safe.min(p.base - 1);
                if upto > self.published.get() {
                    self.published.set(upto);
                }
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
        self.published.set(published);
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

impl MutationSink for Hub {
    /// Without persistence the hub is the store's sink: it numbers the mutation and publishes
    /// it at once. The ring's write lock orders all keys (the store holds the key's shard
    /// lock, so per key the order is the apply order): the next revision is `published` + 1,
    /// moved under that lock. One lock a mutation; the pending slots serve only a fed hub.
    fn on_mutation(&self, m: &Mutation<'_>) -> Revision {
        debug_assert!(self.counting, "a fed hub gets mutations from the log");
        let mut ring = self.ring.write();
        let revision = self.published.get_relaxed() + 1;
        if self.active.load(Ordering::Relaxed) {
            if let Some(e) = make_event(m, revision, Shape::Full) {
                ring.push(e);
                ring.trim(self.limit_bytes, keep_as_spare);
            }
        }
        self.published.set(revision);
        revision
    }
}

impl LogObserver for Hub {
    /// With the history kept, the mutation's skeleton goes to its slot (see the module doc);
    /// before, nothing is made. The fence pairs with [`Hub::activate`]'s.
    fn on_logged(&self, lsn: Revision, m: &Mutation<'_>) {
        fence(Ordering::SeqCst);
        if !self.active.load(Ordering::Relaxed) {
            return;
        }
        let prev = match m {
            Mutation::Stored { prev, .. } | Mutation::Deleted { prev, .. } => prev.as_ref(),
            _ => None,
        };
        let keep_prev =
            prev.is_some_and(|p| p.meta.mod_revision < self.log_first.load(Ordering::Relaxed));
        let slot = match make_event(m, lsn, Shape::Skeleton { keep_prev }) {
            Some(e) => Slot::Event(e),
            None => Slot::NoEvent,
        };
        self.fill(lsn, slot);
    }

    fn on_no_event(&self, lsn: Revision) {
        fence(Ordering::SeqCst);
        if !self.active.load(Ordering::Relaxed) {
            return;
        }
        self.fill(lsn, Slot::NoEvent);
    }
}

impl Hub {
    /// Everything up to `lsn` is safe: publish what is ready.
    /// While the history is not kept, the safe mark is published as it is (under the
    /// pending lock, which [`Hub::activate`] takes: the mark is at most what was assigned).
    pub fn on_safe(&self, lsn: Revision) {
        if self.safe.fetch_max(lsn, Ordering::AcqRel) >= lsn {
            return;
        }
        if !self.active.load(Ordering::Acquire) {
            let _idle = self.pending.lock();
            if !self.active.load(Ordering::Relaxed) {
                if lsn > self.published.get() {
                    self.published.set(lsn);
                }
                return;
            }
        }
        self.drain();
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
mod tests;
