//! The Watch service: the tonic adapter over cairn-watch's streams (crates/watch). Requests
//! in, responses out: one bidirectional stream, many watches, etcd-style, as etcd's
//! `v3rpc/watch.go` is over its `mvcc/watchable_store.go`.
//!
//! ```text
//!   client ── HTTP/2 ──> WatchServer (tonic glue written by hand) ── WatchCodec: prost
//!     decodes each WatchRequest ── read_request: create (its range and filters read here)
//!     / cancel / progress ──> cairn_watch::WatchStream (cursors, filters, initial state,
//!     stepping and batching), polled as the response body of its HTTP/2 stream
//!   <── Update ── outgoing: a WatchResponse message, or Events, whose protobuf bytes the hub
//!     made once per event and EventBatch::encode copies ── OutgoingEncoder ──> HTTP/2 flow
//!     control ──> client
//! ```
//!
//! Backpressure, initial state without races, catching up from the command log: see
//! cairn-watch's stream and initial_state modules. Non-goals: anything a watch decides.

use std::pin::Pin;
use std::sync::Arc;

use cairn_api::pb::{self, watch_create_request::FilterType, watch_request::RequestUnion};
use cairn_store::Revision;
use cairn_watch::{
    Command, CreateWatch, EventBatch, Filters, KeyRange, Streams, Update, WatchBackend,
};
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

use crate::backend::Backend;
use crate::status::request_error;

/// The Watch service's state: the watch streams' shared part.
pub struct WatchService {
    /// Every watch stream's shared part, and where streams learn of new revisions.
    streams: Streams,
}

impl WatchService {
    /// With a batch window, spawns its forwarding task on the current runtime.
    pub fn new(b: Arc<Backend>) -> WatchService {
        let watch = WatchBackend {
            store: Arc::clone(b.engine.store()),
            persist: b.engine.persist().cloned(),
            hub: Arc::clone(&b.hub),
            stats: Arc::clone(&b.stats.watch),
            progress_notify_interval: b.config.progress_notify_interval,
        };
        WatchService {
            streams: Streams::new(watch, b.config.batch_window),
        }
    }
}

/// What a watch stream sends: a response built as a message, or a batch of events written
/// from the bytes the hub made for each event once (cairn-watch's wire module).
pub(crate) enum Outgoing {
    Message(Box<pb::WatchResponse>),
    /// Events, and the history id for their header.
    Events(EventBatch, u64),
}

