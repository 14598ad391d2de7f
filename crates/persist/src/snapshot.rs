//! Snapshot files: every live item at one log position, in checksummed blocks with a trailer.
//!
//! ```text
//! "snapshot-<lsn, 20 digits>.snap"; integers little-endian
//!   header, 32 bytes: magic "CAIRNSNP" | version u32 = 4 | reserved u32 | lsn u64 |
//!                     header_crc u32 (CRC32C of bytes 0..24) | reserved u32
//!   blocks:           len u32 (1..) | crc u32 (CRC32C of the block bytes) | block bytes
//!     block bytes = records back to back, each an item or (version 3) a flash entry:
//!       item:  klen u8 (1..=250) | key | flags u32 | exptime u32 | cas u64 |
//!              state u8 (bit 0 stale) | mod_revision u64 (version 4) | vlen u32 | value
//!       flash: 0xFF | shard u32 | shard_count u32 | loc u64 (the store's FlashLoc) |
//!              seq u64 (of the flash segment, see cairn_flash's checkpoint notes)
//!   trailer, 40 bytes: 0xFFFFFFFF | magic "CAIRNEND" | items u64 | blocks u64 |
//!                      cas_floor u64 | crc u32 (CRC32C of the 36 trailer bytes before it)
//!   (still read: versions 2 and 3, items without mod_revision, which then reads as the
//!   snapshot's lsn; version 1, also a 32-byte trailer without cas_floor)
//! ```
//!
//! `cas_floor` is the store's last CAS unique when the copy ended: at least every CAS the
//! snapshot's items carry, and every CAS handed out to an item deleted before the copy ended,
//! which the snapshot no longer shows.
//!
//! `lsn` is the log position the snapshot is consistent with: replaying every log record with
//! a larger LSN over it gives the exact state (see docs/ARCHITECTURE.md for the argument).
//! A file without a valid trailer is incomplete and is never loaded.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cairn_wal::{FileSystem, LogFile};

use crate::error::PersistError;

pub const MAGIC: &[u8; 8] = b"CAIRNSNP";
pub const END_MAGIC: &[u8; 8] = b"CAIRNEND";
pub const VERSION: u32 = 4;
/// The first byte of a flash entry record (keys are at most 250 bytes).
const FLASH_RECORD: u8 = 0xFF;
/// Bytes of a flash entry record.
const FLASH_RECORD_LEN: usize = 1 + 4 + 4 + 8 + 8;
const HEADER_LEN: usize = 32;
/// Trailer length of the version written.
const TRAILER_LEN: usize = 40;
/// Trailer length by format version (1 had no `cas_floor`).
fn trailer_len(version: u32) -> usize {
    if version == 1 {
        32
    } else {
        TRAILER_LEN
    }
}
/// A block is written once it holds this many bytes.
const BLOCK_TARGET: usize = 1 << 20;
/// Records [`load`] hands its callback at once. A fixed batch, not the whole block: the
/// batch's vector is made once per block and never grows (grown record by record, its
/// reallocations were a quarter of a 9M-entry snapshot's load, copies and page faults).
const RECORDS_PER_CALL: usize = 4096;

pub fn file_name(lsn: u64) -> String {
    format!("snapshot-{lsn:020}.snap")
}

pub fn parse_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("snapshot-")?.strip_suffix(".snap")?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// One item as the snapshot stores it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapItem<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub flags: u32,
    pub exptime: u32,
    pub cas: u64,
    pub stale: bool,
    /// The revision of the mutation that made the item (the item's mod_revision).
    pub mod_revision: u64,
}

/// A flash-resident item as a checkpoint records it: where it is, not what it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapFlash {
    /// The store shard it was in, and the store's shard count then (an entry holds no key,
    /// so it can only go back to the same shard of a store of the same shape).
    pub shard: u32,
    pub shard_count: u32,
    pub loc: u64,
    pub seq: u64,
}

/// One record of a snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SnapRecord<'a> {
    Item(SnapItem<'a>),
    Flash(SnapFlash),
}

/// Appends a flash entry record to a block.
pub fn encode_flash(out: &mut Vec<u8>, f: &SnapFlash) {
    out.push(FLASH_RECORD);
    out.extend_from_slice(&f.shard.to_le_bytes());
    out.extend_from_slice(&f.shard_count.to_le_bytes());
    out.extend_from_slice(&f.loc.to_le_bytes());
    out.extend_from_slice(&f.seq.to_le_bytes());
}

