//! cairn-server: the listener, one task per connection, one file per command family.
//!
//! ```text
//!   TcpListener ──accept──> (semaphore: max_connections) ──spawn──> connection::serve
//!                                                                       │ read batch
//!                                                                       v
//!                                    cairn_proto::parse ──> cmd::execute(ctx, request, out)
//!                                                                       │ Store::get / entry
//!                                                                       v
//!                                                            out buffer ──write──> socket
//! ```
//!
//! Shared state is one [`Ctx`]: the store, the settings, the counters. Shutdown: a watch
//! channel tells the accept loop and every connection to stop after the requests in hand.

pub mod access;
pub mod cluster;
pub mod cmd;
pub mod config;
pub mod connection;
pub mod conns;
pub mod flash;
pub mod grpc;
pub mod metrics;
pub mod server;
pub mod stats;
pub mod transport;
pub mod uring;

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use cairn_persist::{Mode, PersistConfig, Persistence};
use cairn_store::Store;

pub use config::Config;

/// A test switch of [`Ctx::open`]: a slow log disk.
pub const TEST_SYNC_DELAY_ENV: &str = "CAIRN_TEST_LOG_SYNC_DELAY_MS";
/// A test switch of [`Ctx::open`]: a smaller bound for the log bytes waiting for the disk.
pub const TEST_PENDING_KIB_ENV: &str = "CAIRN_TEST_LOG_PENDING_KIB";

/// The version reported by `version` and `stats`.
pub const VERSION: &str = concat!("1.6.21-cairn-", env!("CARGO_PKG_VERSION"));

/// Everything connections share.
pub struct Ctx {
    /// The cache itself.
    pub store: Arc<Store>,
    /// The flash tier RAM evictions go to, if one is configured.
    pub flash: Option<Arc<cairn_flash::Flash>>,
    /// Command log and checkpoints; None in `off` mode. Connections go through its one
    /// durability path (`room`, then `acknowledged`) for every write.
    pub persist: Option<Arc<Persistence>>,
    /// Settings in force (fixed after start).
    pub config: Config,
    /// Limits handed to the parser, derived from `config`.
    pub limits: cairn_proto::Limits,
    /// memcached-named counters.
    pub counters: stats::Counters,
    /// Command latency by family, for the Prometheus endpoint.
    pub latency: stats::Latency,
    /// Open client connections now.
    pub curr_connections: AtomicU64,
    /// Every open socket, for `stats conns`.
    pub conns: conns::Registry,
    /// Woken by the `shutdown` command; the binary stops as on SIGTERM.
    shutdown: tokio::sync::Notify,
    /// Current `verbosity` (settable by the `verbosity` command).
    pub verbosity: AtomicU8,
    /// Applies a new verbosity to the process's log filter (set by the binary; tests and
    /// embedders without a log subscriber leave it unset).
    log_level: OnceLock<LogLevelHook>,
    /// When the server started, for `uptime`.
    pub started: Instant,
    /// `-Y`: the users a connection must authenticate as before anything else.
    pub auth: Option<access::AuthFile>,
    /// `-Z`: the TLS handshake every connection goes through first.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    /// Seconds this server's clock runs ahead of the wall clock: 0, except in tests that need
    /// time to pass (as memcached's debug builds do with `debugtime`); see [`Ctx::now`].
    clock_ahead_secs: AtomicU32,
    /// The watch hub (every mutation with its revision), when the gRPC API is on.
    pub hub: Option<Arc<cairn_grpc::Hub>>,
    /// Replication (crates/cluster): this node's role and its replicas; None without
    /// persistence (a replica must hold what it acknowledges durable).
    pub replication: Option<Arc<cairn_cluster::Replication>>,
    /// gRPC counters and latencies.
    pub grpc_stats: Arc<cairn_grpc::GrpcStats>,
    /// The connection engine in force (`tokio` or `uring`), set when the connection threads
    /// start: `io_engine` asks for one, and uring falls back to tokio (server.rs).
    pub io_engine: OnceLock<&'static str>,
}

