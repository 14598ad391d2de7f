//! set, add, replace, append, prepend, cas: [`outcome`] applies one and says what it did
//! ([`Stored`]); [`store`] words it as the text protocol's reply line, the binary protocol
//! as a status (cmd/binary).

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
    count_error(ctx, &e);
    error_line(e)
}

/// The reply line for a failed store, already counted.
pub fn error_line(e: StoreError) -> &'static [u8] {
    match e {
        StoreError::TooLarge => TOO_LARGE,
        StoreError::OutOfMemory => NO_MEMORY,
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

/// What a storage command did, for each protocol to word its own way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stored {
    /// Stored, with the item's new CAS unique.
    Stored(u64),
    /// add of a present key, replace/append/prepend of a missing one.
    NotStored,
    /// cas (or a binary append/prepend with a CAS) whose unique differs.
    Exists,
    /// cas of a missing key.
    NotFound,
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
    match outcome(ctx, tx, kind, key, flags, exptime, cas_unique, value, now) {
        Ok(Stored::Stored(_)) => STORED,
        Ok(Stored::NotStored) => NOT_STORED,
        Ok(Stored::Exists) => EXISTS,
        Ok(Stored::NotFound) => NOT_FOUND,
        Err(e) => error_line(e),
    }
}

/// Applies one storage command (counted) and says what it did. `cas_unique` is the unique
/// `cas` compares; on append/prepend a non-zero one must match too (the binary protocol's
/// rule; the text protocol passes 0). A failed store is counted in `store_too_large` or
/// `store_no_memory`.
#[allow(clippy::too_many_arguments)]
pub fn outcome(
    ctx: &Ctx,
    tx: &Tx<'_>,
    kind: StoreKind,
    key: &[u8],
    flags: u32,
    exptime: i64,
    cas_unique: u64,
    value: &[u8],
    now: u32,
) -> Result<Stored, StoreError> {
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
                    Put::Stored(meta) => Stored::Stored(meta.cas),
                    Put::NotStored => Stored::NotStored,
                })
            }
            StoreKind::Append | StoreKind::Prepend => match e.item() {
                None => Ok(Stored::NotStored),
                Some(old) if cas_unique != 0 && old.meta.cas != cas_unique => Ok(Stored::Exists),
                Some(old) => {
                    let parts: [&[u8]; 2] = if kind == StoreKind::Append {
                        [&old.value, value]
                    } else {
                        [value, &old.value]
                    };
                    e.store(&parts, old.meta.flags, old.meta.exptime, None)
                        .map(|meta| Stored::Stored(meta.cas))
                }
            },
            StoreKind::Cas => {
                match compare(Compare::Cas(cas_unique), e.peek().as_ref().map(|(m, _)| m)) {
                    Err(Mismatch::Absent) => {
                        bump(&c.cas_misses);
                        Ok(Stored::NotFound)
                    }
                    Err(Mismatch::Differs(_)) => {
                        bump(&c.cas_badval);
                        Ok(Stored::Exists)
                    }
                    Ok(()) => {
                        let r = e.store(&[value], flags, exptime, None);
                        if r.is_ok() {
                            bump(&c.cas_hits);
                        }
                        r.map(|meta| Stored::Stored(meta.cas))
                    }
                }
            }
        }
    });
    result.inspect_err(|e| count_error(ctx, e))
}

/// Counts a failed store.
pub fn count_error(ctx: &Ctx, e: &StoreError) {
    match e {
        StoreError::TooLarge => bump(&ctx.counters.store_too_large),
        StoreError::OutOfMemory => bump(&ctx.counters.store_no_memory),
    }
}
