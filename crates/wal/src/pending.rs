//! The pending buffer: appended records waiting for the syncer, as [`Chunk`]s of
//! [`PendingBuf`]s laid out for an O_DIRECT write.
//!
//! ```text
//!   State::pending: [Framed { LSNs a..=b }][Slot { c, filled }][Framed { d..=e }] ...
//!                    └ records back to back, at the block offset where they will land
//! ```
//!
//! Non-goals: appending (`crate::appender`) and writing (`crate::syncer`).

use crate::format;
use crate::fs::DIRECT_ALIGN;
use crate::marks::Lsn;

/// Records of at least this many bytes are framed (checksummed and copied) by their appender
/// outside the state lock, in a slot reserved in LSN order, so that other appenders and the
/// syncer do not wait for the lock meanwhile (records after the slot still wait for it to be
/// filled before they are written); smaller records are framed under the lock, which costs
/// less than a second lock round.
pub const FRAME_OUTSIDE_LOCK_BYTES: usize = 64 << 10;

/// A `Chunk::Framed` takes records until it holds this many bytes; then a new one starts, so
/// that the syncer can bound a batch (at whole chunks) even when appends outrun it.
pub(crate) const MAX_CHUNK_BYTES: usize = 1 << 20;

/// Records framed back to back in memory that an O_DIRECT write can take as it is: the
/// buffer is [`DIRECT_ALIGN`]-aligned and the records start at `head`, the offset within a
/// disk block at which they will land in the file (the appender predicts it, see
/// `State::next_offset`).
///
/// ```text
///   raw:  [start: aligned]
///         [head bytes: room for the file's partly written last block][records ...][room]
/// ```
///
/// When the prediction holds (the usual case: one chunk per write, no new segment), the
/// syncer copies the partly written block (under 4 KiB, once per write) in front of the
/// records, zeroes the end of the last block and writes the buffer itself: no staging copy
/// of the records. Otherwise the records are staged as before (`DirectBuf::stage`).
pub(crate) struct PendingBuf {
    /// Owns the memory; `raw[start..]` is the aligned part, never reallocated while records
    /// are in it except to grow.
    raw: Vec<u8>,
    start: usize,
    /// Where the records begin within the aligned part (< [`DIRECT_ALIGN`]).
    head: usize,
    /// Bytes of records.
    len: usize,
}

impl PendingBuf {
    /// An empty buffer whose records start at `head` and that holds `records` bytes of
    /// records plus the padding of a direct write without growing.
    pub fn with_capacity(head: usize, records: usize) -> PendingBuf {
        let mut b = PendingBuf {
            raw: Vec::new(),
            start: 0,
            head: 0,
            len: 0,
        };
        b.reset(head);
        b.reserve(records);
        b
    }

    /// Empties the buffer for records that start at `head`, keeping its memory.
    pub fn reset(&mut self, head: usize) {
        debug_assert!(head < DIRECT_ALIGN);
        self.head = head;
        self.len = 0;
    }

    pub fn head(&self) -> usize {
        self.head
    }

    pub fn records(&self) -> &[u8] {
        &self.raw[self.start + self.head..self.start + self.head + self.len]
    }

    pub fn records_mut(&mut self) -> &mut [u8] {
        &mut self.raw[self.start + self.head..self.start + self.head + self.len]
    }

    /// Bytes the aligned part must hold for `more` more bytes of records, a block of end
    /// marker and the padding to a block's end.
    fn needed(&self, more: usize) -> usize {
        (self.head + self.len + more + format::END_MARKER.len()).next_multiple_of(DIRECT_ALIGN)
    }

    /// Makes room for `more` bytes of records. Growing copies the records once; buffers are
    /// reused at their grown size, so it is rare.
    fn reserve(&mut self, more: usize) {
        let need = self.needed(more);
        if self.raw.len() - self.start >= need {
            return;
        }
        let cap = need.max(2 * (self.raw.len() - self.start));
        let mut raw = vec![0u8; cap + DIRECT_ALIGN];
        let start = raw.as_ptr().align_offset(DIRECT_ALIGN);
        let (from, to) = (self.start + self.head, start + self.head);
        if self.len > 0 {
            raw[to..to + self.len].copy_from_slice(&self.raw[from..from + self.len]);
        }
        self.raw = raw;
        self.start = start;
    }

    /// Frames one record (header, CRC, `parts`) after the others: the one copy of the
    /// parts into the log.
    pub fn push_record(&mut self, log_id: u64, lsn: Lsn, parts: &[&[u8]], framed_len: usize) {
        self.reserve(framed_len);
        let at = self.start + self.head + self.len;
        format::frame_record_into(&mut self.raw[at..at + framed_len], log_id, lsn, parts);
        self.len += framed_len;
    }

    /// Lays the file's partly written last block (`kept`, as long as `head`) in front of the
    /// records and zeroes from their end to a block's end (the end marker and padding):
    /// returns the aligned bytes to write at the block where the records' first byte lands.
    pub fn direct_write(&mut self, kept: &[u8]) -> &[u8] {
        assert_eq!(
            kept.len(),
            self.head,
            "records laid out for another block offset"
        );
        let padded = self.needed(0);
        let end = self.head + self.len;
        let buf = &mut self.raw[self.start..self.start + padded];
        buf[..kept.len()].copy_from_slice(kept);
        buf[end..].fill(0);
        debug_assert_eq!(buf.as_ptr() as usize % DIRECT_ALIGN, 0);
        buf
    }
}

/// What a new `Chunk::Framed` buffer holds before it grows (it is reused at its grown size).
pub(crate) const FIRST_CHUNK_BYTES: usize = 64 << 10;

/// A run of appended records, in LSN order, waiting for the syncer.
pub(crate) enum Chunk {
    /// Records framed under the state lock, back to back: LSNs `first..=last`.
    Framed {
        bytes: PendingBuf,
        first: Lsn,
        last: Lsn,
    },
    /// One large record, framed by its appender outside the lock: `None` until it is.
    Slot {
        lsn: Lsn,
        record: Option<PendingBuf>,
    },
}

impl Chunk {
    pub fn first(&self) -> Lsn {
        match self {
            Chunk::Framed { first, .. } => *first,
            Chunk::Slot { lsn, .. } => *lsn,
        }
    }

    pub fn last(&self) -> Lsn {
        match self {
            Chunk::Framed { last, .. } => *last,
            Chunk::Slot { lsn, .. } => *lsn,
        }
    }

    /// The framed bytes; empty for an unfilled slot (which the syncer never takes).
    pub fn bytes(&self) -> &[u8] {
        match self {
            Chunk::Framed { bytes, .. } => bytes.records(),
            Chunk::Slot { record, .. } => record.as_ref().map_or(&[], PendingBuf::records),
        }
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            Chunk::Framed { bytes, .. } => bytes.records_mut(),
            Chunk::Slot { record, .. } => record.as_mut().map_or(&mut [], PendingBuf::records_mut),
        }
    }

    /// The buffer of a filled chunk.
    pub fn buf_mut(&mut self) -> Option<&mut PendingBuf> {
        match self {
            Chunk::Framed { bytes, .. } => Some(bytes),
            Chunk::Slot { record, .. } => record.as_mut(),
        }
    }

    pub fn is_filled(&self) -> bool {
        !matches!(self, Chunk::Slot { record: None, .. })
    }
}
