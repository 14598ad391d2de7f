//! touch.

use cairn_engine::Tx;

use super::exptime::absolute_exptime;
use crate::stats::bump;
use crate::Ctx;

/// Sets a new expiry; returns `TOUCHED` or `NOT_FOUND`.
pub fn touch(ctx: &Ctx, tx: &Tx<'_>, key: &[u8], exptime: i64, now: u32) -> &'static [u8] {
    bump(&ctx.counters.cmd_touch);
    let exptime = absolute_exptime(exptime, now);
    let touched = tx.entry(key, now, |e| {
        e.update_meta(|m| {
            m.exptime = exptime;
            m.last_access = now;
        })
    });
    if touched {
        bump(&ctx.counters.touch_hits);
        b"TOUCHED\r\n"
    } else {
        bump(&ctx.counters.touch_misses);
        b"NOT_FOUND\r\n"
    }
}
