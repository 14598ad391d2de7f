//! Arbitrary bytes into `cairn_persist::record::decode`, as a damaged or hostile command log
//! would hand them to recovery. Checks: no panic, and every record that decodes re-encodes
//! (through the `Mutation` recovery would apply) to exactly the input bytes, so the decoder
//! accepts one spelling per record and drops nothing it was given.

use cairn_persist::record::{decode, encode, Record};
use cairn_store::{ItemMeta, Mutation};

/// Runs the check on `data`.
pub fn check(data: &[u8]) {
    let Some(record) = decode(data) else {
        return;
    };
    let mutation = match record {
        Record::Stored {
            key,
            value,
            flags,
            exptime,
            cas,
            stale,
        } => Mutation::Stored {
            key,
            value,
            meta: ItemMeta {
                flags,
                exptime,
                cas,
                last_access: 0,
                fetched: false,
                stale,
                win_sent: false,
                mod_revision: 0,
            },
            prev: None,
        },
        Record::Deleted { key, reason } => Mutation::Deleted {
            key,
            reason,
            prev: None,
        },
        Record::Flushed => Mutation::Flushed,
        Record::FlushScheduled { at } => Mutation::FlushScheduled { at },
    };
    let mut out = Vec::new();
    encode(&mut out, &mutation);
    assert_eq!(out, data, "{:?} re-encodes differently", decode(data));
}
