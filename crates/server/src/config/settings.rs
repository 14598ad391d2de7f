//! The [`Config`] struct, the one list of settings (each field a file key, a flag and a `-o`
//! option; its `///` line is the `--help` text), its defaults, and the values derived from it
//! that the rest of the server asks for. Not here: reading the settings (`cli.rs`, `file.rs`)
//! and checking them (`validate.rs`).

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::port::{default_data_dir, default_grpc_listen, DEFAULT_PORT};
use super::size::{parse_size, parse_size_u64};

/// Every server setting: a key of the TOML file, a flag, and a `-o` option (see the module doc).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, clap::Args)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// TCP port to listen on (memcached `-p`). The gRPC port and the data folder follow it
    /// unless given (port + 38840, cairn-data-PORT; see docs/CONFIGURATION.md).
    #[arg(short = 'p', long)]
    pub port: u16,
    /// Address to listen on (memcached `-l`).
    #[arg(short = 'l', long)]
    pub listen: String,
    /// Worker threads of the runtime (memcached `-t`); 0 = one per core.
    #[arg(short = 't', long)]
    pub threads: usize,
    /// How connection threads do their socket work: uring (io_uring, the default on Linux:
    /// one system call per turn for all of a thread's connections) or tokio (epoll). uring
    /// falls back to tokio, saying so in the log, where io_uring is unavailable or refused,
    /// and under -Z (TLS runs on tokio's streams).
    #[arg(long = "io-engine")]
    pub io_engine: String,
    /// io_uring engine: a turn that answered connections yields the core once, so that the
    /// clients its replies woke run and the next turn finds more requests; the yield pauses
    /// while yields come back slowly (busy neighbours). false: never yield
    /// (docs/decisions/0006-a-gated-yield-after-each-turn.md).
    #[arg(long)]
    pub uring_turn_yield: bool,
    /// Most simultaneous client connections (memcached `-c`); more are refused politely.
    #[arg(short = 'c', long = "max-connections")]
    pub max_connections: usize,
    /// Memory for items in MiB (memcached `-m`).
    #[arg(short = 'm', long = "memory-limit")]
    pub memory_limit_mb: u64,
    /// Return an error on memory exhaustion instead of evicting (memcached `-M`).
    #[arg(short = 'M', long = "disable-evictions")]
    pub disable_evictions: bool,
    /// Largest item, in bytes or with a k/m suffix, e.g. 1m (memcached `-I`).
    #[arg(short = 'I', long = "max-item-size", value_parser = parse_size)]
    pub item_size_max: usize,
    /// Log verbosity: 0 = info, 1 = debug, 2+ = trace (memcached `-v`, repeat for more).
    #[arg(skip)]
    pub verbosity: u8,
    /// Serve Prometheus metrics on this address (e.g. 127.0.0.1:9150); none = disabled.
    #[arg(long)]
    pub metrics_addr: Option<SocketAddr>,
    /// Most keys in one get/gets/gat/gats line (the line itself may hold 16 MiB).
    #[arg(long)]
    pub max_keys_per_get: usize,
    /// Bytes of responses buffered per connection before the server stops reading from it
    /// (backpressure for clients that do not read).
    #[arg(long)]
    pub output_buffer_max: usize,
    /// Persistence mode: sync (acknowledge after fdatasync), async (fdatasync at least every
    /// async_flush_ms) or off (pure cache).
    #[arg(long)]
    pub persistence: String,
    /// Folder for snapshots and the command log; data_path and logs_path default to it.
    /// Default: cairn-data for port 11211, cairn-data-PORT for any other.
    #[arg(long)]
    pub data_dir: PathBuf,
    /// ARCUS: false is the same as `persistence = "off"` (file only).
    #[arg(skip)]
    pub use_persistence: Option<bool>,
    /// ARCUS: where snapshots go (default: data_dir).
    #[arg(long)]
    pub data_path: Option<PathBuf>,
    /// ARCUS: where the command log goes, possibly another disk (default: data_dir/log).
    #[arg(long)]
    pub logs_path: Option<PathBuf>,
    /// ARCUS: true is the same as `persistence = "async"` (file only).
    #[arg(skip)]
    pub async_logging: Option<bool>,
    /// Async mode: the longest time an acknowledged write stays only in memory (ms).
    #[arg(long)]
    pub async_flush_ms: u64,
    /// Checkpoint once the log written since the last checkpoint reaches this % of the
    /// snapshot size (ARCUS; 1 to 10000, see CHKPT_INTERVAL_PCT_SNAPSHOT)...
    #[arg(long)]
    pub chkpt_interval_pct_snapshot: u64,
    /// ...and at least this many MiB (ARCUS; 1 to 1048576, i.e. up to 1 TiB, see
    /// CHKPT_INTERVAL_MIN_LOGSIZE_MB).
    #[arg(long)]
    pub chkpt_interval_min_logsize: u64,
    /// Snapshot write rate limit in MiB/s (0 = unlimited), to keep serving at full speed.
    #[arg(long)]
    pub checkpoint_rate_mb_s: u64,
    /// Size of one command log segment file in MiB. Segments are zero-filled before use, so
    /// that an fdatasync flushes data only, not the file's extent metadata.
    #[arg(long)]
    pub log_segment_mb: u64,
    /// Write the command log with O_DIRECT (whole 4 KiB blocks, no page cache): a small sync
    /// batch's write + fdatasync is quicker, a 1 MiB one slower
    /// (docs/decisions/0010-o-direct-log-writes-with-rwf-dsync.md). Where the file system
    /// refuses O_DIRECT the log is written buffered.
    #[arg(long)]
    pub log_direct_io: bool,
    /// Run the command log's syncer thread under SCHED_BATCH, so that its several wake-ups per
    /// fdatasync do not preempt the threads serving requests
    /// (docs/decisions/0011-the-log-syncer-under-sched-batch.md).
    #[arg(long)]
    pub log_batch_sched: bool,
    /// Allow admin writes from clients: `config KEY N`, checkpoint triggers, `cache_memlimit`.
    #[arg(long)]
    pub enable_admin: bool,
    /// memcached's ASCII authentication: a file of `user:pass` lines; each connection's first
    /// command must then be `set <any> <flags> <exptime> <n>` with `user pass` as its data
    /// (memcached `-Y`).
    #[arg(short = 'Y', long)]
    pub auth_file: Option<PathBuf>,
    /// TLS on the memcached port, with ssl_chain_cert and ssl_key (memcached `-Z`).
    #[arg(short = 'Z', long)]
    pub enable_ssl: bool,
    /// PEM file of the server's certificate chain for -Z (memcached `-o ssl_chain_cert=`).
    #[arg(long)]
    pub ssl_chain_cert: Option<PathBuf>,
    /// PEM file of the server's private key for -Z (memcached `-o ssl_key=`).
    #[arg(long)]
    pub ssl_key: Option<PathBuf>,
    /// Allow the `shutdown [graceful]` command (memcached `-A`).
    #[arg(short = 'A', long)]
    pub enable_shutdown: bool,
    /// A test aid, off in production: accept the debug commands of memcached's debug build
    /// (`debugtime N`: the server's clock jumps N seconds ahead), which memcached's own test
    /// suite uses to expire items without sleeping. Off, they answer ERROR as memcached's
    /// release build does.
    #[arg(long)]
    pub enable_debug_commands: bool,
    /// Refuse `flush_all` with `CLIENT_ERROR flush_all not allowed` (memcached `-F`).
    #[arg(short = 'F', long)]
    pub disable_flush_all: bool,
    /// The flash tier's file or block device; none = no flash tier (the default). Items
    /// evicted from RAM go there instead of being dropped.
    #[arg(long)]
    pub flash_path: Option<PathBuf>,
    /// Bytes of the flash tier, or with a k/m/g suffix on the command line (a file is created
    /// and preallocated to it).
    #[arg(long, value_parser = parse_size_u64)]
    pub flash_size: u64,
    /// Bytes of one flash segment, the unit of flash writes and flash eviction.
    #[arg(long, value_parser = parse_size_u64)]
    pub flash_segment_size: u64,
    /// Open the flash file with O_DIRECT; false is needed on file systems without it (tmpfs).
    #[arg(long)]
    pub flash_direct_io: bool,
    /// Read flash through io_uring where the kernel allows it (else a pread thread pool).
    #[arg(long)]
    pub flash_io_uring: bool,
    /// Sealed flash segments that may wait for the writer; past it evicted items are dropped.
    #[arg(long)]
    pub flash_write_queue: usize,
    /// memcached's spelling, `PATH:SIZE` (e.g. `-o ext_path=/ssd/cairn:64G`): the same as
    /// flash_path plus flash_size. memcached's other `-o ext_*` options are accepted and
    /// ignored.
    #[arg(long)]
    pub ext_path: Option<String>,
    /// UDP port on the -l address (memcached `-U`); 0 = off, the default (as memcached's
    /// since 1.5.6): UDP replies can be aimed at third parties (reflection attacks), so open
    /// it on a trusted network only.
    #[arg(short = 'U', long)]
    pub udp_port: u16,
    /// Address of the gRPC API (KV, streaming reads, watch), or "off". Default: 127.0.0.1 and
    /// port + 38840 (50051 for 11211; 0 for -p 0).
    #[arg(long)]
    pub grpc_listen: String,
    /// PEM certificate chain: serve gRPC over TLS (with grpc_tls_key); none = plaintext.
    #[arg(long)]
    pub grpc_tls_cert: Option<PathBuf>,
    /// PEM private key for grpc_tls_cert.
    #[arg(long)]
    pub grpc_tls_key: Option<PathBuf>,
    /// Largest gRPC message received or sent, in bytes; 0 = item_size_max + 1 MiB.
    #[arg(long)]
    pub grpc_max_message_bytes: usize,
    /// Threads of the gRPC API, each a current-thread runtime serving the connections dealt
    /// to it (as the memcached workers do); 0 = half the CPUs, at least one.
    #[arg(long)]
    pub grpc_threads: usize,
    /// MiB of `-m` for the watch history in memory, kept from the first watch or replica on
    /// (older revisions are read from the command log while its segments exist); 0 = a
    /// sixteenth of `-m`, at most 64.
    #[arg(long)]
    pub watch_history_mb: u64,
    /// How often an idle watch that asked for progress_notify gets a progress response (ms).
    #[arg(long)]
    pub watch_progress_notify_ms: u64,
    /// Watch streams learn of new writes at most once per this many ms, so that a stream
    /// wakes once for all the events of the window (less CPU per event with many watchers
    /// and many writes; an event waits at most this much longer); 0 = at every write.
    #[arg(long)]
    pub watch_batch_ms: u64,
    /// ZooKeeper ensemble to register with, in ARCUS's layout: `host:port[,host:port...]`,
    /// optionally ending in a `/chroot` (ARCUS memcached `-z`). Needs service_code.
    #[arg(short = 'z', long)]
    pub zookeeper: Option<String>,
    /// The service this node serves (ARCUS's service code): it registers as the ephemeral
    /// `/arcus/cache_list/<service_code>/<ip:port>-<hostname>`.
    #[arg(long)]
    pub service_code: Option<String>,
    /// ZooKeeper session timeout in ms: how long a node that died stays listed (ZooKeeper
    /// clamps it to 2 to 20 of its ticks).
    #[arg(long)]
    pub zookeeper_session_timeout_ms: u64,
    /// Follow this primary as a replica: its gRPC address `host:port` (its --grpc-listen).
    /// A replica serves reads and refuses writes.
    #[arg(long)]
    pub replica_of: Option<String>,
    /// When a primary acknowledges a write: async (once safe here, replicas catch up) or sync
    /// (also once a replica holds it durable).
    #[arg(long)]
    pub replication: String,
    /// Sync replication: how long a write waits for a replica before it is answered with an
    /// error instead of an acknowledgement (ms).
    #[arg(long)]
    pub replication_timeout_ms: u64,
    /// Join this replication group (with zookeeper and service_code): its members elect a
    /// primary through ZooKeeper (ARCUS's /arcus_repl layout); the others follow it.
    #[arg(long)]
    pub replication_group: Option<String>,
    /// memcached `-C` (no CAS): accepted, and CAS stays on: gets answers each item's CAS
    /// unique and cas compares it, as without -C (memcached's -C saves 8 bytes an item; cairn
    /// stores CAS uniques compactly and keeps them).
    #[arg(short = 'C', long = "disable-cas")]
    pub disable_cas: bool,
    /// memcached `-u USER`: started as root, cairn switches to this user (and its groups)
    /// before it opens a port or a file; started as any other user, it is ignored.
    #[arg(short = 'u', long = "user")]
    pub user: Option<String>,
    /// memcached `-R N` (requests per event, at least 1): accepted and ignored; each cairn
    /// connection thread already takes its connections in turn.
    #[arg(short = 'R', long = "max-reqs-per-event")]
    pub max_reqs_per_event: u32,
    /// memcached `-B ascii|auto|binary`: accepted; every connection's protocol is told by its
    /// first byte, as with `auto`.
    #[arg(short = 'B', long = "protocol")]
    pub protocol: String,
    /// memcached `-d` (daemonize): refuses to start; run cairn under systemd
    /// (deploy/systemd) or another supervisor, in the foreground.
    #[arg(short = 'd', long = "daemon")]
    pub daemon: bool,
    /// memcached `-e FILE` (item memory in a mmapped file, for a restartable cache):
    /// accepted and ignored; cairn's data folder already keeps the cache across restarts.
    #[arg(short = 'e', long = "memory-file")]
    pub memory_file: Option<PathBuf>,
    /// What the start log says about accepted memcached flags and options that change nothing
    /// here (`-C`, `-R`, `-B`, `-e`, `-o slab_automove=1`, ...): one line each.
    #[arg(skip)]
    #[serde(skip)]
    pub notes: Vec<String>,
}

