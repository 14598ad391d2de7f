//! The bytes on the flash device: a superblock, then segments of 4 KiB blocks packed with items.
//!
//! ```text
//! device:  [superblock, 1 block][segment 0][segment 1] ... [segment n-1]
//!
//! superblock (block 0), integers little-endian:
//!    0  magic          8  "CAIRNFSB"
//!    8  version        4  2
//!   12  reserved       4  0
//!   16  segment_bytes  8  bytes of one segment (a multiple of 4 KiB)
//!   24  segment_count  8
//!   32  hash_seed      8  the store's key-hash seed (checkpoints record flash entries by hash bits)
//!   40  seq_base       8  random; the first segment write of this file gets it as its seq
//!   48  crc            4  CRC32C of bytes 0..48
//!
//! segment = header block + data blocks
//!   header (block 0 of the segment):
//!    0  magic          8  "CAIRNFSG"
//!    8  version        4  2
//!   12  segment        4  its index on the device
//!   16  seq            8  write sequence number, unique per write of a segment on this device
//!   24  items          4  items in the data blocks
//!   28  used_blocks    4  blocks written, header included
//!   32  crc            4  CRC32C of bytes 0..32
//!   data blocks: items back to back; an item never crosses a block boundary unless it is
//!   larger than a block, and then it starts at one; after the last item of a block, zeros.
//!   No two items of a block have the same tag (bits 0..28 of the key's hash): the writer
//!   starts a new block instead, so an index entry (block, tag) names one item.
//!
//! item:
//!    0  crc            4  CRC32C of bytes 4..len
//!    4  len            4  bytes of the whole item, header included (0 = no more items here)
//!    8  klen           1
//!    9  state          1  bit 0 fetched, bit 1 stale, bit 2 win_sent (as in RAM)
//!   10  flags          4
//!   14  exptime        4  absolute unix seconds, 0 = never
//!   18  cas            8
//!   26  revision       8  mod_revision: the revision of the mutation that made the item
//!   34  key, value     klen + (len - 34 - klen)
//! ```
//!
//! An item is found from its index entry (first block, block count) by reading those blocks
//! and scanning the first one for the key (a block holds at most one copy of a key).

use cairn_store::ItemMeta;

/// The device block: the unit of reads, of alignment, and of the index's addresses.
pub const BLOCK: usize = 4096;
pub const SUPER_MAGIC: &[u8; 8] = b"CAIRNFSB";
pub const SEGMENT_MAGIC: &[u8; 8] = b"CAIRNFSG";
/// 2: items carry their revision. A device of another version is not trusted (formatted anew).
pub const VERSION: u32 = 2;
/// Bytes of an item's header.
pub const ITEM_HEADER: usize = 34;

const STATE_FETCHED: u8 = 1;
const STATE_STALE: u8 = 2;
const STATE_WIN_SENT: u8 = 4;

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The device's first block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Superblock {
    pub segment_bytes: u64,
    pub segment_count: u64,
    pub hash_seed: u64,
    pub seq_base: u64,
}

impl Superblock {
    pub fn encode(&self, out: &mut [u8]) {
        out[..BLOCK].fill(0);
        out[0..8].copy_from_slice(SUPER_MAGIC);
        out[8..12].copy_from_slice(&VERSION.to_le_bytes());
        out[16..24].copy_from_slice(&self.segment_bytes.to_le_bytes());
        out[24..32].copy_from_slice(&self.segment_count.to_le_bytes());
        out[32..40].copy_from_slice(&self.hash_seed.to_le_bytes());
        out[40..48].copy_from_slice(&self.seq_base.to_le_bytes());
        let crc = crc32c::crc32c(&out[0..48]);
        out[48..52].copy_from_slice(&crc.to_le_bytes());
    }

    /// None if the block is not a valid superblock.
    pub fn decode(b: &[u8]) -> Option<Superblock> {
        if b.len() < 52
            || &b[0..8] != SUPER_MAGIC
            || u32_at(b, 8) != VERSION
            || u32_at(b, 48) != crc32c::crc32c(&b[0..48])
        {
            return None;
        }
        Some(Superblock {
            segment_bytes: u64_at(b, 16),
            segment_count: u64_at(b, 24),
            hash_seed: u64_at(b, 32),
            seq_base: u64_at(b, 40),
        })
    }
}

/// A segment's header block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    pub segment: u32,
    pub seq: u64,
    pub items: u32,
    pub used_blocks: u32,
}

impl SegmentHeader {
    pub fn encode(&self, out: &mut [u8]) {
        out[..BLOCK].fill(0);
        out[0..8].copy_from_slice(SEGMENT_MAGIC);
        out[8..12].copy_from_slice(&VERSION.to_le_bytes());
        out[12..16].copy_from_slice(&self.segment.to_le_bytes());
        out[16..24].copy_from_slice(&self.seq.to_le_bytes());
        out[24..28].copy_from_slice(&self.items.to_le_bytes());
        out[28..32].copy_from_slice(&self.used_blocks.to_le_bytes());
        let crc = crc32c::crc32c(&out[0..32]);
        out[32..36].copy_from_slice(&crc.to_le_bytes());
    }

