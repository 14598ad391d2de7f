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
//! cursor older than the ring is served from the command log (persistence on,
//! crate::log_reader) or gets [`ReadError::Compacted`].
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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use cairn_persist::{LogObserver, Mode, Persistence};
use cairn_store::{Mutation, MutationSink, Revision};
use parking_lot::{Mutex, RwLock};

use crate::event::Event;
use crate::history::{ReadError, Ring};
use crate::pending::{Pending, Publishing, Slot, FALLEN_MAX};
use crate::prefetch::prefetch_event;
use crate::published::Published;
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
            ring: RwLock::new(Ring::new(start + 1)),
            published: Published::new(start),
            safe: AtomicU64::new(start),
            counting,
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
    #[inline]
    pub fn published(&self) -> Revision {
        self.published.get()
    }

    /// The oldest revision the in-memory history can answer for.
    pub fn first_in_memory(&self) -> Revision {
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
        let ring = self.ring.read();
        HubStats {
            published_revision: self.published(),
            history_first_revision: ring.first(),
            history_events: ring.len() as u64,
            history_bytes: ring.bytes() as u64,
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
        if let Some(e) = make_event(m, revision) {
            ring.push(e);
            ring.trim(self.limit_bytes, keep_as_spare);
        }
        self.published.set(revision);
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
mod tests;
