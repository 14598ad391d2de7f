//! One step of a watch stream: the events its watches have to send, read once for all of
//! them from the hub's history (made whole first with persistence, crate::resolve), or from
//! the command log for one watch behind the history; every response they make.
//!
//! ```text
//!   step(published)
//!     a ready watch behind the ring (round robin, one a step)? ── step_behind:
//!         ring again, else the command log (crate::log_reader), else canceled (compacted)
//!     else: read = ring[min cursor ..= published] (≤ MAX_EVENTS_PER_STEP, one Arc, shared)
//!         ── persistence: the events a watch wants made whole (crate::resolve)
//!         ── each ready watch: take, take, ... until it looked at all of `read`
//!            (crate::cursor: ≤ 1,000 events and 1 MiB a response): every event is read
//!            once a step, however many responses it makes
//! ```
//!
//! Non-goals: the stream's requests and other responses (crate::stream).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use cairn_store::Revision;

use crate::cursor::Watcher;
use crate::event::Event;
use crate::history::ReadError;
use crate::limits::MAX_EVENTS_PER_STEP;
use crate::log_reader::read_log;
use crate::resolve::{resolve, Needs};
use crate::step_read::StepRead;
use crate::stream::WatchStream;
use crate::update::Update;

impl<R, E> WatchStream<R, E> {
    /// Sends the responses of events of every watch with work, or only moves the cursors when
    /// nothing in what was read matched. The watches the ring still holds the cursor of share
    /// one read of it (a stream of 100 watches on one prefix reads each event once and queues
    /// it 100 times, as a pointer); a watch behind the ring reads the command log, one such
    /// watch a step (round robin).
    pub(crate) async fn step(&mut self, published: Revision) {
        let first = self.b.hub.first_in_memory();
        let behind = self
            .watches
            .range(self.turn + 1..)
            .chain(self.watches.range(..=self.turn))
            .find(|(_, w)| w.ready(published) && w.cursor < first)
            .map(|(&id, _)| id);
        if let Some(id) = behind {
            self.turn = id;
            return self.step_behind(id, published).await;
        }
        let Some(from) = self
            .watches
            .values()
            .filter(|w| w.ready(published))
            .map(|w| w.cursor)
            .min()
        else {
            return;
        };
        // The ring moved past `from` since `first` was read: the next step reads the log.
        let Ok((read, next)) = self.b.hub.read(from, published, MAX_EVENTS_PER_STEP) else {
            return;
        };
        let mut read = StepRead::new(read);
        if self.b.persist.is_some() {
            let needs = self.needs(&read.events, published);
            if needs.iter().any(|n| n.value || n.prev) {
                resolve(&self.b, &mut read, &needs).await;
            }
        }
        let read = Arc::new(read);
        if read.made.made_here() > 0 {
            // For the other streams' steps of the same events (crate::recent).
            self.b.hub.recent.offer(&read);
        }
        let ready: Vec<i64> = self
            .watches
            .iter()
            .filter(|(_, w)| w.ready(published))
            .map(|(&id, _)| id)
            .collect();
        for id in ready {
            self.take_all(id, &read, next);
        }
    }

    /// What each event of `read` needs before a ready watch of this stream sends it (with
    /// persistence the ring holds skeletons: crate::resolve).
    fn needs(&self, read: &[Arc<Event>], published: Revision) -> Vec<Needs> {
        let mut needs = vec![Needs::default(); read.len()];
        for w in self.watches.values().filter(|w| w.ready(published)) {
            let start = read.partition_point(|e| e.revision < w.cursor);
            for (e, n) in read[start..].iter().zip(&mut needs[start..]) {
                if w.wants(e) {
                    n.value |= e.needs_value;
                    n.prev |= w.prev_kv && e.needs_prev();
                }
            }
        }
        needs
    }

    /// Every response watch `id` makes from `read` (events up to `next` exclusive), queued;
    /// a watch stopped at an event that could not be made whole is canceled, compacted.
    fn take_all(&mut self, id: i64, read: &Arc<StepRead>, next: Revision) {
        let w = self.watches.get_mut(&id).expect("a watch of this stream");
        let (mut responses, mut events) = (0, 0);
        loop {
            let start = read.events.partition_point(|e| e.revision < w.cursor);
            let r = w.take(id, read, start, next, &mut self.picked);
            let taken = r.is_some();
            if let Some(r) = r {
                responses += 1;
                events += r.len() as u64;
                self.out.push_back(Ok(Update::Events(r)));
            }
            if !taken || w.missing.is_some() || w.cursor >= next {
                break;
            }
        }
        let missing = w.missing;
        // Counted once a watch and step: the counters are shared by every gRPC thread.
        let stats = &self.b.stats;
        stats
            .watch_responses_sent
            .fetch_add(responses, Ordering::Relaxed);
        stats.watch_events_sent.fetch_add(events, Ordering::Relaxed);
        if let Some(revision) = missing {
            let log_first = self.b.persist.as_ref().map_or(0, |p| p.first_lsn());
            let compact_revision = (revision + 1).max(log_first);
            let why = format!(
                "the history no longer holds what revision {revision} needs (the command log \
                 starts at {log_first})"
            );
            self.cancel_compacted(id, compact_revision, why);
        }
    }

    /// Cancels watch `id`: the history no longer holds what it needs; `compact_revision` is
    /// the oldest revision it could go on from.
    fn cancel_compacted(&mut self, id: i64, compact_revision: Revision, why: String) {
        let Some(w) = self.watches.remove(&id) else {
            return;
        };
        self.b.stats.watch_compacted.fetch_add(1, Ordering::Relaxed);
        self.b.stats.watches.fetch_sub(1, Ordering::Relaxed);
        self.b
            .stats
            .watch_responses_sent
            .fetch_add(1, Ordering::Relaxed);
        self.out.push_back(Ok(Update::Canceled {
            watch_id: id,
            revision: w.sent_upto(),
            reason: format!("{why}: re-sync with initial_state"),
            compact_revision,
            created: false,
        }));
    }

    /// [`step`](Self::step) for one watch whose cursor the ring has passed: its next events
    /// from the command log, every one of them sent (each event is read from the log once), or
    /// its cancel with `compact_revision` when the log is gone too.
    async fn step_behind(&mut self, id: i64, published: Revision) {
        let (from, prev_kv) = {
            let w: &Watcher = &self.watches[&id];
            (w.cursor, w.prev_kv)
        };
        let read = match self.b.hub.read(from, published, MAX_EVENTS_PER_STEP) {
            Ok(r) => Ok(r),
            Err(ReadError::Compacted(first_in_memory)) => {
                read_log(&self.b, from, prev_kv, first_in_memory, published).await
            }
        };
        match read {
            Ok((read, next)) => self.take_all(id, &Arc::new(StepRead::new(read)), next),
            Err((compact_revision, why)) => self.cancel_compacted(id, compact_revision, why),
        }
    }
}
