//! `cairn-bench suite arcus`: the ARCUS persistence seed's scenarios, every target side by
//! side in one run, each server started here on a free loopback port with its own temporary
//! data directory and stopped afterwards.
//!
//! ```text
//!   for each repeat, for each target (A B C A B C ...):
//!     start server ─> insert every key once (P:P, 1:0) ─> RSS after insert
//!       ─> retrieval R:R 0:1 ─> mixed 1:9 (a checkpoint mid-phase for cairn async/sync)
//!       ─> mixed 3:7 ─> mixed 5:5
//!       ─> cairn async/sync: kill -9, restart on the same data directory, read recovery stats
//!       ─> stop
//!   report: markdown table (medians over repeats), ratios, checkpoint dip, recovery,
//!           JSON with per-second timelines, SVG charts
//! ```

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;

use crate::keys::Pattern;
use crate::load::{self, LoadConfig, Protocol};
use crate::procstat::rss_bytes;
use crate::report::{self, CheckpointDip};

#[derive(Clone, Debug, Parser)]
pub struct SuiteArgs {
    /// The scenario set: `arcus`, or `flash` (the fatcache seed's F1-F6, see flash.rs).
    #[arg(default_value = "arcus")]
    pub scenario: String,
    /// Keys inserted and then read (memtier-1 .. memtier-N).
    #[arg(long, default_value_t = 1_000_000)]
    pub keys: u64,
    /// Seconds per timed phase.
    #[arg(long, default_value_t = 15)]
    pub phase_secs: u64,
    #[arg(long, default_value_t = 2)]
    pub threads: u64,
    #[arg(long, default_value_t = 25)]
    pub clients: u64,
    #[arg(long, default_value_t = 50)]
    pub data_size: usize,
    /// The cairn binary to start.
    #[arg(long, default_value = "target/release/cairn")]
    pub cairn_bin: PathBuf,
    /// Another cairn build to measure beside it, as LABEL=PATH (repeatable): each of
    /// `--cairn-modes` also runs on it, named `cairn MODE [LABEL]` (A/B of a change).
    #[arg(long, value_parser = parse_alt)]
    pub cairn_alt: Vec<(String, PathBuf)>,
    /// Requests in flight per connection (memtier's --pipeline).
    #[arg(long, default_value_t = 1)]
    pub pipeline: usize,
    /// cairn modes to measure (comma separated: off, async, sync; empty for none).
    #[arg(long, default_value = "off,async,sync")]
    pub cairn_modes: String,
    /// Redis AOF modes to measure (none, everysec, always; empty for none).
    #[arg(long, default_value = "none,everysec,always")]
    pub redis_modes: String,
    /// Skip memcached.
    #[arg(long)]
    pub no_memcached: bool,
    /// A server this suite does not start: HOST:PORT:PROTOCOL (repeatable).
    #[arg(long)]
    pub target: Vec<String>,
    /// Where the table, JSON and charts go.
    #[arg(long, default_value = "bench-out")]
    pub out_dir: PathBuf,
    /// Run every target this many times, alternating, and report medians.
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// Checkpoint cairn (async/sync) in the middle of the mixed 1:9 phase.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub checkpoint_mid_phase: bool,
    /// After the last phase, kill cairn (async/sync) with SIGKILL, start it again on the same
    /// data directory and report how long recovery took.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub recovery: bool,
    #[arg(long)]
    pub quiet: bool,
    /// `flash`: the RAM limit (-m, MiB) of cairn with flash and of memcached with extstore.
    #[arg(long, default_value_t = 256)]
    pub ram_mb: u64,
    /// `flash`: where the flash files go (default: the output folder); not tmpfs.
    #[arg(long)]
    pub flash_dir: Option<PathBuf>,
    /// `flash`: `all` (F1-F6 side by side), `reads` (F2 and F3 alone, cairn's ring per
    /// worker beside its shared ring thread: flash-reads-results.{md,json}), or `f5` (the
    /// kill -9 check alone, for work on recovery: its table and JSON go to
    /// flash-f5-results.{md,json}), or `reads-ab` (F2 and F3 of `--cairn-bin` against each
    /// `--cairn-alt` build, `--repeat` alternating rounds with fio in each, medians:
    /// flash-reads-ab-results.{md,json}).
    #[arg(long, default_value = "all")]
    pub flash_phases: String,
    /// `flash`, F5: insert the keys in this many parts, each in a hold of `--lock-file` of
    /// its own (the server idles between them), so that a large F5 never holds the bench
    /// lock for long; the kill, restart and check of every key are one more hold.
    #[arg(long, default_value_t = 1)]
    pub f5_insert_holds: u64,
    /// `flash`, F5: a lock file (the one every benchmark on the machine takes) taken with
    /// flock for each part of F5 (see `--f5-insert-holds`) instead of around the whole run.
    #[arg(long)]
    pub lock_file: Option<PathBuf>,
}

