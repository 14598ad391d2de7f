//! The phases of one target: insert every key once, retrieval, then the mixes, each a load run
//! whose figures become a [`Row`]; a checkpoint in the middle of the 1:9 mix (cairn async/sync)
//! with the dip it caused; the log's durable writes over each phase; and, after the last one,
//! the kill -9 and restart (cairn async/sync).
//!
//! ```text
//!   start ─> insert (P:P 1:0) ─> RSS ─> retrieval (R:R 0:1) ─> 1:9 (+ checkpoint) ─> 3:7 ─> 5:5
//!     each phase: server CPU and log counters before/after, load::run ─> Row
//!   ─> kill -9, restart ─> Recovery
//! ```
//!
//! Non-goals: folding repeats or rendering (report/).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::servers::{kill_and_recover, start};
use super::target::Target;
use crate::keys::Pattern;
use crate::load::{self, LoadConfig};
use crate::procstat::{proc_cpu_secs, rss_bytes};
use crate::report;
use crate::rows::{LogSync, Recovery, Row};
use crate::servers::{memcache_stats, numeric_stat};
use crate::suite::SuiteArgs;

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

/// Starts `t`, runs every phase against it, and stops it: its rows and, for cairn async/sync,
/// what the restart after kill -9 recovered.
pub(super) fn measure(
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
        let cpu_before = pid.as_deref().and_then(proc_cpu_secs).unwrap_or(0.0);
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
        let cpu = pid.as_deref().and_then(proc_cpu_secs).unwrap_or(0.0) - cpu_before;
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
