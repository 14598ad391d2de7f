//! The Watch service: one bidirectional stream, many watches, etcd-style.
//!
//! ```text
//!   client requests ──> create / cancel / progress ──┐
//!                                                    v
//!   one stream: watches { id -> cursor, range, filters, phase }, polled as the response
//!   body of its HTTP/2 stream (no task or queue of its own)
//!       │ initial_state: a blocking scan at revision R (items with mod_revision <= R), in
//!       │   chunks through a queue of 2; then initial_state_done{R}; cursor = R + 1
//!       │ live: read the hub's ring once for every watch it holds the cursor of (a watch
//!       │   whose cursor is older reads the command log), filter and batch per watch, hand
//!       │   over; each cursor moves past what was read
//!       v
//!   WatchCodec: each event's protobuf bytes, made once by the hub, copied into the response
//!   (crate::wire) ──> HTTP/2 flow control ──> client
//! ```
//!
//! Backpressure without unbounded buffering: a stream makes its next response only when the
//! transport asks for it, which hyper does only while HTTP/2 flow control has room; so a
//! client that stops reading stops only its own stream, which keeps just a cursor per watch.
//! The hub never holds anything per stream. When the client reads again, the stream
//! catches up from the ring, then from the command log; if even the log no longer holds the
//! cursor, the watch is canceled with `compact_revision` (nothing is dropped silently).
//!
//! Initial state without races: the watch's cursor is set to R + 1 before the scan starts,
//! where R is the newest published revision. The scan sends an item only if its mod_revision
//! is <= R; an item changed after R shows a larger revision (the store sets it under the
//! shard lock the scan also takes), so it is left out and its events (all > R) follow the
//! initial state. So initial state + events after R, applied in order, give the server's
//! contents, with no write lost or doubled.

use std::collections::{BTreeMap, VecDeque};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use cairn_store::Revision;
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

use crate::hub::{self, Event, EventKind, ReadError};
use crate::pb::{self, watch_create_request::FilterType, watch_request::RequestUnion};
use crate::{now_unix, wire, Backend};

/// Most watches one stream holds. Each costs a cursor and a share of its stream's one task;
/// a create past the limit is canceled with the reason, and the stream and its other watches
/// go on.
const MAX_WATCHES_PER_STREAM: usize = 1000;
/// Most events (and bytes of them) in one response.
const MAX_EVENTS_PER_RESPONSE: usize = 1000;
const MAX_BYTES_PER_RESPONSE: usize = 1 << 20;
/// Most events examined per step for one watch (so one watch cannot hold the stream long).
const MAX_EVENTS_PER_STEP: usize = 4096;
/// Initial-state items per response (and the byte bound above).
const MAX_ITEMS_PER_CHUNK: usize = 4096;
/// Initial-state chunks produced ahead of sending.
const INITIAL_QUEUE: usize = 2;
/// Most payload bytes read from the command log in one step of a watch behind the ring.
const MAX_LOG_BYTES_PER_STEP: usize = 4 << 20;

pub struct WatchService {
    b: Arc<Backend>,
    /// Where streams learn of new revisions.
    published: Published,
}

/// Where a stream learns of new revisions: from the hub itself, or with a batch window
/// ([`GrpcConfig::batch_window`](crate::GrpcConfig)) from the channel of [`forward_batched`].
#[derive(Clone)]
enum Published {
    Hub(crate::hub::Subscriber),
    Batched(tokio::sync::watch::Receiver<Revision>),
}

impl Published {
    /// The newest revision published, which [`Published::changed`] then waits to move past.
    fn latest(&mut self) -> Revision {
        match self {
            Published::Hub(s) => s.latest(),
            Published::Batched(rx) => *rx.borrow_and_update(),
        }
    }

    /// Waits for a revision after the one [`Published::latest`] last gave; false if no more
    /// will come (the forwarder is gone). Cancel safe.
    async fn changed(&mut self) -> bool {
        match self {
            Published::Hub(s) => {
                s.changed().await;
                true
            }
            Published::Batched(rx) => rx.changed().await.is_ok(),
        }
    }
}

impl WatchService {
    /// With a batch window, spawns its forwarding task on the current runtime.
    pub fn new(b: Arc<Backend>) -> WatchService {
        let mut hub = b.hub.subscribe();
        let window = b.config.batch_window;
        let published = if window.is_zero() {
            Published::Hub(hub)
        } else {
            let (tx, rx) = tokio::sync::watch::channel(hub.latest());
            tokio::spawn(forward_batched(hub, tx, window));
            Published::Batched(rx)
        };
        WatchService { b, published }
    }
}