fn parse_alt(s: &str) -> Result<(String, PathBuf), String> {
    let (label, path) = s
        .split_once('=')
        .ok_or_else(|| format!("--cairn-alt {s:?}: expected LABEL=PATH"))?;
    Ok((label.to_string(), PathBuf::from(path)))
}

/// A server to measure.
#[derive(Clone, Debug)]
pub enum Target {
    /// cairn in a persistence mode, from `--cairn-bin` or a labelled `--cairn-alt` build.
    Cairn {
        mode: String,
        alt: Option<(String, PathBuf)>,
    },
    Memcached,
    Redis(String),
    External {
        host: String,
        port: u16,
        protocol: Protocol,
    },
}

impl Target {
    pub fn name(&self) -> String {
        match self {
            Target::Cairn { mode, alt: None } => format!("cairn {mode}"),
            Target::Cairn {
                mode,
                alt: Some((label, _)),
            } => format!("cairn {mode} [{label}]"),
            Target::Memcached => "memcached".into(),
            Target::Redis(m) => format!("redis {m}"),
            Target::External { host, port, .. } => format!("{host}:{port}"),
        }
    }

    fn protocol(&self) -> Protocol {
        match self {
            Target::Redis(_) => Protocol::Redis,
            Target::External { protocol, .. } => *protocol,
            _ => Protocol::MemcacheText,
        }
    }
}

/// A started server, stopped on drop.
struct Running {
    child: Option<Child>,
    host: String,
    port: u16,
    /// The server's data directory, removed on drop; a restart after kill -9 reuses it.
    dir: Option<tempfile::TempDir>,
}

impl Running {
    fn pid(&self) -> Option<String> {
        self.child.as_ref().map(|c| c.id().to_string())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
            let _ = c.wait();
        }
    }
}

pub(crate) fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

/// Polls with a short backoff until the server answers (never a fixed sleep).
pub(crate) fn wait_ready(port: u16, protocol: Protocol) -> Result<(), String> {
    let (probe, expect): (&[u8], &[u8]) = match protocol {
        Protocol::MemcacheText => (b"version\r\n", b"VERSION"),
        Protocol::Redis => (b"PING\r\n", b"+PONG"),
    };
    let mut delay = Duration::from_millis(5);
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let mut buf = [0u8; 64];
            if s.write_all(probe).is_ok()
                && s.read(&mut buf).is_ok_and(|n| buf[..n].starts_with(expect))
            {
                return Ok(());
            }
        }
        std::thread::sleep(delay);
        delay = (delay * 2).min(Duration::from_millis(200));
    }
    Err(format!("server on port {port} never became ready"))
}

