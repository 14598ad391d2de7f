//! set, add, replace, append, prepend, cas.

use cairn_engine::{compare, put, Ack, Compare, Mismatch, Put, PutMode, Tx};
use cairn_proto::StoreKind;
use cairn_store::StoreError;

use super::exptime::absolute_exptime;
use crate::stats::bump;
use crate::Ctx;

pub const STORED: &[u8] = b"STORED\r\n";
pub const NOT_STORED: &[u8] = b"NOT_STORED\r\n";
pub const EXISTS: &[u8] = b"EXISTS\r\n";
pub const NOT_FOUND: &[u8] = b"NOT_FOUND\r\n";
pub const TOO_LARGE: &[u8] = b"SERVER_ERROR object too large for cache\r\n";
pub const NO_MEMORY: &[u8] = b"SERVER_ERROR out of memory storing object\r\n";

/// The reply line for a failed store, counting it.
pub fn store_error(ctx: &Ctx, e: StoreError) -> &'static [u8] {
    match e {
        StoreError::TooLarge => {
            bump(&ctx.counters.store_too_large);
            TOO_LARGE
        }
        StoreError::OutOfMemory => {
            bump(&ctx.counters.store_no_memory);
            NO_MEMORY
        }
    }
}

/// A `set` refused before its value was read (larger than `-I`): the key's old value goes, as
/// memcached unlinks it, so that a failed set never leaves stale data readable. Not done once
/// writes are refused (the log failed, or this node is a replica). Returns what the reply
/// waits for.
pub fn forget(ctx: &Ctx, key: &[u8]) -> Ack {
    if ctx.engine.refusal().is_some() {
        return Ack::NONE;
    }
    let now = ctx.now();
    let ((), ack) = ctx.engine.apply(|tx| {
        tx.entry(key, now, |e| e.delete());
    });
    ack
}

/// Applies one storage command and returns its reply line.
#[allow(clippy::too_many_arguments)]
pub fn store(
    ctx: &Ctx,
    tx: &Tx<'_>,
    kind: StoreKind,
    key: &[u8],
    flags: u32,
    exptime: i64,
    cas_unique: u64,
    value: &[u8],
    now: u32,
) -> &'static [u8] {
    let c = &ctx.counters;
    bump(&c.cmd_set);
    let exptime = absolute_exptime(exptime, now);
    let result = tx.entry(key, now, |e| {
        match kind {
            // The engine's rule, gRPC's too: add only when absent, replace only when there,
            // and a set refused as too large leaves no stale value behind.
            StoreKind::Set | StoreKind::Add | StoreKind::Replace => {
                let mode = match kind {
                    StoreKind::Set => PutMode::Set,
                    StoreKind::Add => PutMode::Add,
                    _ => PutMode::Replace,
                };
                put(e, mode, &[value], flags, exptime, None).map(|p| match p {
                    Put::Stored(_) => STORED,
                    Put::NotStored => NOT_STORED,
                })
            }
            StoreKind::Append | StoreKind::Prepend => match e.item() {
                None => Ok(NOT_STORED),
                Some(old) => {
                    let parts: [&[u8]; 2] = if kind == StoreKind::Append {
                        [&old.value, value]
                    } else {
                        [value, &old.value]
                    };
                    e.store(&parts, old.meta.flags, old.meta.exptime, None)
                        .map(|_| STORED)
                }
            },
            StoreKind::Cas => {
                match compare(Compare::Cas(cas_unique), e.peek().as_ref().map(|(m, _)| m)) {
                    Err(Mismatch::Absent) => {
                        bump(&c.cas_misses);
                        Ok(NOT_FOUND)
                    }
                    Err(Mismatch::Differs(_)) => {
                        bump(&c.cas_badval);
                        Ok(EXISTS)
                    }
                    Ok(()) => {
                        let r = e.store(&[value], flags, exptime, None);
                        if r.is_ok() {
                            bump(&c.cas_hits);
                        }
                        r.map(|_| STORED)
                    }
                }
            }
        }
    });
    result.unwrap_or_else(|e| store_error(ctx, e))
}