/// Store shards for `-m` MiB: 64, or enough that one holds at most 32 MiB (up to 4,096). A
/// checkpoint copies one shard at a time under that shard's lock, so this bounds how long it
/// holds one; still smaller shards would evict in coarser steps (a shard evicts whole 1 MiB
/// segments).
fn shard_count(memory_limit_mb: u64) -> usize {
    (memory_limit_mb / 32).clamp(64, 4096).next_power_of_two() as usize
}

impl Ctx {
    /// Builds the shared state from settings, recovering the store from disk unless
    /// persistence is off. Blocking: call it before serving.
    ///
    /// Test switches, not settings (environment variables that `--help` does not show), for
    /// the tests that check a slow or hung log disk never holds up reads:
    /// `CAIRN_TEST_LOG_SYNC_DELAY_MS=N` makes every fdatasync of the log (and every durable
    /// write) take N ms longer once recovery is done, on the real file system
    /// (`cairn_wal::DelayedSyncFs`); `CAIRN_TEST_LOG_PENDING_KIB=N` bounds the log bytes that
    /// wait for the disk at N KiB instead of 16 MiB, so a test fills the bound quickly.
    pub fn open(config: Config) -> Result<Arc<Ctx>, String> {
        start_clock().map_err(|e| format!("refusing to start: {e}"))?;
        let env = |name: &str| {
            std::env::var(name)
                .ok()
                .map(|v| {
                    v.parse::<u64>()
                        .map_err(|_| format!("refusing to start: {name}={v:?}"))
                })
                .transpose()
        };
        let pending = env(TEST_PENDING_KIB_ENV)?
            .map_or(cairn_persist::DEFAULT_MAX_PENDING_BYTES, |kib| {
                (kib as usize) << 10
            });
        let Some(ms) = env(TEST_SYNC_DELAY_ENV)? else {
            return Ctx::open_with(config, Arc::new(cairn_wal::RealFs), pending);
        };
        tracing::warn!(
            "{TEST_SYNC_DELAY_ENV}={ms}: every log fdatasync is delayed (a test switch)"
        );
        let fs = cairn_wal::DelayedSyncFs::new(Arc::new(cairn_wal::RealFs));
        let ctx = Ctx::open_with(config, Arc::new(fs.clone()), pending)?;
        fs.set_delay(std::time::Duration::from_millis(ms));
        Ok(ctx)
    }

    /// [`Ctx::open`] with the snapshots and the log on `fs` (a fault-injecting one in tests).
    pub fn open_on(config: Config, fs: Arc<dyn cairn_wal::FileSystem>) -> Result<Arc<Ctx>, String> {
        Ctx::open_with(config, fs, cairn_persist::DEFAULT_MAX_PENDING_BYTES)
    }