fn installed(bin: &str) -> bool {
    Command::new(bin)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// The memory limit every server gets: room for the keys with headroom.
fn mem_mb(args: &SuiteArgs) -> String {
    (args.keys * 400 / (1 << 20)).max(256).to_string()
}

fn start(t: &Target, args: &SuiteArgs) -> Result<Running, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let port = free_port()?;
    let mem_mb = mem_mb(args);
    let child = match t {
        Target::External {
            host,
            port,
            protocol,
        } => {
            wait_ready_external(host, *port, *protocol)?;
            return Ok(Running {
                child: None,
                host: host.clone(),
                port: *port,
                dir: None,
            });
        }
        Target::Cairn { mode, alt } => {
            spawn_cairn(args, cairn_bin(args, alt), mode, port, dir.path())?
        }
        Target::Memcached => Command::new("memcached")
            .args([
                "-l",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-U",
                "0",
                "-t",
                "2",
                "-m",
                &mem_mb,
                "-c",
                "4096",
                "-u",
                "root",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("memcached: {e}"))?,
        Target::Redis(mode) => {
            let mut cmd = Command::new("redis-server");
            cmd.args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--dir",
            ])
            .arg(dir.path())
            .args(["--maxclients", "4096"]);
            match mode.as_str() {
                "none" => cmd.args(["--appendonly", "no"]),
                m => cmd.args(["--appendonly", "yes", "--appendfsync", m]),
            };
            cmd.stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("redis-server: {e}"))?
        }
    };
    let running = Running {
        child: Some(child),
        host: "127.0.0.1".into(),
        port,
        dir: Some(dir),
    };
    wait_ready(port, t.protocol())?;
    Ok(running)
}

/// Starts cairn and returns once it printed its `cairn listening on` line (after recovery).
/// The same arguments every time, so a restart finds the same data directory and port.
fn spawn_cairn(
    args: &SuiteArgs,
    bin: &std::path::Path,
    mode: &str,
    port: u16,
    dir: &std::path::Path,
) -> Result<Child, String> {
    let mem_mb = mem_mb(args);
    let mut child = Command::new(bin)
        .args([
            "-p",
            &port.to_string(),
            "-t",
            "2",
            "-m",
            &mem_mb,
            "--persistence",
            mode,
            // The checkpoint dip phase sends `checkpoint`.
            "--enable-admin",
            // The gRPC API stays on (its hub is part of the default cost), on a free port: a
            // fixed one would collide with any other cairn on the machine.
            "--grpc-listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{}: {e}", bin.display()))?;
    let out = child.stdout.take().ok_or("no stdout")?;
    let ready = BufReader::new(out)
        .lines()
        .map_while(Result::ok)
        .any(|l| l.starts_with("cairn listening on "));
    if !ready {
        let status = child.wait().map_err(|e| e.to_string())?;
        return Err(format!("cairn exited before it was ready ({status})"));
    }
    Ok(child)
}

/// The binary of a cairn target.
fn cairn_bin<'a>(args: &'a SuiteArgs, alt: &'a Option<(String, PathBuf)>) -> &'a std::path::Path {
    alt.as_ref()
        .map_or(args.cairn_bin.as_path(), |(_, p)| p.as_path())
}

/// The field `name` of a `stats <group>` reply as a number, or why there is none.
fn numeric_stat(stats: &[(String, String)], group: &str, name: &str) -> Result<u64, String> {
    stats
        .iter()
        .find(|(n, _)| n == name)
        .and_then(|(_, v)| v.parse().ok())
        .ok_or_else(|| format!("stats {group}: no numeric {name}"))
}

