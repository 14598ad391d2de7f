//! What the gRPC services share ([`Backend`]): the engine (the one write path, with the
//! store, the command log, the flash tier and the clock), the watch hub, the counters, the
//! settings ([`GrpcConfig`]) and the primary's side of replication. The server crate builds
//! it.
//!
//! ```text
//!   crates/server grpc.rs ── Backend { engine, hub, stats, config,
//!                                      replica_acks } ──> prepare() ──> KV, Watch, Replication
//! ```
//!
//! Non-goals: starting anything (crate::server).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use cairn_engine::Engine;
use cairn_watch::Hub;

use crate::replica_acks::ReplicaAcks;
use crate::stats::GrpcStats;

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
    /// zero: at every write). See cairn-watch's `batch::forward_batched`.
    pub batch_window: Duration,
}

/// Everything the services share.
pub struct Backend {
    /// The one write path every front end takes (cairn-engine), and what it holds: the
    /// cache every service reads and writes, the command log (None without persistence), the
    /// flash tier (reads look there too; writes bring the key's item back to RAM first, as
    /// memcached commands do), and the clock requests run at.
    pub engine: Arc<Engine>,
    /// The watch hub: revisions for response headers, events for the Watch service.
    pub hub: Arc<Hub>,
    /// The counters (`stats grpc`), the server's as well.
    pub stats: Arc<GrpcStats>,
    /// The listener's and the services' settings.
    pub config: GrpcConfig,
    /// What the primary does with its replicas' reports (crates/cluster); None: replication
    /// is off and the Replication service refuses followers.
    pub replica_acks: Option<Arc<dyn ReplicaAcks>>,
}