    fn open_with(
        config: Config,
        fs: Arc<dyn cairn_wal::FileSystem>,
        max_pending_bytes: usize,
    ) -> Result<Arc<Ctx>, String> {
        // Access first: a bad auth file or certificate refuses the start before recovery.
        let refuse = |e| format!("refusing to start: {e}");
        let auth = match &config.auth_file {
            Some(path) => Some(access::AuthFile::load(path).map_err(refuse)?),
            None => None,
        };
        let tls = match (&config.ssl_chain_cert, &config.ssl_key) {
            (Some(chain), Some(key)) if config.enable_ssl => {
                Some(access::tls_acceptor(chain, key).map_err(refuse)?)
            }
            _ => None,
        };
        let flash = match config.flash() {
            Some(f) => Some(flash::open(f, config.mode() != Mode::Off)?),
            None => None,
        };
        let store_config = cairn_store::StoreConfig {
            // -m less the watch history's part (docs/CONFIGURATION.md, watch_history_mb).
            memory_limit_bytes: config.store_memory_bytes(),
            evict_when_full: !config.disable_evictions,
            item_size_max_bytes: config.item_size_max,
            shard_count: shard_count(config.memory_limit_mb),
            // Flash entries are recorded by hash bits, so the seed is the device's.
            hash_seed: flash.as_ref().map(|f| f.hash_seed()),
        };
        let history_bytes = config.watch_history_bytes();
        let grpc_on = config.grpc_addr().is_some();
        let mut hub = None;
        let (store, persist) = match config.mode() {
            Mode::Off => {
                // Without a log the hub numbers mutations itself: it is the store's sink.
                let sink = grpc_on.then(|| {
                    let h = cairn_grpc::Hub::counting(history_bytes);
                    hub = Some(Arc::clone(&h));
                    h as Arc<dyn cairn_store::MutationSink>
                });
                (
                    Arc::new(Store::with_flash(
                        store_config,
                        sink,
                        flash.clone().map(|f| f as Arc<dyn cairn_store::FlashTier>),
                    )),
                    None,
                )
            }
            mode => {
                let p = Persistence::open(
                    PersistConfig {
                        mode,
                        data_path: config.snapshot_dir(),
                        logs_path: config.log_dir(),
                        async_flush_ms: config.async_flush_ms,
                        chkpt_interval_pct_snapshot: config.chkpt_interval_pct_snapshot,
                        chkpt_interval_min_logsize_mb: config.chkpt_interval_min_logsize,
                        checkpoint_rate_mb_s: config.checkpoint_rate_mb_s,
                        segment_bytes: config.log_segment_mb << 20,
                        direct_io: config.log_direct_io,
                        syncer_batch_sched: config.log_batch_sched,
                        max_pending_bytes,
                        fs,
                        flash: flash.clone(),
                    },
                    store_config,
                )
                .map_err(|e| format!("refusing to start: recovery failed: {e}"))?;
                let p = Arc::new(p);
                if grpc_on {
                    // The log feeds the hub: revisions are LSNs, published once safe.
                    let h = cairn_grpc::Hub::attach(&p, history_bytes)
                        .map_err(|e| format!("refusing to start: {e}"))?;
                    hub = Some(h);
                }
                (p.store(), Some(p))
            }
        };
        if let Some(f) = &flash {
            f.start(&store);
        }
        let replication = persist.as_ref().map(|p| cluster::replication(&config, p));
        let limits = cairn_proto::Limits {
            max_value_len: config.item_size_max,
            max_keys_per_get: config.max_keys_per_get,
            ..cairn_proto::Limits::default()
        };
        Ok(Arc::new(Ctx {
            store,
            flash,
            persist,
            limits,
            counters: stats::Counters::default(),
            latency: stats::Latency::default(),
            curr_connections: AtomicU64::new(0),
            verbosity: AtomicU8::new(config.verbosity),
            started: Instant::now(),
            auth,
            tls,
            clock_ahead_secs: AtomicU32::new(0),
            log_level: OnceLock::new(),
            conns: conns::Registry::default(),
            shutdown: tokio::sync::Notify::new(),
            hub,
            grpc_stats: Arc::new(cairn_grpc::GrpcStats::default()),
            replication,
            io_engine: OnceLock::new(),
            config,
        }))
    }

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

    /// The time in unix seconds, as commands, TTLs and last access times use it: the ticked
    /// clock ([`ticked_now_unix`]), not a wall clock read per request.
    pub fn now(&self) -> u32 {
        ticked_now_unix().saturating_add(self.clock_ahead_secs.load(Ordering::Relaxed))
    }

    /// Moves this server's clock `secs` ahead of the wall clock (tests of TTLs and last access
    /// times, which must not sleep).
    pub fn advance_clock(&self, secs: u32) {
        self.clock_ahead_secs.fetch_add(secs, Ordering::Relaxed);
    }

    /// The current persistence mode.
    pub fn mode(&self) -> Mode {
        self.persist.as_ref().map_or(Mode::Off, |p| p.mode())
    }

