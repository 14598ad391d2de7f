//! The flash tier's figures: its counters ([`cairn_flash::COUNTERS`]), its segments' usage,
//! the store's flash figures ([`cairn_store::StoreStats`]) and ratios of them. Part of the
//! general `stats` block, `stats extstore` and the Prometheus endpoint.
//!
//! ```text
//!   Flash::counters, Flash::usage, store.stats() ─> Readings (memcached extstore's names)
//! ```
//!
//! Non-goals: the tier itself (`crate::flash` opens it, cairn-flash runs it).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::reading::{Kind, Readings, Value};
use crate::Ctx;

/// The tier's figures, added to the general `stats` block (as memcached adds extstore's),
/// `stats extstore` and the Prometheus endpoint; nothing when the tier is off. Names follow
/// memcached's extstore where it has one.
pub fn flash(ctx: &Ctx, r: &mut Readings) {
    let Some(flash) = ctx.engine.flash() else {
        return;
    };
    let c = &flash.counters;
    let s = ctx.store().stats();
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
