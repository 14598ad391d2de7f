//! Settings: built-in defaults, then the TOML file (`--config`), then command-line flags.
//!
//! ```text
//!   Config::default()  <──  [file.toml] (unknown key or bad value: refuse to start)
//!                      <──  flags (-p -l -t -c -m -M -I -v --metrics-addr)
//! ```
//!
//! Every setting lives in [`Config`]; the flag names follow memcached's.
//!
//! The settings that an admin line can also change while running (`config KEY N`, see
//! `cmd/admin.rs`) keep their range in one place, [`ChkptSetting`], so that the file, the flags
//! and the admin line accept exactly the same values.

use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

use clap::Parser;
use serde::Deserialize;

/// Every server setting. Each field is also a key of the TOML file.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// TCP port (memcached `-p`).
    pub port: u16,
    /// Listen address (memcached `-l`).
    pub listen: String,
    /// Worker threads of the runtime (memcached `-t`); 0 = one per core.
    pub threads: usize,
    /// Most simultaneous client connections (memcached `-c`); more are refused politely.
    pub max_connections: usize,
    /// Memory for items in MiB (memcached `-m`).
    pub memory_limit_mb: u64,
    /// Refuse stores with an error instead of evicting when memory is full (memcached `-M`).
    pub disable_evictions: bool,
    /// Largest item in bytes (memcached `-I`).
    pub item_size_max: usize,
    /// Log verbosity: 0 = info, 1 = debug, 2+ = trace (memcached `-v`).
    pub verbosity: u8,
    /// Address of the Prometheus text endpoint; none = disabled.
    pub metrics_addr: Option<SocketAddr>,
    /// Most keys in one get line.
    pub max_keys_per_get: usize,
    /// Bytes of responses buffered per connection before the server stops reading from it
    /// (backpressure for clients that do not read).
    pub output_buffer_max: usize,
    /// Persistence mode: "sync" (acknowledge after fdatasync), "async" (fdatasync at least
    /// every `async_flush_ms`) or "off" (pure cache).
    pub persistence: String,
    /// Folder for everything persistent; `data_path` and `logs_path` default to it.
    pub data_dir: PathBuf,
    /// ARCUS: false is the same as `persistence = "off"`.
    pub use_persistence: Option<bool>,
    /// ARCUS: where snapshots go (default: `data_dir`).
    pub data_path: Option<PathBuf>,
    /// ARCUS: where the command log goes, possibly another disk (default: `data_dir/log`).
    pub logs_path: Option<PathBuf>,
    /// ARCUS: true is the same as `persistence = "async"`.
    pub async_logging: Option<bool>,
    /// Async mode: the longest time an acknowledged write stays only in memory (ms).
    pub async_flush_ms: u64,
    /// ARCUS: checkpoint when the log written since the last checkpoint reaches this % of the
    /// snapshot size... Allowed: 1..=10000 ([`CHKPT_INTERVAL_PCT_SNAPSHOT`]).
    pub chkpt_interval_pct_snapshot: u64,
    /// ARCUS: ...and at least this many MiB. Allowed: 1..=1048576, i.e. up to 1 TiB
    /// ([`CHKPT_INTERVAL_MIN_LOGSIZE_MB`]).
    pub chkpt_interval_min_logsize: u64,
    /// Snapshot write rate limit in MiB/s (0 = unlimited), to keep serving at full speed.
    pub checkpoint_rate_mb_s: u64,
    /// Size of one command log segment file in MiB. Segments are zero-filled before use, so
    /// that an fdatasync flushes data only, not the file's extent metadata.
    pub log_segment_mb: u64,
    /// Write the command log with O_DIRECT (whole 4 KiB blocks, no page cache): a small sync
    /// batch's write + fdatasync is quicker, a 1 MiB one slower (docs/BENCHMARKS.md). Where
    /// the file system refuses O_DIRECT the log is written buffered.
    pub log_direct_io: bool,
    /// Run the command log's syncer thread under SCHED_BATCH, so that its several wake-ups per
    /// fdatasync do not preempt the threads serving requests (docs/BENCHMARKS.md).
    pub log_batch_sched: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            port: 11211,
            listen: "127.0.0.1".to_string(),
            threads: 0,
            max_connections: 1024,
            memory_limit_mb: 64,
            disable_evictions: false,
            item_size_max: 1 << 20,
            verbosity: 0,
            metrics_addr: None,
            max_keys_per_get: 1024,
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
        }
    }
}