/// `stats GROUP` over the memcached text protocol, as (name, value) pairs.
pub(crate) fn memcache_stats(
    host: &str,
    port: u16,
    group: &str,
) -> Result<Vec<(String, String)>, String> {
    let mut s = TcpStream::connect((host, port)).map_err(|e| format!("{host}:{port}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let line = if group.is_empty() {
        "stats\r\n".to_string()
    } else {
        format!("stats {group}\r\n")
    };
    s.write_all(line.as_bytes()).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for line in BufReader::new(s).lines() {
        let line = line.map_err(|e| format!("stats {group}: {e}"))?;
        if line == "END" {
            return Ok(out);
        }
        let (name, value) = line
            .strip_prefix("STAT ")
            .and_then(|l| l.split_once(' '))
            .ok_or_else(|| format!("stats {group}: unexpected line {line:?}"))?;
        out.push((name.to_string(), value.to_string()));
    }
    Err(format!("stats {group}: connection closed before END"))
}

/// Kills a cairn target with SIGKILL (no shutdown checkpoint), starts it again on the same data
/// directory and port, and reads what its recovery did from `stats persistence`. The restarted
/// server replaces the killed one in `server`, so dropping `server` stops it.
fn kill_and_recover(
    server: &mut Running,
    t: &Target,
    args: &SuiteArgs,
    repeat: usize,
) -> Result<Recovery, String> {
    let Target::Cairn { mode, alt } = t else {
        return Err(format!("{}: only cairn is restarted", t.name()));
    };
    let mut child = server.child.take().ok_or("no server process to kill")?;
    child.kill().map_err(|e| format!("kill -9: {e}"))?;
    child.wait().map_err(|e| e.to_string())?;
    let dir = server.dir.as_ref().ok_or("no data directory")?.path();
    let spawned = Instant::now();
    server.child = Some(spawn_cairn(
        args,
        cairn_bin(args, alt),
        mode,
        server.port,
        dir,
    )?);
    let restart_to_ready_ms = spawned.elapsed().as_secs_f64() * 1000.0;
    wait_ready(server.port, t.protocol())?;
    let stats = memcache_stats(&server.host, server.port, "persistence")?;
    let field = |name: &str| numeric_stat(&stats, "persistence", name);
    let recovery_ms = field("recovery_ms")?;
    let recovered_items = field("recovered_items")?;
    Ok(Recovery {
        target: t.name(),
        repeat,
        recovery_ms,
        restart_to_ready_ms,
        recovered_items,
        recovered_log_records: field("recovered_log_records")?,
        items_per_sec: (recovery_ms > 0)
            .then(|| recovered_items as f64 * 1000.0 / recovery_ms as f64),
    })
}

fn wait_ready_external(host: &str, port: u16, _p: Protocol) -> Result<(), String> {
    TcpStream::connect((host, port))
        .map(|_| ())
        .map_err(|e| format!("{host}:{port}: {e}"))
}

/// One measured phase of one target.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Row {
    pub target: String,
    pub scenario: String,
    pub repeat: usize,
    pub ops_per_sec: f64,
    pub avg_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    /// Error replies, not counted in `ops_per_sec` nor in the latencies.
    pub errors: u64,
    /// `errors` over all replies.
    pub error_rate: f64,
    pub server_cpu_secs: f64,
    /// Server CPU (user + system, from procfs) per successful op, in microseconds.
    pub server_cpu_us_per_op: f64,
    pub load_generator_cpu_secs: f64,
    pub secs: f64,
    pub rss_after_insert_mib: f64,
    pub bytes_per_item: f64,
    /// ops in each second of the phase
    pub timeline_ops: Vec<u64>,
    /// (start, end) seconds into the phase of a checkpoint taken during it
    pub checkpoint_window: Option<(f64, f64)>,
    /// throughput while that checkpoint ran against the rest of the phase (None: no
    /// checkpoint, or the phase too short to tell)
    pub checkpoint_dip: Option<CheckpointDip>,
    /// cairn async/sync: the log's durable writes (None for other targets)
    pub log_sync: Option<LogSync>,
}

/// The log's durable writes as the server itself timed them (`stats persistence`): with
/// O_DIRECT each is one `pwritev2(RWF_DSYNC)` (`log_dsync_write_*`), without it an fdatasync
/// (`fdatasync_*`); whichever the server did more of in the phase.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LogSync {
    /// The median durable write in microseconds, over every one since the server started:
    /// for the first phase (insert), that phase's alone.
    pub p50_us: f64,
    /// Durable writes during the phase.
    pub count: u64,
    /// Log records appended during the phase (`log_appended_lsn`): records per durable
    /// write is the group commit's batch.
    pub records: u64,
}

/// (dsync writes, their p50 us, fdatasyncs, their p50 us, appended LSN) of a cairn server.
fn log_counters(host: &str, port: u16) -> Result<[u64; 5], String> {
    let stats = memcache_stats(host, port, "persistence")?;
    let field = |name: &str| numeric_stat(&stats, "persistence", name);
    Ok([
        field("log_dsync_write_count")?,
        field("log_dsync_write_latency_us_p50")?,
        field("fdatasync_count")?,
        field("fdatasync_latency_us_p50")?,
        field("log_appended_lsn")?,
    ])
}