/// Passes the hub's newest published revision on to the streams at most once per `window`.
///
/// Every write publishes a revision and wakes every stream with a watch on it; with many
/// streams and a high write rate those wake-ups are most of the CPU an event costs (each
/// wake-up reads, encodes and sends one or two events). Forwarded at most once per window,
/// a stream wakes once for all the events of the window: an event waits at most `window`
/// longer (none at all after a quiet spell: the first change is forwarded at once). What a
/// stream sends is unchanged: it reads the ring up to the revision it is given, so no event
/// is skipped, doubled or reordered (tests/grpc.rs runs the watch properties with and without
/// a window). Ends when every stream and the service are gone.
async fn forward_batched(
    mut from: crate::hub::Subscriber,
    to: tokio::sync::watch::Sender<Revision>,
    window: std::time::Duration,
) {
    loop {
        tokio::select! {
            _ = from.changed() => {}
            _ = to.closed() => return,
        }
        to.send_replace(from.latest());
        tokio::time::sleep(window).await;
    }
}

/// What a watch stream sends: a response built as a message, or a batch of events written
/// from the bytes the hub made for each event once (crate::wire).
pub(crate) enum Outgoing {
    Message(Box<pb::WatchResponse>),
    Events {
        watch_id: i64,
        /// header.revision: every event of the watch up to it was sent.
        revision: Revision,
        prev_kv: bool,
        events: Picked,
    },
}

/// The events of one response: picked from what one step read from the ring, which every
/// response of that step shares (one reference count a response, not one an event: with 100
/// watches on a prefix, a write is 100 responses of one event each).
pub(crate) struct Picked {
    read: Arc<Vec<Arc<Event>>>,
    which: Which,
}

enum Which {
    /// `read[from..to]`: every event of a stretch matched (a prefix watch on a busy prefix).
    Run(usize, usize),
    /// These positions of `read`, in order.
    Each(Vec<u32>),
}

impl Outgoing {
    /// Events in this response.
    fn events(&self) -> u64 {
        match self {
            Outgoing::Events { events, .. } => events.len() as u64,
            Outgoing::Message(_) => 0,
        }
    }
}

impl Picked {
    fn len(&self) -> usize {
        match &self.which {
            Which::Run(from, to) => to - from,
            Which::Each(at) => at.len(),
        }
    }

    fn iter(&self) -> impl Iterator<Item = &Event> {
        let (run, each) = match &self.which {
            Which::Run(from, to) => (&self.read[*from..*to], &[][..]),
            Which::Each(at) => (&[][..], &at[..]),
        };
        let each = each.iter().map(|&i| &*self.read[i as usize]);
        run.iter().map(|e| &**e).chain(each)
    }
}

/// Encodes [`Outgoing`] as `cairn.v1.WatchResponse`: the same bytes prost writes for the
/// message the events make (crate::wire; the tests compare them).
#[derive(Default)]
pub(crate) struct OutgoingEncoder;

impl tonic::codec::Encoder for OutgoingEncoder {
    type Item = Outgoing;
    type Error = Status;

    fn encode(
        &mut self,
        item: Outgoing,
        buf: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), Status> {
        match item {
            Outgoing::Message(m) => prost::Message::encode(&*m, buf)
                .map_err(|e| Status::internal(format!("encoding a watch response: {e}"))),
            Outgoing::Events {
                watch_id,
                revision,
                prev_kv,
                events,
            } => {
                let parts = events.iter().map(|e| e.wire_parts(prev_kv));
                wire::put_events_response(buf, watch_id, revision, parts);
                Ok(())
            }
        }
    }
}

/// The Watch service's codec: requests decoded by prost, responses by [`OutgoingEncoder`].
#[derive(Default)]
pub(crate) struct WatchCodec;

impl tonic::codec::Codec for WatchCodec {
    type Encode = Outgoing;
    type Decode = pb::WatchRequest;
    type Encoder = OutgoingEncoder;
    type Decoder = tonic_prost::ProstDecoder<pb::WatchRequest>;

    fn encoder(&mut self) -> OutgoingEncoder {
        OutgoingEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        tonic_prost::ProstDecoder::default()
    }
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<Outgoing, Status>> + Send>>;

/// One call of the Watch method, as tonic's server drives it.
struct WatchCall(Arc<WatchService>);

impl tonic::server::StreamingService<pb::WatchRequest> for WatchCall {
    type Response = Outgoing;
    type ResponseStream = WatchStream;
    type Future = std::future::Ready<Result<Response<WatchStream>, Status>>;

