//! Starts the gRPC API (crates/grpc) over this server's engine and hub. gRPC writes take the
//! one write path (cairn-engine), as memcached writes do.
//!
//! ```text
//!   main ── Config::grpc_addr ──> prepare(ctx, addr) ──> Prepared::serve(listener, shutdown)
//! ```

use std::sync::Arc;
use std::time::Duration;

use cairn_grpc::{Backend, GrpcConfig};

use crate::Ctx;

/// Builds the gRPC API for `listen`; an error says why the server refuses to start. Needs the
/// hub (`ctx.hub()`), which `Ctx::open` builds when `grpc_listen` is not "off".
pub async fn prepare(
    ctx: &Arc<Ctx>,
    listen: std::net::SocketAddr,
) -> Result<cairn_grpc::Prepared, String> {
    let c = &ctx.config;
    let backend = Arc::new(Backend {
        engine: Arc::clone(&ctx.engine),
        hub: ctx.hub().cloned().ok_or("the gRPC API is off")?,
        stats: Arc::clone(&ctx.grpc_stats),
        config: GrpcConfig {
            listen,
            tls: c.grpc_tls_cert.clone().zip(c.grpc_tls_key.clone()),
            max_message_bytes: c.grpc_max_message(),
            threads: c.grpc_thread_count(),
            // memcached has no limit on keys per get; a gRPC request is one message, so 10,000.
            max_keys_per_request: c.max_keys_per_get.min(10_000),
            progress_notify_interval: Duration::from_millis(c.watch_progress_notify_ms),
            batch_window: Duration::from_millis(c.watch_batch_ms),
        },
        replica_acks: ctx
            .replication
            .clone()
            .map(|r| r as Arc<dyn cairn_grpc::ReplicaAcks>),
    });
    cairn_grpc::prepare(backend).await
}
