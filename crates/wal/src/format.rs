//! The bytes on disk: segment header and record framing (also in docs/FORMATS.md).
//!
//! ```text
//! segment file "<first_lsn, 20 digits>.wal", preallocated; all integers little-endian
//!   header, 40 bytes:
//!     0  magic       8  b"CAIRNWAL"
//!     8  version     4  2 (1 is still read: the same bytes without sync-start flags)
//!    12  reserved    4  0
//!    16  log_id      8  random, chosen when the log was created; every segment of a log has it
//!    24  first_lsn   8  LSN of the segment's first record (also its file name)
//!    32  header_crc  4  CRC32C of bytes 0..32
//!    36  reserved    4  0
//!   records from offset 40, back to back:
//!     0  len         4  payload length
//!     4  lsn         8  this record's LSN (the previous one + 1) in bits 0..63; bit 63 is
//!                       the sync-start flag: set on the first record of the first write
//!                       after an fdatasync (in sync mode: of every write)
//!    12  crc         4  CRC32C over log_id (8 bytes), then bytes 0..12 of this record with
//!                       the sync-start flag cleared, then the payload
//!    16  payload   len
//!   after the last record: the end marker, 16 zero bytes (a record header of zeros). Every
//!     write of records carries one after them; the next write starts on top of it. Past
//!     the marker: zeros in a new file, or the older records of a reused one.
//!
//! spare file "next-<nonce, 16 hex>-<seq>.spare": the next segment prepared ahead (zeros, no
//!   header); renamed to a segment name and given its header when it becomes the tail.
//!   Never part of the log: recovery removes it.
//! ```
//!
//! The CRC covers the record header as well as the payload, and is seeded with the log id, so
//! a segment left over from another log (a reused or renamed file) cannot bring back records:
//! its records fail the check. A record whose 16 header bytes are all zero marks the end.
//!
//! A segment file of this log can be reused for a later segment (`LogOptions::reuse_segments`):
//! its header is zeroed, then rewritten with the new first LSN. Its old records stay behind
//! the new ones, but a scan stops at the end marker, and every old record has an LSN below
//! the new segment's first LSN, so none of them can pass for the next record (a scan accepts
//! only the LSN it expects) or for a valid record past a torn one (recovery looks for LSNs
//! above the last good one). Records a crash left past the end of the newest segment, whose
//! LSNs will be handed out again, are zeroed on open (`recovery::clear_after_end`).
//!
//! The sync-start flag lets recovery tell a torn tail from damage to synced records. Writes go
//! one after another; the writes since the last fdatasync (one in sync mode, several in async
//! mode) are the unsynced group, and a disk may persist their pages in any order. So when a
//! bad record is followed by valid ones, those belong to the same unsynced group if none of
//! them starts a group; if one does, an fdatasync came between, the bad record had been
//! synced, and that is damage. The flag is outside the CRC so that the syncer can set it on
//! an already framed record; a flipped flag can only change that decision, never what a
//! record holds.

/// Magic of a segment file.
pub const MAGIC: &[u8; 8] = b"CAIRNWAL";
/// Format version written by this code.
pub const VERSION: u32 = 2;
/// Oldest format version read: version 1 has no sync-start flags (every record may start a
/// group, as far as recovery knows).
pub const MIN_VERSION: u32 = 1;
/// Bit of the LSN field that marks the first record written after an fdatasync.
const SYNC_START: u64 = 1 << 63;
/// Bytes of the segment header.
pub const HEADER_LEN: usize = 40;
/// Bytes of a record header.
pub const RECORD_HEADER_LEN: usize = 16;
/// Written after the last record of every write: where a scan stops.
pub const END_MARKER: [u8; RECORD_HEADER_LEN] = [0; RECORD_HEADER_LEN];

/// A decoded segment header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    pub log_id: u64,
    pub first_lsn: u64,
    /// Format version: [`VERSION`] when encoded here; what the file says when decoded.
    pub version: u32,
}

