//! cairn-grpc: the gRPC API (`proto/cairn/v1/*.proto`): the KV service with streaming reads,
//! the etcd-style Watch service and the watch hub, over the store and log the memcached front
//! end uses.
//!
//! ```text
//!   gRPC client ── HTTP/2 (tonic, optional rustls) ──> KV  ──> Store::get (or Flash::get) /
//!                                                      │   Store::entry (after
//!                                                      │   Flash::bring_to_ram)
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
use tokio_stream::StreamExt;

/// The watch hub (crates/watch), re-exported for compatibility.
pub use cairn_watch::Hub;
pub use replication::ReplicaAcks;
pub use stats::GrpcStats;

/// The generated messages and services of `cairn.v1` (crates/api), re-exported for
/// compatibility: users of the generated types depend on cairn-api itself.
pub use cairn_api::pb;

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
    /// Threads of the gRPC API (`--grpc-threads`), each a current-thread runtime serving the
    /// connections dealt to it.
    pub threads: usize,
    /// Most keys in one BatchGet or StreamGet request.
    pub max_keys_per_request: usize,
    /// How often watches with progress_notify get a progress response while idle.
    pub progress_notify_interval: Duration,
    /// Watch streams learn of new revisions at most once per this window (`--watch-batch-ms`;
    /// zero: at every write). See `watch::forward_batched`.
    pub batch_window: Duration,
}

/// Everything the services share.
pub struct Backend {
    pub store: Arc<Store>,
    /// Command log and checkpoints; None without persistence.
    pub persist: Option<Arc<Persistence>>,
    /// The flash tier, if one is on: reads look there too, and writes bring the key's item
    /// back to RAM first, as memcached commands do.
    pub flash: Option<Arc<cairn_flash::Flash>>,
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
    /// Threads serving connections ([`GrpcConfig::threads`]).
    threads: usize,
}

impl Prepared {
    /// Serves the KV, Watch, health and reflection services on `listener` until `shutdown`
    /// resolves (or this future is dropped).
    ///
    /// The API runs on threads of its own ([`GrpcConfig::threads`]), each a current-thread
    /// runtime, as the memcached workers do: this future accepts connections and deals them
    /// round robin to the threads, where a connection, the task hyper spawns per request and
    /// every watch stream of that connection stay for life. A call's wake-ups never cross
    /// threads (docs/decisions/0020-grpc-on-current-thread-runtimes-of-its-own.md: 20.5 us of
    /// server CPU a call at 30 concurrent on a current-thread runtime, 23.9 on the shared
    /// multi-thread one; 13.7 vs 18.9 at 300).
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), String> {
        let threads = self.threads.max(1);
        let (ended_tx, mut ended) = tokio::sync::mpsc::unbounded_channel();
        // `shutdown`: the threads stop taking connections and tell clients to go (HTTP/2
        // GOAWAY), finishing the calls in flight. This future dropped (the caller aborting
        // it): the threads stop at once and drop their connections.
        let (graceful_tx, graceful_rx) = tokio::sync::watch::channel(false);
        let (_stop_tx, stop_rx) = tokio::sync::watch::channel(());
        let mut to_thread = Vec::with_capacity(threads);
        for i in 0..threads {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<std::net::TcpStream>();
            let router = self.router.clone();
            let mut stop = stop_rx.clone();
            let mut graceful = graceful_rx.clone();
            let ended_tx = ended_tx.clone();
            std::thread::Builder::new()
                .name(format!("cairn-grpc-{i}"))
                .spawn(move || {
                    let r = match tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    {
                        Err(e) => Err(format!("gRPC runtime: {e}")),
                        Ok(rt) => {
                            let r = rt.block_on(async move {
                                // Registered with this thread's reactor as it is taken.
                                let incoming =
                                    tokio_stream::wrappers::UnboundedReceiverStream::new(rx)
                                        .map(tokio::net::TcpStream::from_std);
                                let graceful = async move {
                                    let _ = graceful.wait_for(|g| *g).await;
                                };
                                tokio::select! {
                                    r = router.serve_with_incoming_shutdown(incoming, graceful) => {
                                        r.map_err(|e| format!("gRPC server: {e}"))
                                    }
                                    _ = stop.changed() => Ok(()),
                                }
                            });
                            // Blocking tasks (initial-state scans) stop on their own flag.
                            rt.shutdown_background();
                            r
                        }
                    };
                    let _ = ended_tx.send(r);
                })
                .map_err(|e| format!("gRPC thread: {e}"))?;
            to_thread.push(tx);
        }
        let mut shutdown = std::pin::pin!(shutdown);
        let mut next = 0;
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                r = ended.recv() => return r.unwrap_or(Ok(())),
                accepted = listener.accept() => {
                    let stream = match accepted {
                        Ok((s, _)) => s,
                        Err(e) => {
                            // Out of descriptors and the like: the listener stays; pause a
                            // little rather than spin.
                            tracing::warn!("gRPC accept: {e}");
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            continue;
                        }
                    };
                    // Nagle's algorithm would hold small responses for the client's delayed
                    // ACK (about 40 ms a request at low concurrency).
                    let _ = stream.set_nodelay(true);
                    let Ok(stream) = stream.into_std() else { continue };
                    let _ = to_thread[next % threads].send(stream);
                    next += 1;
                }
            }
        }
        drop(listener);
        let _ = graceful_tx.send(true);
        for _ in 0..threads {
            if let Some(Err(e)) = ended.recv().await {
                return Err(e);
            }
        }
        Ok(())
    }
}

