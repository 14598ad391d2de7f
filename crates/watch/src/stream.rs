//! One watch stream: many watches, etcd-style, stepped only when the transport asks for its
//! next response; and [`Streams`], what every stream of a server shares and how one opens.
//!
//! ```text
//!   adapter: requests ──> Command: create / cancel / progress ──┐
//!                                                              v
//!   one stream: watches { id -> cursor, range, filters, phase }, polled as the response
//!   body of its HTTP/2 stream (no task or queue of its own)
//!       │ initial_state: a blocking scan at revision R (items with mod_revision <= R), in
//!       │   chunks through a queue of 2; then initial_state_done{R}; cursor = R + 1
//!       │   (crate::initial_state)
//!       │ live: read the hub's ring once for every watch it holds the cursor of (a watch
//!       │   whose cursor is older reads the command log, crate::log_reader), filter and
//!       │   batch per watch (crate::cursor), hand over; each cursor moves past what was read
//!       v
//!   Update ──> adapter: each event's protobuf bytes, made once by the hub, copied into the
//!   response (crate::wire) ──> HTTP/2 flow control ──> client
//! ```
//!
//! Backpressure without unbounded buffering: a stream makes its next response only when the
//! transport asks for it, which hyper does only while HTTP/2 flow control has room; so a
//! client that stops reading stops only its own stream, which keeps just a cursor per watch.
//! The hub never holds anything per stream. When the client reads again, the stream
//! catches up from the ring, then from the command log; if even the log no longer holds the
//! cursor, the watch is canceled with `compact_revision` (nothing is dropped silently).
//!
//! Non-goals: decoding requests and encoding responses (the adapter, crates/grpc's
//! watch.rs).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cairn_store::Revision;
use tokio::sync::mpsc;
use tokio_stream::{Stream, StreamExt};

use crate::backend::WatchBackend;
use crate::batch::Published;
use crate::command::{Command, CreateWatch};
use crate::cursor::Watcher;
use crate::hub;
use crate::initial_state::{scan_initial, InitialChunk};
use crate::limits::{INITIAL_QUEUE, MAX_WATCHES_PER_STREAM};
use crate::update::{canceled, Update};

/// The watch streams of one server: what they share, and where they learn of new revisions.
pub struct Streams {
    /// What the streams read from and count into.
    b: Arc<WatchBackend>,
    /// Where streams learn of new revisions.
    published: Published,
}

impl Streams {
    /// With a batch window (`batch_window` not zero), spawns its forwarding task on the
    /// current runtime (crate::batch).
    pub fn new(b: WatchBackend, batch_window: Duration) -> Streams {
        let published = Published::new(&b.hub, batch_window);
        Streams {
            b: Arc::new(b),
            published,
        }
    }

    /// The history the revisions belong to (`ResponseHeader.history_id`).
    pub fn history_id(&self) -> u64 {
        self.b.hub.history_id()
    }

    /// A new watch stream over the client's `requests` (each a [`Command`], or an error that
    /// the stream answers last before it ends).
    pub fn open<R, E>(&self, requests: R) -> WatchStream<R, E> {
        let (initial_tx, initial_rx) = mpsc::channel(INITIAL_QUEUE);
        let mut tick = tokio::time::interval(self.b.progress_notify_interval);
        // The first tick of an interval is at once; progress is due one interval from now.
        tick.reset();
        self.b.stats.watch_streams.fetch_add(1, Ordering::Relaxed);
        WatchStream {
            published: self.published.clone(),
            b: Arc::clone(&self.b),
            requests,
            out: VecDeque::new(),
            ended: false,
            tick,
            initial_tx,
            initial_rx,
            watches: BTreeMap::new(),
            next_id: 1,
            turn: 0,
            picked: Vec::new(),
            progress_due: 0,
        }
    }
}

/// One watch stream: its watches and what it has to send. Polled by the adapter through
/// [`WatchStream::next`].
pub struct WatchStream<R, E> {
    /// What the stream reads from and counts into.
    pub(crate) b: Arc<WatchBackend>,
    /// The client's requests.
    requests: R,
    /// Responses made by the last step and not yet handed to the transport (one step makes
    /// at most one response per watch).
    pub(crate) out: VecDeque<Result<Update, E>>,
    /// The client is gone or the stream failed: `out` is the rest.
    ended: bool,
    /// Progress notifications of idle watches.
    tick: tokio::time::Interval,
    /// Where the stream learns of new revisions.
    published: Published,
    /// The initial-state scans' chunks, all watches' through one queue.
    initial_tx: mpsc::Sender<InitialChunk>,
    /// Where the stream takes the chunks from, in the order they were sent.
    initial_rx: mpsc::Receiver<InitialChunk>,
    /// The stream's watches by id.
    pub(crate) watches: BTreeMap<i64, Watcher>,
    /// The next server-chosen watch id.
    next_id: i64,
    /// Round-robin position among watches behind the ring: the watch id served last.
    pub(crate) turn: i64,
    /// Scratch space of `Watcher::take`.
    pub(crate) picked: Vec<u32>,
    /// Progress requests not answered yet: a stream's progress waits for the initial states
    /// under way (until a watch's `initial_state_done`, nothing of it can be resumed from).
    progress_due: usize,
}

