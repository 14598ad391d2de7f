//! Finding the end of a log on open, reading records back, and reporting on segments.
//!
//! Recovery cases, in one table (what `Log::open` does with each mode):
//!
//! | what the scan finds                                   | Strict | TolerateTornTail | Salvage |
//! |-------------------------------------------------------|--------|------------------|---------|
//! | zeros after the last record (preallocation)           | end    | end              | end     |
//! | bad record in the newest segment, nothing valid after | error  | cut there        | cut     |
//! | ... followed only by valid records of the same write  | error  | cut there        | cut     |
//! | ... followed by a valid record that starts a write    | error  | error            | cut     |
//! | bad record in an older segment                        | error  | error when read  | cut, drop later segments |
//! | older segment ends before the next one begins         | error  | error when read  | cut, drop later segments |
//! | newest segment without a header (crash while creating)| error  | drop the file    | drop    |
//! | bad header elsewhere, LSN gap, another log's segment  | error  | error            | cut before it |
//! | a spare file (`*.spare`, a segment prepared ahead)    | remove | remove           | remove  |
//!
//! "error" is `WalError::Corrupt` naming the file and offset; nothing is changed on disk.
//! "error when read": the default mode scans only the newest segment on open (see
//! [`recover`]), and [`read_records`] returns the error when the older segment's records are
//! read (replay after a snapshot reads every one it needs, so the server still refuses to
//! start on damage it would replay).
//! A spare is removed in every mode: it never holds an acknowledged record (a spare becomes a
//! segment by a rename that is made durable before anything written to it is acknowledged).

use std::path::{Path, PathBuf};

use crate::error::WalError;
use crate::format::{self, Bad, SegmentHeader, HEADER_LEN, RECORD_HEADER_LEN};
use crate::fs::{FileSystem, LogFile};
use crate::marks::Lsn;
use crate::options::RecoveryMode;
use crate::pages::{self, ReadBuf};

/// What recovery found: enough to continue appending.
pub(crate) struct Found {
    pub log_id: u64,
    pub last_lsn: Lsn,
    pub segments: Vec<(Lsn, PathBuf)>,
    pub tail_path: PathBuf,
    pub tail_end: u64,
    /// Format version of the tail segment's header.
    pub tail_version: u32,
}

