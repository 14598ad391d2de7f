//! The segment the syncer writes: [`Tail`], and the aligned staging buffer of its O_DIRECT
//! writes ([`DirectBuf`]).
//!
//! ```text
//!   syncer ─> Tail { file (O_DIRECT or buffered), offset, DirectBuf } ─> pwritev2 / pwritev
//! ```
//!
//! Non-goals: when a new tail starts and how old segments go (`crate::segment`).

use std::path::Path;

use memmap2::MmapMut;

use crate::format;
use crate::fs::{LogFile, DIRECT_ALIGN};
use crate::options::LogOptions;
use crate::pages;

/// What a [`DirectBuf`] is mapped to hold at first; it grows for a larger batch. Only the
/// pages a staged write reaches are resident.
const STAGE_BYTES: usize = 1 << 20;

/// The segment the syncer appends to.
pub(crate) struct Tail {
    /// The file, opened with O_DIRECT when `direct` is set. Shared with the syncer's
    /// fdatasync, which runs without the writer lock.
    pub file: std::sync::Arc<dyn LogFile>,
    /// With O_DIRECT: a second handle through the page cache, for async mode's writes.
    pub buffered: Option<Box<dyn LogFile>>,
    pub path: std::sync::Arc<Path>,
    /// Where the next batch is written.
    pub offset: u64,
    /// The segment was just renamed into place: fsync the directory after its first batch,
    /// before that batch is acknowledged.
    pub dir_sync_due: bool,
    /// Set with `direct_io`: the staging buffer of O_DIRECT writes.
    pub direct: Option<DirectBuf>,
    /// The spare thread was asked for the segment after this one.
    pub spare_requested: bool,
    /// Format version of the segment: from 2 on, the first record of each write is flagged.
    pub version: u32,
    /// The segment's first LSN (its name): the key of its points in the sparse index
    /// (`crate::index`).
    pub first_lsn: crate::marks::Lsn,
}

/// The aligned staging buffer of O_DIRECT writes: O_DIRECT needs 4 KiB-aligned memory, file
/// offsets and lengths, while records end anywhere.
///
/// ```text
///   file:   ... | block k                         | block k+1 ...
///               [kept      ][batch ........................][zeros to a block end]
///               ^ tail offset rounded down to 4 KiB
///                           ^ tail offset
/// ```
///
/// Each batch is written from the start of the block holding the tail offset: the bytes of
/// that block already on disk (kept here, never read back), then the batch, then zeros up to a
/// block boundary. Zeros after the last record are the format's end of log, so the padding
/// reads as "no more records" and the next batch overwrites it. Rewriting the kept bytes
/// (identical data) is what the page cache does for a buffered append, too. Async mode writes
/// a direct tail through the page cache from the same block start (kept bytes first), so the
/// kept bytes stay what the file holds whichever way a batch went.
pub(crate) struct DirectBuf {
    /// Page-aligned memory (`crate::pages`).
    mem: MmapMut,
    /// Bytes at the start: the partly written last block (tail offset % 4096).
    pub kept: usize,
}

impl DirectBuf {
    pub fn new(kept: &[u8]) -> DirectBuf {
        let mut b = DirectBuf {
            mem: pages::zeroed(STAGE_BYTES),
            kept: 0,
        };
        b.keep(kept);
        b
    }

    /// Keeps `kept` (the partly written last block of another file) in place of the kept
    /// bytes.
    pub fn keep(&mut self, kept: &[u8]) {
        assert!(kept.len() < DIRECT_ALIGN, "only a partial block is kept");
        self.mem[..kept.len()].copy_from_slice(kept);
        self.kept = kept.len();
    }

    /// The kept bytes: the file's last, partly written block.
    pub fn kept_bytes(&self) -> &[u8] {
        &self.mem[..self.kept]
    }

    /// Makes room for `len` aligned bytes, keeping the kept block.
    fn reserve(&mut self, len: usize) {
        if self.mem.len() >= len {
            return;
        }
        let mut mem = pages::zeroed(len.max(2 * self.mem.len()));
        mem[..self.kept].copy_from_slice(self.kept_bytes());
        self.mem = mem;
    }

    /// Hands the pages that staged writes touched back to the operating system: the buffer
    /// starts again at its first size, with the kept block.
    pub fn release(&mut self) {
        *self = DirectBuf::new(self.kept_bytes());
    }

