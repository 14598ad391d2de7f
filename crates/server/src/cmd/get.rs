//! get, gets, gat, gats: `VALUE` lines for the hits, then `END`. [`lookup`] and
//! [`lookup_async`] are the lookup itself, counted, with the reply's encoding as a closure
//! (the binary protocol's too).

use cairn_engine::Ack;
use cairn_flash::Promotion;
use cairn_proto::{encode, GetKind};
use cairn_store::{ItemMeta, ReadOutcome};

use super::exptime::absolute_exptime;
use crate::stats::bump;
use crate::Ctx;

/// Looks up one key of a retrieval line and appends its `VALUE` block if it is a hit. Returns
/// what the reply waits for (gat and gats change the item's expiry: a write).
pub fn one(
    ctx: &Ctx,
    kind: GetKind,
    exptime: Option<i64>,
    now: u32,
    key: &[u8],
    out: &mut Vec<u8>,
) -> Ack {
    lookup(ctx, exptime, now, key, value_block(out, key, kind)).1
}

/// A hit's `VALUE` block (with its CAS for gets and gats).
fn value_block<'a>(
    out: &'a mut Vec<u8>,
    key: &'a [u8],
    kind: GetKind,
) -> impl FnOnce(&ItemMeta, &[u8]) + 'a {
    move |meta, value| {
        encode::value(
            out,
            key,
            meta.flags,
            value,
            kind.with_cas().then_some(meta.cas),
        )
    }
}

/// [`one`] with the flash tier: a plain retrieval reads flash without holding a lock (the
/// connection awaits the device read); gat first brings the item back to RAM
/// (`Engine::resolve`).
pub async fn one_async(
    ctx: &Ctx,
    kind: GetKind,
    exptime: Option<i64>,
    now: u32,
    key: &[u8],
    out: &mut Vec<u8>,
) -> Ack {
    lookup_async(ctx, exptime, now, key, value_block(out, key, kind))
        .await
        .1
}

/// Looks up one key (counted in `cmd_get`, `get_hits`, ...; with `exptime`, a gat, also in
/// `cmd_touch`, `touch_hits`, ...) in RAM: `hit` sees a live item's metadata and value, to
/// encode the reply in its protocol. Returns the outcome and what the reply waits for (gat
/// changes the item's expiry: a write).
pub fn lookup(
    ctx: &Ctx,
    exptime: Option<i64>,
    now: u32,
    key: &[u8],
    hit: impl FnOnce(&ItemMeta, &[u8]),
) -> (ReadOutcome<()>, Ack) {
    let c = &ctx.counters;
    bump(&c.cmd_get);
    let (outcome, ack) = match exptime {
        None => {
            // The reply is encoded under the shard lock, straight from the item's memory.
            let outcome = ctx.store().get_with(key, now, hit);
            count(ctx, &outcome);
            return (outcome, Ack::NONE);
        }
        Some(exptime) => {
            bump(&c.cmd_touch);
            let new_exp = absolute_exptime(exptime, now);
            ctx.engine.apply(|tx| {
                tx.entry(key, now, |e| {
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
            })
        }
    };
    (answer(ctx, outcome, hit), ack)
}

/// [`lookup`] with the flash tier: a plain retrieval reads flash without holding a lock (the
/// connection awaits the device read); gat first brings the item back to RAM
/// (`Engine::resolve`).
pub async fn lookup_async(
    ctx: &Ctx,
    exptime: Option<i64>,
    now: u32,
    key: &[u8],
    hit: impl FnOnce(&ItemMeta, &[u8]),
) -> (ReadOutcome<()>, Ack) {
    let Some(flash) = ctx.engine.flash() else {
        return lookup(ctx, exptime, now, key, hit);
    };
    if exptime.is_some() {
        if ctx.engine.resolve(key).await.is_err() {
            // The item's read could not be done: a miss this once, its expiry unchanged (an
            // error line would end a multi-key reply for the client).
            let c = &ctx.counters;
            bump(&c.cmd_get);
            bump(&c.cmd_touch);
            bump(&c.touch_misses);
            return (answer(ctx, ReadOutcome::Miss, hit), Ack::NONE);
        }
        return lookup(ctx, exptime, now, key, hit);
    }
    bump(&ctx.counters.cmd_get);
    let outcome = flash.get(ctx.store(), key, now, Promotion::IfHot).await;
    (answer(ctx, outcome, hit), Ack::NONE)
}

/// Counts a lookup's outcome and hands a hit to `hit`.
fn answer(ctx: &Ctx, outcome: ReadOutcome, hit: impl FnOnce(&ItemMeta, &[u8])) -> ReadOutcome<()> {
    let outcome = match outcome {
        ReadOutcome::Hit(item) => {
            hit(&item.meta, &item.value);
            ReadOutcome::Hit(())
        }
        ReadOutcome::Miss => ReadOutcome::Miss,
        ReadOutcome::Expired => ReadOutcome::Expired,
    };
    count(ctx, &outcome);
    outcome
}

/// Counts a lookup's outcome (its reply is already encoded).
fn count(ctx: &Ctx, outcome: &ReadOutcome<()>) {
    let c = &ctx.counters;
    match outcome {
        ReadOutcome::Hit(()) => bump(&c.get_hits),
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
