//! [`Ctx`]: what the memcached front end shares, its connections, command files, stats and
//! admin lines: the engine (the one write path, with the store, log, flash tier, watch hub
//! and clock it holds), and the front end's own settings, limits, counters, access control
//! and registry of connections.
//!
//! ```text
//!   Ctx { engine ──> cairn-engine: store, persist?, flash?, hub?, clock
//!         config, limits, counters, latency, curr_connections, conns, auth, tls,
//!         replication, grpc_stats, io_engine, verbosity and its hook, shutdown, started }
//! ```
//!
//! Non-goals: building it (open.rs, [`Ctx::open`]); the write path itself (cairn-engine).

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use cairn_engine::Engine;
use cairn_persist::{Mode, Persistence};
use cairn_store::Store;

use crate::access::AuthFile;
use crate::config::Config;
use crate::conns::Registry;
use crate::meters::{Counters, Latency};

/// Everything connections share.
pub struct Ctx {
    /// The one write path, and the store, log, flash tier, watch hub and clock it writes
    /// through (cairn-engine): shared with the gRPC API and a replica's follower.
    pub engine: Arc<Engine>,
    /// Settings in force (fixed after start).
    pub config: Config,
    /// Limits handed to the parser, derived from `config`.
    pub limits: cairn_proto::Limits,
    /// memcached-named counters.
    pub counters: Counters,
    /// Command latency by family, for the Prometheus endpoint.
    pub latency: Latency,
    /// Open client connections now.
    pub curr_connections: AtomicU64,
    /// Every open socket, for `stats conns`.
    pub conns: Registry,
    /// Woken by the `shutdown` command; the binary stops as on SIGTERM.
    pub(crate) shutdown: tokio::sync::Notify,
    /// Current `verbosity` (settable by the `verbosity` command).
    pub verbosity: AtomicU8,
    /// Applies a new verbosity to the process's log filter (set by the binary; tests and
    /// embedders without a log subscriber leave it unset).
    pub(crate) log_level: OnceLock<LogLevelHook>,
    /// When the server started, for `uptime`.
    pub started: Instant,
    /// `-Y`: the users a connection must authenticate as before anything else.
    pub auth: Option<AuthFile>,
    /// `-Z`: the TLS handshake every connection goes through first.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    /// Replication (crates/cluster): this node's role and its replicas; None without
    /// persistence (a replica must hold what it acknowledges durable).
    pub replication: Option<Arc<cairn_cluster::Replication>>,
    /// gRPC counters and latencies.
    pub grpc_stats: Arc<cairn_grpc::GrpcStats>,
    /// The connection engine in force (`tokio` or `uring`), set when the connection threads
    /// start: `io_engine` asks for one, and uring falls back to tokio (server.rs).
    pub io_engine: OnceLock<&'static str>,
}

impl Ctx {
    /// Asks the server to stop (the `shutdown` command).
    pub fn request_shutdown(&self) {
        self.shutdown.notify_one();
    }

    /// Resolves once [`Ctx::request_shutdown`] was called (before or after).
    pub async fn shutdown_requested(&self) {
        self.shutdown.notified().await;
    }

    /// Installs what `verbosity N` calls to change the log level (once; later calls are ignored).
    pub fn set_log_level_hook(&self, hook: LogLevelHook) {
        let _ = self.log_level.set(hook);
    }

    /// `verbosity N`: the level `stats settings` shows and the log filter in force.
    pub fn set_verbosity(&self, level: u32) {
        let level = u8::try_from(level).unwrap_or(u8::MAX);
        self.verbosity.store(level, Ordering::Relaxed);
        if let Some(hook) = self.log_level.get() {
            hook(level);
        }
    }

    /// The time in unix seconds, as commands, TTLs and last access times use it: the
    /// engine's ticked clock ([`cairn_engine::Clock::now`]), the same for every front end.
    pub fn now(&self) -> u32 {
        self.engine.now()
    }

    /// Moves this server's clock `secs` ahead of the wall clock (tests of TTLs and last access
    /// times, which must not sleep).
    pub fn advance_clock(&self, secs: u32) {
        self.engine.clock().advance(secs);
    }

    /// The current persistence mode.
    pub fn mode(&self) -> Mode {
        self.engine.mode()
    }

    /// The cache (the engine's).
    pub fn store(&self) -> &Arc<Store> {
        self.engine.store()
    }

    /// The command log and checkpoints (the engine's), if persistence is on.
    pub fn persist(&self) -> Option<&Arc<Persistence>> {
        self.engine.persist()
    }

    /// The watch hub (the engine's), if the gRPC API is on.
    pub fn hub(&self) -> Option<&Arc<cairn_grpc::Hub>> {
        self.engine.hub()
    }
}

/// Changes the log filter to a verbosity's level (see [`log_filter`]).
pub type LogLevelHook = Box<dyn Fn(u8) + Send + Sync>;

/// The log filter for a memcached verbosity: 0 info (memcached prints errors only), 1 debug
/// (memcached `-v`: warnings and connection events), 2 and more trace (memcached `-vv`:
/// commands).
pub fn log_filter(verbosity: u8) -> &'static str {
    match verbosity {
        0 => "info",
        1 => "debug",
        _ => "trace",
    }
}
