//! Reading records back by LSN range ([`crate::Log::read_range`]): the watch's history older
//! than its memory, and the values of events whose item changed since. Each read starts at the
//! sparse index's last point at or before the first LSN it wants (`crate::index`), so a record
//! costs a read of at most a stride before it, wherever it is in its segment.
//!
//! ```text
//!   read_range(from, upto) ── segments overlapping [from, upto] ── per segment:
//!     index.seek(segment, from) ─> (lsn, offset), else the segment's first record
//!     ── pread from offset, 64 KiB first, doubling up to 4 MiB while the read goes on
//!     ── decode each record (CRC checked), in LSN order ── f(lsn, payload) for lsn >= from
//!     ── points found on the way ─> index.merge (a segment written before this process)
//! ```
//!
//! Non-goals: recovery's scans (`crate::recovery`), and what a payload means.

use std::path::Path;

use crate::error::WalError;
use crate::format::{self, Bad, HEADER_LEN, RECORD_HEADER_LEN};
use crate::fs::LogFile;
use crate::index::STRIDE;
use crate::marks::Lsn;
use crate::pages::ReadBuf;
use crate::shared::Shared;

/// The first read of a scan; each next one doubles, up to [`MAX_READ`].
const FIRST_READ: usize = 64 << 10;
const MAX_READ: usize = 4 << 20;

/// Where one segment's scan starts and what it must find.
struct Scan<'a> {
    path: &'a Path,
    /// The segment's first LSN (its index key).
    segment: Lsn,
    /// The record the scan starts at, and its file offset.
    lsn: Lsn,
    offset: u64,
    /// The last LSN the segment holds, if a later segment exists (its first LSN - 1).
    last_of_segment: Option<Lsn>,
}

impl Shared {
    /// See [`crate::Log::read_range`].
    pub(crate) fn read_range<E: From<WalError>>(
        &self,
        from: Lsn,
        upto: Lsn,
        mut f: impl FnMut(Lsn, &[u8]) -> Result<bool, E>,
    ) -> Result<(), E> {
        let segments = self.state.lock().segments.clone();
        // One read buffer for every segment (a new one would fault its pages in again).
        let mut buf = ReadBuf::new();
        for (i, (first, path)) in segments.iter().enumerate() {
            if *first > upto {
                break;
            }
            let next_first = segments.get(i + 1).map(|(next, _)| *next);
            if next_first.is_some_and(|next| next <= from) {
                continue;
            }
            let start = if from > *first {
                self.index.lock().seek(*first, from)
            } else {
                None
            };
            let (lsn, offset) = start.unwrap_or((*first, HEADER_LEN as u64));
            let scan = Scan {
                path,
                segment: *first,
                lsn,
                offset,
                last_of_segment: next_first.map(|n| n - 1),
            };
            if !self.scan(scan, from, upto, &mut buf, &mut f)? {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Scans one segment from `s`; false once `f` asked to stop or `upto` was passed.
    fn scan<E: From<WalError>>(
        &self,
        s: Scan<'_>,
        from: Lsn,
        upto: Lsn,
        buf: &mut ReadBuf,
        f: &mut impl FnMut(Lsn, &[u8]) -> Result<bool, E>,
    ) -> Result<bool, E> {
        let io = |e| WalError::io(s.path, e);
        let file = self.fs.open(s.path).map_err(io)?;
        let needed = s.last_of_segment.map_or(upto, |last| last.min(upto));
        buf.truncate(0);
        let mut buf_at = s.offset;
        let mut pos = 0usize;
        let mut expected = s.lsn;
        let mut read_len = FIRST_READ;
        // The scan's first record is a point (the segment's first, or one the index had).
        let mut found: Vec<(Lsn, u64)> = vec![(s.lsn, s.offset)];
        let mut last_point = s.offset;
        let go_on = loop {
            if expected > needed {
                // The segment gave what it must: go on to the next one unless done.
                break expected <= upto;
            }
            let at = buf_at + pos as u64;
            let rest = &buf[pos..];
            // Bytes the next record needs in the buffer: its header, then all of it.
            let whole = match rest.get(..4) {
                Some(len) if rest.len() >= RECORD_HEADER_LEN => {
                    let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
                    RECORD_HEADER_LEN + len.min(self.opts.max_record_bytes)
                }
                _ => RECORD_HEADER_LEN,
            };
            if rest.len() < whole {
                buf.drain_front(pos);
                buf_at += pos as u64;
                pos = 0;
                let want = read_len.max(whole - buf.len());
                read_len = (read_len * 2).min(MAX_READ);
                if read_more(file.as_ref(), buf, buf_at, want).map_err(io)? == 0 {
                    return Err(corrupt(s.path, at, "the segment ends before the record").into());
                }
                continue;
            }
            let (lsn, payload, total) = match format::decode_record(rest, self.log_id) {
                Ok(r) => r,
                Err(Bad::End) => {
                    return Err(corrupt(s.path, at, "the segment ends before the record").into())
                }
                Err(Bad::Short) => return Err(corrupt(s.path, at, "torn record").into()),
                Err(Bad::Checksum) => return Err(corrupt(s.path, at, "checksum mismatch").into()),
            };
            if lsn != expected {
                return Err(corrupt(s.path, at, "record out of sequence").into());
            }
            if at >= last_point + STRIDE {
                found.push((lsn, at));
                last_point = at;
            }
            if lsn >= from && !f(lsn, &rest[payload])? {
                break false;
            }
            expected += 1;
            pos += total;
        };
        self.index.lock().merge(s.segment, &found);
        Ok(go_on)
    }
}

/// Appends up to `want` bytes of the file from `at + buf.len()` to `buf`; the bytes read.
fn read_more(
    file: &dyn LogFile,
    buf: &mut ReadBuf,
    at: u64,
    want: usize,
) -> std::io::Result<usize> {
    let have = buf.len();
    buf.resize(have + want);
    let mut n = 0;
    while n < want {
        let got = file.read_at(at + (have + n) as u64, &mut buf[have + n..])?;
        if got == 0 {
            break;
        }
        n += got;
    }
    buf.truncate(have + n);
    Ok(n)
}

fn corrupt(path: &Path, offset: u64, why: &'static str) -> WalError {
    WalError::Corrupt {
        path: path.to_path_buf(),
        offset,
        why,
    }
}