    fn call(&mut self, req: Request<Streaming<pb::WatchRequest>>) -> Self::Future {
        std::future::ready(Ok(Response::new(self.0.open(req))))
    }
}

impl WatchService {
    /// A new watch stream: its state, polled as the response body.
    fn open(&self, req: Request<Streaming<pb::WatchRequest>>) -> WatchStream {
        let (initial_tx, initial_rx) = mpsc::channel(INITIAL_QUEUE);
        let mut tick = tokio::time::interval(self.b.config.progress_notify_interval);
        // The first tick of an interval is at once; progress is due one interval from now.
        tick.reset();
        self.b.stats.watch_streams.fetch_add(1, Ordering::Relaxed);
        let s = StreamState {
            published: self.published.clone(),
            b: Arc::clone(&self.b),
            requests: req.into_inner(),
            out: VecDeque::new(),
            ended: false,
            tick,
            initial_tx,
            initial_rx,
            watches: BTreeMap::new(),
            next_id: 1,
            turn: 0,
            picked: Vec::new(),
        };
        let stream = futures_util::stream::unfold(s, |mut s| async move {
            let r = s.next().await?;
            Some((r, s))
        });
        Box::pin(stream)
    }
}

/// The Watch service as tonic serves it: what tonic-build generates for `service Watch`,
/// written here so that responses go through [`WatchCodec`] (the generated server insists on
/// encoding a `pb::WatchResponse`). The route and the messages are the .proto's, so clients
/// generated from it (grpcio, the tonic client in `pb`) see no difference.
#[derive(Clone)]
pub struct WatchServer {
    inner: Arc<WatchService>,
    max_decoding_message_size: Option<usize>,
    max_encoding_message_size: Option<usize>,
}

impl WatchServer {
    pub fn new(inner: WatchService, max_message_bytes: usize) -> WatchServer {
        WatchServer {
            inner: Arc::new(inner),
            max_decoding_message_size: Some(max_message_bytes),
            max_encoding_message_size: Some(max_message_bytes),
        }
    }
}

impl tonic::server::NamedService for WatchServer {
    const NAME: &'static str = "cairn.v1.Watch";
}

impl<B> tower::Service<http::Request<B>> for WatchServer
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<tonic::codegen::StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = tonic::codegen::BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if req.uri().path() != "/cairn.v1.Watch/Watch" {
            return Box::pin(async move {
                let mut response = http::Response::new(tonic::body::Body::default());
                let headers = response.headers_mut();
                headers.insert(
                    Status::GRPC_STATUS,
                    (tonic::Code::Unimplemented as i32).into(),
                );
                headers.insert(
                    http::header::CONTENT_TYPE,
                    tonic::metadata::GRPC_CONTENT_TYPE,
                );
                Ok(response)
            });
        }
        let (inner, dec, enc) = (
            Arc::clone(&self.inner),
            self.max_decoding_message_size,
            self.max_encoding_message_size,
        );
        Box::pin(async move {
            let mut grpc =
                tonic::server::Grpc::new(WatchCodec).apply_max_message_size_config(dec, enc);
            Ok(grpc.streaming(WatchCall(inner), req).await)
        })
    }
}

/// The keys a watch covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum KeyRange {
    Key(Bytes),
    Prefix(Bytes),
    /// [start, end); None = every key >= start.
    Range(Bytes, Option<Bytes>),
}

impl KeyRange {
    /// The range a create request names, or why it is not one.
    fn of(req: &pb::WatchCreateRequest) -> Result<KeyRange, String> {
        let key = req.key.clone();
        if req.prefix {
            if !req.range_end.is_empty() {
                return Err("give prefix or range_end, not both".into());
            }
            return Ok(KeyRange::Prefix(key));
        }
        if req.range_end.is_empty() {
            if key.is_empty() {
                return Err("the key is empty (set prefix to watch every key)".into());
            }
            return Ok(KeyRange::Key(key));
        }
        if &req.range_end[..] == b"\0" {
            return Ok(KeyRange::Range(key, None));
        }
        if req.range_end <= key {
            return Err("range_end must be greater than key".into());
        }
        Ok(KeyRange::Range(key, Some(req.range_end.clone())))
    }