impl<R, E> Drop for WatchStream<R, E> {
    /// The stream ended (the client left, or the transport dropped it): stop its scans.
    fn drop(&mut self) {
        for w in self.watches.values() {
            if let Some((_, stop)) = &w.initial {
                stop.store(true, Ordering::Relaxed);
            }
        }
        let stats = &self.b.stats;
        stats
            .watches
            .fetch_sub(self.watches.len() as u64, Ordering::Relaxed);
        stats.watch_streams.fetch_sub(1, Ordering::Relaxed);
    }
}

impl<R, E> WatchStream<R, E>
where
    R: Stream<Item = Result<Command, E>> + Unpin,
{
    /// The next response of the stream, or None once it ended. The stream does its work only
    /// when the transport asks for the next response, i.e. when HTTP/2 flow control has room:
    /// a client that stops reading stops its stream here, holding one cursor per watch.
    pub async fn next(&mut self) -> Option<Result<Update, E>> {
        loop {
            if let Some(r) = self.out.pop_front() {
                return Some(r);
            }
            if self.ended {
                return None;
            }
            let published = self.published.latest();
            let work = self.has_event_work(published);
            let initial_active = self.watches.values().any(|w| w.initial.is_some());
            let go_on = tokio::select! {
                req = self.requests.next() => self.handle(req),
                chunk = self.initial_rx.recv(), if initial_active => match chunk {
                    Some(c) => self.send_initial(c),
                    None => true,
                },
                _ = std::future::ready(()), if work => {
                    self.step(published).await;
                    true
                }
                changed = self.published.changed(), if !work => changed,
                _ = self.tick.tick() => self.progress_tick(published),
            };
            if !go_on {
                self.ended = true;
            }
        }
    }

    fn has_event_work(&self, published: Revision) -> bool {
        self.watches.values().any(|w| w.ready(published))
    }

    /// Queues a response, counting it.
    fn send(&mut self, r: Update) -> bool {
        self.b
            .stats
            .watch_responses_sent
            .fetch_add(1, Ordering::Relaxed);
        self.out.push_back(Ok(r));
        true
    }

    /// Handles one client message; false ends the stream.
    fn handle(&mut self, msg: Option<Result<Command, E>>) -> bool {
        let req = match msg {
            Some(Ok(r)) => r,
            // The client closed its side, or the transport failed: the stream ends.
            None => return false,
            // A request that could not be read, or is none: answered last, the stream ends.
            Some(Err(e)) => {
                self.out.push_back(Err(e));
                return false;
            }
        };
        if matches!(req, Command::Create(_)) {
            // The history is kept from the first watch on (crate::hub).
            self.b.hub.activate();
        }
        let published = self.b.hub.published();
        match req {
            Command::Create(c) => self.create(c, published),
            Command::Cancel(id) => {
                let r = match self.watches.remove(&id) {
                    Some(w) => {
                        if let Some((_, stop)) = &w.initial {
                            stop.store(true, Ordering::Relaxed);
                        }
                        self.b.stats.watches.fetch_sub(1, Ordering::Relaxed);
                        // What this watch sent, not what the server published: a client
                        // resumes after it (watch.proto).
                        canceled(id, w.sent_upto(), "canceled by the client".into())
                    }
                    None => canceled(id, published, format!("unknown watch id {id}")),
                };
                self.send(r)
            }
            Command::Progress => {
                self.progress_due += 1;
                self.send_progress_due(published)
            }
        }
    }

    /// Answers the progress requests waiting, unless an initial state is under way.
    fn send_progress_due(&mut self, published: Revision) -> bool {
        if self.watches.values().any(|w| w.initial.is_some()) {
            return true;
        }
        while self.progress_due > 0 {
            self.progress_due -= 1;
            let revision = self.bookmark(published);
            self.send(Update::Progress {
                watch_id: -1,
                revision,
            });
        }
        true
    }

    /// The revision every watch of the stream has sent everything up to.
    fn bookmark(&self, published: Revision) -> Revision {
        self.watches
            .values()
            .map(Watcher::sent_upto)
            .min()
            .unwrap_or(published)
            .min(published)
    }

    fn create(&mut self, c: CreateWatch, published: Revision) -> bool {
        if self.watches.len() >= MAX_WATCHES_PER_STREAM {
            let why = format!(
                "resource exhausted: this stream already holds {MAX_WATCHES_PER_STREAM} \
                 watches, the most one stream may; cancel one or open another stream"
            );
            return self.send(canceled(c.watch_id, published, why));
        }
        let id = match c.watch_id {
            0 => {
                while self.watches.contains_key(&self.next_id) {
                    self.next_id += 1;
                }
                self.next_id
            }
            id if id < 0 => {
                return self.send(canceled(
                    id,
                    published,
                    "watch_id must be > 0 (or 0 for one chosen by the server)".into(),
                ))
            }
            id if self.watches.contains_key(&id) => {
                return self.send(canceled(
                    id,
                    published,
                    format!("watch id {id} is in use on this stream"),
                ))
            }
            id => id,
        };
        let range = match c.range {
            Ok(r) => r,
            Err(why) => return self.send(canceled(id, published, why)),
        };
        let filters = match c.filters {
            Ok(f) => f,
            Err(why) => return self.send(canceled(id, published, why)),
        };
        let mut w = Watcher {
            range,
            no_put: filters.no_put,
            no_delete: filters.no_delete,
            prev_kv: c.prev_kv,
            progress_notify: c.progress_notify,
            cursor: published + 1,
            initial: None,
            sent_since_tick: false,
            missing: None,
        };
        // header.revision: every event of the watch up to it is sent (nothing yet: the one
        // before its first; for an initial state, 0 until initial_state_done).
        let mut created = Update::Created {
            watch_id: id,
            revision: if c.initial_state { 0 } else { published },
        };
        if c.initial_state {
            let stop = Arc::new(AtomicBool::new(false));
            w.initial = Some((published, Arc::clone(&stop)));
            let (store, range, tx) = (
                Arc::clone(&self.b.store),
                w.range.clone(),
                self.initial_tx.clone(),
            );
            tokio::task::spawn_blocking(move || {
                scan_initial(&store, &range, published, id, &tx, &stop)
            });
        } else if c.start_revision != 0 {
            let history = self.b.hub.history_id();
            if c.history_id != 0 && c.history_id != history {
                // Another history's revision: resuming here would skip events (a restart
                // without persistence starts again from 1).
                self.b.stats.watch_compacted.fetch_add(1, Ordering::Relaxed);
                let oldest = self.oldest_held();
                return self.send(Update::Canceled {
                    watch_id: id,
                    revision: 0,
                    reason: format!(
                        "history_id {} is not this server's history ({history}): its \
                         revisions are not this history's; re-sync with initial_state",
                        c.history_id
                    ),
                    compact_revision: oldest,
                    created: true,
                });
            }
            let newest = hub::newest_assigned(&self.b.hub, self.b.persist.as_deref());
            if c.start_revision > newest + 1 {
                return self.send(canceled(
                    id,
                    published,
                    format!(
                        "start_revision {} is in the future: the newest revision is {newest}",
                        c.start_revision
                    ),
                ));
            }
            w.cursor = c.start_revision;
            created = Update::Created {
                watch_id: id,
                revision: c.start_revision - 1,
            };
            let first = self.b.hub.first_in_memory();
            // Without a log (or for prev_kv) the ring is all the history there is; with one,
            // the first read tells whether the log still holds the cursor.
            if w.cursor < first && (self.b.persist.is_none() || w.prev_kv) {
                self.b.stats.watch_compacted.fetch_add(1, Ordering::Relaxed);
                return self.send(Update::Canceled {
                    watch_id: id,
                    revision: c.start_revision - 1,
                    reason: format!(
                        "start_revision {} is older than the history kept (from {first})",
                        c.start_revision
                    ),
                    compact_revision: first,
                    created: true,
                });
            }
        }
        self.watches.insert(id, w);
        self.b.stats.watches.fetch_add(1, Ordering::Relaxed);
        self.send(created)
    }

    /// The oldest revision a watch can start from: the command log's first, or (without
    /// persistence) the in-memory history's.
    fn oldest_held(&self) -> Revision {
        match &self.b.persist {
            Some(p) => p.first_lsn(),
            None => self.b.hub.first_in_memory(),
        }
    }

    /// Forwards one chunk of a watch's initial state (or its end).
    fn send_initial(&mut self, (id, chunk): InitialChunk) -> bool {
        let Some(w) = self.watches.get_mut(&id) else {
            return true; // canceled meanwhile
        };
        let Some((r, _)) = w.initial else {
            return true;
        };
        w.sent_since_tick = true;
        let resp = match chunk {
            Some(items) => {
                self.b
                    .stats
                    .watch_initial_items_sent
                    .fetch_add(items.len() as u64, Ordering::Relaxed);
                // header.revision 0: nothing of the watch can be resumed from before
                // initial_state_done (watch.proto).
                Update::InitialItems {
                    watch_id: id,
                    revision: 0,
                    items,
                }
            }
            None => {
                w.initial = None;
                w.cursor = r + 1;
                Update::InitialDone {
                    watch_id: id,
                    revision: r,
                }
            }
        };
        self.send(resp);
        if self.progress_due > 0 {
            let published = self.b.hub.published();
            self.send_progress_due(published);
        }
        true
    }

    /// The periodic progress notification of idle, caught-up watches that asked for it.
    fn progress_tick(&mut self, published: Revision) -> bool {
        let mut due = Vec::new();
        for (&id, w) in self.watches.iter_mut() {
            let idle = !std::mem::replace(&mut w.sent_since_tick, false);
            if w.progress_notify && idle && w.initial.is_none() && w.cursor > published {
                due.push((id, w.cursor - 1));
            }
        }
        for (id, revision) in due {
            self.send(Update::Progress {
                watch_id: id,
                revision,
            });
        }
        true
    }
}