/// io_uring where the kernel has it (Linux); elsewhere epoll through tokio.
const DEFAULT_IO_ENGINE: &str = if cfg!(target_os = "linux") {
    "uring"
} else {
    "tokio"
};

impl Default for Config {
    fn default() -> Self {
        Config {
            port: DEFAULT_PORT,
            listen: "127.0.0.1".to_string(),
            threads: 0,
            io_engine: DEFAULT_IO_ENGINE.to_string(),
            uring_turn_yield: true,
            max_connections: 1024,
            memory_limit_mb: 64,
            disable_evictions: false,
            item_size_max: 1 << 20,
            verbosity: 0,
            metrics_addr: None,
            max_keys_per_get: 1_000_000,
            output_buffer_max: 256 << 10,
            persistence: "sync".to_string(),
            data_dir: default_data_dir(DEFAULT_PORT),
            use_persistence: None,
            data_path: None,
            logs_path: None,
            async_logging: None,
            async_flush_ms: 100,
            chkpt_interval_pct_snapshot: 100,
            chkpt_interval_min_logsize: 256,
            checkpoint_rate_mb_s: 64,
            log_segment_mb: 64,
            log_direct_io: true,
            log_batch_sched: true,
            enable_admin: false,
            auth_file: None,
            enable_ssl: false,
            ssl_chain_cert: None,
            ssl_key: None,
            enable_shutdown: false,
            enable_debug_commands: false,
            disable_flush_all: false,
            flash_path: None,
            flash_size: 0,
            flash_segment_size: 1 << 20,
            flash_direct_io: true,
            flash_io_uring: true,
            flash_write_queue: 4,
            ext_path: None,
            udp_port: 0,
            grpc_listen: default_grpc_listen(DEFAULT_PORT),
            grpc_tls_cert: None,
            grpc_tls_key: None,
            grpc_max_message_bytes: 0,
            grpc_threads: 0,
            watch_history_mb: 0,
            watch_progress_notify_ms: 10_000,
            watch_batch_ms: 0,
            zookeeper: None,
            service_code: None,
            zookeeper_session_timeout_ms: 30_000,
            replica_of: None,
            replication: "async".to_string(),
            replication_timeout_ms: 5_000,
            replication_group: None,
            disable_cas: false,
            user: None,
            max_reqs_per_event: 20,
            protocol: "auto".to_string(),
            daemon: false,
            memory_file: None,
            notes: Vec::new(),
        }
    }
}