/// Encodes [`Outgoing`] as `cairn.v1.WatchResponse`: the same bytes prost writes for the
/// message the events make (cairn-watch's wire module; its tests compare them).
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
            // Room for the whole message first: a response of initial items (up to 1 MiB)
            // would otherwise grow the buffer, and copy what it holds, several times.
            Outgoing::Message(m) => {
                buf.reserve(prost::Message::encoded_len(&*m));
                prost::Message::encode_raw(&*m, buf);
                Ok(())
            }
            Outgoing::Events(events, history_id) => {
                buf.reserve(events.encoded_len(history_id));
                events.encode(buf, history_id);
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
        let requests = req.into_inner().map(read_request);
        let s = self.streams.open(requests);
        let history_id = self.streams.history_id();
        let stream = futures_util::stream::unfold(s, move |mut s| async move {
            let r = s.next().await?;
            Some((r.map(|u| outgoing(u, history_id)), s))
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
    /// Requests up to `max_message_bytes`; responses up to that plus `item_size_max`: a
    /// response holds one event when the event alone is past cairn-watch's 1 MiB bound, and
    /// one event with `prev_kv` carries two items, each up to the item size limit (a response
    /// past the encoding limit fails the stream, and every resume at that revision with it).
    pub fn new(inner: WatchService, max_message_bytes: usize, item_size_max: usize) -> WatchServer {
        WatchServer {
            inner: Arc::new(inner),
            max_decoding_message_size: Some(max_message_bytes),
            max_encoding_message_size: Some(max_message_bytes + item_size_max),
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

/// A request as the watch stream takes it. A request that could not be read, or holds none of
/// the three, is the status the stream ends with.
fn read_request(msg: Result<pb::WatchRequest, Status>) -> Result<Command, Status> {
    let req = msg.map_err(request_error)?;
    match req.request_union {
        None => Err(Status::invalid_argument(
            "a WatchRequest must hold create_request, cancel_request or progress_request",
        )),
        Some(RequestUnion::CreateRequest(c)) => Ok(Command::Create(CreateWatch {
            watch_id: c.watch_id,
            range: key_range(&c),
            filters: filters(&c.filters),
            prev_kv: c.prev_kv,
            progress_notify: c.progress_notify,
            initial_state: c.initial_state,
            start_revision: c.start_revision,
            history_id: c.history_id,
        })),
        Some(RequestUnion::CancelRequest(c)) => Ok(Command::Cancel(c.watch_id)),
        Some(RequestUnion::ProgressRequest(_)) => Ok(Command::Progress),
    }
}

/// The range a create request names, or why it is not one.
fn key_range(req: &pb::WatchCreateRequest) -> Result<KeyRange, String> {
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

/// The kinds of event a create request leaves out, or why one of its filters is unknown.
fn filters(filters: &[i32]) -> Result<Filters, String> {
    let mut w = Filters::default();
    for f in filters {
        match FilterType::try_from(*f) {
            Ok(FilterType::Noput) => w.no_put = true,
            Ok(FilterType::Nodelete) => w.no_delete = true,
            Err(_) => return Err(format!("unknown filter {f}")),
        }
    }
    Ok(w)
}

/// A stream's update as it goes on the wire; `history_id` goes in its header.
fn outgoing(u: Update, history_id: u64) -> Outgoing {
    let response = |watch_id, revision| response(watch_id, revision, history_id);
    let canceled = |watch_id, revision, reason| pb::WatchResponse {
        canceled: true,
        cancel_reason: reason,
        ..response(watch_id, revision)
    };
    let m = match u {
        Update::Events(events) => return Outgoing::Events(events, history_id),
        Update::Created { watch_id, revision } => pb::WatchResponse {
            created: true,
            ..response(watch_id, revision)
        },
        Update::Canceled {
            watch_id,
            revision,
            reason,
            compact_revision,
            created,
        } => pb::WatchResponse {
            created,
            compact_revision,
            ..canceled(watch_id, revision, reason)
        },
        Update::Progress { watch_id, revision } => pb::WatchResponse {
            progress_notify: true,
            ..response(watch_id, revision)
        },
        Update::InitialItems {
            watch_id,
            revision,
            items,
        } => pb::WatchResponse {
            initial_items: items,
            ..response(watch_id, revision)
        },
        Update::InitialDone { watch_id, revision } => pb::WatchResponse {
            initial_state_done: true,
            ..response(watch_id, revision)
        },
    };
    Outgoing::Message(Box::new(m))
}

fn response(watch_id: i64, revision: Revision, history_id: u64) -> pb::WatchResponse {
    pb::WatchResponse {
        header: Some(pb::ResponseHeader {
            revision,
            history_id,
        }),
        watch_id,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

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
        let r = key_range(&create(b"a", b"", false)).unwrap();
        assert!(r.matches(b"a") && !r.matches(b"ab"));
        let r = key_range(&create(b"ab", b"", true)).unwrap();
        assert!(r.matches(b"ab") && r.matches(b"abc") && !r.matches(b"a"));
        let r = key_range(&create(b"", b"", true)).unwrap();
        assert!(r.matches(b"anything"));
        let r = key_range(&create(b"b", b"d", false)).unwrap();
        assert!(r.matches(b"b") && r.matches(b"c\xff") && !r.matches(b"d") && !r.matches(b"a"));
        let r = key_range(&create(b"b", b"\0", false)).unwrap();
        assert!(r.matches(b"zzz") && !r.matches(b"a"));
        assert!(key_range(&create(b"", b"", false)).is_err());
        assert!(key_range(&create(b"d", b"b", false)).is_err());
        assert!(key_range(&create(b"d", b"e", true)).is_err());
    }
}