/// How a segment scan ended.
struct ScanEnd {
    /// Offset just past the last good record.
    end: u64,
    /// LSN of the last good record (first_lsn - 1 if none).
    last_lsn: Lsn,
    /// Where and why the scan stopped early, if it did.
    bad: Option<(u64, &'static str)>,
}

/// Bytes read from a segment at a time.
const CHUNK: usize = 4 << 20;

/// Scans the records of one segment from its header on, calling `on_record` for each good
/// one until it returns `Ok(false)`. `buf` is the read buffer, reused segment to segment (a
/// new one would take a page fault for every 4 KiB it fills).
fn scan_segment<E>(
    file: &dyn LogFile,
    path: &Path,
    log_id: u64,
    first_lsn: Lsn,
    buf: &mut ReadBuf,
    mut on_record: impl FnMut(Lsn, &[u8]) -> Result<bool, E>,
) -> Result<ScanEnd, E>
where
    E: From<WalError>,
{
    let io = |e| WalError::io(path, e);
    let len = file.size().map_err(io)?;
    buf.truncate(0);
    let mut buf_start = HEADER_LEN as u64;
    let mut pos = 0usize;
    let mut expected = first_lsn;
    loop {
        let more = buf_start + (buf.len() as u64) < len;
        let decoded = format::decode_record(&buf[pos..], log_id);
        let need_more = match decoded {
            Err(Bad::Short) => true,
            Err(Bad::End) => buf.len() - pos < RECORD_HEADER_LEN,
            _ => false,
        };
        if need_more && more {
            buf.drain_front(pos);
            buf_start += pos as u64;
            pos = 0;
            let want = match format::decode_record(buf, log_id) {
                Err(Bad::Short) if buf.len() >= RECORD_HEADER_LEN => {
                    let l = u32::from_le_bytes(buf[0..4].try_into().expect("4 bytes")) as usize;
                    (RECORD_HEADER_LEN + l).max(CHUNK)
                }
                _ => CHUNK,
            };
            let have = buf.len();
            let to_read = want.min((len - buf_start) as usize - have).max(1);
            buf.resize(have + to_read);
            let n = file
                .read_at(buf_start + have as u64, &mut buf[have..])
                .map_err(io)?;
            buf.truncate(have + n);
            if n == 0 {
                return Ok(ScanEnd {
                    end: buf_start,
                    last_lsn: expected - 1,
                    bad: Some((buf_start, "unexpected end of file")),
                });
            }
            continue;
        }
        let at = buf_start + pos as u64;
        match decoded {
            Ok((lsn, payload, total)) => {
                if lsn != expected {
                    return Ok(ScanEnd {
                        end: at,
                        last_lsn: expected - 1,
                        bad: Some((at, "record out of sequence")),
                    });
                }
                if !on_record(lsn, &buf[pos + payload.start..pos + payload.end])? {
                    return Ok(ScanEnd {
                        end: at + total as u64,
                        last_lsn: lsn,
                        bad: None,
                    });
                }
                expected += 1;
                pos += total;
            }
            Err(Bad::End) => {
                return Ok(ScanEnd {
                    end: at,
                    last_lsn: expected - 1,
                    bad: None,
                })
            }
            Err(Bad::Short) => {
                return Ok(ScanEnd {
                    end: at,
                    last_lsn: expected - 1,
                    bad: Some((at, "torn record")),
                })
            }
            Err(Bad::Checksum) => {
                return Ok(ScanEnd {
                    end: at,
                    last_lsn: expected - 1,
                    bad: Some((at, "checksum mismatch")),
                })
            }
        }
    }
}

/// Whether a later sync group follows the bad record at `from`: a record that decodes
/// anywhere past it with LSN > `after_lsn` and (with `flags`, format 2) the sync-start flag.
/// If only records of the same unsynced group follow, its writes were torn by a crash before
/// their fdatasync returned (pages persist in any order); if a later group follows, an
/// fdatasync covered the damaged record. Without flags (format 1) any later record counts, as
/// every one might start a group.
fn later_sync_group_after(
    file: &dyn LogFile,
    path: &Path,
    log_id: u64,
    from: u64,
    after_lsn: Lsn,
    flags: bool,
) -> Result<bool, WalError> {
    let len = file.size().map_err(|e| WalError::io(path, e))?;
    if from + 1 >= len {
        return Ok(false);
    }
    let mut buf = pages::zeroed((len - from - 1) as usize);
    let n = file
        .read_at(from + 1, &mut buf[..(len - from - 1) as usize])
        .map_err(|e| WalError::io(path, e))?;
    let rest = &buf[..n];
    Ok(
        (0..rest.len()).any(|p| match format::decode_record(&rest[p..], log_id) {
            Ok((lsn, _, _)) => lsn > after_lsn && (!flags || format::starts_sync_group(&rest[p..])),
            Err(_) => false,
        }),
    )
}

/// Overwrites `[from, file end)` with zeros and syncs, so a cut tail cannot come back.
fn zero_from(file: &dyn LogFile, path: &Path, from: u64) -> Result<(), WalError> {
    let len = file.size().map_err(|e| WalError::io(path, e))?;
    zero_range(file, path, from, len)
}

/// Overwrites `[from, to)` with zeros and syncs.
fn zero_range(file: &dyn LogFile, path: &Path, from: u64, to: u64) -> Result<(), WalError> {
    let io = |e| WalError::io(path, e);
    let zeros = pages::zeroed(1 << 20);
    let mut at = from;
    while at < to {
        let n = zeros.len().min((to - at) as usize);
        file.write_at(at, &zeros[..n]).map_err(io)?;
        at += n as u64;
    }
    file.sync_data().map_err(io)
}

/// After a clean end in the newest segment: zeros whatever follows the end marker within
/// `window` bytes (the most the writes since one fdatasync can span), if anything does.
///
/// A crash can leave later pages of the unsynced writes on disk without their first ones:
/// valid records past the end, with LSNs the log will hand out again. They are never
/// read (the scan stops at the end), but left there they could later pass for "a valid record
/// after a bad one" and make a torn tail look like corruption; in a reused file they could
/// also carry LSNs above a later first LSN. Old records of a reused file are cleared too.
fn clear_after_end(file: &dyn LogFile, path: &Path, end: u64, window: u64) -> Result<(), WalError> {
    let io = |e| WalError::io(path, e);
    let to = file.size().map_err(io)?.min(end.saturating_add(window));
    let mut buf = pages::zeroed(CHUNK);
    let mut at = end;
    while at < to {
        let want = CHUNK.min((to - at) as usize);
        let n = file.read_at(at, &mut buf[..want]).map_err(io)?;
        if n == 0 {
            break;
        }
        if buf[..n].iter().any(|&b| b != 0) {
            return zero_range(file, path, end, to);
        }
        at += n as u64;
    }
    Ok(())
}

/// The segment files of `dir`, by first LSN.
fn list_segments(fs: &dyn FileSystem, dir: &Path) -> Result<Vec<(Lsn, PathBuf)>, WalError> {
    let mut segs: Vec<(Lsn, PathBuf)> = fs
        .list(dir)
        .map_err(|e| WalError::io(dir, e))?
        .into_iter()
        .filter_map(|p| {
            let lsn = format::parse_segment_name(p.file_name()?.to_str()?)?;
            Some((lsn, p))
        })
        .collect();
    segs.sort();
    Ok(segs)
}

fn corrupt(path: &Path, offset: u64, why: &'static str) -> WalError {
    WalError::Corrupt {
        path: path.to_path_buf(),
        offset,
        why,
    }
}

fn read_header(file: &dyn LogFile, path: &Path) -> Result<Result<SegmentHeader, Bad>, WalError> {
    let mut b = [0u8; HEADER_LEN];
    let n = file.read_at(0, &mut b).map_err(|e| WalError::io(path, e))?;
    if n < HEADER_LEN || b.iter().all(|&x| x == 0) {
        return Ok(Err(Bad::End));
    }
    Ok(SegmentHeader::decode(&b))
}

/// Asks the disk to read the segment about to be scanned, and the one after it, in the
/// background (see [`LogFile::will_need`]): with a cold cache the scan then checks one part
/// while the next is being read.
fn read_ahead(fs: &dyn FileSystem, file: &dyn LogFile, next: Option<&Path>) {
    file.will_need();
    if let Some(Ok(next)) = next.map(|p| fs.open(p)) {
        next.will_need();
    }
}

/// Removes the segments from index `from` on (Salvage, or an unfinished newest segment).
fn drop_segments(fs: &dyn FileSystem, dir: &Path, segs: &[(Lsn, PathBuf)]) -> Result<(), WalError> {
    for (_, p) in segs {
        fs.remove(p).map_err(|e| WalError::io(p, e))?;
    }
    fs.sync_dir(dir).map_err(|e| WalError::io(dir, e))
}

/// Removes leftover spare files (see [`format::spare_name`]); returns how many.
fn remove_spares(fs: &dyn FileSystem, dir: &Path) -> Result<usize, WalError> {
    let mut n = 0;
    for p in fs.list(dir).map_err(|e| WalError::io(dir, e))? {
        if p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(format::is_spare_name)
        {
            fs.remove(&p).map_err(|e| WalError::io(&p, e))?;
            n += 1;
        }
    }
    Ok(n)
}

/// Finds the end of the log in `dir` (None if there is no segment yet).
///
/// `write_window` is the most bytes the writes between two fdatasyncs can span (see
/// [`clear_after_end`]).
///
/// In the default mode (`TolerateTornTail`) only the newest segment's records are scanned:
/// the end of the log is in it, and an older segment is sealed (every record in it was made
/// durable before the segment after it got its first record). An older segment's header is
/// still checked here (its log and first LSN); its records are checked when they are read
/// ([`read_records`]: a bad record, or a segment that ends before the next one begins, is
/// `WalError::Corrupt` then), so a server that replays them still refuses to start on one.
/// A restart then reads the log once instead of twice: at 10M items on flash, 7 segments
/// (448 MiB) were scanned to find an end that only the last one holds. `Strict` and
/// `Salvage` scan every segment, as they must to refuse or cut at the first bad record.
pub(crate) fn recover(
    fs: &dyn FileSystem,
    dir: &Path,
    mode: RecoveryMode,
    write_window: u64,
) -> Result<Option<Found>, WalError> {
    // No directory sync needed: a spare that comes back after a crash is removed again.
    remove_spares(fs, dir)?;
    let mut segs = list_segments(fs, dir)?;
    let mut log_id = None;
    let mut expected: Option<Lsn> = None;
    // End offset of the last segment scanned (the tail, once the loop is done).
    let mut tail_end = 0;
    let mut tail_version = format::VERSION;
    let mut buf = ReadBuf::new();
    let headers_only = mode == RecoveryMode::TolerateTornTail;
    // `expected` before the segment just passed on its header alone (see below).
    let mut expected_before_previous = None;
    let mut i = 0;
    while i < segs.len() {
        let (first, path) = segs[i].clone();
        let is_last = i + 1 == segs.len();
        let file = fs.open(&path).map_err(|e| WalError::io(&path, e))?;
        let header = read_header(file.as_ref(), &path)?;
        let problem = match header {
            Err(Bad::End) if is_last && mode != RecoveryMode::Strict => {
                // Crashed while creating the newest segment: it never held a record.
                drop_segments(fs, dir, &segs[i..])?;
                segs.truncate(i);
                if headers_only && i > 0 {
                    // The segment before it was passed on its header; it is the newest
                    // now, so scan it for the end.
                    i -= 1;
                    expected = expected_before_previous;
                    continue;
                }
                break;
            }
            Err(_) => Some("bad segment header"),
            Ok(h) if h.first_lsn != first => Some("segment header does not match its file name"),
            Ok(h) if log_id.is_some_and(|id| id != h.log_id) => {
                Some("segment belongs to another log")
            }
            Ok(_) if expected.is_some_and(|e| e != first) => {
                Some("gap in the log's sequence numbers")
            }
            Ok(_) => None,
        };
        if let Some(why) = problem {
            if mode == RecoveryMode::Salvage && i > 0 {
                drop_segments(fs, dir, &segs[i..])?;
                segs.truncate(i);
                break;
            }
            return Err(corrupt(&path, 0, why));
        }
        let h = header.expect("checked above");
        log_id = Some(h.log_id);
        tail_version = h.version;
        if headers_only && !is_last {
            // Sealed: its records end where the next segment's begin (checked when read).
            expected_before_previous = expected;
            expected = Some(segs[i + 1].0);
            i += 1;
            continue;
        }
        read_ahead(fs, file.as_ref(), segs.get(i + 1).map(|(_, p)| p.as_path()));
        let end =
            scan_segment::<WalError>(file.as_ref(), &path, h.log_id, first, &mut buf, |_, _| {
                Ok(true)
            })?;
        expected = Some(end.last_lsn + 1);
        tail_end = end.end;
        if let Some((offset, why)) = end.bad {
            let torn_tail = is_last
                && mode == RecoveryMode::TolerateTornTail
                && !later_sync_group_after(
                    file.as_ref(),
                    &path,
                    h.log_id,
                    offset,
                    end.last_lsn,
                    h.version >= 2,
                )?;
            if mode == RecoveryMode::Salvage || torn_tail {
                zero_from(file.as_ref(), &path, offset)?;
                drop_segments(fs, dir, &segs[i + 1..])?;
                segs.truncate(i + 1);
                break;
            }
            return Err(corrupt(&path, offset, why));
        }
        if is_last && mode != RecoveryMode::Strict {
            clear_after_end(file.as_ref(), &path, end.end, write_window)?;
        }
        i += 1;
    }
    let Some(log_id) = log_id else {
        // Only headerless files: an empty log that crashed while being created.
        if !segs.is_empty() {
            if mode == RecoveryMode::Strict {
                return Err(corrupt(&segs[0].1, 0, "bad segment header"));
            }
            drop_segments(fs, dir, &segs)?;
        }
        return Ok(None);
    };
    let (_, tail_path) = segs.last().cloned().expect("at least one segment");
    let last_lsn = expected.expect("a segment was scanned") - 1;
    Ok(Some(Found {
        log_id,
        last_lsn,
        segments: segs,
        tail_path,
        tail_end,
        tail_version,
    }))
}

/// Calls `f` for each record with `from <= LSN <= upto`, in order, from the given segments.
///
/// A segment must hold exactly the LSNs from its first to the next segment's first - 1 (as
/// far as `upto` needs): one that ends early or runs past it is `WalError::Corrupt`, since
/// [`recover`] checks only the newest segment's records in the default mode.
pub fn read_records<E: From<WalError>>(
    fs: &dyn FileSystem,
    segments: &[(Lsn, PathBuf)],
    log_id: u64,
    from: Lsn,
    upto: Lsn,
    mut f: impl FnMut(Lsn, &[u8]) -> Result<(), E>,
) -> Result<(), E> {
    let mut buf = ReadBuf::new();
    for (i, (first, path)) in segments.iter().enumerate() {
        if *first > upto {
            break;
        }
        if segments.get(i + 1).is_some_and(|(next, _)| *next <= from) {
            continue;
        }
        let file = fs.open(path).map_err(|e| WalError::io(path, e))?;
        read_ahead(
            fs,
            file.as_ref(),
            segments.get(i + 1).map(|(_, p)| p.as_path()),
        );
        let next_first = segments.get(i + 1).map(|(next, _)| *next);
        let mut past_next = None;
        let end = scan_segment::<E>(
            file.as_ref(),
            path,
            log_id,
            *first,
            &mut buf,
            |lsn, payload| {
                if lsn > upto {
                    return Ok(false);
                }
                if next_first.is_some_and(|next| lsn >= next) {
                    past_next = Some(lsn);
                    return Ok(false);
                }
                if lsn >= from {
                    f(lsn, payload)?;
                }
                Ok(true)
            },
        )?;
        if past_next.is_some() {
            return Err(corrupt(path, end.end, "record past the next segment's first LSN").into());
        }
        // The last LSN this segment must hold for the read.
        let needed = next_first.map_or(upto, |next| upto.min(next - 1));
        if end.last_lsn < needed {
            let (offset, why) = end
                .bad
                .unwrap_or((end.end, "segment ends before the next one begins"));
            return Err(corrupt(path, offset, why).into());
        }
    }
    Ok(())
}

/// One segment as the inspector reports it.
#[derive(Debug)]
pub struct SegmentReport {
    pub path: PathBuf,
    pub first_lsn: Lsn,
    pub log_id: Option<u64>,
    pub records: u64,
    pub payload_bytes: u64,
    pub last_lsn: Lsn,
    pub end_offset: u64,
    /// Offset and reason of the first problem, if any.
    pub problem: Option<(u64, &'static str)>,
}

/// Every segment of `dir`, with `on_record` called for each good record.
pub struct DirScan {
    pub segments: Vec<SegmentReport>,
}

/// Reads every segment of `dir` without changing anything (for `cairn-wal-inspect`).
pub fn scan_dir(
    fs: &dyn FileSystem,
    dir: &Path,
    mut on_record: impl FnMut(&Path, Lsn, &[u8]),
) -> Result<DirScan, WalError> {
    let mut out = Vec::new();
    let mut buf = ReadBuf::new();
    for (first, path) in list_segments(fs, dir)? {
        let file = fs.open(&path).map_err(|e| WalError::io(&path, e))?;
        let header = read_header(file.as_ref(), &path)?;
        let mut report = SegmentReport {
            path: path.clone(),
            first_lsn: first,
            log_id: None,
            records: 0,
            payload_bytes: 0,
            last_lsn: first - 1,
            end_offset: 0,
            problem: None,
        };
        match header {
            Ok(h) if h.first_lsn == first => {
                report.log_id = Some(h.log_id);
                let mut records = 0u64;
                let mut bytes = 0u64;
                let end = scan_segment::<WalError>(
                    file.as_ref(),
                    &path,
                    h.log_id,
                    first,
                    &mut buf,
                    |lsn, payload| {
                        records += 1;
                        bytes += payload.len() as u64;
                        on_record(&path, lsn, payload);
                        Ok(true)
                    },
                )?;
                report.records = records;
                report.payload_bytes = bytes;
                report.last_lsn = end.last_lsn;
                report.end_offset = end.end;
                report.problem = end.bad;
            }
            Ok(_) => report.problem = Some((0, "segment header does not match its file name")),
            Err(_) => report.problem = Some((0, "bad segment header")),
        }
        out.push(report);
    }
    Ok(DirScan { segments: out })
}