/// What the log did between two reads of [`log_counters`].
fn log_sync_between(before: [u64; 5], after: [u64; 5]) -> LogSync {
    let dsync = after[0] - before[0];
    let fdatasync = after[2] - before[2];
    let (count, p50_us) = if dsync >= fdatasync {
        (dsync, after[1])
    } else {
        (fdatasync, after[3])
    };
    LogSync {
        p50_us: p50_us as f64,
        count,
        records: after[4] - before[4],
    }
}

/// What one restart after `kill -9` recovered.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Recovery {
    pub target: String,
    pub repeat: usize,
    /// The server's own figure (`stats persistence` recovery_ms): snapshot load and log
    /// replay, in whole milliseconds.
    pub recovery_ms: u64,
    /// From spawning the new process to its `cairn listening` line: what a client waits.
    pub restart_to_ready_ms: f64,
    /// Live items after recovery (`recovered_items`).
    pub recovered_items: u64,
    /// Log records replayed after the snapshot (`recovered_log_records`).
    pub recovered_log_records: u64,
    /// recovered_items / recovery_ms; None when recovery took under a millisecond.
    pub items_per_sec: Option<f64>,
}

fn phases(args: &SuiteArgs) -> Vec<(&'static str, Pattern, (u32, u32), bool)> {
    let _ = args;
    vec![
        ("insert", Pattern::Parallel, (1, 0), false),
        ("retrieval", Pattern::Random, (0, 1), false),
        ("mixed 1:9", Pattern::Random, (1, 9), true),
        ("mixed 3:7", Pattern::Random, (3, 7), false),
        ("mixed 5:5", Pattern::Random, (5, 5), false),
    ]
}

/// Sends `checkpoint` after `after`, returns when it is done with its (start, end) seconds.
fn checkpoint_later(
    host: String,
    port: u16,
    after: Duration,
    t0: Instant,
) -> std::thread::JoinHandle<Option<(f64, f64)>> {
    std::thread::spawn(move || {
        std::thread::sleep(after);
        let mut s = TcpStream::connect((host.as_str(), port)).ok()?;
        let start = t0.elapsed().as_secs_f64();
        s.write_all(b"checkpoint\r\n").ok()?;
        let mut buf = [0u8; 256];
        let n = s.read(&mut buf).ok()?;
        buf[..n]
            .starts_with(b"OK")
            .then(|| (start, t0.elapsed().as_secs_f64()))
    })
}