/// Command-line flags; each overrides the file.
#[derive(Debug, Parser)]
#[command(
    name = "cairn",
    version,
    about = "A durable, memcached-compatible cache server"
)]
pub struct Flags {
    /// TOML file holding any of the settings (flags override it).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// TCP port to listen on.
    #[arg(short = 'p', long)]
    pub port: Option<u16>,
    /// Address to listen on.
    #[arg(short = 'l', long)]
    pub listen: Option<String>,
    /// Worker threads (default: number of cores).
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// Maximum simultaneous connections.
    #[arg(short = 'c', long = "max-connections")]
    pub max_connections: Option<usize>,
    /// Item memory in MiB.
    #[arg(short = 'm', long = "memory-limit")]
    pub memory_limit_mb: Option<u64>,
    /// Return an error on memory exhaustion instead of evicting.
    #[arg(short = 'M', long = "disable-evictions")]
    pub disable_evictions: bool,
    /// Maximum item size, in bytes or with a k/m suffix (e.g. 1m).
    #[arg(short = 'I', long = "max-item-size", value_parser = parse_size)]
    pub item_size_max: Option<usize>,
    /// Verbose logging; repeat for more.
    #[arg(short = 'v', action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Serve Prometheus metrics on this address (e.g. 127.0.0.1:9150).
    #[arg(long)]
    pub metrics_addr: Option<SocketAddr>,
    /// Persistence mode: sync (default), async or off.
    #[arg(long)]
    pub persistence: Option<String>,
    /// Folder for snapshots and the command log (default: ./cairn-data).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Size of one command log segment file in MiB (each is zero-filled when created).
    #[arg(long)]
    pub log_segment_mb: Option<u64>,
    /// Write the command log with O_DIRECT (true or false).
    #[arg(long)]
    pub log_direct_io: Option<bool>,
    /// Run the command log's syncer under SCHED_BATCH (true or false).
    #[arg(long)]
    pub log_batch_sched: Option<bool>,
    /// Checkpoint once the log is this % of the snapshot size (1 to 10000).
    #[arg(long)]
    pub chkpt_interval_pct_snapshot: Option<u64>,
    /// ...and at least this many MiB (1 to 1048576).
    #[arg(long)]
    pub chkpt_interval_min_logsize: Option<u64>,
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
    let (digits, mult) = match s.as_bytes().last() {
        Some(b'k' | b'K') => (&s[..s.len() - 1], 1 << 10),
        Some(b'm' | b'M') => (&s[..s.len() - 1], 1 << 20),
        _ => (s, 1),
    };
    digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("not a size: {s}"))
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

    /// Defaults, then the file named by `--config`, then the flags.
    pub fn load(flags: &Flags) -> Result<Config, ConfigError> {
        let mut c = match &flags.config {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        if let Some(v) = flags.port {
            c.port = v;
        }
        if let Some(v) = &flags.listen {
            c.listen = v.clone();
        }
        if let Some(v) = flags.threads {
            c.threads = v;
        }
        if let Some(v) = flags.max_connections {
            c.max_connections = v;
        }
        if let Some(v) = flags.memory_limit_mb {
            c.memory_limit_mb = v;
        }
        if flags.disable_evictions {
            c.disable_evictions = true;
        }
        if let Some(v) = flags.item_size_max {
            c.item_size_max = v;
        }
        if flags.verbose > 0 {
            c.verbosity = flags.verbose;
        }
        if let Some(v) = flags.metrics_addr {
            c.metrics_addr = Some(v);
        }
        // ARCUS's switches map onto the mode; the explicit flag wins over both.
        if c.use_persistence == Some(false) {
            c.persistence = "off".into();
        } else if let Some(a) = c.async_logging {
            c.persistence = if a { "async" } else { "sync" }.into();
        }
        if let Some(v) = &flags.persistence {
            c.persistence = v.clone();
        }
        if let Some(v) = &flags.data_dir {
            c.data_dir = v.clone();
        }
        if let Some(v) = flags.log_segment_mb {
            c.log_segment_mb = v;
        }
        if let Some(v) = flags.log_direct_io {
            c.log_direct_io = v;
        }
        if let Some(v) = flags.log_batch_sched {
            c.log_batch_sched = v;
        }
        if let Some(v) = flags.chkpt_interval_pct_snapshot {
            c.chkpt_interval_pct_snapshot = v;
        }
        if let Some(v) = flags.chkpt_interval_min_logsize {
            c.chkpt_interval_min_logsize = v;
        }
        c.validate()?;
        Ok(c)
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
        // The same check as the admin line `config chkpt_interval_* N`.
        ChkptSetting::PctSnapshot.check(self.chkpt_interval_pct_snapshot)?;
        ChkptSetting::MinLogsize.check(self.chkpt_interval_min_logsize)?;
        Ok(())
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

    /// The runtime's worker count.
    pub fn worker_threads(&self) -> usize {
        if self.threads == 0 {
            std::thread::available_parallelism().map_or(2, |n| n.get())
        } else {
            self.threads
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `Config::load` gives for a file holding `text` (written to `path`) and the `extra`
    /// flags.
    fn load_result(path: &Path, text: &str, extra: &[&str]) -> Result<Config, ConfigError> {
        std::fs::write(path, text).unwrap();
        let mut args = vec!["cairn", "--config", path.to_str().unwrap()];
        args.extend_from_slice(extra);
        Config::load(&Flags::parse_from(args))
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
        let flags = Flags::parse_from(["cairn", "--config", path.to_str().unwrap(), "-p", "2000"]);
        let c = Config::load(&flags).unwrap();
        assert_eq!((c.port, c.memory_limit_mb), (2000, 5));
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
    fn bad_ranges_refused() {
        let flags = Flags::parse_from(["cairn", "-c", "0"]);
        let err = Config::load(&flags).unwrap_err().to_string();
        assert!(err.contains("max_connections"), "{err}");
        let flags = Flags::parse_from(["cairn", "--persistence", "sometimes"]);
        let err = Config::load(&flags).unwrap_err().to_string();
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
}
