//! flush_all [delay]: invalidate every item now or after a delay.
//!
//! A delayed flush is a timer task; a later flush_all supersedes it (memcached keeps one
//! "oldest live" time, so the newest flush_all wins).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::stats::bump;
use crate::Ctx;

/// Flushes now (`delay` 0) or schedules a flush at `now + delay` (or the absolute time).
pub fn flush_all(ctx: &Arc<Ctx>, delay: i64, now: u32) {
    bump(&ctx.counters.cmd_flush);
    let generation = ctx.flush_generation.fetch_add(1, Ordering::SeqCst) + 1;
    let at = crate::absolute_exptime(delay, now);
    if at == 0 || at <= now {
        ctx.store.flush_all();
        return;
    }
    let ctx = Arc::clone(ctx);
    let wait = Duration::from_secs(u64::from(at - now));
    tokio::spawn(async move {
        tokio::time::sleep(wait).await;
        if ctx.flush_generation.load(Ordering::SeqCst) == generation {
            ctx.store.flush_all();
        }
    });
}