/// tonic answers a request it cannot take with a status gRPC's conventions name otherwise: one
/// over the message size limit with OUT_OF_RANGE, where grpc-go and grpc-java send
/// RESOURCE_EXHAUSTED (and clients handle it as such), and bytes that are no message of the
/// method's type with INTERNAL, which is the client's error: INVALID_ARGUMENT. This layer
/// rewrites the status of such answers (the message, saying why, stays).
fn standard_status_codes(
    mut res: http::Response<tonic::body::Body>,
) -> http::Response<tonic::body::Body> {
    let h = res.headers();
    let (Some(code), Some(message)) = (h.get("grpc-status"), h.get("grpc-message")) else {
        return res;
    };
    let code = std::str::from_utf8(code.as_bytes())
        .ok()
        .and_then(|c| c.parse::<i32>().ok())
        .map(tonic::Code::from);
    let status = code.map(|c| tonic::Status::new(c, String::from_utf8_lossy(message.as_bytes())));
    if let Some(mapped) = status.and_then(client_error) {
        let value = http::HeaderValue::from(mapped.code() as i32);
        res.headers_mut().insert("grpc-status", value);
    }
    res
}

/// The status a request error should have been (see [`standard_status_codes`]), if it is one
/// tonic names otherwise.
fn client_error(status: tonic::Status) -> Option<tonic::Status> {
    let text = status.message().replace("%20", " ");
    match status.code() {
        tonic::Code::OutOfRange if text.contains("message length too large") => {
            Some(tonic::Status::resource_exhausted(text))
        }
        tonic::Code::Internal if text.contains("failed to decode Protobuf message") => {
            Some(tonic::Status::invalid_argument(text))
        }
        _ => None,
    }
}

/// The status a stream forwards for a failed request read (see [`standard_status_codes`]).
pub(crate) fn request_error(status: tonic::Status) -> tonic::Status {
    client_error(status.clone()).unwrap_or(status)
}

/// Builds the KV, Watch, health and reflection services; an error (a TLS file that cannot be
/// read or parsed) says why the server should refuse to start.
pub async fn prepare(backend: Arc<Backend>) -> Result<Prepared, String> {
    let max = backend.config.max_message_bytes;
    let kv = pb::kv_server::KvServer::new(kv::KvService::new(Arc::clone(&backend)))
        .max_decoding_message_size(max)
        .max_encoding_message_size(max);
    let watch = watch::WatchServer::new(watch::WatchService::new(Arc::clone(&backend)), max);
    let replication = pb::replication_server::ReplicationServer::new(
        replication::ReplicationService::new(Arc::clone(&backend)),
    );
    let (health_reporter, health) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<pb::kv_server::KvServer<kv::KvService>>()
        .await;
    health_reporter.set_serving::<watch::WatchServer>().await;
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
            standard_status_codes as MapResponse,
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
    Ok(Prepared {
        router,
        threads: backend.config.threads.max(1),
    })
}
