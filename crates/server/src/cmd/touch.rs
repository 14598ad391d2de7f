//! touch: [`outcome`] sets a new expiry and hands back the item's metadata; [`touch`] words
//! it as the text protocol's reply line.

use cairn_engine::Tx;
use cairn_store::ItemMeta;

use super::exptime::absolute_exptime;
use crate::stats::bump;
use crate::Ctx;

/// Sets a new expiry; returns `TOUCHED` or `NOT_FOUND`.
pub fn touch(ctx: &Ctx, tx: &Tx<'_>, key: &[u8], exptime: i64, now: u32) -> &'static [u8] {
    match outcome(ctx, tx, key, exptime, now) {
        Some(_) => b"TOUCHED\r\n",
        None => b"NOT_FOUND\r\n",
    }
}

/// Sets a new expiry (counted in `cmd_touch`, `touch_hits`/`touch_misses`); the touched
/// item's metadata, or None for a missing key.
pub fn outcome(ctx: &Ctx, tx: &Tx<'_>, key: &[u8], exptime: i64, now: u32) -> Option<ItemMeta> {
    bump(&ctx.counters.cmd_touch);
    let exptime = absolute_exptime(exptime, now);
    let touched = tx.entry(key, now, |e| {
        e.update_meta(|m| {
            m.exptime = exptime;
            m.last_access = now;
        })
        .then(|| e.peek().map(|(meta, _)| meta))
        .flatten()
    });
    bump(if touched.is_some() {
        &ctx.counters.touch_hits
    } else {
        &ctx.counters.touch_misses
    });
    touched
}