/// Why a header or record did not decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bad {
    /// Zeros where a record would start: the clean end of the data.
    End,
    /// Not enough bytes for the header or payload it announces.
    Short,
    /// Wrong magic, version, or checksum.
    Checksum,
}

impl SegmentHeader {
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&self.version.to_le_bytes());
        b[16..24].copy_from_slice(&self.log_id.to_le_bytes());
        b[24..32].copy_from_slice(&self.first_lsn.to_le_bytes());
        let crc = crc32c::crc32c(&b[0..32]);
        b[32..36].copy_from_slice(&crc.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<SegmentHeader, Bad> {
        if b.len() < HEADER_LEN {
            return Err(Bad::Short);
        }
        let crc = u32::from_le_bytes(b[32..36].try_into().expect("4 bytes"));
        let version = u32::from_le_bytes(b[8..12].try_into().expect("4 bytes"));
        if &b[0..8] != MAGIC
            || !(MIN_VERSION..=VERSION).contains(&version)
            || crc != crc32c::crc32c(&b[0..32])
        {
            return Err(Bad::Checksum);
        }
        Ok(SegmentHeader {
            log_id: u64::from_le_bytes(b[16..24].try_into().expect("8 bytes")),
            first_lsn: u64::from_le_bytes(b[24..32].try_into().expect("8 bytes")),
            version,
        })
    }
}

/// The CRC of a record: `head` is its first 12 bytes, taken with the sync-start flag cleared;
/// the payload is `parts`, back to back.
fn record_crc(log_id: u64, head: &[u8], parts: &[&[u8]]) -> u32 {
    let mut h = [0u8; 12];
    h.copy_from_slice(&head[..12]);
    h[11] &= 0x7f;
    let crc = crc32c::crc32c(&log_id.to_le_bytes());
    let crc = crc32c::crc32c_append(crc, &h);
    parts
        .iter()
        .fold(crc, |crc, p| crc32c::crc32c_append(crc, p))
}

/// Sets the sync-start flag of the record at the start of `b`.
pub fn mark_sync_start(b: &mut [u8]) {
    b[11] |= 0x80;
}

/// Whether the record at the start of `b` (one that decodes) carries the sync-start flag.
pub fn starts_sync_group(b: &[u8]) -> bool {
    b[11] & 0x80 != 0
}

/// Appends one framed record to `out`.
pub fn encode_record(out: &mut Vec<u8>, log_id: u64, lsn: u64, payload: &[u8]) {
    encode_record_parts(out, log_id, lsn, &[payload]);
}

/// Appends one framed record whose payload is `parts` back to back: each part is copied once,
/// into `out`.
pub fn encode_record_parts(out: &mut Vec<u8>, log_id: u64, lsn: u64, parts: &[&[u8]]) {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let start = out.len();
    out.resize(start + RECORD_HEADER_LEN + len, 0);
    frame_record_into(&mut out[start..], log_id, lsn, parts);
}

/// Frames one record whose payload is `parts` back to back into `out`, which is exactly
/// [`RECORD_HEADER_LEN`] + the payload's length: each part is copied once, into `out`.
pub fn frame_record_into(out: &mut [u8], log_id: u64, lsn: u64, parts: &[&[u8]]) {
    assert!(
        lsn > 0 && lsn & SYNC_START == 0,
        "LSNs start at 1 and stay below 2^63"
    );
    let len: usize = parts.iter().map(|p| p.len()).sum();
    assert_eq!(
        out.len(),
        RECORD_HEADER_LEN + len,
        "the record's exact room"
    );
    let len32 = u32::try_from(len).expect("record size checked by the caller");
    out[0..4].copy_from_slice(&len32.to_le_bytes());
    out[4..12].copy_from_slice(&lsn.to_le_bytes());
    let crc = record_crc(log_id, &out[..12], parts);
    out[12..16].copy_from_slice(&crc.to_le_bytes());
    let mut at = RECORD_HEADER_LEN;
    for p in parts {
        out[at..at + p.len()].copy_from_slice(p);
        at += p.len();
    }
}

