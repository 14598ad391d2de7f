//! flush_all [delay]: invalidate every item now or at a later time.
//!
//! The store keeps the one pending schedule (memcached keeps one "oldest live" time, so the
//! newest flush_all wins) and logs it, so a delayed flush survives a restart; this file runs
//! the timer that carries it out.

use std::sync::Arc;
use std::time::Duration;

use cairn_engine::Tx;

use super::exptime::absolute_exptime;
use crate::stats::bump;
use crate::Ctx;

/// `-F` refused a flush_all.
pub struct FlushDisabled;

/// The text protocol's reply to [`flush_all`]'s outcome.
pub fn reply(r: Result<(), FlushDisabled>) -> &'static [u8] {
    match r {
        Ok(()) => b"OK\r\n",
        Err(FlushDisabled) => b"CLIENT_ERROR flush_all not allowed\r\n",
    }
}

/// Flushes now (`delay` 0 or a time already past) or schedules a flush at `now + delay` (or
/// the absolute time). With `-F` it is refused (and still counted, as memcached counts it).
pub fn flush_all(ctx: &Arc<Ctx>, tx: &Tx<'_>, delay: i64, now: u32) -> Result<(), FlushDisabled> {
    bump(&ctx.counters.cmd_flush);
    if ctx.config.disable_flush_all {
        return Err(FlushDisabled);
    }
    let at = absolute_exptime(delay, now);
    if at == 0 || at <= now {
        tx.flush_all();
    } else {
        tx.schedule_flush(at);
        arm_timer(ctx, at, now);
    }
    Ok(())
}

/// Runs the flush scheduled for `at` when that time comes, unless a later flush_all replaced
/// it by then. Also called at start for a schedule recovered from the log.
pub fn arm_timer(ctx: &Arc<Ctx>, at: u32, now: u32) {
    let ctx = Arc::clone(ctx);
    let wait = Duration::from_secs(u64::from(at.saturating_sub(now)));
    tokio::spawn(async move {
        tokio::time::sleep(wait).await;
        ctx.store().run_scheduled_flush(at);
    });
}
