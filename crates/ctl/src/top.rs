//! `cairnctl top`: a live view of one server, like `redis-cli --stat`, refreshed every second
//! from its stats over the memcached port: ops/s by command, hit ratio, items and memory, the
//! log's write and fdatasync latency, checkpoints, replication role and lag, watch streams.
//!
//! ```text
//!   every interval: stats, stats persistence, stats replication, stats grpc  (one connection)
//!        ──> Sample ──(this one - the one before) / seconds──> Frame ──> screen (a terminal:
//!            cleared and redrawn; a pipe: frames one after another; -o json: one object each)
//! ```
//!
//! Rates are over the last interval; latency percentiles are the server's own (since its
//! start). `--count N` stops after N frames (the first comes one interval after the start).
//!
//! Non-goals: history (the status page on the metrics address draws charts), several servers.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::error::{CtlError, Result};
use crate::memcached::Memcached;
use crate::output::Out;

/// The `stats` groups one sample reads (`stats` itself is "").
const GROUPS: [&str; 4] = ["", "persistence", "replication", "grpc"];

/// Every figure of one reading, by group and name, and when it was taken.
struct Sample {
    at: Instant,
    stats: BTreeMap<&'static str, BTreeMap<String, String>>,
}

impl Sample {
    async fn read(mc: &mut Memcached) -> Result<Sample> {
        let mut stats = BTreeMap::new();
        for g in GROUPS {
            let lines = mc.stats((!g.is_empty()).then_some(g)).await?;
            stats.insert(g, lines.into_iter().collect());
        }
        Ok(Sample {
            at: Instant::now(),
            stats,
        })
    }

    fn text(&self, group: &str, name: &str) -> &str {
        self.stats
            .get(group)
            .and_then(|g| g.get(name))
            .map_or("", String::as_str)
    }

    fn num(&self, group: &str, name: &str) -> u64 {
        self.text(group, name).parse().unwrap_or(0)
    }

    /// The sum of the named counters of the general block.
    fn sum(&self, names: &[&str]) -> u64 {
        names.iter().map(|n| self.num("", n)).sum()
    }

    /// Every gRPC request answered, all methods.
    fn grpc_requests(&self) -> u64 {
        self.stats.get("grpc").map_or(0, |g| {
            g.iter()
                .filter(|(k, _)| k.starts_with("grpc_") && k.ends_with("_requests"))
                .filter_map(|(_, v)| v.parse::<u64>().ok())
                .sum()
        })
    }
}

/// The command families shown, and the counters each adds up.
const COMMANDS: [(&str, &[&str]); 7] = [
    ("get", &["cmd_get"]),
    ("set", &["cmd_set"]),
    ("delete", &["delete_hits", "delete_misses"]),
    (
        "incr/decr",
        &["incr_hits", "incr_misses", "decr_hits", "decr_misses"],
    ),
    ("touch", &["cmd_touch"]),
    ("meta", &["cmd_meta"]),
    ("flush", &["cmd_flush"]),
];

/// What one refresh shows.
struct Frame {
    json: serde_json::Value,
    text: String,
}

fn per_second(now: u64, before: u64, secs: f64) -> f64 {
    now.saturating_sub(before) as f64 / secs
}

fn ratio(hits: u64, misses: u64) -> Option<f64> {
    (hits + misses > 0).then(|| hits as f64 / (hits + misses) as f64)
}

fn bytes(n: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", units[u])
    }
}

fn percent(r: Option<f64>) -> String {
    r.map_or("-".into(), |r| format!("{:.1}%", r * 100.0))
}