fn measure(
    t: &Target,
    args: &SuiteArgs,
    repeat: usize,
) -> Result<(Vec<Row>, Option<Recovery>), String> {
    let mut server = start(t, args)?;
    let pid = server.pid();
    let rss_before = pid.as_deref().map_or(0, rss_bytes);
    let mut rows = Vec::new();
    let mut rss_after_insert = 0;
    for (scenario, pattern, ratio, checkpoint) in phases(args) {
        let insert = scenario == "insert";
        let clients = args.threads * args.clients;
        let cfg = LoadConfig {
            server: server.host.clone(),
            port: server.port,
            protocol: t.protocol(),
            threads: args.threads,
            clients: args.clients,
            data_size_min: args.data_size,
            data_size_max: args.data_size,
            key_prefix: "memtier-".into(),
            set_pattern: pattern,
            get_pattern: pattern,
            key_min: 1,
            key_max: args.keys,
            ratio,
            requests: insert.then(|| args.keys.div_ceil(clients)),
            test_time: (!insert).then(|| Duration::from_secs(args.phase_secs)),
            pipeline: args.pipeline,
            seed: 1 + repeat as u64,
            distinct_client_seed: true,
            rate: None,
            verify: false,
            quiet: args.quiet,
        };
        let logged = matches!(t, Target::Cairn { mode, .. } if mode != "off");
        let log_before = logged
            .then(|| log_counters(&server.host, server.port))
            .transpose()?;
        let cpu_before = pid
            .as_deref()
            .and_then(crate::procstat::proc_cpu_secs)
            .unwrap_or(0.0);
        let t0 = Instant::now();
        let ckpt = (checkpoint
            && args.checkpoint_mid_phase
            && matches!(t, Target::Cairn { mode, .. } if mode != "off"))
        .then(|| {
            checkpoint_later(
                server.host.clone(),
                server.port,
                Duration::from_secs(args.phase_secs / 3),
                t0,
            )
        });
        let r = load::run(&cfg)?;
        let checkpoint_window = ckpt.and_then(|h| h.join().ok().flatten());
        let cpu = pid
            .as_deref()
            .and_then(crate::procstat::proc_cpu_secs)
            .unwrap_or(0.0)
            - cpu_before;
        if insert {
            rss_after_insert = pid.as_deref().map_or(0, rss_bytes);
        }
        let log_sync = match log_before {
            Some(b) => Some(log_sync_between(
                b,
                log_counters(&server.host, server.port)?,
            )),
            None => None,
        };
        let h = &r.all_latency;
        let ms = |p: f64| h.value_at_percentile(p) as f64 / 1000.0;
        let timeline_ops: Vec<u64> = r.timeline.iter().map(|s| s.ops).collect();
        let row = Row {
            target: t.name(),
            scenario: scenario.into(),
            repeat,
            ops_per_sec: r.ops_per_sec(),
            avg_ms: h.mean() / 1000.0,
            p50_ms: ms(50.0),
            p90_ms: ms(90.0),
            p95_ms: ms(95.0),
            p99_ms: ms(99.0),
            p999_ms: ms(99.9),
            errors: r.errors(),
            error_rate: r.error_rate(),
            server_cpu_secs: cpu,
            server_cpu_us_per_op: cpu * 1e6 / r.ops().max(1) as f64,
            load_generator_cpu_secs: r.cpu_secs,
            secs: r.secs,
            rss_after_insert_mib: rss_after_insert as f64 / (1 << 20) as f64,
            bytes_per_item: rss_after_insert.saturating_sub(rss_before) as f64 / args.keys as f64,
            checkpoint_dip: checkpoint_window
                .and_then(|w| report::checkpoint_dip(&timeline_ops, r.secs, w)),
            timeline_ops,
            checkpoint_window,
            log_sync,
        };
        if !args.quiet {
            eprintln!(
                "{:<16} {:<10} {:>10.0} ops/s  p50 {:.3} ms  p99 {:.3} ms",
                row.target, row.scenario, row.ops_per_sec, row.p50_ms, row.p99_ms
            );
        }
        rows.push(row);
    }
    let recovery = (args.recovery && matches!(t, Target::Cairn { mode, .. } if mode != "off"))
        .then(|| kill_and_recover(&mut server, t, args, repeat))
        .transpose()
        .map_err(|e| format!("{}: restart after kill -9: {e}", t.name()))?;
    if let (Some(r), false) = (&recovery, args.quiet) {
        eprintln!(
            "{:<16} recovery   {} items in {} ms ({:.0} ms to ready)",
            r.target, r.recovered_items, r.recovery_ms, r.restart_to_ready_ms
        );
    }
    Ok((rows, recovery))
}