/// Appends an item's bytes to a block.
pub fn encode_item(out: &mut Vec<u8>, it: &SnapItem<'_>) {
    out.push(u8::try_from(it.key.len()).expect("keys are at most 250 bytes"));
    out.extend_from_slice(it.key);
    out.extend_from_slice(&it.flags.to_le_bytes());
    out.extend_from_slice(&it.exptime.to_le_bytes());
    out.extend_from_slice(&it.cas.to_le_bytes());
    out.push(u8::from(it.stale));
    out.extend_from_slice(&it.mod_revision.to_le_bytes());
    out.extend_from_slice(
        &u32::try_from(it.value.len())
            .expect("items are under 4 GiB")
            .to_le_bytes(),
    );
    out.extend_from_slice(it.value);
}

/// Writes a snapshot: header, blocks, trailer; throttled to `rate_bytes_per_s` (0 = no limit).
pub struct Writer {
    file: Box<dyn LogFile>,
    path: PathBuf,
    offset: u64,
    block: Vec<u8>,
    items: u64,
    blocks: u64,
    rate_bytes_per_s: u64,
    started: Instant,
}

impl Writer {
    pub fn create(
        fs: &dyn FileSystem,
        path: &Path,
        lsn: u64,
        rate_bytes_per_s: u64,
    ) -> Result<Writer, PersistError> {
        let file = fs.create(path).map_err(|e| PersistError::io(path, e))?;
        let mut h = [0u8; HEADER_LEN];
        h[0..8].copy_from_slice(MAGIC);
        h[8..12].copy_from_slice(&VERSION.to_le_bytes());
        h[16..24].copy_from_slice(&lsn.to_le_bytes());
        let crc = crc32c::crc32c(&h[0..24]);
        h[24..28].copy_from_slice(&crc.to_le_bytes());
        file.write_at(0, &h)
            .map_err(|e| PersistError::io(path, e))?;
        Ok(Writer {
            file,
            path: path.to_path_buf(),
            offset: HEADER_LEN as u64,
            block: Vec::with_capacity(BLOCK_TARGET + 4096),
            items: 0,
            blocks: 0,
            rate_bytes_per_s,
            started: Instant::now(),
        })
    }

    /// Adds already-encoded item bytes (whole items, see [`encode_item`]).
    pub fn add_encoded(&mut self, bytes: &[u8], items: u64) -> Result<(), PersistError> {
        self.block.extend_from_slice(bytes);
        self.items += items;
        if self.block.len() >= BLOCK_TARGET {
            self.flush_block()?;
        }
        Ok(())
    }

    fn flush_block(&mut self) -> Result<(), PersistError> {
        if self.block.is_empty() {
            return Ok(());
        }
        let mut head = [0u8; 8];
        head[0..4].copy_from_slice(
            &u32::try_from(self.block.len())
                .expect("block under 4 GiB")
                .to_le_bytes(),
        );
        head[4..8].copy_from_slice(&crc32c::crc32c(&self.block).to_le_bytes());
        let io = |e| PersistError::io(&self.path, e);
        self.file.write_at(self.offset, &head).map_err(io)?;
        self.file
            .write_at(self.offset + 8, &self.block)
            .map_err(io)?;
        self.offset += 8 + self.block.len() as u64;
        self.blocks += 1;
        self.block.clear();
        self.throttle();
        Ok(())
    }

    /// Sleeps as long as the writer is ahead of its rate.
    fn throttle(&self) {
        if self.rate_bytes_per_s == 0 {
            return;
        }
        let due = Duration::from_secs_f64(self.offset as f64 / self.rate_bytes_per_s as f64);
        if let Some(ahead) = due.checked_sub(self.started.elapsed()) {
            std::thread::sleep(ahead);
        }
    }

    /// Writes the trailer with `cas_floor` (the store's last CAS unique, read after the
    /// last item was added) and fdatasyncs. Returns (items, bytes).
    pub fn finish(mut self, cas_floor: u64) -> Result<(u64, u64), PersistError> {
        self.flush_block()?;
        let mut t = [0u8; TRAILER_LEN];
        t[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
        t[4..12].copy_from_slice(END_MAGIC);
        t[12..20].copy_from_slice(&self.items.to_le_bytes());
        t[20..28].copy_from_slice(&self.blocks.to_le_bytes());
        t[28..36].copy_from_slice(&cas_floor.to_le_bytes());
        let crc = crc32c::crc32c(&t[0..36]);
        t[36..40].copy_from_slice(&crc.to_le_bytes());
        let io = |e| PersistError::io(&self.path, e);
        self.file.write_at(self.offset, &t).map_err(io)?;
        self.file.sync_data().map_err(io)?;
        Ok((self.items, self.offset + t.len() as u64))
    }
}

fn bad(path: &Path, offset: u64, why: &'static str) -> PersistError {
    PersistError::Corrupt {
        path: path.to_path_buf(),
        offset,
        why,
    }
}

fn read_exact(
    file: &dyn LogFile,
    path: &Path,
    offset: u64,
    buf: &mut [u8],
) -> Result<(), PersistError> {
    let mut done = 0;
    while done < buf.len() {
        let n = file
            .read_at(offset + done as u64, &mut buf[done..])
            .map_err(|e| PersistError::io(path, e))?;
        if n == 0 {
            return Err(bad(path, offset + done as u64, "unexpected end of file"));
        }
        done += n;
    }
    Ok(())
}

/// What [`load`] found in a snapshot's header and trailer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Loaded {
    /// The log position the snapshot is consistent with.
    pub lsn: u64,
    pub items: u64,
    /// See the module doc; 0 in a version 1 snapshot.
    pub cas_floor: u64,
}