    fn matches(&self, key: &[u8]) -> bool {
        match self {
            KeyRange::Key(k) => key == &k[..],
            KeyRange::Prefix(p) => key.starts_with(p),
            KeyRange::Range(start, end) => {
                key >= &start[..] && end.as_ref().is_none_or(|e| key < &e[..])
            }
        }
    }
}

/// One watch of a stream.
struct Watcher {
    range: KeyRange,
    no_put: bool,
    no_delete: bool,
    prev_kv: bool,
    progress_notify: bool,
    /// The next revision to look at: every event before it was sent (or filtered out).
    cursor: Revision,
    /// While the initial state is being sent: its revision R, and the flag that stops the
    /// scan if the watch is canceled.
    initial: Option<(Revision, Arc<AtomicBool>)>,
    /// Something was sent since the last progress tick.
    sent_since_tick: bool,
}

impl Watcher {
    /// Live (past its initial state) with events published at or after its cursor.
    fn ready(&self, published: Revision) -> bool {
        self.initial.is_none() && self.cursor <= published
    }

    /// The watch's next response from `read[start..]` (events in revision order, none before
    /// the cursor, read up to revision `next` exclusive): the matching events, at most a
    /// response's worth; the cursor moves past what was looked at. None when nothing matched.
    /// `picked` is scratch space.
    fn take(
        &mut self,
        id: i64,
        read: &Arc<Vec<Arc<Event>>>,
        start: usize,
        next: Revision,
        picked: &mut Vec<u32>,
    ) -> Option<Outgoing> {
        let mut cursor = next;
        let mut bytes = 0;
        picked.clear();
        for (i, e) in read.iter().enumerate().skip(start) {
            if !self.wants(e) {
                continue;
            }
            if picked.len() == MAX_EVENTS_PER_RESPONSE || bytes > MAX_BYTES_PER_RESPONSE {
                cursor = e.revision;
                break;
            }
            bytes += e.size_bytes();
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
        Some(Outgoing::Events {
            watch_id: id,
            revision: cursor - 1,
            prev_kv: self.prev_kv,
            events: Picked {
                read: Arc::clone(read),
                which,
            },
        })
    }

    fn wants(&self, e: &Event) -> bool {
        match e.kind {
            EventKind::Put => !self.no_put && self.range.matches(e.key()),
            EventKind::Delete(_) => !self.no_delete && self.range.matches(e.key()),
            EventKind::Flush => !self.no_delete,
        }
    }
}

/// A chunk of a watch's initial state (None: the scan is done).
type InitialChunk = (i64, Option<Vec<pb::KeyValue>>);

struct StreamState {
    b: Arc<Backend>,
    requests: Streaming<pb::WatchRequest>,
    /// Responses made by the last step and not yet handed to the transport (one step makes
    /// at most one response per watch).
    out: VecDeque<Result<Outgoing, Status>>,
    /// The client is gone or the stream failed: `out` is the rest.
    ended: bool,
    /// Progress notifications of idle watches.
    tick: tokio::time::Interval,
    published: Published,
    initial_tx: mpsc::Sender<InitialChunk>,
    initial_rx: mpsc::Receiver<InitialChunk>,
    watches: BTreeMap<i64, Watcher>,
    /// The next server-chosen watch id.
    next_id: i64,
    /// Round-robin position among watches behind the ring: the watch id served last.
    turn: i64,
    /// Scratch space of `Watcher::take`.
    picked: Vec<u32>,
}

impl Drop for StreamState {
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

fn response(watch_id: i64, revision: Revision) -> pb::WatchResponse {
    pb::WatchResponse {
        header: Some(pb::ResponseHeader { revision }),
        watch_id,
        ..Default::default()
    }
}

fn canceled(watch_id: i64, revision: Revision, reason: String) -> pb::WatchResponse {
    pb::WatchResponse {
        canceled: true,
        cancel_reason: reason,
        ..response(watch_id, revision)
    }
}

impl StreamState {
    /// The next response of the stream, or None once it ended. The stream does its work only
    /// when the transport asks for the next response, i.e. when HTTP/2 flow control has room:
    /// a client that stops reading stops its stream here, holding one cursor per watch.
    async fn next(&mut self) -> Option<Result<Outgoing, Status>> {
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
                req = self.requests.message() => self.handle(req),
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
    fn send(&mut self, r: pb::WatchResponse) -> bool {
        self.b
            .stats
            .watch_responses_sent
            .fetch_add(1, Ordering::Relaxed);
        self.out.push_back(Ok(Outgoing::Message(Box::new(r))));
        true
    }

    /// Handles one client message; false ends the stream.
    fn handle(&mut self, msg: Result<Option<pb::WatchRequest>, Status>) -> bool {
        let req = match msg {
            Ok(Some(r)) => r,
            // The client closed its side, or the transport failed: the stream ends.
            Ok(None) => return false,
            Err(status) => {
                self.out.push_back(Err(crate::request_error(status)));
                return false;
            }
        };
        let published = self.b.hub.published();
        match req.request_union {
            None => {
                self.out.push_back(Err(Status::invalid_argument(
                    "a WatchRequest must hold create_request, cancel_request or progress_request",
                )));
                false
            }
            Some(RequestUnion::CreateRequest(c)) => self.create(c, published),
            Some(RequestUnion::CancelRequest(c)) => {
                let id = c.watch_id;
                let r = match self.watches.remove(&id) {
                    Some(w) => {
                        if let Some((_, stop)) = &w.initial {
                            stop.store(true, Ordering::Relaxed);
                        }
                        self.b.stats.watches.fetch_sub(1, Ordering::Relaxed);
                        canceled(id, published, "canceled by the client".into())
                    }
                    None => canceled(id, published, format!("unknown watch id {id}")),
                };
                self.send(r)
            }
            Some(RequestUnion::ProgressRequest(_)) => {
                let revision = self.bookmark(published);
                self.send(pb::WatchResponse {
                    progress_notify: true,
                    ..response(-1, revision)
                })
            }
        }
    }

    /// The revision every watch of the stream has sent everything up to.
    fn bookmark(&self, published: Revision) -> Revision {
        self.watches
            .values()
            .map(|w| w.cursor - 1)
            .min()
            .unwrap_or(published)
            .min(published)
    }

    fn create(&mut self, c: pb::WatchCreateRequest, published: Revision) -> bool {
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
        let range = match KeyRange::of(&c) {
            Ok(r) => r,
            Err(why) => return self.send(canceled(id, published, why)),
        };
        let mut w = Watcher {
            range,
            no_put: false,
            no_delete: false,
            prev_kv: c.prev_kv,
            progress_notify: c.progress_notify,
            cursor: published + 1,
            initial: None,
            sent_since_tick: false,
        };
        for f in &c.filters {
            match FilterType::try_from(*f) {
                Ok(FilterType::Noput) => w.no_put = true,
                Ok(FilterType::Nodelete) => w.no_delete = true,
                Err(_) => return self.send(canceled(id, published, format!("unknown filter {f}"))),
            }
        }
        let mut created = pb::WatchResponse {
            created: true,
            ..response(id, published)
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
            let first = self.b.hub.first_in_memory();
            // Without a log (or for prev_kv) the ring is all the history there is; with one,
            // the first read tells whether the log still holds the cursor.
            if w.cursor < first && (self.b.persist.is_none() || w.prev_kv) {
                self.b.stats.watch_compacted.fetch_add(1, Ordering::Relaxed);
                created.canceled = true;
                created.compact_revision = first;
                created.cancel_reason = format!(
                    "start_revision {} is older than the history kept (from {first})",
                    c.start_revision
                );
                return self.send(created);
            }
        }
        self.watches.insert(id, w);
        self.b.stats.watches.fetch_add(1, Ordering::Relaxed);
        self.send(created)
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
                pb::WatchResponse {
                    initial_items: items,
                    ..response(id, r)
                }
            }
            None => {
                w.initial = None;
                w.cursor = r + 1;
                pb::WatchResponse {
                    initial_state_done: true,
                    ..response(id, r)
                }
            }
        };
        self.send(resp)
    }

