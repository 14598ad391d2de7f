//! Arbitrary bytes into `cairn_persist::record::decode`, as a damaged or hostile command log
//! would hand them to recovery. Checks: no panic, and every record that decodes re-encodes
//! (through the `Mutation` recovery would apply) to exactly the input bytes, so the decoder
//! accepts one spelling per record and drops nothing it was given.

use cairn_persist::record::{decode, encode};

/// Runs the check on `data`.
pub fn check(data: &[u8]) {
    let Some(record) = decode(data) else {
        return;
    };
    let mutation = record.to_mutation(0);
    let mut out = Vec::new();
    encode(&mut out, &mutation);
    assert_eq!(out, data, "{:?} re-encodes differently", decode(data));
}
