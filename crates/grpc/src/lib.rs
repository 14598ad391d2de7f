//! cairn-grpc: the gRPC API (`proto/cairn/v1/*.proto`): the KV service with streaming reads,
//! the etcd-style Watch service and the watch hub, over the store and log the memcached front
//! end uses.
//!
//! ```text
//!   gRPC client ── HTTP/2 (tonic, optional rustls) ──> KV  ──> Store::get / Store::entry
//!                                                      │         │ mutation (shard lock)
//!                                                      │         v
//!                                                      │   LogSink ─ LSN ─> Hub (hub.rs)
//!                                                      │   room(), capture(ticket),
//!                                                      │   acknowledged(ticket): persist's
//!                                                      │   one durability path
//!                                                 Watch ──> pulls events from the Hub's ring
//!                                                           (or the command log when behind)
//!   also: grpc.health.v1 (tonic-health), server reflection (tonic-reflection)
//! ```
//!
//! The server crate builds a [`Backend`] (its store, persistence and hub) and calls [`prepare`]
//! then [`Prepared::serve`]. This crate never sees the memcached protocol.

pub mod hub;
mod kv;
pub mod replication;
pub mod stats;
mod watch;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cairn_persist::Persistence;
use cairn_store::Store;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;

pub use hub::Hub;
pub use replication::ReplicaAcks;
pub use stats::GrpcStats;

/// The generated messages and services of `cairn.v1`.
pub mod pb {
    tonic::include_proto!("cairn.v1");
    /// The encoded descriptors of the .proto files, for server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/cairn_descriptor.bin"));
}

/// Settings of the gRPC listener.
#[derive(Clone, Debug)]
pub struct GrpcConfig {
    /// Where to listen (`--grpc-listen`).
    pub listen: SocketAddr,
    /// PEM certificate chain and private key for TLS (`--grpc-tls-cert`, `--grpc-tls-key`);
    /// None = plaintext HTTP/2.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Largest message received or sent, in bytes; past it RESOURCE_EXHAUSTED.
    pub max_message_bytes: usize,
    /// Most keys in one BatchGet or StreamGet request.
    pub max_keys_per_request: usize,
    /// How often watches with progress_notify get a progress response while idle.
    pub progress_notify_interval: Duration,
}

/// Everything the services share.
pub struct Backend {
    pub store: Arc<Store>,
    /// Command log and checkpoints; None without persistence.
    pub persist: Option<Arc<Persistence>>,
    pub hub: Arc<Hub>,
    pub stats: Arc<GrpcStats>,
    pub config: GrpcConfig,
    /// What the primary does with its replicas' reports (crates/cluster); None: replication
    /// is off and the Replication service refuses followers.
    pub replica_acks: Option<Arc<dyn ReplicaAcks>>,
}

/// The wall clock in unix seconds (the store's time base).
pub(crate) fn now_unix() -> u32 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as u32)
}

type MapResponse = fn(http::Response<tonic::body::Body>) -> http::Response<tonic::body::Body>;

/// The services, built and checked (TLS files read and parsed), ready to serve.
pub struct Prepared {
    router: tonic::transport::server::Router<
        tower::layer::util::Stack<
            tower::util::MapResponseLayer<MapResponse>,
            tower::layer::util::Identity,
        >,
    >,
}

impl Prepared {
    /// Serves the KV, Watch, health and reflection services on `listener` until `shutdown`
    /// resolves.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), String> {
        self.router
            .serve_with_incoming_shutdown(TcpListenerStream::new(listener), shutdown)
            .await
            .map_err(|e| format!("gRPC server: {e}"))
    }
}

/// tonic answers a request over the message size limit with OUT_OF_RANGE; gRPC's status code
/// for it is RESOURCE_EXHAUSTED (what grpc-go and grpc-java send), which clients handle as such.
fn too_large_is_resource_exhausted(
    mut res: http::Response<tonic::body::Body>,
) -> http::Response<tonic::body::Body> {
    let h = res.headers();
    let too_large = h.get("grpc-status").is_some_and(|s| s == "11")
        && h.get("grpc-message")
            .is_some_and(|m| is_too_large_message(m.as_bytes()));
    if too_large {
        res.headers_mut().insert(
            "grpc-status",
            http::HeaderValue::from_static("8"), // RESOURCE_EXHAUSTED
        );
    }
    res
}

/// Whether a status message is tonic's "decoded message length too large" (percent-encoded or
/// not).
pub(crate) fn is_too_large_message(m: &[u8]) -> bool {
    let text = String::from_utf8_lossy(m).replace("%20", " ");
    text.contains("message length too large")
}

/// The status a stream forwards for a failed request read: RESOURCE_EXHAUSTED for one over the
/// size limit (see [`too_large_is_resource_exhausted`]).
pub(crate) fn request_error(status: tonic::Status) -> tonic::Status {
    if status.code() == tonic::Code::OutOfRange && is_too_large_message(status.message().as_bytes())
    {
        return tonic::Status::resource_exhausted(status.message().to_string());
    }
    status
}

/// Builds the KV, Watch, health and reflection services; an error (a TLS file that cannot be
/// read or parsed) says why the server should refuse to start.
pub async fn prepare(backend: Arc<Backend>) -> Result<Prepared, String> {
    let max = backend.config.max_message_bytes;
    let kv = pb::kv_server::KvServer::new(kv::KvService::new(Arc::clone(&backend)))
        .max_decoding_message_size(max)
        .max_encoding_message_size(max);
    let watch = pb::watch_server::WatchServer::new(watch::WatchService::new(Arc::clone(&backend)))
        .max_decoding_message_size(max)
        .max_encoding_message_size(max);
    let replication = pb::replication_server::ReplicationServer::new(
        replication::ReplicationService::new(Arc::clone(&backend)),
    );
    let (health_reporter, health) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<pb::kv_server::KvServer<kv::KvService>>()
        .await;
    health_reporter
        .set_serving::<pb::watch_server::WatchServer<watch::WatchService>>()
        .await;
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .map_err(|e| format!("gRPC reflection: {e}"))?;
    let reflection_alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()
        .map_err(|e| format!("gRPC reflection: {e}"))?;
    let mut builder = tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .http2_keepalive_interval(Some(Duration::from_secs(60)))
        .layer(tower::util::MapResponseLayer::new(
            too_large_is_resource_exhausted as MapResponse,
        ));
    if let Some((cert, key)) = &backend.config.tls {
        let read =
            |p: &PathBuf| std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()));
        let identity = tonic::transport::Identity::from_pem(read(cert)?, read(key)?);
        builder = builder
            .tls_config(tonic::transport::ServerTlsConfig::new().identity(identity))
            .map_err(|e| format!("gRPC TLS: {e}"))?;
    }
    let router = builder
        .add_service(health)
        .add_service(reflection)
        .add_service(reflection_alpha)
        .add_service(kv)
        .add_service(watch)
        .add_service(replication);
    Ok(Prepared { router })
}
