//! The server's side of the flash tier: opening it at start, and bringing a key's item back
//! from flash before a command that reads and changes it runs under the shard lock.
//!
//! ```text
//!   get/gets ──> cmd::get::one_async ──> Flash::get (device read awaited, no lock held)
//!   any other keyed command ──> resolve(key): Flash::bring_to_ram (the item
//!        is in RAM now, CAS and metadata kept) ──> cmd::execute: the RAM path, unchanged
//! ```
//!
//! Should the item go back to flash between the two steps (only under extreme RAM churn), the
//! command sees no item, as if it had been evicted, and a store or delete still removes the
//! flash copy: a stale value is never served.

use std::sync::Arc;

use cairn_flash::{Flash, FlashConfig};
use cairn_proto::{MetaCmd, Request};

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::stats::{Kind, Readings, Value};
use crate::Ctx;

/// Opens the tier, logging which read engine it uses; the error names the path and reason.
/// `keep`: persistence is on, so what the last checkpoint named may be trusted again.
pub fn open(config: FlashConfig, keep: bool) -> Result<Arc<Flash>, String> {
    #[cfg(feature = "test-hooks")]
    let config = crate::test_hooks::flash_config(config);
    let path = config.path.display().to_string();
    let flash =
        Flash::open_keeping(config.clone(), keep).map_err(|e| format!("refusing to start: {e}"))?;
    if let Some(why) = &flash.uring_unavailable {
        tracing::warn!("flash reads use a pread thread pool: {why}");
    }
    tracing::info!(
        path,
        size = config.size_bytes,
        segment_bytes = config.segment_bytes,
        segments = flash.segment_count(),
        direct_io = config.direct_io,
        io = flash.io_engine(),
        "flash tier on"
    );
    Ok(flash)
}

/// The key a command reads or changes, if it may be on flash (plain retrievals read flash
/// themselves, see `cmd::get`).
fn key_of<'r>(request: &'r Request<'_>) -> Option<&'r [u8]> {
    match request {
        Request::Store { key, .. }
        | Request::Delete { key, .. }
        | Request::Arith { key, .. }
        | Request::Touch { key, .. } => Some(key),
        Request::Meta(m) if m.cmd != MetaCmd::Noop => Some(&m.key),
        _ => None,
    }
}

/// Brings `request`'s key back to RAM if its item is on flash, so the command runs on it
/// with RAM semantics. An error: the item's read could not be done (the reader stopping, a
/// busy ring), so the command must not run; nothing changed.
pub async fn resolve(ctx: &Ctx, request: &Request<'_>) -> std::io::Result<()> {
    let (Some(flash), Some(key)) = (&ctx.flash, key_of(request)) else {
        return Ok(());
    };
    resolve_key(ctx, flash, key).await
}

/// [`resolve`] for one key ([`Flash::bring_to_ram`]).
pub async fn resolve_key(ctx: &Ctx, flash: &Flash, key: &[u8]) -> std::io::Result<()> {
    flash.bring_to_ram(&ctx.store, key, ctx.now()).await
}

/// The tier's figures, added to the general `stats` block (as memcached adds extstore's),
/// `stats extstore` and the Prometheus endpoint; nothing when the tier is off. Names follow
/// memcached's extstore where it has one.
pub fn readings(ctx: &Ctx, r: &mut Readings) {
    let Some(flash) = &ctx.flash else {
        return;
    };
    let c = &flash.counters;
    let s = ctx.store.stats();
    r.text(
        "flash_io_engine",
        "How flash is read: io_uring, or a pread thread pool.",
        flash.io_engine(),
    );
    for (name, help, read) in cairn_flash::COUNTERS {
        r.counter(name, help, read(c));
    }
    let (free, live, used) = flash.usage();
    let seg = flash.segment_bytes();
    r.gauge(
        "extstore_objects_used",
        "Items on flash that are still indexed.",
        live,
    );
    r.gauge(
        "extstore_pages_free",
        "Flash segments free for writing.",
        free,
    );
    r.gauge(
        "extstore_pages_used",
        "Flash segments holding data (written or buffered).",
        used,
    );
    r.gauge(
        "extstore_bytes_used",
        "Bytes of the flash segments holding data.",
        used * seg,
    );
    r.gauge(
        "extstore_limit_maxbytes",
        "Bytes of flash segments the tier has.",
        flash.segment_count() * seg,
    );
    r.gauge(
        "flash_items",
        "Live items whose copy is on flash.",
        s.flash_items,
    );
    r.counter(
        "flash_evicted_to_flash",
        "Items moved from RAM to flash.",
        s.evicted_to_flash,
    );
    r.counter(
        "flash_tag_drops",
        "Flash entries of other keys removed by a store or delete of a key with their hash tag because their item was damaged or unreadable.",
        s.flash_tag_drops,
    );
    r.counter(
        "flash_promotions",
        "Items brought back from flash to RAM.",
        s.flash_promotions,
    );
    r.gauge(
        "flash_index_bytes",
        "RAM held by the flash index (its entries and free slots).",
        s.flash_index_bytes,
    );
    let read = |a: &AtomicU64| a.load(Relaxed) as f64;
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    let mut float = |name, help, v| r.renamed(name, name, Kind::Gauge, help, Value::Float(v));
    float(
        "flash_reads_per_hit",
        "Flash reads (device or buffer) per flash hit.",
        ratio(
            read(&c.flash_device_reads) + read(&c.flash_buffered_reads),
            read(&c.get_extstore),
        ),
    );
    float(
        "flash_false_positive_reads_per_miss",
        "Flash reads that did not hold the key, per get miss.",
        ratio(
            read(&c.miss_from_extstore),
            ctx.counters.sum(|c| &c.get_misses) as f64,
        ),
    );
    float(
        "flash_write_amplification",
        "Bytes written to the flash device per key and value byte written to flash.",
        ratio(
            read(&c.extstore_bytes_written),
            read(&c.flash_item_bytes_admitted),
        ),
    );
}
