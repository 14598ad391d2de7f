//! Settings: built-in defaults, then the TOML file (`--config`), then command-line flags.
//!
//! ```text
//!   Config::default()  <──  [file.toml]  (unknown key or bad value: refuse to start)
//!                      <──  flags: --key-name VALUE, memcached's short letters (-p -l -t -c -m
//!                           -M -I -v -A -Y -Z), and -o key=value,key=value (memcached's -o)
//!                      ──>  Config::validate (ranges: refuse to start naming the key)
//! ```
//!
//! [`Config`] is the one list of settings. clap and serde both derive from it: each field is a
//! key of the file (its Rust name), a `--long-flag` (the same name with dashes, or the
//! `long = ".."` memcached spelling), and a `-o name=value` option.
//!
//! ## Adding a setting (one place)
//! 1. Add a field to [`Config`] with a `///` line (it is the `--help` text), and its default in
//!    `impl Default for Config`. Give it `#[arg(short = 'X')]` only for a memcached letter, and
//!    `#[arg(skip)]` if it must not be a flag (a file-only key).
//! 2. If some values are wrong, refuse them in [`Config::validate`] with the key's name.
//!
//! That is all: the file, the flag and `-o` then accept it, and the flag overrides the file.
//! A `bool` flag takes an optional value (`-M`, `--log-direct-io false`), an `Option<T>` is
//! unset by default. The flags do not repeat the defaults ([`command`] makes every flag
//! optional): a flag that is absent leaves the file's value alone.
//!
//! The settings that an admin line can also change while running (`config KEY N`, see
//! `cmd/admin.rs`) keep their range in one place, [`ChkptSetting`], so that the file, the flags
//! and the admin line accept exactly the same values.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

use clap::{Arg, ArgAction, ArgMatches, Args, FromArgMatches};
use serde::{Deserialize, Serialize};

/// Every server setting: a key of the TOML file, a flag, and a `-o` option (see the module doc).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, clap::Args)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// TCP port to listen on (memcached `-p`).
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
    /// Allow admin writes from clients: `config KEY N`, checkpoint triggers, `verbosity`.
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
    /// UDP port (memcached `-U`): only 0 (off, memcached's default since 1.5.6) is accepted;
    /// cairn serves TCP only, and refuses to start rather than silently not serve UDP.
    #[arg(short = 'U', long)]
    pub udp_port: u16,
    /// Address of the gRPC API (KV, streaming reads, watch), or "off".
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
    /// MiB of `-m` for the watch history in memory, kept from the first watch on (older
    /// revisions are read from the command log while its segments exist); 0 = a sixteenth of
    /// `-m`, between 1 and 64.
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
            port: 11211,
            listen: "127.0.0.1".to_string(),
            threads: 0,
            io_engine: DEFAULT_IO_ENGINE.to_string(),
            max_connections: 1024,
            memory_limit_mb: 64,
            disable_evictions: false,
            item_size_max: 1 << 20,
            verbosity: 0,
            metrics_addr: None,
            max_keys_per_get: 1_000_000,
            output_buffer_max: 256 << 10,
            persistence: "sync".to_string(),
            data_dir: PathBuf::from("cairn-data"),
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
            disable_flush_all: false,
            flash_path: None,
            flash_size: 0,
            flash_segment_size: 1 << 20,
            flash_direct_io: true,
            flash_io_uring: true,
            flash_write_queue: 4,
            ext_path: None,
            udp_port: 0,
            grpc_listen: "127.0.0.1:50051".to_string(),
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
        }
    }
}