fn targets(args: &SuiteArgs) -> Result<Vec<Target>, String> {
    let mut v = Vec::new();
    let list = |s: &str| {
        s.split(',')
            .map(str::trim)
            .filter(|x| !x.is_empty())
            .map(String::from)
            .collect::<Vec<_>>()
    };
    if !list(&args.cairn_modes).is_empty() && !args.cairn_bin.exists() {
        return Err(format!("{} not found: build it with `cargo build --release -p cairn-server` or pass --cairn-bin", args.cairn_bin.display()));
    }
    for m in list(&args.cairn_modes) {
        if !["off", "async", "sync"].contains(&m.as_str()) {
            return Err(format!("cairn mode {m:?}: use off, async or sync"));
        }
        v.push(Target::Cairn {
            mode: m.clone(),
            alt: None,
        });
        for (label, path) in &args.cairn_alt {
            if !path.exists() {
                return Err(format!("--cairn-alt {label}: {} not found", path.display()));
            }
            v.push(Target::Cairn {
                mode: m.clone(),
                alt: Some((label.clone(), path.clone())),
            });
        }
    }
    if !args.no_memcached {
        if installed("memcached") {
            v.push(Target::Memcached);
        } else {
            eprintln!("note: memcached is not installed; skipped");
        }
    }
    let redis = list(&args.redis_modes);
    if !redis.is_empty() {
        if installed("redis-server") {
            for m in redis {
                if !["none", "everysec", "always"].contains(&m.as_str()) {
                    return Err(format!("redis mode {m:?}: use none, everysec or always"));
                }
                v.push(Target::Redis(m));
            }
        } else {
            eprintln!("note: redis-server is not installed; skipped");
        }
    }
    for t in &args.target {
        let parts: Vec<&str> = t.rsplitn(3, ':').collect();
        let [proto, port, host] = parts.as_slice() else {
            return Err(format!("--target {t:?}: expected HOST:PORT:PROTOCOL"));
        };
        v.push(Target::External {
            host: host.to_string(),
            port: port
                .parse()
                .map_err(|_| format!("--target {t:?}: bad port"))?,
            protocol: Protocol::parse(proto)?,
        });
    }
    Ok(v)
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return 0.0;
    }
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// Rows with the same target and scenario folded into their median (and spread).
pub fn summarize(rows: &[Row]) -> Vec<(Row, f64, f64)> {
    let mut out: Vec<(Row, f64, f64)> = Vec::new();
    let mut keys: Vec<(String, String)> = Vec::new();
    for r in rows {
        let k = (r.target.clone(), r.scenario.clone());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    for (target, scenario) in keys {
        let group: Vec<&Row> = rows
            .iter()
            .filter(|r| r.target == target && r.scenario == scenario)
            .collect();
        let pick = |f: fn(&Row) -> f64| median(group.iter().map(|r| f(r)).collect());
        let ops: Vec<f64> = group.iter().map(|r| r.ops_per_sec).collect();
        let min = ops.iter().cloned().fold(f64::INFINITY, f64::min);
        let max = ops.iter().cloned().fold(0.0, f64::max);
        let mut row = group[0].clone();
        row.ops_per_sec = pick(|r| r.ops_per_sec);
        // Errors add up over repeats; the rate is the worst repeat's.
        row.errors = group.iter().map(|r| r.errors).sum();
        row.error_rate = group.iter().map(|r| r.error_rate).fold(0.0, f64::max);
        row.avg_ms = pick(|r| r.avg_ms);
        row.p50_ms = pick(|r| r.p50_ms);
        row.p90_ms = pick(|r| r.p90_ms);
        row.p95_ms = pick(|r| r.p95_ms);
        row.p99_ms = pick(|r| r.p99_ms);
        row.p999_ms = pick(|r| r.p999_ms);
        row.server_cpu_secs = pick(|r| r.server_cpu_secs);
        row.server_cpu_us_per_op = pick(|r| r.server_cpu_us_per_op);
        row.load_generator_cpu_secs = pick(|r| r.load_generator_cpu_secs);
        row.rss_after_insert_mib = pick(|r| r.rss_after_insert_mib);
        row.bytes_per_item = pick(|r| r.bytes_per_item);
        if row.log_sync.is_some() {
            let syncs: Vec<&LogSync> = group.iter().filter_map(|r| r.log_sync.as_ref()).collect();
            let of = |f: fn(&LogSync) -> f64| median(syncs.iter().map(|l| f(l)).collect());
            row.log_sync = Some(LogSync {
                p50_us: of(|l| l.p50_us),
                count: of(|l| l.count as f64) as u64,
                records: of(|l| l.records as f64) as u64,
            });
        }
        out.push((row, min, max));
    }
    out
}

/// The markdown table.
pub fn table(summary: &[(Row, f64, f64)], repeats: usize) -> String {
    let mut s = String::new();
    s.push_str("| scenario | target | ops/s | spread (min-max) | avg ms | p50 ms | p90 ms | p95 ms | p99 ms | p99.9 ms | server CPU s | server CPU us/op | load gen CPU s | RSS after insert MiB | bytes/item | errors | log sync p50 us | records per log sync |\n");
    s.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    let mut scenarios: Vec<&str> = Vec::new();
    for (r, _, _) in summary {
        if !scenarios.contains(&r.scenario.as_str()) {
            scenarios.push(&r.scenario);
        }
    }
    for sc in scenarios {
        for (r, min, max) in summary.iter().filter(|(r, _, _)| r.scenario == sc) {
            let spread = if repeats > 1 {
                format!("{min:.0}-{max:.0}")
            } else {
                "-".into()
            };
            let (sync_p50, per_sync) = match &r.log_sync {
                Some(l) if l.count > 0 => (
                    format!("{:.0}", l.p50_us),
                    format!("{:.1}", l.records as f64 / l.count as f64),
                ),
                _ => ("-".into(), "-".into()),
            };
            s.push_str(&format!(
                "| {} | {} | {:.0} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.1} | {:.2} | {:.1} | {:.0} | {:.0} | {} | {} | {} |\n",
                r.scenario, r.target, r.ops_per_sec, spread, r.avg_ms, r.p50_ms, r.p90_ms, r.p95_ms, r.p99_ms, r.p999_ms,
                r.server_cpu_secs, r.server_cpu_us_per_op, r.load_generator_cpu_secs, r.rss_after_insert_mib, r.bytes_per_item, r.errors,
                sync_p50, per_sync
            ));
        }
    }
    s
}

pub fn run(args: &SuiteArgs) -> Result<(), String> {
    if args.scenario == "flash" {
        return crate::flash::run(args);
    }
    if args.scenario != "arcus" {
        return Err(format!(
            "unknown scenario set {:?} (try arcus or flash)",
            args.scenario
        ));
    }
    let targets = targets(args)?;
    if targets.is_empty() {
        return Err("no target to measure".into());
    }
    std::fs::create_dir_all(&args.out_dir)
        .map_err(|e| format!("{}: {e}", args.out_dir.display()))?;
    let mut rows = Vec::new();
    let mut recoveries = Vec::new();
    for rep in 0..args.repeat.max(1) {
        for t in &targets {
            let (r, recovery) = measure(t, args, rep)?;
            rows.extend(r);
            recoveries.extend(recovery);
        }
    }
    let summary = summarize(&rows);
    let ratios = report::ratios(&summary);
    let mut md = table(&summary, args.repeat.max(1));
    for extra in [
        report::ratio_table(&ratios),
        report::against_memcached_table(&summary),
        report::durability_goals(&summary),
        report::dip_table(&rows),
        report::recovery_table(&recoveries),
    ] {
        if !extra.is_empty() {
            md.push('\n');
            md.push_str(&extra);
        }
    }
    println!("{md}");
    std::fs::write(args.out_dir.join("results.md"), &md).map_err(|e| e.to_string())?;
    let json = serde_json::json!({
        "keys": args.keys, "phase_secs": args.phase_secs, "threads": args.threads,
        "clients": args.clients, "data_size": args.data_size, "repeat": args.repeat,
        "pipeline": args.pipeline,
        "rows": rows, "ratios": ratios, "recovery": recoveries,
    });
    std::fs::write(
        args.out_dir.join("results.json"),
        serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())?;
    crate::chart::all(&summary, &rows, &args.out_dir)?;
    eprintln!(
        "wrote {}/results.md, results.json, throughput.svg, latency.svg, timeline.svg",
        args.out_dir.display()
    );
    // The report is written either way, so that the errors can be seen; the run fails.
    let failed: Vec<String> = rows
        .iter()
        .filter(|r| r.error_rate > crate::load::MAX_ERROR_RATE)
        .map(|r| {
            format!(
                "{} / {} (repeat {}): {:.3}% errors",
                r.target,
                r.scenario,
                r.repeat,
                r.error_rate * 100.0
            )
        })
        .collect();
    if !failed.is_empty() {
        return Err(format!(
            "error rate above {:.1}%: {}",
            crate::load::MAX_ERROR_RATE * 100.0,
            failed.join("; ")
        ));
    }
    Ok(())
}