    /// Sends one response of events to every watch with work, or only moves the cursor of one
    /// when nothing in what it read matched. The watches the ring still holds the cursor of
    /// share one read of it (a stream of 100 watches on one prefix reads each event once and
    /// queues it 100 times, as a pointer); a watch behind the ring reads the command log, one
    /// such watch a step (round robin).
    async fn step(&mut self, published: Revision) {
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
        let read = Arc::new(read);
        let (mut responses, mut events) = (0, 0);
        for (&id, w) in self.watches.iter_mut() {
            if !w.ready(published) {
                continue;
            }
            let start = read.partition_point(|e| e.revision < w.cursor);
            if let Some(r) = w.take(id, &read, start, next, &mut self.picked) {
                responses += 1;
                events += r.events();
                self.out.push_back(Ok(r));
            }
        }
        // Counted once a step: the counters are shared by every gRPC thread.
        let stats = &self.b.stats;
        stats
            .watch_responses_sent
            .fetch_add(responses, Ordering::Relaxed);
        stats.watch_events_sent.fetch_add(events, Ordering::Relaxed);
    }

    /// [`step`](Self::step) for one watch whose cursor the ring has passed: its next events from
    /// the command log, or its cancel with `compact_revision` when the log is gone too.
    async fn step_behind(&mut self, id: i64, published: Revision) {
        let (from, prev_kv) = {
            let w = &self.watches[&id];
            (w.cursor, w.prev_kv)
        };
        let read = match self.b.hub.read(from, published, MAX_EVENTS_PER_STEP) {
            Ok(r) => Ok(r),
            Err(ReadError::Compacted(first_in_memory)) => {
                read_log(&self.b, from, prev_kv, first_in_memory, published).await
            }
        };
        let w = self.watches.get_mut(&id).expect("found above");
        match read {
            Ok((read, next)) => {
                if let Some(r) = w.take(id, &Arc::new(read), 0, next, &mut self.picked) {
                    let stats = &self.b.stats;
                    stats.watch_responses_sent.fetch_add(1, Ordering::Relaxed);
                    stats
                        .watch_events_sent
                        .fetch_add(r.events(), Ordering::Relaxed);
                    self.out.push_back(Ok(r));
                }
            }
            Err((compact_revision, why)) => {
                self.b.stats.watch_compacted.fetch_add(1, Ordering::Relaxed);
                let reason = format!("{why}: re-sync with initial_state");
                let r = pb::WatchResponse {
                    compact_revision,
                    ..canceled(id, w.cursor - 1, reason)
                };
                self.watches.remove(&id);
                self.b.stats.watches.fetch_sub(1, Ordering::Relaxed);
                self.send(r);
            }
        }
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
            let r = pb::WatchResponse {
                progress_notify: true,
                ..response(id, revision)
            };
            self.send(r);
        }
        true
    }
}