    /// Lays out kept bytes + `parts` (back to back) + zero padding; returns the aligned bytes
    /// to write at the tail offset rounded down to a block.
    pub fn stage(&mut self, parts: &[&[u8]]) -> &[u8] {
        let used = self.kept + parts.iter().map(|p| p.len()).sum::<usize>();
        let padded = used.next_multiple_of(DIRECT_ALIGN);
        self.reserve(padded);
        let buf = &mut self.mem[..padded];
        let mut at = self.kept;
        for p in parts {
            buf[at..at + p.len()].copy_from_slice(p);
            at += p.len();
        }
        buf[used..].fill(0);
        debug_assert_eq!(buf.as_ptr() as usize % DIRECT_ALIGN, 0);
        buf
    }

    /// After the staged bytes of a `batch_len`-byte batch were written: keeps the new partly
    /// written last block.
    pub fn advance(&mut self, batch_len: usize) {
        let used = self.kept + batch_len;
        let block = used / DIRECT_ALIGN * DIRECT_ALIGN;
        self.mem.copy_within(block..used, 0);
        self.kept = used - block;
    }

    /// After the kept bytes and then `records` (`len` bytes in all) were written through the
    /// page cache: keeps the new partly written last block, copied from the end of `records`
    /// (at most one block, not the batch).
    pub fn absorb(&mut self, records: &[&[u8]], len: usize) {
        let used = self.kept + len;
        let keep = used % DIRECT_ALIGN;
        let mut last = [0u8; DIRECT_ALIGN];
        // Fill `last[..keep]` from the end of kept ++ records.
        let mut need = keep;
        for part in records
            .iter()
            .rev()
            .chain(std::iter::once(&self.kept_bytes()))
        {
            if need == 0 {
                break;
            }
            let n = need.min(part.len());
            last[need - n..need].copy_from_slice(&part[part.len() - n..]);
            need -= n;
        }
        self.mem[..keep].copy_from_slice(&last[..keep]);
        self.kept = keep;
    }
}

impl Tail {
    /// Drops the tail's clean cached pages, on a direct tail (`LogOptions::direct_io`): its
    /// sync writes bypass the cache anyway, and its async writes (through the page cache)
    /// are whole blocks, which need no read of what the file holds. Why: the spare's zero fill
    /// (1 MiB writes) or recovery's read-ahead leave the file cached in large folios, and each
    /// small buffered write into a large folio walks every block of it (ext4's
    /// `block_write_begin` and `block_commit_write`: 0.25 us per insert in the profile of
    /// ASYNC inserts, docs/decisions/0015-async-writes-in-whole-blocks-on-an-uncached-tail.md);
    /// written after the drop, the pages come in folios the size of the writes.
    pub fn drop_cache(&self) {
        if self.direct.is_some() {
            self.file.drop_cache();
        }
    }

    /// Whether a batch of `records` bytes (and its end marker) does not fit this segment, so
    /// that it starts the next one. A batch larger than a whole segment goes into the
    /// current one if nothing is written there yet.
    pub fn needs_next_segment(&self, records: usize, opts: &LogOptions) -> bool {
        let marked_len = (records + format::END_MARKER.len()) as u64;
        self.offset > format::HEADER_LEN as u64 && self.offset + marked_len > opts.segment_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absorb_keeps_the_last_partial_block_of_kept_and_records() {
        let kept: Vec<u8> = (0..100u8).collect();
        let mut d = DirectBuf::new(&kept);
        // Records that end inside the same block: the new kept block holds both.
        d.absorb(&[b"abc", b"de"], 5);
        let mut want = kept.clone();
        want.extend_from_slice(b"abcde");
        assert_eq!(d.kept_bytes(), &want[..]);
        // Records that cross a block end: only what lies past it is kept.
        let big = vec![7u8; DIRECT_ALIGN];
        d.absorb(&[&big[..10], &big[10..]], DIRECT_ALIGN);
        assert_eq!(d.kept_bytes(), &vec![7u8; 105][..]);
        // Exactly at a block end: nothing kept.
        let rest = vec![9u8; DIRECT_ALIGN - 105];
        d.absorb(&[&rest], rest.len());
        assert!(d.kept_bytes().is_empty());
    }
}