/// Decodes the record at the start of `b`: (lsn, payload range within `b`, total length).
pub fn decode_record(b: &[u8], log_id: u64) -> Result<(u64, std::ops::Range<usize>, usize), Bad> {
    if b.len() < RECORD_HEADER_LEN {
        return if b.iter().all(|&x| x == 0) {
            Err(Bad::End)
        } else {
            Err(Bad::Short)
        };
    }
    let head = &b[..RECORD_HEADER_LEN];
    if head.iter().all(|&x| x == 0) {
        return Err(Bad::End);
    }
    let len = u32::from_le_bytes(head[0..4].try_into().expect("4 bytes")) as usize;
    let lsn = u64::from_le_bytes(head[4..12].try_into().expect("8 bytes")) & !SYNC_START;
    let crc = u32::from_le_bytes(head[12..16].try_into().expect("4 bytes"));
    let total = RECORD_HEADER_LEN + len;
    if b.len() < total {
        return Err(Bad::Short);
    }
    let payload = RECORD_HEADER_LEN..total;
    if record_crc(log_id, &head[0..12], &[&b[payload.clone()]]) != crc {
        return Err(Bad::Checksum);
    }
    Ok((lsn, payload, total))
}

/// The file name of the segment whose first record is `first_lsn`.
pub fn segment_name(first_lsn: u64) -> String {
    format!("{first_lsn:020}.wal")
}

/// The name of a spare file: the next segment, created and preallocated ahead of time by a
/// background thread, then renamed to [`segment_name`] and given its header when the log needs
/// it. `nonce` differs between opens of a log, `seq` between the spares of one open. A spare
/// is never part of the log: recovery removes any it finds.
pub fn spare_name(nonce: u64, seq: u64) -> String {
    format!("next-{nonce:016x}-{seq}.spare")
}

/// Whether a file name is a spare's (see [`spare_name`]).
pub fn is_spare_name(name: &str) -> bool {
    name.starts_with("next-") && name.ends_with(".spare")
}

/// The first LSN a segment file name stands for, if it is one.
pub fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".wal")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trip_and_checks() {
        let mut b = Vec::new();
        encode_record(&mut b, 7, 1, b"hello");
        encode_record(&mut b, 7, 2, b"");
        let (lsn, p, n) = decode_record(&b, 7).unwrap();
        assert_eq!((lsn, &b[p], n), (1, &b"hello"[..], 21));
        let (lsn, p, _) = decode_record(&b[n..], 7).unwrap();
        assert_eq!((lsn, p.len()), (2, 0));
        assert_eq!(
            decode_record(&b, 8),
            Err(Bad::Checksum),
            "another log's record"
        );
        assert_eq!(decode_record(&b[..20], 7), Err(Bad::Short));
        assert_eq!(decode_record(&[0u8; 40], 7), Err(Bad::End));
        let mut marked = b.clone();
        mark_sync_start(&mut marked);
        assert_eq!(
            decode_record(&marked, 7),
            Ok((1, 16..21, 21)),
            "flag outside the CRC"
        );
        assert!(starts_sync_group(&marked) && !starts_sync_group(&b));
        let mut flipped = b.clone();
        flipped[5] ^= 1;
        assert_eq!(
            decode_record(&flipped, 7),
            Err(Bad::Checksum),
            "the header is covered"
        );
    }

    #[test]
    fn header_and_names() {
        let h = SegmentHeader {
            log_id: 9,
            first_lsn: 42,
            version: VERSION,
        };
        assert_eq!(SegmentHeader::decode(&h.encode()), Ok(h));
        let mut b = h.encode();
        b[25] ^= 1;
        assert_eq!(SegmentHeader::decode(&b), Err(Bad::Checksum));
        assert_eq!(parse_segment_name(&segment_name(42)), Some(42));
        assert_eq!(parse_segment_name("42.wal"), None);
        assert!(is_spare_name(&spare_name(7, 3)));
        assert_eq!(parse_segment_name(&spare_name(7, 3)), None);
        assert!(!is_spare_name(&segment_name(42)));
    }
}