/// Reads and checks a whole snapshot, calling `f` for each item (only after its block's
/// checksum passed). Any damage is an error naming the offset.
///
/// ```text
///   calling thread: header, trailer, then every block's 8-byte head ─> block index
///   worker k of n:  the k-th contiguous part of the index: read block, check CRC, decode,
///                   f(the block's records, RECORDS_PER_CALL at a time)
/// ```
///
/// `f` gets a block's records many at once (so that a caller can apply many under one
/// lock), and runs on `workers` threads at once, in no particular order: a snapshot holds each key
/// once, so the order items are applied in does not change the result. Each worker takes a
/// contiguous part of the file, and the file is written shard by shard, so workers mostly
/// fill different store shards. On an error some items may already have been passed to `f`
/// (the caller discards them).
pub fn load(
    fs: &dyn FileSystem,
    path: &Path,
    workers: usize,
    f: impl Fn(&[SnapRecord<'_>]) + Sync,
) -> Result<Loaded, PersistError> {
    let file = fs.open(path).map_err(|e| PersistError::io(path, e))?;
    let size = file.size().map_err(|e| PersistError::io(path, e))?;
    if size < HEADER_LEN as u64 {
        return Err(bad(path, 0, "too short for a snapshot"));
    }
    let mut h = [0u8; HEADER_LEN];
    read_exact(file.as_ref(), path, 0, &mut h)?;
    let crc = u32::from_le_bytes(h[24..28].try_into().expect("4 bytes"));
    let version = u32::from_le_bytes(h[8..12].try_into().expect("4 bytes"));
    if &h[0..8] != MAGIC || !(1..=VERSION).contains(&version) || crc != crc32c::crc32c(&h[0..24]) {
        return Err(bad(path, 0, "bad snapshot header"));
    }
    let lsn = u64::from_le_bytes(h[16..24].try_into().expect("8 bytes"));
    // Recovery picks a snapshot, and leaves out its flash entries past it, by the LSN in its
    // name (`Flash::items_past`); replay starts from the header's. They must be one.
    let named = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(parse_file_name);
    if named.is_some_and(|named| named != lsn) {
        return Err(bad(path, 16, "its name and its header give different LSNs"));
    }
    // Check the trailer first: an incomplete file is rejected before anything is loaded.
    let tlen = trailer_len(version);
    if size < (HEADER_LEN + tlen) as u64 {
        return Err(bad(path, 0, "too short for a snapshot"));
    }
    let mut t = vec![0u8; tlen];
    let trailer_at = size - tlen as u64;
    read_exact(file.as_ref(), path, trailer_at, &mut t)?;
    let tcrc = u32::from_le_bytes(t[tlen - 4..].try_into().expect("4 bytes"));
    if t[0..4] != u32::MAX.to_le_bytes()
        || &t[4..12] != END_MAGIC
        || tcrc != crc32c::crc32c(&t[..tlen - 4])
    {
        return Err(bad(
            path,
            trailer_at,
            "missing or bad trailer (incomplete snapshot)",
        ));
    }
    let want_items = u64::from_le_bytes(t[12..20].try_into().expect("8 bytes"));
    let want_blocks = u64::from_le_bytes(t[20..28].try_into().expect("8 bytes"));
    let cas_floor = match version {
        1 => 0,
        _ => u64::from_le_bytes(t[28..36].try_into().expect("8 bytes")),
    };

    // The block index: (offset of the block's head, length, CRC), from the heads alone.
    let mut index = Vec::new();
    let mut offset = HEADER_LEN as u64;
    while offset < trailer_at {
        let mut head = [0u8; 8];
        read_exact(file.as_ref(), path, offset, &mut head)?;
        let len = u32::from_le_bytes(head[0..4].try_into().expect("4 bytes")) as u64;
        let crc = u32::from_le_bytes(head[4..8].try_into().expect("4 bytes"));
        if len == 0 || offset + 8 + len > trailer_at {
            return Err(bad(path, offset, "bad block length"));
        }
        index.push((offset, len as usize, crc));
        offset += 8 + len;
    }
    if index.len() as u64 != want_blocks {
        return Err(bad(
            path,
            trailer_at,
            "trailer counts do not match the blocks",
        ));
    }
    // Items read so far by all workers, for the progress log (added once per block).
    let progress = AtomicU64::new(0);
    let load_part = |part: &[(u64, usize, u32)]| -> Result<u64, PersistError> {
        let mut items = 0u64;
        let mut block = Vec::new();
        for &(at, len, crc) in part {
            block.resize(len, 0);
            read_exact(file.as_ref(), path, at + 8, &mut block)?;
            if crc32c::crc32c(&block) != crc {
                return Err(bad(path, at, "block checksum mismatch"));
            }
            let mut p = 0usize;
            let mut block_items = 0u64;
            let mut records = Vec::with_capacity(RECORDS_PER_CALL);
            while p < block.len() {
                let (record, len) = decode_record(&block[p..], version, lsn)
                    .ok_or_else(|| bad(path, at + 8 + p as u64, "bad item in block"))?;
                p += len;
                records.push(record);
                if records.len() == RECORDS_PER_CALL || p == block.len() {
                    f(&records);
                    block_items += records.len() as u64;
                    records.clear();
                }
            }
            items += block_items;
            let before = progress.fetch_add(block_items, Ordering::Relaxed);
            if (before + block_items) / 1_000_000 > before / 1_000_000 {
                tracing::info!(
                    "recovery: {} items read from the snapshot",
                    (before + block_items) / 1_000_000 * 1_000_000
                );
            }
        }
        Ok(items)
    };
    let part_len = index.len().div_ceil(workers.max(1)).max(1);
    let counts: Vec<Result<u64, PersistError>> = std::thread::scope(|s| {
        let handles: Vec<_> = index
            .chunks(part_len)
            .map(|part| s.spawn(move || load_part(part)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a snapshot worker panicked"))
            .collect()
    });
    let mut items = 0u64;
    for c in counts {
        items += c?;
    }
    if items != want_items {
        return Err(bad(
            path,
            trailer_at,
            "trailer counts do not match the blocks",
        ));
    }
    Ok(Loaded {
        lsn,
        items,
        cas_floor,
    })
}

/// Decodes the record at the start of `b` (of a snapshot of format `version` taken at `lsn`):
/// it and its length.
fn decode_record(b: &[u8], version: u32, lsn: u64) -> Option<(SnapRecord<'_>, usize)> {
    if *b.first()? == FLASH_RECORD {
        if b.len() < FLASH_RECORD_LEN {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let f = SnapFlash {
            shard: u32_at(1),
            shard_count: u32_at(5),
            loc: u64_at(9),
            seq: u64_at(17),
        };
        return Some((SnapRecord::Flash(f), FLASH_RECORD_LEN));
    }
    let (item, len) = decode_item(b, version, lsn)?;
    Some((SnapRecord::Item(item), len))
}

/// Decodes one item and returns it with its length; items of versions before 4 get the
/// snapshot's `lsn` as their revision.
fn decode_item(b: &[u8], version: u32, lsn: u64) -> Option<(SnapItem<'_>, usize)> {
    let klen = *b.first()? as usize;
    let rev_len = if version >= 4 { 8 } else { 0 };
    let fixed = 1 + klen + 4 + 4 + 8 + 1 + rev_len + 4;
    if klen == 0 || b.len() < fixed {
        return None;
    }
    let key = &b[1..1 + klen];
    let r = &b[1 + klen..];
    let u32_at = |i: usize| u32::from_le_bytes(r[i..i + 4].try_into().expect("4 bytes"));
    let u64_at = |i: usize| u64::from_le_bytes(r[i..i + 8].try_into().expect("8 bytes"));
    let vlen = u32_at(17 + rev_len) as usize;
    if b.len() < fixed + vlen {
        return None;
    }
    let item = SnapItem {
        key,
        flags: u32_at(0),
        exptime: u32_at(4),
        cas: u64_at(8),
        stale: r[16] & 1 != 0,
        mod_revision: if version >= 4 { u64_at(17) } else { lsn },
        value: &b[fixed..fixed + vlen],
    };
    Some((item, fixed + vlen))
}