impl Config {
    /// The flash tier's settings, if it is on.
    pub fn flash(&self) -> Option<cairn_flash::FlashConfig> {
        let path = self.flash_path.clone()?;
        Some(cairn_flash::FlashConfig {
            segment_bytes: self.flash_segment_size,
            direct_io: self.flash_direct_io,
            io_uring: self.flash_io_uring,
            write_queue: self.flash_write_queue,
            ..cairn_flash::FlashConfig::new(path, self.flash_size)
        })
    }

    /// The persistence mode (validated).
    pub fn mode(&self) -> cairn_persist::Mode {
        cairn_persist::Mode::parse(&self.persistence).unwrap_or(cairn_persist::Mode::Sync)
    }

    /// Where snapshots and the manifest go.
    pub fn snapshot_dir(&self) -> PathBuf {
        self.data_path
            .clone()
            .unwrap_or_else(|| self.data_dir.clone())
    }

    /// Where the command log goes.
    pub fn log_dir(&self) -> PathBuf {
        self.logs_path
            .clone()
            .unwrap_or_else(|| self.data_dir.join("log"))
    }

    /// Threads of the gRPC API (`grpc_threads`). 0 gives half the CPUs, at least one: the
    /// memcached connection threads already take one per CPU, and a gRPC thread for every CPU
    /// beside them kept more threads busy than there were cores
    /// (docs/decisions/0021-grpc-threads-half-the-cpus.md).
    pub fn grpc_thread_count(&self) -> usize {
        match self.grpc_threads {
            0 => grpc_threads_for(std::thread::available_parallelism().map_or(1, |n| n.get())),
            n => n,
        }
    }