/// Reads the events of a watch behind the in-memory history from the command log, up to
/// where the ring starts. Err: (the oldest revision still available, why) when the log does
/// not hold the cursor either, there is no log, or the watch wants previous items, which only
/// the ring keeps.
#[allow(clippy::type_complexity)]
async fn read_log(
    b: &Arc<Backend>,
    cursor: Revision,
    prev_kv: bool,
    first_in_memory: Revision,
    published: Revision,
) -> Result<(Vec<Arc<Event>>, Revision), (Revision, String)> {
    let gone = |first: Revision| {
        format!("the history no longer holds revision {cursor} (it starts at {first})")
    };
    let Some(p) = b.persist.clone() else {
        return Err((first_in_memory, gone(first_in_memory)));
    };
    if prev_kv {
        return Err((
            first_in_memory,
            format!(
                "revision {cursor} is older than the in-memory history (from \
                 {first_in_memory}), and only that keeps previous items (prev_kv)"
            ),
        ));
    }
    let upto = published.min(first_in_memory - 1);
    // Blocking file reads, on a blocking thread: the runtime's thread goes on serving the
    // other streams and calls meanwhile.
    let read = tokio::task::spawn_blocking(move || {
        let mut events = Vec::new();
        let r = p.read_history(
            cursor,
            upto,
            MAX_EVENTS_PER_STEP,
            MAX_LOG_BYTES_PER_STEP,
            |lsn, rec| {
                if let Some(e) = Event::from_record(&rec, lsn) {
                    events.push(Arc::new(e));
                }
            },
        );
        r.map(|next| (events, next))
    })
    .await;
    let r = match read {
        Ok(r) => r,
        Err(e) => {
            return Err((
                first_in_memory,
                format!("reading the command log failed: {e}"),
            ));
        }
    };
    match r {
        Ok((events, next)) => {
            b.stats
                .watch_events_from_log
                .fetch_add(events.len() as u64, Ordering::Relaxed);
            Ok((events, next))
        }
        Err(cairn_persist::HistoryError::Compacted { first }) => Err((first, gone(first))),
        Err(e) => {
            tracing::error!("watch: reading the command log failed: {e}");
            Err((
                first_in_memory,
                format!("reading the command log failed: {e}"),
            ))
        }
    }
}

