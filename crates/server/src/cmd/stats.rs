//! stats, stats settings, stats items, stats slabs, stats reset.
//!
//! Field names are memcached's so existing dashboards read them. cairn has no slab classes;
//! `stats items` and `stats slabs` report the whole store as class 1.

use std::sync::atomic::Ordering::Relaxed;

use cairn_proto::encode::stat;

use crate::stats::COUNTERS;
use crate::Ctx;

/// Seconds of user and system CPU this process used, from /proc/self/stat.
pub fn cpu_seconds() -> (f64, f64) {
    let Ok(text) = std::fs::read_to_string("/proc/self/stat") else {
        return (0.0, 0.0);
    };
    // Fields after the ")" that ends the command name: utime is the 12th, stime the 13th.
    let Some(rest) = text.rsplit_once(')').map(|(_, r)| r) else {
        return (0.0, 0.0);
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
            / 100.0
    };
    (ticks(11), ticks(12))
}

/// Resident set size in bytes, from /proc/self/statm.
pub fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// Appends the general `stats` block (without `END`).
pub fn general(ctx: &Ctx, out: &mut Vec<u8>) {
    let s = ctx.store.stats();
    let (user, sys) = cpu_seconds();
    stat(out, "pid", std::process::id());
    stat(out, "uptime", ctx.started.elapsed().as_secs());
    stat(out, "time", ctx.now());
    stat(out, "version", crate::VERSION);
    stat(out, "pointer_size", usize::BITS);
    stat(out, "rusage_user", format!("{user:.6}"));
    stat(out, "rusage_system", format!("{sys:.6}"));
    stat(out, "max_connections", ctx.config.max_connections);
    stat(out, "curr_connections", ctx.curr_connections.load(Relaxed));
    for (name, _, read) in COUNTERS {
        stat(out, name, read(&ctx.counters));
    }
    stat(out, "limit_maxbytes", s.limit_maxbytes);
    stat(out, "threads", ctx.config.worker_threads());
    stat(out, "bytes", s.bytes);
    stat(out, "curr_items", s.curr_items);
    stat(out, "total_items", s.total_items);
    stat(out, "expired_unfetched", s.expired_unfetched);
    stat(out, "evicted_unfetched", s.evicted_unfetched);
    stat(out, "evictions", s.evictions);
    stat(out, "reclaimed", s.reclaimed);
    stat(out, "memory_used_bytes", s.memory_used_bytes);
    stat(out, "rss_bytes", rss_bytes());
}

/// Answers `stats [group]`.
pub fn stats(ctx: &Ctx, args: &[String], out: &mut Vec<u8>) {
    let c = &ctx.config;
    match args.first().map(String::as_str) {
        None => general(ctx, out),
        Some("settings") => {
            stat(out, "maxbytes", c.memory_limit_mb << 20);
            stat(out, "maxconns", c.max_connections);
            stat(out, "tcpport", c.port);
            stat(out, "interface", &c.listen);
            stat(out, "verbosity", ctx.verbosity.load(Relaxed));
            stat(
                out,
                "evictions",
                if c.disable_evictions { "off" } else { "on" },
            );
            stat(out, "num_threads", c.worker_threads());
            stat(out, "cas_enabled", "yes");
            stat(out, "item_size_max", c.item_size_max);
            stat(out, "max_keys_per_get", c.max_keys_per_get);
            stat(out, "output_buffer_max", c.output_buffer_max);
            stat(out, "persistence", ctx.mode().name());
        }
        Some("persistence") => match &ctx.persist {
            Some(p) => {
                for (name, value) in p.stats() {
                    stat(out, name, value);
                }
            }
            None => {
                stat(out, "use_persistence", "off");
                stat(out, "mode", "off");
            }
        },
        Some("items") => {
            let s = ctx.store.stats();
            stat(out, "items:1:number", s.curr_items);
            stat(out, "items:1:evicted", s.evictions);
            stat(out, "items:1:evicted_unfetched", s.evicted_unfetched);
            stat(out, "items:1:expired_unfetched", s.expired_unfetched);
            stat(out, "items:1:reclaimed", s.reclaimed);
            stat(
                out,
                "items:1:outofmemory",
                ctx.counters.store_no_memory.load(Relaxed),
            );
        }
        Some("slabs") => {
            let s = ctx.store.stats();
            stat(out, "1:used_chunks", s.curr_items);
            stat(out, "1:mem_requested", s.bytes);
            stat(out, "active_slabs", 1);
            stat(out, "total_malloced", s.memory_used_bytes);
        }
        Some("reset") if args.len() == 1 => {
            ctx.counters.reset();
            out.extend_from_slice(b"RESET\r\n");
            return;
        }
        Some(_) => {
            out.extend_from_slice(b"ERROR\r\n");
            return;
        }
    }
    out.extend_from_slice(b"END\r\n");
}