/// The command line: every [`Config`] field's flag (all optional, none with a default, so that
/// an absent flag leaves the file's value), plus the three flags that are not settings:
/// `--config FILE`, `-v` (counted into `verbosity`) and `-o name=value,...`.
pub fn command() -> clap::Command {
    let cmd = clap::Command::new("cairn").version(env!("CARGO_PKG_VERSION"));
    Config::augment_args(cmd)
        .about("A durable, memcached-compatible cache server")
        // As memcached: a flag given twice takes the last value.
        .args_override_self(true)
        .mut_args(|a| {
            let a = a.required(false);
            if matches!(a.get_action(), ArgAction::SetTrue) {
                // A bare `-M` means true; `--log-direct-io false` turns a file's true off. No
                // implicit default `false`, which would override the file.
                a.action(ArgAction::Set)
                    .num_args(0..=1)
                    .default_missing_value("true")
                    .value_parser(clap::value_parser!(bool))
            } else {
                a
            }
        })
        .arg(
            Arg::new("config")
                .long("config")
                .value_name("FILE")
                .value_parser(clap::value_parser!(PathBuf))
                .help("TOML file holding any of the settings (flags override it)"),
        )
        .arg(
            Arg::new("verbose")
                .short('v')
                .action(ArgAction::Count)
                .help("Verbose logging; repeat for more (sets verbosity)"),
        )
        .arg(
            Arg::new("option")
                .short('o')
                .value_name("NAME=VALUE,...")
                .action(ArgAction::Append)
                .value_delimiter(',')
                .help("Any setting by its file key, memcached style (e.g. -o ssl_key=k.pem)"),
        )
}

/// Why the server refuses to start.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("invalid setting {key}: {why}")]
    Invalid { key: &'static str, why: String },
    #[error("option -o {option}: {message}")]
    Option { option: String, message: String },
    /// A flag clap refused, or `--help` / `--version` (print it with `clap::Error::exit`).
    #[error("{0}")]
    Flags(#[from] clap::Error),
}

/// Values of `chkpt_interval_pct_snapshot` (percent of the snapshot size). 0 is refused: it
/// would drop the ratio condition, leaving only the size one. Above 10000 (a log 100 times the
/// snapshot before a checkpoint, all of it replayed at recovery) is taken for a typo.
pub const CHKPT_INTERVAL_PCT_SNAPSHOT: RangeInclusive<u64> = 1..=10_000;

/// Values of `chkpt_interval_min_logsize` (MiB). 0 is refused: with an empty snapshot it
/// checkpoints at every check of the rule, that is every second. The top, 1 TiB, keeps the
/// size in bytes (`<< 20`) far from overflowing a u64.
pub const CHKPT_INTERVAL_MIN_LOGSIZE_MB: RangeInclusive<u64> = 1..=1 << 20;

/// A checkpoint-interval setting: a key of the file and a flag at start, and an ARCUS admin line
/// (`config KEY [N]`) while running. Both paths check a value with [`ChkptSetting::check`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChkptSetting {
    /// `chkpt_interval_pct_snapshot`, in % ([`CHKPT_INTERVAL_PCT_SNAPSHOT`]).
    PctSnapshot,
    /// `chkpt_interval_min_logsize`, in MiB ([`CHKPT_INTERVAL_MIN_LOGSIZE_MB`]).
    MinLogsize,
}

impl ChkptSetting {
    /// The setting named `key` (the TOML key, which is also ARCUS's name), if it is one.
    pub fn from_key(key: &str) -> Option<ChkptSetting> {
        match key {
            "chkpt_interval_pct_snapshot" => Some(ChkptSetting::PctSnapshot),
            "chkpt_interval_min_logsize" => Some(ChkptSetting::MinLogsize),
            _ => None,
        }
    }

    /// The TOML key and admin-line name.
    pub fn key(self) -> &'static str {
        match self {
            ChkptSetting::PctSnapshot => "chkpt_interval_pct_snapshot",
            ChkptSetting::MinLogsize => "chkpt_interval_min_logsize",
        }
    }

    /// The values accepted, everywhere.
    pub fn range(self) -> RangeInclusive<u64> {
        match self {
            ChkptSetting::PctSnapshot => CHKPT_INTERVAL_PCT_SNAPSHOT,
            ChkptSetting::MinLogsize => CHKPT_INTERVAL_MIN_LOGSIZE_MB,
        }
    }

    /// `v` if it is in [`ChkptSetting::range`]; otherwise an error naming the key and the range.
    pub fn check(self, v: u64) -> Result<u64, ConfigError> {
        let range = self.range();
        if range.contains(&v) {
            return Ok(v);
        }
        let unit = match self {
            ChkptSetting::PctSnapshot => "% of the snapshot size",
            ChkptSetting::MinLogsize => "MiB",
        };
        Err(ConfigError::Invalid {
            key: self.key(),
            why: format!(
                "must be between {} and {} ({unit})",
                range.start(),
                range.end()
            ),
        })
    }
}

/// Parses `1048576`, `512k`, `1m`.
fn parse_size(s: &str) -> Result<usize, String> {
    parse_size_u64(s).and_then(|n| usize::try_from(n).map_err(|_| format!("too large: {s}")))
}

