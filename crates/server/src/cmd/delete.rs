//! delete: [`outcome`] removes a key and says what it did; [`delete`] words it as the text
//! protocol's reply line.

use cairn_engine::Tx;

use crate::stats::bump;
use crate::Ctx;

/// What a delete did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deleted {
    Deleted,
    NotFound,
    /// A unique was given (the binary protocol's CAS) and the item's differs: kept.
    Exists,
}

/// Removes a key; returns `DELETED` or `NOT_FOUND`.
pub fn delete(ctx: &Ctx, tx: &Tx<'_>, key: &[u8], now: u32) -> &'static [u8] {
    match outcome(ctx, tx, key, 0, now) {
        Deleted::Deleted => b"DELETED\r\n",
        Deleted::NotFound | Deleted::Exists => b"NOT_FOUND\r\n",
    }
}

/// Removes a key (counted in `delete_hits`/`delete_misses`) if `expect_cas` is 0 or its
/// unique.
pub fn outcome(ctx: &Ctx, tx: &Tx<'_>, key: &[u8], expect_cas: u64, now: u32) -> Deleted {
    let done = tx.entry(key, now, |e| match e.peek() {
        Some((meta, _)) if expect_cas != 0 && meta.cas != expect_cas => Deleted::Exists,
        _ if e.delete() => Deleted::Deleted,
        _ => Deleted::NotFound,
    });
    match done {
        Deleted::Deleted => bump(&ctx.counters.delete_hits),
        Deleted::NotFound => bump(&ctx.counters.delete_misses),
        Deleted::Exists => {}
    }
    done
}