    /// The gRPC address, None when `grpc_listen` is "off" (validated).
    pub fn grpc_addr(&self) -> Option<SocketAddr> {
        self.grpc_listen.parse().ok()
    }

    /// The watch history's bound in bytes: its part of `-m` (0 with the gRPC API off). The
    /// history is kept from the first watch or replica on, so this is what a watched server
    /// spends on it at most: without persistence its events hold their values (a sixteenth of
    /// `-m` by default), with it about 200 bytes an event (the command log holds the values).
    pub fn watch_history_bytes(&self) -> usize {
        if self.grpc_addr().is_none() {
            return 0;
        }
        let bytes = match self.watch_history_mb {
            // (Below -m 16 that is under 1 MiB: a small cache keeps a small history.)
            0 => ((self.memory_limit_mb << 20) / 16).min(64 << 20),
            mb => mb << 20,
        };
        usize::try_from(bytes).unwrap_or(usize::MAX)
    }

    /// The store's memory limit in bytes: `-m` less the watch history's part.
    pub fn store_memory_bytes(&self) -> u64 {
        (self.memory_limit_mb << 20).saturating_sub(self.watch_history_bytes() as u64)
    }

    /// The largest gRPC message in bytes.
    pub fn grpc_max_message(&self) -> usize {
        match self.grpc_max_message_bytes {
            0 => self.item_size_max + (1 << 20),
            n => n,
        }
    }

    /// The runtime's worker count.
    pub fn worker_threads(&self) -> usize {
        if self.threads == 0 {
            std::thread::available_parallelism().map_or(2, |n| n.get())
        } else {
            self.threads
        }
    }
}

/// The gRPC threads given to `cpus` CPUs when `grpc_threads` is 0: half, at least one.
pub(super) fn grpc_threads_for(cpus: usize) -> usize {
    (cpus / 2).max(1)
}
