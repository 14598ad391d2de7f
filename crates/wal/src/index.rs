//! Where records are in their segment files: a sparse LSN -> file offset index, so that a
//! read of old records (the watch's history, `crate::reader`) starts next to them instead of
//! at the start of their segment.
//!
//! ```text
//!   syncer / helper, after each write of a batch ── note_batch(segment, offset, chunks) ──┐
//!   a reader's scan of a segment (after a restart) ── merge(segment, its points) ──────────┤
//!                                                                                        v
//!   Index { per segment (by its first LSN): [(lsn, offset)] in LSN order, a point at least
//!           every STRIDE bytes }
//!   reader ── seek(segment, lsn) ──> the last point at or before lsn: scan from there
//!   truncate_before ── drop_before(first kept segment)
//! ```
//!
//! Kept in memory only: a segment written before the process started gets its points from
//! the first read that scans it. 16 bytes a point, one per [`STRIDE`] of records: 32 KiB for a
//! 64 MiB segment. Non-goals: reading (`crate::reader`), and anything on disk (an index is a
//! cache of what a scan finds).

use std::collections::BTreeMap;

use crate::format::RECORD_HEADER_LEN;
use crate::marks::Lsn;
use crate::pending::Chunk;

/// Most bytes of records between two points of a segment's index: a read scans at most this
/// much (and the record it starts in) before it reaches the record it wants.
pub(crate) const STRIDE: u64 = 32 << 10;

/// See the module doc.
#[derive(Default)]
pub(crate) struct Index {
    /// By the segment's first LSN: points (lsn, file offset of that record's header), in LSN
    /// order, the segment's first record's among them once a write or a scan noted it.
    segments: BTreeMap<Lsn, Vec<(Lsn, u64)>>,
}

impl Index {
    /// Notes the records of a batch just written at `offset` of the segment that starts at
    /// `segment`: one point a stride. Walks the records' headers (their length), which the
    /// write just read, so it costs about a nanosecond a record.
    pub(crate) fn note_batch(&mut self, segment: Lsn, mut offset: u64, batch: &[Chunk]) {
        let points = self.segments.entry(segment).or_default();
        for chunk in batch {
            let bytes = chunk.bytes();
            let mut lsn = chunk.first();
            let mut at = 0usize;
            while at + RECORD_HEADER_LEN <= bytes.len() {
                note_in(points, lsn, offset);
                let len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
                let total = RECORD_HEADER_LEN + len as usize;
                at += total;
                offset += total as u64;
                lsn += 1;
            }
        }
    }

    /// Adds the points a scan of the segment found (in LSN order) past those it holds.
    pub(crate) fn merge(&mut self, segment: Lsn, found: &[(Lsn, u64)]) {
        let points = self.segments.entry(segment).or_default();
        for &(lsn, offset) in found {
            note_in(points, lsn, offset);
        }
    }

    /// The last point at or before `lsn` in the segment that starts at `segment`: where a read
    /// of `lsn` starts. None when the segment has no point at or before it (scan from its
    /// first record).
    pub(crate) fn seek(&self, segment: Lsn, lsn: Lsn) -> Option<(Lsn, u64)> {
        let points = self.segments.get(&segment)?;
        let i = points.partition_point(|&(l, _)| l <= lsn);
        i.checked_sub(1).map(|i| points[i])
    }

    /// Forgets the segments that start before `first`: they left the log.
    pub(crate) fn drop_before(&mut self, first: Lsn) {
        self.segments = self.segments.split_off(&first);
    }

    /// Points held, over every segment (for stats and tests).
    pub(crate) fn points(&self) -> usize {
        self.segments.values().map(Vec::len).sum()
    }
}

/// Appends (lsn, offset) to `points` if it comes after the last one and a stride past it.
fn note_in(points: &mut Vec<(Lsn, u64)>, lsn: Lsn, offset: u64) {
    match points.last() {
        Some(&(l, o)) if lsn <= l || offset < o + STRIDE => {}
        _ => points.push((lsn, offset)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_every_stride_and_seek_finds_the_last_at_or_before() {
        let mut ix = Index::default();
        // Records of 1 KiB from offset 40: a point every 32 records.
        let points: Vec<(Lsn, u64)> = (0..100u64).map(|i| (1 + i, 40 + i * 1024)).collect();
        ix.merge(1, &points);
        assert_eq!(ix.points(), 4, "records 1, 33, 65, 97");
        assert_eq!(ix.seek(1, 1), Some((1, 40)));
        assert_eq!(ix.seek(1, 32), Some((1, 40)));
        assert_eq!(ix.seek(1, 33), Some((33, 40 + 32 * 1024)));
        assert_eq!(ix.seek(1, 1000), Some((97, 40 + 96 * 1024)));
        assert_eq!(ix.seek(2, 5), None, "no such segment");
        // A scan that found points the index has, and more: only the new ones are added.
        ix.merge(1, &[(33, 40 + 32 * 1024), (129, 40 + 128 * 1024)]);
        assert_eq!(ix.seek(1, 200), Some((129, 40 + 128 * 1024)));
        ix.merge(200, &[(200, 40)]);
        ix.drop_before(200);
        assert_eq!((ix.seek(1, 50), ix.seek(200, 200)), (None, Some((200, 40))));
    }
}
