//! The command log's record: the resulting state of a mutation, not the command.
//!
//! ```text
//!   payload of one log record (all integers little-endian):
//!     kind u8 = 1 Stored:  klen u8 | key | flags u32 | exptime u32 | cas u64 | state u8 | value
//!     kind u8 = 2 Deleted: klen u8 | key
//!     kind u8 = 3 Flushed
//!   state bit 0: stale (meta invalidate). exptime is absolute unix seconds, 0 = never.
//! ```
//!
//! Replaying a record sets the key to exactly that state, so replay is idempotent and the
//! last record of a key wins: incr, append, cas, touch and the meta commands all log what they
//! produced. The log's CRC (cairn-wal) guards the bytes; this decoder still checks every length.

use cairn_store::{ItemMeta, Mutation};

pub const STORED: u8 = 1;
pub const DELETED: u8 = 2;
pub const FLUSHED: u8 = 3;

const STALE: u8 = 1;

/// A decoded record, borrowing from the payload.
#[derive(Debug, PartialEq, Eq)]
pub enum Record<'a> {
    Stored {
        key: &'a [u8],
        value: &'a [u8],
        flags: u32,
        exptime: u32,
        cas: u64,
        stale: bool,
    },
    Deleted {
        key: &'a [u8],
    },
    Flushed,
}

/// Encodes a mutation into `out` (cleared first).
pub fn encode(out: &mut Vec<u8>, m: &Mutation<'_>) {
    out.clear();
    match m {
        Mutation::Stored { key, value, meta } => {
            out.push(STORED);
            out.push(u8::try_from(key.len()).expect("keys are at most 250 bytes"));
            out.extend_from_slice(key);
            encode_meta(out, meta);
            out.extend_from_slice(value);
        }
        Mutation::Deleted { key } => {
            out.push(DELETED);
            out.push(u8::try_from(key.len()).expect("keys are at most 250 bytes"));
            out.extend_from_slice(key);
        }
        Mutation::Flushed => out.push(FLUSHED),
    }
}

fn encode_meta(out: &mut Vec<u8>, meta: &ItemMeta) {
    out.extend_from_slice(&meta.flags.to_le_bytes());
    out.extend_from_slice(&meta.exptime.to_le_bytes());
    out.extend_from_slice(&meta.cas.to_le_bytes());
    out.push(if meta.stale { STALE } else { 0 });
}

/// Bytes of the fixed fields after the key of a Stored record.
const META_LEN: usize = 4 + 4 + 8 + 1;

/// Decodes a record; `None` if the bytes do not form one.
pub fn decode(b: &[u8]) -> Option<Record<'_>> {
    let (&kind, rest) = b.split_first()?;
    match kind {
        FLUSHED if rest.is_empty() => Some(Record::Flushed),
        DELETED => {
            let (&klen, rest) = rest.split_first()?;
            (rest.len() == klen as usize && klen > 0).then_some(Record::Deleted { key: rest })
        }
        STORED => {
            let (&klen, rest) = rest.split_first()?;
            let klen = klen as usize;
            if klen == 0 || rest.len() < klen + META_LEN {
                return None;
            }
            let (key, rest) = rest.split_at(klen);
            let u32_at = |i: usize| u32::from_le_bytes(rest[i..i + 4].try_into().expect("4 bytes"));
            Some(Record::Stored {
                key,
                flags: u32_at(0),
                exptime: u32_at(4),
                cas: u64::from_le_bytes(rest[8..16].try_into().expect("8 bytes")),
                stale: rest[16] & STALE != 0,
                value: &rest[META_LEN..],
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let meta = ItemMeta {
            flags: 7,
            exptime: 99,
            cas: 1234,
            last_access: 0,
            fetched: false,
            stale: true,
            win_sent: false,
        };
        let mut out = Vec::new();
        encode(
            &mut out,
            &Mutation::Stored {
                key: b"k",
                value: b"value",
                meta,
            },
        );
        assert_eq!(
            decode(&out),
            Some(Record::Stored {
                key: b"k",
                value: b"value",
                flags: 7,
                exptime: 99,
                cas: 1234,
                stale: true
            })
        );
        encode(&mut out, &Mutation::Deleted { key: b"gone" });
        assert_eq!(decode(&out), Some(Record::Deleted { key: b"gone" }));
        encode(&mut out, &Mutation::Flushed);
        assert_eq!(decode(&out), Some(Record::Flushed));
        assert_eq!(decode(&[STORED, 3, b'a']), None);
        assert_eq!(decode(&[9]), None);
        assert_eq!(decode(&[]), None);
    }
}
