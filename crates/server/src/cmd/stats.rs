//! stats, stats settings, stats items, stats slabs, stats persistence, stats reset.
//!
//! The general and persistence blocks come from the one list in `crate::stats`, which the
//! Prometheus endpoint reads too.
//!
//! Field names are memcached's so existing dashboards read them. cairn has no slab classes;
//! `stats items` and `stats slabs` report the whole store as class 1.

use std::sync::atomic::Ordering::Relaxed;

use cairn_proto::encode::stat;

use crate::stats::Reading;
use crate::Ctx;

/// Appends readings as `STAT name value` lines.
fn lines(out: &mut Vec<u8>, readings: &[Reading]) {
    for r in readings {
        stat(out, r.name, &r.value);
    }
}

/// Appends the general `stats` block (without `END`).
pub fn general(ctx: &Ctx, out: &mut Vec<u8>) {
    lines(out, &crate::stats::general(ctx));
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
        Some("persistence") => lines(out, &crate::stats::persistence(ctx)),
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
