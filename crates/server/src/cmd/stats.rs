//! stats, stats settings, stats items, stats slabs, stats sizes, stats conns,
//! stats persistence, stats replication, stats reset.
//!
//! The general, persistence, extstore and grpc blocks come from the lists in `crate::stats`,
//! which the Prometheus endpoint reads too.
//!
//! Field names are memcached's so existing dashboards and Debian's memcached-tool read them.
//! cairn has no slab classes; `stats items` and `stats slabs` report the whole store as class 1,
//! whose "pages" are the 1 MiB segments and whose "chunk size" is the average item's size.

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

/// `stats settings`: memcached's fields where cairn has the setting, then cairn's own.
fn settings(ctx: &Ctx, out: &mut Vec<u8>) {
    let c = &ctx.config;
    let yes_no = |b: bool| if b { "yes" } else { "no" };
    // -m: the store's limit and the watch history's part (as `stats`' limit_maxbytes).
    let history = c.watch_history_bytes() as u64;
    stat(
        out,
        "maxbytes",
        ctx.store().stats().limit_maxbytes + history,
    );
    stat(out, "maxconns", c.max_connections);
    stat(out, "tcpport", c.port);
    stat(out, "udpport", c.udp_port);
    stat(out, "inter", &c.listen);
    stat(out, "verbosity", ctx.verbosity.load(Relaxed));
    stat(
        out,
        "evictions",
        if c.disable_evictions { "off" } else { "on" },
    );
    stat(out, "domain_socket", "NULL");
    stat(out, "shutdown_command", yes_no(c.enable_shutdown));
    stat(out, "num_threads", c.worker_threads());
    stat(out, "stat_key_prefix", ":");
    stat(out, "detail_enabled", "no");
    stat(out, "cas_enabled", "yes");
    stat(out, "binding_protocol", "ascii");
    stat(out, "auth_enabled_sasl", "no");
    stat(out, "auth_enabled_ascii", yes_no(c.auth_file.is_some()));
    stat(out, "ssl_enabled", yes_no(c.enable_ssl));
    let path = |p: &Option<std::path::PathBuf>| {
        p.as_ref()
            .map_or("(null)".to_string(), |p| p.display().to_string())
    };
    stat(out, "ssl_chain_cert", path(&c.ssl_chain_cert));
    stat(out, "ssl_key", path(&c.ssl_key));
    stat(out, "item_size_max", c.item_size_max);
    // Connections past the limit are refused at once with an error, as memcached's default.
    stat(out, "maxconns_fast", "yes");
    stat(out, "lru_crawler", "yes");
    stat(out, "flush_enabled", yes_no(!c.disable_flush_all));
    stat(out, "dump_enabled", "yes");
    stat(out, "idle_timeout", 0);
    stat(out, "max_keys_per_get", c.max_keys_per_get);
    stat(out, "output_buffer_max", c.output_buffer_max);
    stat(out, "persistence", ctx.mode().name());
    // The engine in force: the configured one, or tokio after a fallback (server.rs).
    stat(
        out,
        "io_engine",
        ctx.io_engine.get().copied().unwrap_or(&c.io_engine),
    );
    stat(out, "admin_enabled", yes_no(c.enable_admin));
}

/// `stats slabs`: the store as memcached's slab class 1 (see the module doc).
fn slabs(ctx: &Ctx, out: &mut Vec<u8>) {
    let s = ctx.store().stats();
    let ram_items = s.curr_items.saturating_sub(s.flash_items);
    let chunk_size = s.bytes.checked_div(ram_items).unwrap_or(0);
    let per_page = (SEGMENT_BYTES).checked_div(chunk_size).unwrap_or(0);
    let total_chunks = per_page * s.segments;
    stat(out, "1:chunk_size", chunk_size);
    stat(out, "1:chunks_per_page", per_page);
    stat(out, "1:total_pages", s.segments);
    stat(out, "1:total_chunks", total_chunks);
    stat(out, "1:used_chunks", ram_items);
    stat(out, "1:free_chunks", total_chunks.saturating_sub(ram_items));
    stat(out, "1:free_chunks_end", 0);
    stat(out, "1:mem_requested", s.bytes);
    stat(out, "active_slabs", u64::from(s.segments > 0));
    stat(out, "total_malloced", s.memory_used_bytes);
}

/// Bytes of one store segment (a memcached "page").
const SEGMENT_BYTES: u64 = 1 << 20;

/// `stats sizes`: how many items there are of each size, in 32-byte steps (memcached's
/// buckets), counted by walking the store one shard at a time, as memcached 1.4 did.
fn sizes(ctx: &Ctx, out: &mut Vec<u8>) {
    let mut buckets = std::collections::BTreeMap::<u64, u64>::new();
    let now = ctx.now();
    for shard in 0..ctx.store().shard_count() {
        ctx.store().visit_shard(shard, now, |key, value, meta| {
            let size = cairn_store::Store::item_bytes(key, value, meta) as u64;
            *buckets.entry(size.div_ceil(32) * 32).or_default() += 1;
        });
    }
    for (size, count) in buckets {
        stat(out, &size.to_string(), count);
    }
}

/// Answers `stats [group]`.
pub fn stats(ctx: &Ctx, args: &[String], out: &mut Vec<u8>) {
    match args.first().map(String::as_str) {
        None => general(ctx, out),
        Some("settings") => settings(ctx, out),
        Some("sizes") => sizes(ctx, out),
        Some("conns") => ctx.conns.write_stats(ctx.now(), out),
        Some("persistence") => lines(out, &crate::stats::persistence(ctx)),
        Some("replication") => {
            for (name, value) in crate::cluster::stats(ctx) {
                stat(out, name, &value);
            }
        }
        Some("extstore") => {
            let mut r = crate::stats::Readings::default();
            crate::stats::flash(ctx, &mut r);
            lines(out, &r.0);
        }
        Some("grpc") => lines(out, &crate::stats::grpc(ctx)),
        Some("items") => {
            let s = ctx.store().stats();
            let age = match s.oldest_segment_created {
                0 => 0,
                t => ctx.now().saturating_sub(t),
            };
            stat(out, "items:1:number", s.curr_items);
            stat(out, "items:1:age", age);
            stat(out, "items:1:mem_requested", s.bytes);
            stat(out, "items:1:evicted", s.evictions);
            stat(out, "items:1:evicted_time", 0);
            stat(out, "items:1:evicted_unfetched", s.evicted_unfetched);
            stat(out, "items:1:expired_unfetched", s.expired_unfetched);
            stat(out, "items:1:reclaimed", s.reclaimed);
            stat(
                out,
                "items:1:outofmemory",
                ctx.counters.sum(|c| &c.store_no_memory),
            );
        }
        Some("slabs") => slabs(ctx, out),
        // memcached ignores words after `reset`.
        Some("reset") => {
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
