//! delete.

use cairn_engine::Tx;

use crate::stats::bump;
use crate::Ctx;

/// Removes a key; returns `DELETED` or `NOT_FOUND`.
pub fn delete(ctx: &Ctx, tx: &Tx<'_>, key: &[u8], now: u32) -> &'static [u8] {
    if tx.entry(key, now, |e| e.delete()) {
        bump(&ctx.counters.delete_hits);
        b"DELETED\r\n"
    } else {
        bump(&ctx.counters.delete_misses);
        b"NOT_FOUND\r\n"
    }
}
