//! The pending buffer: appended records waiting for the syncer, as [`Chunk`]s of
//! [`PendingBuf`]s laid out for an O_DIRECT write.
//!
//! ```text
//!   State::pending: [Framed { LSNs a..=b }][Slot { c, filled }][Framed { d..=e }] ...
//!                    └ records back to back, at the block offset where they will land
//! ```
//!
//! Non-goals: appending (`crate::appender`) and writing (`crate::syncer`).

use memmap2::MmapMut;

use crate::format;
use crate::fs::DIRECT_ALIGN;
use crate::marks::Lsn;
use crate::pages;

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
///   mem:  [head bytes: room for the file's partly written last block][records ...][room]
///         ^ page-aligned
/// ```
///
/// When the prediction holds (the usual case: one chunk per write, no new segment), the
/// syncer copies the partly written block (under 4 KiB, once per write) in front of the
/// records, zeroes the end of the last block and writes the buffer itself: no staging copy
/// of the records. Otherwise the records are staged as before (`DirectBuf::stage`).
pub(crate) struct PendingBuf {
    /// Page-aligned memory (`crate::pages`), never reallocated while records are in it
    /// except to grow.
    mem: MmapMut,
    /// Where the records begin within it (< [`DIRECT_ALIGN`]).
    head: usize,
    /// Bytes of records.
    len: usize,
}

impl PendingBuf {
    /// An empty buffer whose records start at `head` and that holds `records` bytes of
    /// records plus the padding of a direct write without growing: a new mapping, sized for
    /// any head and at least [`CHUNK_BUF_BYTES`] of records, so that, once emptied, it can
    /// serve as any chunk.
    pub fn with_capacity(head: usize, records: usize) -> PendingBuf {
        debug_assert!(head < DIRECT_ALIGN);
        let mem = pages::zeroed(Self::padded(
            DIRECT_ALIGN - 1 + records.max(CHUNK_BUF_BYTES),
        ));
        PendingBuf { mem, head, len: 0 }
    }

    /// Whether the buffer is of the size every chunk fits in (not one mapped for a larger
    /// record): only those are kept for reuse, so that what is kept stays bounded.
    pub fn is_standard(&self) -> bool {
        self.mem.len() == Self::padded(DIRECT_ALIGN - 1 + CHUNK_BUF_BYTES)
    }

    /// One of `free` (emptied buffers) that holds `records` bytes of records at `head`, taken
    /// out and emptied for them: its memory is reused, and its pages are already resident.
    pub fn take_free(
        free: &mut Vec<PendingBuf>,
        head: usize,
        records: usize,
    ) -> Option<PendingBuf> {
        let need = Self::padded(head + records);
        let i = free.iter().position(|b| b.mem.len() >= need)?;
        let mut b = free.swap_remove(i);
        b.head = head;
        b.len = 0;
        Some(b)
    }

    pub fn head(&self) -> usize {
        self.head
    }

    pub fn records(&self) -> &[u8] {
        &self.mem[self.head..self.head + self.len]
    }

    pub fn records_mut(&mut self) -> &mut [u8] {
        &mut self.mem[self.head..self.head + self.len]
    }

    /// Bytes a buffer must hold for `used` bytes (head and records), a block of end marker
    /// and the padding to a block's end.
    fn padded(used: usize) -> usize {
        (used + format::END_MARKER.len()).next_multiple_of(DIRECT_ALIGN)
    }

    /// Makes room for `more` bytes of records. Growing copies the records once; buffers are
    /// mapped for what their chunk holds (a slot's record, or a chunk's [`CHUNK_BUF_BYTES`]
    /// with a block of slack), so it is a safety net that does not happen.
    fn reserve(&mut self, more: usize) {
        let need = Self::padded(self.head + self.len + more);
        if self.mem.len() >= need {
            return;
        }
        let mut mem = pages::zeroed(need.max(2 * self.mem.len()));
        let records = self.head..self.head + self.len;
        mem[records.clone()].copy_from_slice(&self.mem[records]);
        self.mem = mem;
    }

    /// Frames one record (header, CRC, `parts`) after the others: the one copy of the
    /// parts into the log.
    pub fn push_record(&mut self, log_id: u64, lsn: Lsn, parts: &[&[u8]], framed_len: usize) {
        self.reserve(framed_len);
        let at = self.head + self.len;
        format::frame_record_into(&mut self.mem[at..at + framed_len], log_id, lsn, parts);
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
        let end = self.head + self.len;
        let buf = &mut self.mem[..Self::padded(end)];
        buf[..kept.len()].copy_from_slice(kept);
        buf[end..].fill(0);
        debug_assert_eq!(buf.as_ptr() as usize % DIRECT_ALIGN, 0);
        buf
    }
}

/// How many emptied buffers are kept for reuse: as many chunks as the pending buffer holds
/// before appenders wait for room (at least one being filled while one is written), so that
/// a burst of large records does not map new ones. The rest are unmapped; all of them go back
/// to the operating system once the log is quiet ([`crate::LogOptions::release_after`]).
pub(crate) fn free_buffers_kept(max_pending_bytes: usize) -> usize {
    (max_pending_bytes / MAX_CHUNK_BYTES).max(2)
}

/// What a `Chunk::Framed` buffer is mapped to hold: a chunk takes records until it holds
/// [`MAX_CHUNK_BYTES`], and its last record's payload is smaller than
/// [`FRAME_OUTSIDE_LOCK_BYTES`] (larger ones take a slot; the record header adds
/// `format::RECORD_HEADER_LEN`, within the block of slack a buffer is mapped with). Only the
/// pages its records reach are ever resident.
pub(crate) const CHUNK_BUF_BYTES: usize = MAX_CHUNK_BYTES + FRAME_OUTSIDE_LOCK_BYTES;

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

    /// The buffer of a filled chunk, to be reused.
    pub fn into_buf(self) -> Option<PendingBuf> {
        match self {
            Chunk::Framed { bytes, .. } => Some(bytes),
            Chunk::Slot { record, .. } => record,
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