    pub fn decode(b: &[u8]) -> Option<SegmentHeader> {
        if b.len() < 36
            || &b[0..8] != SEGMENT_MAGIC
            || u32_at(b, 8) != VERSION
            || u32_at(b, 32) != crc32c::crc32c(&b[0..32])
        {
            return None;
        }
        Some(SegmentHeader {
            segment: u32_at(b, 12),
            seq: u64_at(b, 16),
            items: u32_at(b, 24),
            used_blocks: u32_at(b, 28),
        })
    }
}

/// Bytes an item takes on flash.
pub fn item_len(key_len: usize, value_len: usize) -> usize {
    ITEM_HEADER + key_len + value_len
}

/// Blocks an item of `len` bytes is read with.
pub fn blocks_for(len: usize) -> u32 {
    len.div_ceil(BLOCK) as u32
}

/// Writes an item at the start of `out` (exactly `item_len` bytes long).
pub fn encode_item(out: &mut [u8], key: &[u8], value: &[u8], meta: &ItemMeta) {
    let len = item_len(key.len(), value.len());
    assert_eq!(out.len(), len, "item buffer size");
    out[4..8].copy_from_slice(&(len as u32).to_le_bytes());
    out[8] = u8::try_from(key.len()).expect("keys are at most 250 bytes");
    out[9] = (if meta.fetched { STATE_FETCHED } else { 0 })
        | (if meta.stale { STATE_STALE } else { 0 })
        | (if meta.win_sent { STATE_WIN_SENT } else { 0 });
    out[10..14].copy_from_slice(&meta.flags.to_le_bytes());
    out[14..18].copy_from_slice(&meta.exptime.to_le_bytes());
    out[18..26].copy_from_slice(&meta.cas.to_le_bytes());
    out[26..34].copy_from_slice(&meta.mod_revision.to_le_bytes());
    out[34..34 + key.len()].copy_from_slice(key);
    out[34 + key.len()..].copy_from_slice(value);
    let crc = crc32c::crc32c(&out[4..]);
    out[0..4].copy_from_slice(&crc.to_le_bytes());
}

/// One item as read back, borrowed from the read buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ItemRef<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub meta: ItemMeta,
    /// Bytes of the whole item.
    pub len: usize,
}

/// Decodes the item at the start of `b`, checking its bounds and checksum.
pub fn decode_item(b: &[u8]) -> Result<ItemRef<'_>, Damage> {
    if b.len() < ITEM_HEADER {
        return Err(Damage);
    }
    let len = u32_at(b, 4) as usize;
    let klen = b[8] as usize;
    if len < ITEM_HEADER + klen || len > b.len() {
        return Err(Damage);
    }
    if u32_at(b, 0) != crc32c::crc32c(&b[4..len]) {
        return Err(Damage);
    }
    let state = b[9];
    Ok(ItemRef {
        key: &b[ITEM_HEADER..ITEM_HEADER + klen],
        value: &b[ITEM_HEADER + klen..len],
        meta: ItemMeta {
            flags: u32_at(b, 10),
            exptime: u32_at(b, 14),
            cas: u64_at(b, 18),
            last_access: 0,
            fetched: state & STATE_FETCHED != 0,
            stale: state & STATE_STALE != 0,
            win_sent: state & STATE_WIN_SENT != 0,
            mod_revision: u64_at(b, 26),
        },
        len,
    })
}

/// The bytes read were not what was written (a bad length or checksum).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Damage;

/// What a scan of the read blocks found for a key.
#[derive(Debug, PartialEq, Eq)]
pub enum Found<'a> {
    Item(ItemRef<'a>),
    /// The key is not there (another key shares its hash tag).
    Absent,
    /// The blocks are damaged.
    Damaged,
}

/// Finds `key` in blocks read for an index entry of `nblocks` blocks.
pub fn find_item<'a>(blocks: &'a [u8], nblocks: u32, key: &[u8]) -> Found<'a> {
    if nblocks > 1 {
        return match decode_item(blocks) {
            Ok(it) if it.key == key => Found::Item(it),
            Ok(_) => Found::Absent,
            Err(Damage) => Found::Damaged,
        };
    }
    let block = &blocks[..BLOCK.min(blocks.len())];
    let mut at = 0;
    let mut last = None;
    while at + ITEM_HEADER <= block.len() {
        let len = u32_at(block, at + 4) as usize;
        if len == 0 {
            break;
        }
        let klen = block[at + 8] as usize;
        if len < ITEM_HEADER + klen || at + len > block.len() {
            return Found::Damaged;
        }
        if &block[at + ITEM_HEADER..at + ITEM_HEADER + klen] == key {
            last = Some(at);
        }
        at += len;
    }
    match last {
        None => Found::Absent,
        Some(at) => match decode_item(&block[at..]) {
            Ok(it) => Found::Item(it),
            Err(Damage) => Found::Damaged,
        },
    }
}

