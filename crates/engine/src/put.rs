//! What storing by mode and on a compare mean, the same for every front end: memcached's
//! `set`/`add`/`replace`/`cas` (text and meta `ms`) and the gRPC API's Set with its SetMode
//! and compare. The front ends keep their replies (`NOT_STORED`, `EXISTS`; ALREADY_EXISTS,
//! FAILED_PRECONDITION) and their counters.
//!
//! ```text
//!   put(entry, mode, value):  Add, an item there ─────> NotStored
//!                             Replace, none there ────> NotStored
//!                             else store ─ too large, mode Set ─> the old value goes too
//!   compare(expected, item):  none there ─> Absent;  its CAS unique / mod_revision another
//!                             ─> Differs(the item's);  else Ok
//! ```
//!
//! Non-goals: append, prepend, incr and the meta flags (each front end's own commands).

use cairn_store::{Entry, ItemMeta, StoreError, UnixSecs};

/// How a store treats the key's current item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PutMode {
    /// Whatever is there (memcached `set`).
    Set,
    /// Only if no item is there (memcached `add`).
    Add,
    /// Only if an item is there (memcached `replace`).
    Replace,
}

/// What [`put`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Put {
    /// The item now, as stored.
    Stored(ItemMeta),
    /// The mode's condition did not hold: nothing changed.
    NotStored,
}

/// Stores `parts` (concatenated) as the entry's item by `mode`. A `Set` the store refuses as
/// too large removes the old value, as memcached does: a failed set never leaves stale data
/// readable.
#[inline]
pub fn put(
    e: &mut Entry<'_>,
    mode: PutMode,
    parts: &[&[u8]],
    flags: u32,
    exptime: UnixSecs,
    cas: Option<u64>,
) -> Result<Put, StoreError> {
    match mode {
        PutMode::Add if e.peek().is_some() => return Ok(Put::NotStored),
        PutMode::Replace if e.peek().is_none() => return Ok(Put::NotStored),
        _ => {}
    }
    let r = e.store(parts, flags, exptime, cas);
    if r == Err(StoreError::TooLarge) && mode == PutMode::Set {
        e.delete();
    }
    r.map(Put::Stored)
}

/// What a write expects of the key's current item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compare {
    /// Its CAS unique (memcached `cas`, meta `C`, gRPC compare on CAS).
    Cas(u64),
    /// The revision of its last change (gRPC compare on mod_revision).
    ModRevision(u64),
}

/// Why a [`compare`] failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mismatch {
    /// No item is there (memcached `NOT_FOUND`, gRPC NOT_FOUND).
    Absent,
    /// The item's CAS unique or revision is this, not the expected one (memcached `EXISTS`,
    /// gRPC FAILED_PRECONDITION).
    Differs(u64),
}

/// Checks `expected` against the current item (None: there is none).
#[inline]
pub fn compare(expected: Compare, current: Option<&ItemMeta>) -> Result<(), Mismatch> {
    let Some(meta) = current else {
        return Err(Mismatch::Absent);
    };
    let actual = match expected {
        Compare::Cas(_) => meta.cas,
        Compare::ModRevision(_) => meta.mod_revision,
    };
    match expected {
        Compare::Cas(want) | Compare::ModRevision(want) if want == actual => Ok(()),
        _ => Err(Mismatch::Differs(actual)),
    }
}