    /// Why client writes are refused right now (the log failed, or this node is a replica),
    /// if they are.
    pub fn write_refusal(&self) -> Option<String> {
        self.persist.as_ref().and_then(|p| p.client_write_refusal())
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

/// The wall clock in unix seconds (the server asks [`Ctx::now`], which tests can move ahead).
pub fn now_unix() -> u32 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as u32)
}

/// The wall clock in unix seconds as of its last tick: memcached's `current_time`, which its
/// clock event sets once a second, so that a request reads a number instead of the clock.
/// Reading the wall clock (`SystemTime::now`) costs tens of ns on this machine's virtual TSC
/// and a request read it two or three times; this is one relaxed load. Seconds are all
/// commands need (expiry, last access); latencies keep measuring with `Instant`. Before
/// [`start_clock`] (a store used without a server) it reads the wall clock.
pub fn ticked_now_unix() -> u32 {
    match TICKED.load(Ordering::Relaxed) {
        0 => now_unix(),
        now => now,
    }
}

static TICKED: AtomicU32 = AtomicU32::new(0);

/// Starts the thread (`cairn-clock`, once per process) that sets [`ticked_now_unix`] just
/// after each whole second of the wall clock.
pub fn start_clock() -> std::io::Result<()> {
    static STARTED: OnceLock<Result<(), String>> = OnceLock::new();
    let started = STARTED.get_or_init(|| {
        TICKED.store(now_unix(), Ordering::Relaxed);
        let tick = || loop {
            let wall = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            TICKED.store(wall.as_secs() as u32, Ordering::Relaxed);
            let to_next_second = 1_000_000_000 - u64::from(wall.subsec_nanos());
            std::thread::sleep(std::time::Duration::from_nanos(to_next_second + 100_000));
        };
        std::thread::Builder::new()
            .name("cairn-clock".into())
            .spawn(tick)
            .map(drop)
            .map_err(|e| {
                TICKED.store(0, Ordering::Relaxed);
                format!("cannot start the clock thread: {e}")
            })
    });
    started.clone().map_err(std::io::Error::other)
}

/// memcached's expiry rule: 0 never; up to 30 days relative; larger is an absolute unix time;
/// negative (or an absolute time already past) is expired at once. Returns absolute seconds.
pub fn absolute_exptime(exptime: i64, now: u32) -> u32 {
    const MAX_RELATIVE: i64 = 60 * 60 * 24 * 30;
    match exptime {
        0 => 0,
        e if e < 0 => 1,
        e if e > MAX_RELATIVE => u32::try_from(e).unwrap_or(u32::MAX).max(1),
        e => now.saturating_add(e as u32),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ticked clock starts at the wall clock's second and moves on by itself (polled
    /// with a deadline: it ticks once a second).
    #[test]
    fn the_ticked_clock_follows_the_wall_clock() {
        start_clock().unwrap();
        let first = ticked_now_unix();
        assert!(first.abs_diff(now_unix()) <= 1, "{first} vs {}", now_unix());
        let deadline = Instant::now() + std::time::Duration::from_secs(30);
        while ticked_now_unix() == first {
            assert!(
                Instant::now() < deadline,
                "the clock stood still at {first}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(ticked_now_unix().abs_diff(now_unix()) <= 1);
    }

    #[test]
    fn exptime_rules() {
        let now = 1_700_000_000;
        assert_eq!(absolute_exptime(0, now), 0);
        assert_eq!(absolute_exptime(-5, now), 1);
        assert_eq!(absolute_exptime(10, now), now + 10);
        assert_eq!(absolute_exptime(2_592_000, now), now + 2_592_000);
        assert_eq!(absolute_exptime(2_592_001, now), 2_592_001);
        assert_eq!(absolute_exptime(1_800_000_000, now), 1_800_000_000);
    }

    #[test]
    fn shards_hold_at_most_32_mib_past_64_of_them() {
        assert_eq!(shard_count(64), 64);
        assert_eq!(shard_count(1024), 64);
        assert_eq!(shard_count(2048), 64);
        assert_eq!(shard_count(12_000), 512);
        assert_eq!(shard_count(1 << 20), 4096);
    }
}
