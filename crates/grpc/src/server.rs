//! Starts the gRPC API: builds the KV, Watch, Replication, health and reflection services
//! ([`prepare`]) and serves them on threads of their own ([`Prepared::serve`]).
//!
//! ```text
//!   prepare(backend) ── KV (crate::kv), Watch (crate::watch), Replication
//!     (crate::replication), grpc.health.v1, reflection (cairn_api::pb::FILE_DESCRIPTOR_SET)
//!     ── TLS (optional) ── status layer (crate::status) ──> Prepared
//!   Prepared::serve(listener) ── accept ── round robin ──> cairn-grpc-N threads, each a
//!     current-thread runtime serving the connections dealt to it
//! ```
//!
//! Non-goals: what the services do (their files).

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use cairn_api::pb;
use tokio::net::TcpListener;
use tokio_stream::StreamExt;

use crate::backend::Backend;
use crate::status::{standard_status_codes, MapResponse};
use crate::{kv, replication, watch};

/// The services, built and checked (TLS files read and parsed), ready to serve.
pub struct Prepared {
    router: tonic::transport::server::Router<
        tower::layer::util::Stack<
            tower::util::MapResponseLayer<MapResponse>,
            tower::layer::util::Identity,
        >,
    >,
    /// Threads serving connections ([`GrpcConfig::threads`](crate::GrpcConfig::threads)).
    threads: usize,
}

impl Prepared {
    /// Serves the KV, Watch, health and reflection services on `listener` until `shutdown`
    /// resolves (or this future is dropped).
    ///
    /// The API runs on threads of its own
    /// ([`GrpcConfig::threads`](crate::GrpcConfig::threads)), each a current-thread runtime,
    /// as the memcached workers do: this future accepts connections and deals them round
    /// robin to the threads, where a connection, the task hyper spawns per request and every
    /// watch stream of that connection stay for life. A call's wake-ups never cross
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

/// Builds the KV, Watch, health and reflection services; an error (a TLS file that cannot be
/// read or parsed) says why the server should refuse to start.
pub async fn prepare(backend: Arc<Backend>) -> Result<Prepared, String> {
    let max = backend.config.max_message_bytes;
    let kv = pb::kv_server::KvServer::new(kv::KvService::new(Arc::clone(&backend)))
        .max_decoding_message_size(max)
        .max_encoding_message_size(max);
    let watch = watch::WatchServer::new(
        watch::WatchService::new(Arc::clone(&backend)),
        max,
        backend.engine.store().config().item_size_max_bytes,
    );
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