/// Scans the store for a watch's initial state at revision `r` and sends it in chunks, then
/// the end mark. Runs on a blocking thread; stops early when `stop` is set.
fn scan_initial(
    store: &cairn_store::Store,
    range: &KeyRange,
    r: Revision,
    id: i64,
    tx: &mpsc::Sender<InitialChunk>,
    stop: &AtomicBool,
) {
    let now = now_unix();
    let mut chunk: Vec<pb::KeyValue> = Vec::new();
    let mut chunk_bytes = 0usize;
    for shard in 0..store.shard_count() {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        // One buffer per shard for every key and value it contributes; items slice it.
        let mut arena = Vec::new();
        let mut found = Vec::new();
        store.visit_shard(shard, now, |key, value, meta| {
            if meta.mod_revision <= r && range.matches(key) {
                let at = arena.len();
                arena.extend_from_slice(key);
                arena.extend_from_slice(value);
                found.push((at, key.len(), value.len(), *meta));
            }
        });
        let arena = Bytes::from(arena);
        for (at, klen, vlen, meta) in found {
            let key = arena.slice(at..at + klen);
            let value = arena.slice(at + klen..at + klen + vlen);
            chunk_bytes += klen + vlen + 48;
            chunk.push(crate::kv::key_value(key, value, &meta));
            if chunk.len() >= MAX_ITEMS_PER_CHUNK || chunk_bytes >= MAX_BYTES_PER_RESPONSE {
                if tx
                    .blocking_send((id, Some(std::mem::take(&mut chunk))))
                    .is_err()
                {
                    return;
                }
                chunk_bytes = 0;
            }
        }
    }
    if !chunk.is_empty() && tx.blocking_send((id, Some(chunk))).is_err() {
        return;
    }
    let _ = tx.blocking_send((id, None));
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_store::DeleteReason;

    /// The wire form of an event, built as a prost message: what `wire` must match.
    fn event_pb(e: &Event, prev_kv: bool) -> pb::Event {
        let state_kv = |s: &hub::ItemState, value: Option<&[u8]>| pb::KeyValue {
            key: Bytes::copy_from_slice(e.key()),
            value: Bytes::copy_from_slice(value.unwrap()),
            flags: s.flags,
            expires_at: s.exptime,
            cas: s.cas,
            mod_revision: s.mod_revision,
            stale: s.stale,
        };
        use pb::event::{DeleteReason as R, EventType as T};
        let (kind, reason) = match e.kind {
            EventKind::Put => (T::Put, R::None),
            EventKind::Delete(DeleteReason::Client) => (T::Delete, R::Client),
            EventKind::Delete(DeleteReason::Expired) => (T::Delete, R::Expired),
            EventKind::Delete(DeleteReason::Evicted) => (T::Delete, R::Evicted),
            EventKind::Flush => (T::Flush, R::Flushed),
        };
        let kv = match (&e.kind, &e.item) {
            (EventKind::Put, Some(item)) => Some(state_kv(item, e.value())),
            (EventKind::Flush, _) => None,
            _ => Some(pb::KeyValue {
                key: Bytes::copy_from_slice(e.key()),
                mod_revision: e.revision,
                ..Default::default()
            }),
        };
        pb::Event {
            r#type: kind as i32,
            kv,
            prev_kv: if prev_kv {
                e.prev.as_ref().map(|p| state_kv(p, e.prev_value()))
            } else {
                None
            },
            reason: reason as i32,
            revision: e.revision,
        }
    }

    fn create(key: &[u8], range_end: &[u8], prefix: bool) -> pb::WatchCreateRequest {
        pb::WatchCreateRequest {
            key: Bytes::copy_from_slice(key),
            range_end: Bytes::copy_from_slice(range_end),
            prefix,
            ..Default::default()
        }
    }

    #[test]
    fn key_ranges() {
        let r = KeyRange::of(&create(b"a", b"", false)).unwrap();
        assert!(r.matches(b"a") && !r.matches(b"ab"));
        let r = KeyRange::of(&create(b"ab", b"", true)).unwrap();
        assert!(r.matches(b"ab") && r.matches(b"abc") && !r.matches(b"a"));
        let r = KeyRange::of(&create(b"", b"", true)).unwrap();
        assert!(r.matches(b"anything"));
        let r = KeyRange::of(&create(b"b", b"d", false)).unwrap();
        assert!(r.matches(b"b") && r.matches(b"c\xff") && !r.matches(b"d") && !r.matches(b"a"));
        let r = KeyRange::of(&create(b"b", b"\0", false)).unwrap();
        assert!(r.matches(b"zzz") && !r.matches(b"a"));
        assert!(KeyRange::of(&create(b"", b"", false)).is_err());
        assert!(KeyRange::of(&create(b"d", b"b", false)).is_err());
        assert!(KeyRange::of(&create(b"d", b"e", true)).is_err());
    }

    #[test]
    fn events_on_the_wire_are_what_prost_writes() {
        use cairn_store::{ItemMeta, Mutation, PrevItem};
        use prost::Message;
        let meta = |flags, exptime, cas, stale, rev| ItemMeta {
            flags,
            exptime,
            cas,
            last_access: 0,
            fetched: false,
            stale,
            win_sent: false,
            mod_revision: rev,
        };
        let big = vec![b'v'; 300];
        // Events past hub::CHUNKED_MIN and past a quarter of a chunk: their bytes come from
        // the thread's chunk, or a chunk of their own.
        let chunked = vec![b'c'; 3000];
        let huge = vec![b'h'; 40_000];
        let prev = PrevItem {
            value: b"old",
            meta: meta(7, 1_900_000_000, 41, true, 3),
        };
        let empty_prev = PrevItem {
            value: b"",
            meta: meta(0, 0, 0, false, 0),
        };
        let mutations = [
            Mutation::Stored {
                key: b"k",
                value: b"v",
                meta: meta(0, 0, 1, false, 0),
                prev: None,
            },
            Mutation::Stored {
                key: b"key",
                value: &big,
                meta: meta(u32::MAX, 5, u64::MAX, true, 0),
                prev: Some(prev),
            },
            Mutation::Stored {
                key: b"key",
                value: b"",
                meta: meta(0, 0, 0, false, 0),
                prev: Some(empty_prev),
            },
            Mutation::Deleted {
                key: b"gone",
                reason: DeleteReason::Client,
                prev: None,
            },
            Mutation::Deleted {
                key: b"gone",
                reason: DeleteReason::Expired,
                prev: Some(prev),
            },
            Mutation::Deleted {
                key: b"gone",
                reason: DeleteReason::Evicted,
                prev: None,
            },
            Mutation::Stored {
                key: b"chunked",
                value: &chunked,
                meta: meta(3, 0, 77, false, 0),
                prev: Some(PrevItem {
                    value: &chunked,
                    meta: meta(1, 2, 3, false, 4),
                }),
            },
            Mutation::Stored {
                key: b"huge",
                value: &huge,
                meta: meta(0, 0, 78, false, 0),
                prev: None,
            },
            Mutation::Flushed,
        ];
        let events: Vec<Arc<Event>> = mutations
            .iter()
            .zip([1, 200, 1 << 40, 9, 10, 11, 12, 13, u64::MAX])
            .map(|(m, rev)| Arc::new(Event::from_mutation(m, rev).unwrap()))
            .collect();
        // Each event alone, and all of them in one response; with and without prev_kv; watch
        // ids small, large and negative (the stream's own -1).
        let mut batches: Vec<Vec<Arc<Event>>> =
            events.iter().map(|e| vec![Arc::clone(e)]).collect();
        batches.push(events.clone());
        for batch in &batches {
            for prev_kv in [false, true] {
                for (watch_id, revision) in [(1, 5), (1 << 40, 0), (-1, u64::MAX)] {
                    let expected = pb::WatchResponse {
                        events: batch.iter().map(|e| event_pb(e, prev_kv)).collect(),
                        ..response(watch_id, revision)
                    };
                    let mut buf = bytes::BytesMut::new();
                    wire::put_events_response(
                        &mut buf,
                        watch_id,
                        revision,
                        batch.iter().map(|e| e.wire_parts(prev_kv)),
                    );
                    assert_eq!(buf.to_vec(), expected.encode_to_vec(), "{expected:?}");
                }
            }
        }
        // The event's parts are stretches of its wire bytes.
        let e = &events[1];
        assert_eq!((e.key(), e.value()), (&b"key"[..], Some(&big[..])));
        assert_eq!(e.prev_value(), Some(&b"old"[..]));
    }

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
        let read = Arc::new(read);
        let watcher = |prefix: &[u8]| Watcher {
            range: KeyRange::Prefix(Bytes::copy_from_slice(prefix)),
            no_put: false,
            no_delete: false,
            prev_kv: false,
            progress_notify: false,
            cursor: 1,
            initial: None,
            sent_since_tick: false,
        };
        let mut scratch = Vec::new();
        let taken = |w: &mut Watcher, start, scratch: &mut Vec<u32>| {
            let Some(Outgoing::Events {
                events, revision, ..
            }) = w.take(7, &read, start, 6, scratch)
            else {
                return None;
            };
            let keys: Vec<Vec<u8>> = events.iter().map(|e| e.key().to_vec()).collect();
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