/// Every item of a segment's data blocks with its first block (relative to the segment) and
/// block count, for flash eviction. Stops at the first damaged item of a block (the rest of
/// that block is skipped; their index entries are dropped by the caller's scan).
pub fn segment_items(seg: &[u8], used_blocks: u32) -> Vec<(u32, u32, ItemRef<'_>)> {
    let mut out = Vec::new();
    let mut block = 1u32;
    while block < used_blocks {
        let start = block as usize * BLOCK;
        if start + BLOCK > seg.len() {
            break;
        }
        let mut at = 0;
        let mut next_block = block + 1;
        while at + ITEM_HEADER <= BLOCK {
            let b = &seg[start + at..];
            let len = u32_at(b, 4) as usize;
            if len == 0 {
                break;
            }
            let Ok(it) = decode_item(&b[..len.min(b.len())]) else {
                break;
            };
            if len > BLOCK {
                // A large item: alone from the start of its blocks.
                let n = blocks_for(len);
                out.push((block, n, it));
                next_block = block + n;
                break;
            }
            out.push((block, 1, it));
            at += len;
        }
        block = next_block;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(cas: u64) -> ItemMeta {
        ItemMeta {
            flags: 7,
            exptime: 99,
            cas,
            last_access: 0,
            fetched: true,
            stale: false,
            win_sent: true,
            // Apart from the CAS, so that a mix-up of the two shows.
            mod_revision: cas * 1000 + 7,
        }
    }

    #[test]
    fn headers_round_trip_and_reject_damage() {
        let mut b = vec![0u8; BLOCK];
        let s = Superblock {
            segment_bytes: 1 << 20,
            segment_count: 9,
            hash_seed: 42,
            seq_base: 1000,
        };
        s.encode(&mut b);
        assert_eq!(Superblock::decode(&b), Some(s));
        b[17] ^= 1;
        assert_eq!(Superblock::decode(&b), None);
        let h = SegmentHeader {
            segment: 3,
            seq: 77,
            items: 10,
            used_blocks: 4,
        };
        h.encode(&mut b);
        assert_eq!(SegmentHeader::decode(&b), Some(h));
        assert_eq!(Superblock::decode(&b), None);
        b[20] ^= 1;
        assert_eq!(SegmentHeader::decode(&b), None);
    }

    #[test]
    fn a_block_scan_finds_the_last_copy_and_catches_damage() {
        let mut block = vec![0u8; BLOCK];
        let mut at = 0;
        for (key, value, cas) in [
            (&b"a"[..], &b"one"[..], 1),
            (b"b", b"two", 2),
            (b"a", b"three", 3),
        ] {
            let len = item_len(key.len(), value.len());
            encode_item(&mut block[at..at + len], key, value, &meta(cas));
            at += len;
        }
        let Found::Item(it) = find_item(&block, 1, b"a") else {
            panic!("a is there")
        };
        assert_eq!((it.value, it.meta), (&b"three"[..], meta(3)));
        assert_eq!(find_item(&block, 1, b"c"), Found::Absent);
        // A flipped value byte: the checksum catches it, never a wrong value.
        let last = at - 1;
        block[last] ^= 0x20;
        assert_eq!(find_item(&block, 1, b"a"), Found::Damaged);
        // A bad length: damage, not a read past the block.
        block[4] = 0xff;
        block[5] = 0xff;
        assert_eq!(find_item(&block, 1, b"b"), Found::Damaged);
    }

    #[test]
    fn large_items_start_a_block_and_segments_list_their_items() {
        let mut seg = vec![0u8; 8 * BLOCK];
        let small = item_len(1, 10);
        encode_item(&mut seg[BLOCK..BLOCK + small], b"s", &[1; 10], &meta(1));
        let big_value = vec![9u8; 6000];
        let big = item_len(3, big_value.len());
        encode_item(
            &mut seg[2 * BLOCK..2 * BLOCK + big],
            b"big",
            &big_value,
            &meta(2),
        );
        encode_item(
            &mut seg[4 * BLOCK..4 * BLOCK + small],
            b"t",
            &[2; 10],
            &meta(3),
        );
        let items: Vec<_> = segment_items(&seg, 5)
            .into_iter()
            .map(|(b, n, it)| (b, n, it.key.to_vec()))
            .collect();
        assert_eq!(
            items,
            vec![
                (1, 1, b"s".to_vec()),
                (2, 2, b"big".to_vec()),
                (4, 1, b"t".to_vec())
            ]
        );
        let Found::Item(it) = find_item(&seg[2 * BLOCK..4 * BLOCK], 2, b"big") else {
            panic!("big is there")
        };
        assert_eq!(it.value, &big_value[..]);
    }
}