/// Parses `1048576`, `512k`, `1m`, `64g` (and memcached's `64G`).
fn parse_size_u64(s: &str) -> Result<u64, String> {
    let (digits, mult) = match s.as_bytes().last() {
        Some(b'k' | b'K') => (&s[..s.len() - 1], 1 << 10),
        Some(b'm' | b'M') => (&s[..s.len() - 1], 1 << 20),
        Some(b'g' | b'G') => (&s[..s.len() - 1], 1 << 30),
        Some(b't' | b'T') => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("not a size: {s}"))
}

/// Splits memcached's `ext_path` value, `PATH:SIZE`.
fn parse_ext_path(v: &str) -> Result<(PathBuf, u64), ConfigError> {
    let bad = |why: String| ConfigError::Invalid {
        key: "ext_path",
        why,
    };
    let (path, size) = v
        .rsplit_once(':')
        .ok_or_else(|| bad(format!("{v}: expected PATH:SIZE, e.g. /ssd/cairn:64G")))?;
    if path.is_empty() {
        return Err(bad(format!("{v}: the path is empty")));
    }
    Ok((PathBuf::from(path), parse_size_u64(size).map_err(bad)?))
}

impl Config {
    /// Reads a TOML file; unknown keys and bad values name the key in the error.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.message().to_string(),
        })
    }

    /// Defaults, then the file, then the flags, from a whole command line (`args[0]` is the
    /// program name). `--help`, `--version` and a malformed flag come back as
    /// [`ConfigError::Flags`].
    pub fn from_args<I, T>(args: I) -> Result<Config, ConfigError>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        Config::from_matches(&command().try_get_matches_from(args)?)
    }

    /// Defaults, then the file named by `--config`, then the flags in `m` (from [`command`]).
    pub fn from_matches(m: &ArgMatches) -> Result<Config, ConfigError> {
        let mut c = match m.get_one::<PathBuf>("config") {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        // ARCUS's switches (file only) pick the mode; a persistence flag or -o wins over both.
        if let Some(mode) = c.arcus_mode() {
            c.persistence = mode.into();
        }
        // Only the flags present: clap's derive leaves a field alone when its flag is absent.
        c.update_from_arg_matches(m)?;
        let verbose = m.get_count("verbose");
        if verbose > 0 {
            c.verbosity = verbose;
        }
        for option in m.get_many::<String>("option").into_iter().flatten() {
            c.set_option(option)?;
        }
        // memcached's spelling of the flash tier; an explicit flash_path wins.
        if let Some(v) = c.ext_path.take() {
            let (path, size) = parse_ext_path(&v)?;
            if c.flash_path.is_none() {
                c.flash_path = Some(path);
                c.flash_size = size;
            }
        }
        c.validate()?;
        Ok(c)
    }

    /// The mode that ARCUS's `use_persistence` / `async_logging` keys ask for, if any.
    fn arcus_mode(&self) -> Option<&'static str> {
        if self.use_persistence == Some(false) {
            Some("off")
        } else {
            self.async_logging.map(|a| if a { "async" } else { "sync" })
        }
    }

    /// Sets the setting named like its file key from one `-o` item: `name=value`, or a bare
    /// `name` for true. The value is read as the key's type: a number, a bool or text.
    fn set_option(&mut self, option: &str) -> Result<(), ConfigError> {
        let fail = |message: String| ConfigError::Option {
            option: option.to_string(),
            message,
        };
        let (name, value) = option.split_once('=').unwrap_or((option, "true"));
        if name.starts_with("ext_") && name != "ext_path" {
            // memcached's extstore tuning (ext_item_size, ext_wbuf_size, ...): cairn sizes
            // these itself, and deploy scripts carry them.
            tracing::info!("-o {option}: ignored (cairn has no such setting)");
            return Ok(());
        }
        let mut table = toml::Table::try_from(&*self).map_err(|e| fail(e.to_string()))?;
        let value = match table.get(name) {
            Some(toml::Value::Integer(_)) => value
                .parse::<i64>()
                .map(toml::Value::Integer)
                .map_err(|_| fail("must be a whole number".into()))?,
            Some(toml::Value::Boolean(_)) => value
                .parse::<bool>()
                .map(toml::Value::Boolean)
                .map_err(|_| fail("must be true or false".into()))?,
            Some(_) => toml::Value::String(value.to_string()),
            // An unset Option: a bool or a number if it reads as one, otherwise text.
            None => value
                .parse::<bool>()
                .map(toml::Value::Boolean)
                .or_else(|_| value.parse::<i64>().map(toml::Value::Integer))
                .unwrap_or_else(|_| toml::Value::String(value.to_string())),
        };
        table.insert(name.to_string(), value);
        *self = table
            .try_into()
            .map_err(|e: toml::de::Error| fail(e.message().to_string()))?;
        Ok(())
    }

    /// Checks ranges that serde cannot.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key, why: &str| {
            Err(ConfigError::Invalid {
                key,
                why: why.to_string(),
            })
        };
        if self.max_connections == 0 || self.max_connections > 1_000_000 {
            return invalid("max_connections", "must be between 1 and 1000000");
        }
        if self.udp_port != 0 {
            return invalid(
                "udp_port",
                "must be 0: cairn does not serve memcached's UDP protocol (TCP only)",
            );
        }
        if !matches!(self.io_engine.as_str(), "tokio" | "uring") {
            return invalid("io_engine", "must be tokio or uring");
        }
        if self.memory_limit_mb == 0 {
            return invalid("memory_limit_mb", "must be at least 1");
        }
        if self.item_size_max < 1024 || self.item_size_max > 128 << 20 {
            return invalid("item_size_max", "must be between 1 KiB and 128 MiB");
        }
        if self.item_size_max as u64 > (self.memory_limit_mb << 20) / 2 {
            return invalid("item_size_max", "must be at most half of memory_limit_mb");
        }
        if self.max_keys_per_get == 0 {
            return invalid("max_keys_per_get", "must be at least 1");
        }
        if self.output_buffer_max < 4096 {
            return invalid("output_buffer_max", "must be at least 4096");
        }
        if self.listen.parse::<std::net::IpAddr>().is_err() {
            return invalid("listen", "must be an IP address");
        }
        if cairn_persist::Mode::parse(&self.persistence).is_none() {
            return invalid("persistence", "must be sync, async or off");
        }
        if self.async_flush_ms == 0 || self.async_flush_ms > 60_000 {
            return invalid("async_flush_ms", "must be between 1 and 60000");
        }
        if self.log_segment_mb == 0 || self.log_segment_mb > 4096 {
            return invalid("log_segment_mb", "must be between 1 and 4096");
        }
        if (self.log_segment_mb << 20) < self.item_size_max as u64 * 2 {
            return invalid(
                "log_segment_mb",
                "must hold at least two items of item_size_max",
            );
        }
        if self.enable_ssl && (self.ssl_chain_cert.is_none() || self.ssl_key.is_none()) {
            return invalid(
                "enable_ssl",
                "needs ssl_chain_cert and ssl_key (-o ssl_chain_cert=FILE,ssl_key=FILE)",
            );
        }
        if self.grpc_listen != "off" && self.grpc_listen.parse::<SocketAddr>().is_err() {
            return invalid("grpc_listen", "must be an IP address and port, or off");
        }
        if self.grpc_tls_cert.is_some() != self.grpc_tls_key.is_some() {
            return invalid(
                "grpc_tls_cert",
                "grpc_tls_cert and grpc_tls_key go together",
            );
        }
        if self.grpc_threads > 1024 {
            return invalid("grpc_threads", "must be at most 1024 (0 = half the CPUs)");
        }
        if self.grpc_max_message_bytes != 0
            && (self.grpc_max_message_bytes < 64 << 10
                || self.grpc_max_message_bytes < self.item_size_max + 4096)
        {
            return invalid(
                "grpc_max_message_bytes",
                "must be 0 (automatic) or at least 64 KiB and item_size_max + 4 KiB",
            );
        }
        if self.watch_history_mb > self.memory_limit_mb / 2 {
            return invalid(
                "watch_history_mb",
                "must be at most half of memory_limit_mb",
            );
        }
        if self.watch_progress_notify_ms == 0 || self.watch_progress_notify_ms > 3_600_000 {
            return invalid("watch_progress_notify_ms", "must be between 1 and 3600000");
        }
        if self.watch_batch_ms > 1000 {
            return invalid("watch_batch_ms", "must be at most 1000 (0 = off)");
        }
        // The same check as the admin line `config chkpt_interval_* N`.
        ChkptSetting::PctSnapshot.check(self.chkpt_interval_pct_snapshot)?;
        ChkptSetting::MinLogsize.check(self.chkpt_interval_min_logsize)?;
        if self.flash_path.is_some() && self.flash_size == 0 {
            return invalid(
                "flash_size",
                "must be given with flash_path (e.g. --flash-size 64g)",
            );
        }
        if self.flash_write_queue == 0 || self.flash_write_queue > 1024 {
            return invalid("flash_write_queue", "must be between 1 and 1024");
        }
        match (&self.zookeeper, &self.service_code) {
            (Some(_), None) => {
                return invalid("service_code", "must be given with zookeeper (-z)");
            }
            (None, Some(_)) => return invalid("zookeeper", "must be given with service_code"),
            _ => {}
        }
        if !matches!(self.replication.as_str(), "async" | "sync") {
            return invalid("replication", "must be async or sync");
        }
        if let Some(group) = &self.replication_group {
            if self.zookeeper.is_none() {
                return invalid("replication_group", "needs zookeeper and service_code");
            }
            // ARCUS's clients drop every node of a service whose group names hold '-', ','
            // or '^' (they cut cache_list names at the first '-').
            if group.is_empty()
                || !group
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_')
            {
                return invalid(
                    "replication_group",
                    "letters, digits and '_' only (ARCUS's clients read no other)",
                );
            }
            if self.replica_of.is_some() {
                return invalid(
                    "replication_group",
                    "a group elects its primary: not with replica_of",
                );
            }
        }
        let replicated = self.replica_of.is_some()
            || self.replication == "sync"
            || self.replication_group.is_some();
        if replicated && self.mode() == cairn_persist::Mode::Off {
            return invalid(
                "replication",
                "needs persistence (a replica acknowledges only what it holds durable)",
            );
        }
        if replicated && self.grpc_listen == "off" {
            return invalid("replication", "needs the gRPC API (grpc_listen) on");
        }
        if self.replication_timeout_ms == 0 || self.replication_timeout_ms > 3_600_000 {
            return invalid("replication_timeout_ms", "must be between 1 and 3600000");
        }
        if !(100..=300_000).contains(&self.zookeeper_session_timeout_ms) {
            return invalid(
                "zookeeper_session_timeout_ms",
                "must be between 100 and 300000",
            );
        }
        Ok(())
    }

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
    /// history is kept from the first watch on, so this is what a watched server spends on
    /// it at most: without persistence its events hold their values (a sixteenth of `-m` by
    /// default), with it about 100 bytes an event (the command log holds the values).
    pub fn watch_history_bytes(&self) -> usize {
        if self.grpc_addr().is_none() {
            return 0;
        }
        let bytes = match self.watch_history_mb {
            0 => ((self.memory_limit_mb << 20) / 16).clamp(1 << 20, 64 << 20),
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
fn grpc_threads_for(cpus: usize) -> usize {
    (cpus / 2).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `Config::from_args` gives for a file holding `text` (written to `path`) and the
    /// `extra` flags.
    fn load_result(path: &Path, text: &str, extra: &[&str]) -> Result<Config, ConfigError> {
        std::fs::write(path, text).unwrap();
        let mut args = vec!["cairn", "--config", path.to_str().unwrap()];
        args.extend_from_slice(extra);
        Config::from_args(args)
    }

    fn load_with(path: &Path, text: &str, extra: &[&str]) -> Config {
        load_result(path, text, extra).unwrap()
    }

    #[test]
    fn unknown_key_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "port = 1\nmemory_limt_mb = 5\n").unwrap();
        let err = Config::from_file(&path).unwrap_err().to_string();
        assert!(err.contains("memory_limt_mb"), "{err}");
        std::fs::write(&path, "port = \"x\"\n").unwrap();
        let err = Config::from_file(&path).unwrap_err().to_string();
        assert!(err.contains("port") || err.contains("string"), "{err}");
    }

    #[test]
    fn arcus_keys_pick_the_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        let load = |text: &str, extra: &[&str]| load_with(&path, text, extra).persistence;
        assert_eq!(load("", &[]), "sync");
        assert_eq!(load("use_persistence = false\n", &[]), "off");
        assert_eq!(
            load("use_persistence = true\nasync_logging = true\n", &[]),
            "async"
        );
        assert_eq!(
            load("async_logging = true\n", &["--persistence", "sync"]),
            "sync"
        );
        let c = load_with(&path, "logs_path = \"/x/log\"\n", &[]);
        assert_eq!(
            (c.log_dir(), c.snapshot_dir()),
            (PathBuf::from("/x/log"), PathBuf::from("cairn-data"))
        );
    }

    #[test]
    fn flags_override_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "port = 1000\nmemory_limit_mb = 5\n").unwrap();
        let c =
            Config::from_args(["cairn", "--config", path.to_str().unwrap(), "-p", "2000"]).unwrap();
        assert_eq!((c.port, c.memory_limit_mb), (2000, 5));
    }

    #[test]
    fn an_absent_flag_keeps_the_file_value_and_bool_flags_take_an_optional_value() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        let text = "disable_evictions = true\nverbosity = 2\nlog_direct_io = false\n";
        let c = load_with(&path, text, &[]);
        assert!(c.disable_evictions && !c.log_direct_io && c.verbosity == 2);
        let c = load_with(&path, text, &["-M", "false", "--log-direct-io", "-v"]);
        assert!(!c.disable_evictions && c.log_direct_io && c.verbosity == 1);
        let c = load_with(&path, "", &["-M", "-A", "-p", "7"]);
        assert!(c.disable_evictions && c.enable_shutdown && c.port == 7);
        assert_eq!(Config::from_args(["cairn"]).unwrap(), Config::default());
    }

    /// The configuration reference's table has a row for every key (JSON keeps the unset
    /// Options' keys).
    #[test]
    fn the_reference_lists_every_setting() {
        let readme = include_str!("../../../docs/CONFIGURATION.md");
        let keys = serde_json::to_value(Config::default()).unwrap();
        for key in keys.as_object().unwrap().keys() {
            assert!(
                readme.contains(&format!("\n| `{key}` | ")),
                "docs/CONFIGURATION.md's settings table has no row for `{key}`"
            );
        }
    }

    /// Every flag `cairn --help` shows, long and short, is written in the configuration
    /// reference.
    #[test]
    fn the_reference_lists_every_flag() {
        let readme = include_str!("../../../docs/CONFIGURATION.md");
        let mut cmd = command();
        cmd.build();
        for arg in cmd.get_arguments() {
            let long = arg.get_long().map(|l| format!("`--{l}"));
            let short = arg.get_short().map(|s| format!("`-{s}"));
            for flag in long.into_iter().chain(short) {
                assert!(
                    readme.contains(&flag),
                    "docs/CONFIGURATION.md does not name {flag}`"
                );
            }
        }
    }

    #[test]
    fn dash_o_sets_any_key_and_refuses_unknown_ones() {
        let c = Config::from_args([
            "cairn",
            "-o",
            "async_flush_ms=7,data_path=/x/snap,log_batch_sched=false",
            "-o",
            "enable_admin",
        ])
        .unwrap();
        assert_eq!(c.async_flush_ms, 7);
        assert_eq!(c.data_path, Some(PathBuf::from("/x/snap")));
        assert!(!c.log_batch_sched && c.enable_admin);
        let c = Config::from_args(["cairn", "-o", "metrics_addr=127.0.0.1:9150"]).unwrap();
        assert_eq!(c.metrics_addr, Some("127.0.0.1:9150".parse().unwrap()));
        for (option, why) in [
            ("no_such_key=1", "no_such_key"),
            ("async_flush_ms=soon", "whole number"),
            ("log_direct_io=maybe", "true or false"),
            // -o values are checked like the file's and the flags'.
            ("async_flush_ms=0", "between 1 and 60000"),
        ] {
            let err = Config::from_args(["cairn", "-o", option])
                .unwrap_err()
                .to_string();
            assert!(err.contains(why), "{option}: {err}");
        }
    }

    #[test]
    fn log_batch_sched_is_on_unless_turned_off() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        let load = |text: &str, extra: &[&str]| load_with(&path, text, extra).log_batch_sched;
        assert!(load("", &[]));
        assert!(!load("log_batch_sched = false\n", &[]));
        assert!(load(
            "log_batch_sched = false\n",
            &["--log-batch-sched", "true"]
        ));
    }

    #[test]
    fn grpc_settings_from_file_and_flags() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        let c = load_with(&path, "", &[]);
        assert_eq!(c.grpc_addr(), Some("127.0.0.1:50051".parse().unwrap()));
        assert_eq!((c.grpc_threads, c.watch_batch_ms), (0, 0));
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(c.grpc_thread_count(), grpc_threads_for(cpus));
        let halves: Vec<usize> = [1, 2, 3, 4, 96].map(grpc_threads_for).into();
        assert_eq!(halves, [1, 1, 1, 2, 48], "half the CPUs, at least one");
        assert_eq!(c.grpc_max_message(), (1 << 20) + (1 << 20));
        assert_eq!(c.watch_history_bytes(), 4 << 20, "a sixteenth of -m 64");
        assert_eq!(c.store_memory_bytes(), 60 << 20, "the rest is the store's");
        let c = load_with(&path, "memory_limit_mb = 4096\n", &[]);
        assert_eq!(c.watch_history_bytes(), 64 << 20, "at most 64 MiB");
        let c = load_with(&path, "grpc_listen = \"off\"\nwatch_history_mb = 8\n", &[]);
        assert_eq!(
            (c.grpc_addr(), c.watch_history_bytes()),
            (None, 0),
            "no API, no history"
        );
        let c = load_with(&path, "watch_history_mb = 8\n", &[]);
        assert_eq!(c.watch_history_bytes(), 8 << 20);
        let c = load_with(
            &path,
            "grpc_listen = \"off\"\n",
            &[
                "--grpc-listen",
                "127.0.0.1:0",
                "--watch-progress-notify-ms",
                "50",
                "--grpc-threads",
                "2",
                "--watch-batch-ms",
                "2",
            ],
        );
        assert_eq!(c.grpc_addr(), Some("127.0.0.1:0".parse().unwrap()));
        assert_eq!((c.watch_progress_notify_ms, c.grpc_threads), (50, 2));
        assert_eq!(c.grpc_thread_count(), 2, "a count given is kept");
        assert_eq!(c.watch_batch_ms, 2);
        assert_eq!(
            load_with(&path, "watch_batch_ms = 5\n", &[]).watch_batch_ms,
            5
        );
        for (text, key) in [
            ("grpc_listen = \"nowhere\"\n", "grpc_listen"),
            ("grpc_tls_cert = \"/x.pem\"\n", "grpc_tls_cert"),
            ("grpc_max_message_bytes = 100\n", "grpc_max_message_bytes"),
            ("grpc_threads = 2000\n", "grpc_threads"),
            ("watch_progress_notify_ms = 0\n", "watch_progress_notify_ms"),
            ("watch_batch_ms = 1001\n", "watch_batch_ms"),
        ] {
            let err = load_result(&path, text, &[]).unwrap_err();
            assert!(
                matches!(err, ConfigError::Invalid { key: k, .. } if k == key),
                "{text}: {err}"
            );
        }
    }

    #[test]
    fn bad_ranges_refused() {
        let err = Config::from_args(["cairn", "-c", "0"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("max_connections"), "{err}");
        let err = Config::from_args(["cairn", "--persistence", "sometimes"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("persistence"), "{err}");
        assert_eq!(parse_size("2m"), Ok(2 << 20));
    }

    #[test]
    fn chkpt_intervals_out_of_range_are_refused_naming_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        let pct = "chkpt_interval_pct_snapshot";
        let min = "chkpt_interval_min_logsize";
        let cases: [(&str, &[&str], &str, &str); 6] = [
            (
                "chkpt_interval_pct_snapshot = 0\n",
                &[],
                pct,
                "between 1 and 10000",
            ),
            (
                "chkpt_interval_pct_snapshot = 10001\n",
                &[],
                pct,
                "between 1 and 10000",
            ),
            (
                "chkpt_interval_min_logsize = 0\n",
                &[],
                min,
                "between 1 and 1048576",
            ),
            (
                "chkpt_interval_min_logsize = 1048577\n",
                &[],
                min,
                "between 1 and 1048576",
            ),
            // A flag is checked too, and it overrides a good file value.
            (
                "chkpt_interval_pct_snapshot = 100\n",
                &["--chkpt-interval-pct-snapshot", "0"],
                pct,
                "between 1 and 10000",
            ),
            (
                "",
                &["--chkpt-interval-min-logsize", "0"],
                min,
                "between 1 and 1048576",
            ),
        ];
        for (text, flags, key, range) in cases {
            let err = load_result(&path, text, flags).unwrap_err();
            assert!(
                matches!(err, ConfigError::Invalid { key: k, .. } if k == key),
                "{text:?} {flags:?}: {err}"
            );
            let message = err.to_string();
            assert!(
                message.contains(key) && message.contains(range),
                "{message}"
            );
        }
        // Both ends of each range are accepted, and a good flag mends a bad file value.
        let c = load_with(
            &path,
            "chkpt_interval_pct_snapshot = 10000\nchkpt_interval_min_logsize = 0\n",
            &["--chkpt-interval-min-logsize", "1048576"],
        );
        assert_eq!(
            (c.chkpt_interval_pct_snapshot, c.chkpt_interval_min_logsize),
            (10_000, 1 << 20)
        );
        let c = load_with(
            &path,
            "",
            &[
                "--chkpt-interval-pct-snapshot",
                "1",
                "--chkpt-interval-min-logsize",
                "1",
            ],
        );
        assert_eq!(
            (c.chkpt_interval_pct_snapshot, c.chkpt_interval_min_logsize),
            (1, 1)
        );
    }

    #[test]
    fn flash_is_off_by_default_and_takes_memcacheds_spelling() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        assert!(load_with(&path, "", &[]).flash().is_none());
        let f = load_with(&path, "", &["-o", "ext_path=/ssd/x:2G,ext_item_size=64"])
            .flash()
            .unwrap();
        assert_eq!((f.path, f.size_bytes), (PathBuf::from("/ssd/x"), 2 << 30));
        let f = load_with(
            &path,
            "flash_path = \"/a\"\nflash_size = 1048576000\nflash_segment_size = 262144\n",
            &[],
        )
        .flash()
        .unwrap();
        assert_eq!(
            (f.path, f.size_bytes, f.segment_bytes),
            (PathBuf::from("/a"), 1_048_576_000, 256 << 10)
        );
        // ARCUS-style files carry memcached's key.
        let c = load_with(
            &path,
            "ext_path = \"/b:64m\"\n",
            &["--flash-direct-io", "false"],
        );
        let f = c.flash().unwrap();
        assert_eq!(
            (f.path, f.size_bytes, f.direct_io),
            (PathBuf::from("/b"), 64 << 20, false)
        );
        for (text, flags, key) in [
            ("flash_path = \"/a\"\n", &[][..], "flash_size"),
            ("", &["-o", "ext_path=/a"][..], "ext_path"),
        ] {
            let err = load_result(&path, text, flags).unwrap_err();
            assert!(
                matches!(err, ConfigError::Invalid { key: k, .. } if k == key),
                "{text} {flags:?}: {err}"
            );
        }
        // memcached's extstore tuning is ignored, anything else unknown is refused.
        assert!(load_result(&path, "", &["-o", "ext_wbuf_size=8"]).is_ok());
        let err = load_result(&path, "", &["-o", "no_such_key=1"]).unwrap_err();
        assert!(matches!(err, ConfigError::Option { .. }), "{err}");
    }

    #[test]
    fn chkpt_setting_names_and_ranges() {
        for s in [ChkptSetting::PctSnapshot, ChkptSetting::MinLogsize] {
            assert_eq!(ChkptSetting::from_key(s.key()), Some(s));
            let (lo, hi) = (*s.range().start(), *s.range().end());
            assert_eq!((s.check(lo).unwrap(), s.check(hi).unwrap()), (lo, hi));
            assert!(s.check(lo - 1).is_err() && s.check(hi + 1).is_err());
        }
        assert_eq!(ChkptSetting::from_key("async_logging"), None);
        // The defaults are valid.
        Config::default().validate().unwrap();
    }

    /// memcached's -U: 0 (UDP off, memcached's default) is accepted, any port refuses to start
    /// with the reason, and -F disables flush_all.
    #[test]
    fn udp_is_refused_and_flush_all_can_be_disabled() {
        let c = Config::from_args(["cairn", "-U", "0", "-F"]).unwrap();
        assert_eq!((c.udp_port, c.disable_flush_all), (0, true));
        let err = Config::from_args(["cairn", "-U", "11211"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("udp_port") && err.contains("TCP only"),
            "{err}"
        );
    }
}
