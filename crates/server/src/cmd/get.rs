//! get, gets, gat, gats: `VALUE` lines for the hits, then `END`.

use cairn_proto::{encode, GetKind};
use cairn_store::ReadOutcome;

use crate::stats::bump;
use crate::Ctx;

/// Looks up one key of a retrieval line and appends its `VALUE` block if it is a hit.
pub fn one(
    ctx: &Ctx,
    kind: GetKind,
    exptime: Option<i64>,
    now: u32,
    key: &[u8],
    out: &mut Vec<u8>,
) {
    let c = &ctx.counters;
    bump(&c.cmd_get);
    let outcome = match exptime {
        None => ctx.store.get(key, now),
        Some(exptime) => {
            bump(&c.cmd_touch);
            let new_exp = crate::absolute_exptime(exptime, now);
            ctx.store.entry(key, now, |e| {
                let expired = e.was_expired();
                if e.update_meta(|m| {
                    m.exptime = new_exp;
                    m.fetched = true;
                    m.last_access = now;
                }) {
                    bump(&c.touch_hits);
                    e.item().map_or(ReadOutcome::Miss, ReadOutcome::Hit)
                } else {
                    bump(&c.touch_misses);
                    if expired {
                        ReadOutcome::Expired
                    } else {
                        ReadOutcome::Miss
                    }
                }
            })
        }
    };
    match outcome {
        ReadOutcome::Hit(item) => {
            bump(&c.get_hits);
            let cas = kind.with_cas().then_some(item.meta.cas);
            encode::value(out, key, item.meta.flags, &item.value, cas);
        }
        ReadOutcome::Miss => bump(&c.get_misses),
        ReadOutcome::Expired => {
            bump(&c.get_misses);
            bump(&c.get_expired);
        }
    }
}

/// Ends a retrieval reply.
pub fn end(out: &mut Vec<u8>) {
    out.extend_from_slice(b"END\r\n");
}