fn frame(now: &Sample, before: &Sample, addr: &str) -> Frame {
    let secs = now.at.duration_since(before.at).as_secs_f64().max(1e-3);
    let mut ops: Vec<(&str, f64)> = COMMANDS
        .iter()
        .map(|(name, counters)| {
            (
                *name,
                per_second(now.sum(counters), before.sum(counters), secs),
            )
        })
        .collect();
    ops.push((
        "grpc",
        per_second(now.grpc_requests(), before.grpc_requests(), secs),
    ));
    let total: f64 = ops.iter().map(|(_, v)| v).sum();
    let (hits, misses) = (now.num("", "get_hits"), now.num("", "get_misses"));
    let hit_ratio = ratio(
        hits.saturating_sub(before.num("", "get_hits")),
        misses.saturating_sub(before.num("", "get_misses")),
    );
    let hit_ratio_since_start = ratio(hits, misses);
    let p = |name: &str| now.num("persistence", name);
    let r = |name: &str| now.text("replication", name).to_string();
    // A figure the role does not have: null in JSON.
    let opt = |name: &str| {
        let v = now.text("replication", name);
        (!v.is_empty()).then(|| v.to_string())
    };
    let g = |name: &str| now.num("grpc", name);
    let syncs = per_second(
        p("fdatasync_count") + p("log_dsync_write_count"),
        before.num("persistence", "fdatasync_count")
            + before.num("persistence", "log_dsync_write_count"),
        secs,
    );
    let events = per_second(
        g("grpc_watch_events_sent"),
        before.num("grpc", "grpc_watch_events_sent"),
        secs,
    );
    let role = r("role");
    let json = json!({
        "address": addr,
        "interval_seconds": secs,
        "ops_per_second": ops.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "ops_per_second_total": total,
        "hit_ratio": hit_ratio,
        "hit_ratio_since_start": hit_ratio_since_start,
        "items": now.num("", "curr_items"),
        "flash_items": now.num("", "flash_items"),
        "memory_used_bytes": now.num("", "memory_used_bytes"),
        "limit_maxbytes": now.num("", "limit_maxbytes"),
        "flash_bytes_used": now.num("", "extstore_bytes_used"),
        "persistence": now.text("persistence", "mode"),
        "log_write_latency_us": {"p50": p("log_write_latency_us_p50"), "p99": p("log_write_latency_us_p99")},
        "fdatasync_latency_us": {"p50": p("fdatasync_latency_us_p50"), "p99": p("fdatasync_latency_us_p99")},
        "log_dsync_write_latency_us": {"p50": p("log_dsync_write_latency_us_p50"), "p99": p("log_dsync_write_latency_us_p99")},
        "log_syncs_per_second": syncs,
        "checkpoint_in_progress": now.text("persistence", "last_chkpt_in_progress") == "true",
        "last_checkpoint_status": now.text("persistence", "last_checkpoint_status"),
        "log_bytes_since_checkpoint": p("log_bytes_since_checkpoint"),
        "replication": {
            "role": role,
            "mode": r("mode"),
            "replicas": now.num("replication", "replicas"),
            "lag_revisions": now.num("replication", "lag_revisions"),
            "lag_bytes": now.num("replication", "lag_bytes"),
            "term": opt("term").and_then(|t| t.parse::<u64>().ok()),
            "lease": opt("lease"),
            "connected": opt("connected"),
        },
        "watch_streams": g("grpc_watch_streams"),
        "watches": g("grpc_watches"),
        "watch_events_per_second": events,
    });

    let mut t = String::new();
    let line = |t: &mut String, label: &str, body: String| {
        t.push_str(&format!("{label:<9}{body}\n"));
    };
    line(
        &mut t,
        "cairn",
        format!(
            "{addr}  version {}  uptime {} s  persistence {}",
            now.text("", "version"),
            now.num("", "uptime"),
            now.text("persistence", "mode"),
        ),
    );
    let per_command: Vec<String> = ops.iter().map(|(k, v)| format!("{k} {v:.0}")).collect();
    line(
        &mut t,
        "OPS/S",
        format!("{total:.0} total: {}", per_command.join("  ")),
    );
    line(
        &mut t,
        "HITS",
        format!(
            "ratio {} (last {:.1} s), {} since start",
            percent(hit_ratio),
            secs,
            percent(hit_ratio_since_start)
        ),
    );
    line(
        &mut t,
        "ITEMS",
        format!(
            "RAM {}  flash {}",
            now.num("", "curr_items"),
            now.num("", "flash_items")
        ),
    );
    line(
        &mut t,
        "MEMORY",
        format!(
            "{} of {} (-m)  flash {}  rss {}",
            bytes(now.num("", "memory_used_bytes")),
            bytes(now.num("", "limit_maxbytes")),
            bytes(now.num("", "extstore_bytes_used")),
            bytes(now.num("", "rss_bytes")),
        ),
    );
    // Only the log calls this mode makes (async: write + fdatasync; sync with O_DIRECT: one
    // RWF_DSYNC write).
    let calls: Vec<String> = [
        ("write", "log_write"),
        ("fdatasync", "fdatasync"),
        ("dsync write", "log_dsync_write"),
    ]
    .iter()
    .filter(|(_, n)| p(&format!("{n}_count")) > 0)
    .map(|(label, n)| {
        format!(
            "{label} p50/p99 {}/{} us",
            p(&format!("{n}_latency_us_p50")),
            p(&format!("{n}_latency_us_p99"))
        )
    })
    .collect();
    let log = match now.text("persistence", "mode") {
        "off" | "" => "persistence off".to_string(),
        _ if calls.is_empty() => "no log writes yet".to_string(),
        _ => format!("{}  syncs/s {syncs:.0}", calls.join("  ")),
    };
    line(&mut t, "LOG", log);
    line(
        &mut t,
        "CKPT",
        format!(
            "last {}  in progress {}  log since {}",
            now.text("persistence", "last_checkpoint_status"),
            now.text("persistence", "last_chkpt_in_progress"),
            bytes(p("log_bytes_since_checkpoint")),
        ),
    );
    let mut repl = format!("role {role}  mode {}", r("mode"));
    match role.as_str() {
        "primary" => repl.push_str(&format!("  replicas {}", r("replicas"))),
        "replica" => repl.push_str(&format!(
            "  primary {}  connected {}",
            r("primary"),
            r("connected")
        )),
        _ => {}
    }
    if role != "none" {
        repl.push_str(&format!(
            "  lag {} revisions ({})",
            r("lag_revisions"),
            bytes(now.num("replication", "lag_bytes"))
        ));
    }
    if !r("term").is_empty() {
        repl.push_str(&format!("  term {}  lease {}", r("term"), r("lease")));
    }
    line(&mut t, "REPL", repl);
    line(
        &mut t,
        "WATCH",
        format!(
            "streams {}  watches {}  events/s {events:.0}",
            g("grpc_watch_streams"),
            g("grpc_watches")
        ),
    );
    Frame { json, text: t }
}

pub async fn run(memcached: &str, count: Option<u64>, interval: f64, out: &mut Out) -> Result<()> {
    if !(interval > 0.0 && interval.is_finite()) {
        return Err(CtlError::Usage(
            "--interval must be a positive number of seconds".into(),
        ));
    }
    let interval = Duration::from_secs_f64(interval);
    let mut mc = Memcached::connect(memcached).await?;
    let terminal = std::io::stdout().is_terminal() && !out.json_mode();
    let mut before = Sample::read(&mut mc).await?;
    let mut shown = 0u64;
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while count.is_none_or(|c| shown < c) {
        tick.tick().await;
        let now = Sample::read(&mut mc).await?;
        let f = frame(&now, &before, memcached);
        if out.json_mode() {
            out.json(&f.json)?;
        } else if terminal {
            // Home, clear the screen, then the frame: a view redrawn in place.
            out.line(&format!("\x1b[H\x1b[2J{}", f.text.trim_end()))?;
        } else {
            out.line(&f.text)?;
        }
        before = now;
        shown += 1;
    }
    Ok(())
}
