//! gRPC helpers for the tests that watch a real server: a channel to its gRPC address and a
//! watch stream (requests in, responses out). Included with `#[path]` by the test files that
//! use it (grpc.rs, watch_contract.rs), as zookeeper.rs is.

#![allow(dead_code)]

use std::time::Duration;

use cairn_api::pb::{self, watch_client::WatchClient};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

use super::common::Server;

/// The largest response the tests' client takes: above the server's own bound (item size
/// max + 1 MiB), so that a response the server should not have sent is its error, not ours.
const MAX_RESPONSE: usize = 16 << 20;

/// A channel to `server`'s gRPC API.
pub async fn channel(server: &Server) -> Channel {
    let addr = server.grpc_addr.expect("gRPC is on");
    Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .expect("connect")
}

/// A watch stream: requests in through `tx`, responses out of `rx`.
pub struct Watch {
    pub tx: mpsc::Sender<pb::WatchRequest>,
    pub rx: tonic::Streaming<pb::WatchResponse>,
}

impl Watch {
    /// A watch stream with its create request sent; the created response is not read yet.
    pub async fn open_raw(ch: Channel, create: pb::WatchCreateRequest) -> Watch {
        let (tx, rx) = mpsc::channel(4);
        tx.send(pb::WatchRequest {
            request_union: Some(pb::watch_request::RequestUnion::CreateRequest(create)),
        })
        .await
        .unwrap();
        let rx = WatchClient::new(ch)
            .max_decoding_message_size(MAX_RESPONSE)
            .watch(ReceiverStream::new(rx))
            .await
            .expect("watch")
            .into_inner();
        Watch { tx, rx }
    }

    /// A watch stream whose `created` response was read (and was not a cancel).
    pub async fn open(ch: Channel, create: pb::WatchCreateRequest) -> Watch {
        let mut w = Watch::open_raw(ch, create).await;
        let first = w.next().await;
        assert!(first.created && !first.canceled, "{first:?}");
        w
    }

    /// The next response, or the stream's error.
    pub async fn response(&mut self) -> Result<pb::WatchResponse, tonic::Status> {
        tokio::time::timeout(Duration::from_secs(60), self.rx.message())
            .await
            .expect("a response within 60 s (a safety net, not a wait)")
            .map(|m| m.expect("stream open"))
    }

    /// The next response; the stream failing fails the test.
    pub async fn next(&mut self) -> pb::WatchResponse {
        self.response().await.expect("stream ok")
    }

    /// Sends a request on the stream.
    pub async fn send(&self, r: pb::watch_request::RequestUnion) {
        self.tx
            .send(pb::WatchRequest {
                request_union: Some(r),
            })
            .await
            .unwrap();
    }
}
