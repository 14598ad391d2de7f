//! The store's side of the flash tier: the packed location a flash-resident item keeps in RAM,
//! and the narrow seam ([`FlashTier`]) through which items leave RAM for flash.
//!
//! ```text
//!   RAM eviction (segment-FIFO tail) ──FlashTier::admit(key, value, meta)──> flash writer buffer
//!        │                                   └─ Some(FlashLoc): the index keeps 8 bytes
//!        v                                      None: the writer is behind → evicted for good
//!   Shard { index: HashTable<Loc> (RAM), flash: FlashIndex (flash, see flash_index.rs) }
//!        └─ overwrite / delete of a key removes its flash copy (the entry with its tag that
//!           holds it; FlashTier::release), so an old flash copy can never be found again
//! ```
//!
//! A flash entry holds no key: only a 28-bit tag of the key's hash, the device block where
//! the item starts, how many 4 KiB blocks to read, and a fetched bit. Two keys of one shard
//! with the same tag are indistinguishable in RAM; the full key is compared after the device
//! read. A store or delete of a key that has no RAM copy removes the key's own flash copy
//! only: each entry with its tag is checked first ([`FlashTier::key_at`]: the segment buffer
//! if the item is not written yet, else a read made before the shard lock was taken, see
//! `Store::spare_flash`, or a device read), so writing one key never drops another.
//!
//! No two items of one 4 KiB block share a tag (the tier starts a new block instead), so an
//! entry's place (block, blocks, tag) names exactly one item.

use crate::types::ItemMeta;

/// Bits of the device block number: 2^27 blocks of 4 KiB = 512 GiB.
pub const BLOCK_BITS: u32 = 27;
/// Bits of (blocks to read - 1): 1..=256 blocks, items up to 1 MiB.
const NBLOCKS_BITS: u32 = 8;
/// Bits of the key-hash tag.
pub const TAG_BITS: u32 = 28;
/// Most 4 KiB blocks one flash item may span.
pub const MAX_ITEM_BLOCKS: u32 = 1 << NBLOCKS_BITS;
const FETCHED_BIT: u64 = 1 << (BLOCK_BITS + NBLOCKS_BITS);
const TAG_SHIFT: u32 = BLOCK_BITS + NBLOCKS_BITS + 1;
const _: () = assert!(TAG_SHIFT + TAG_BITS == 64);

/// Where a flash-resident item is, packed into 8 bytes:
///
/// ```text
///   bits  0..27  device block (4 KiB units) where the item starts
///   bits 27..35  blocks to read - 1
///   bit  35      fetched since it was written to flash (promotion, reinsertion)
///   bits 36..64  tag: bits 0..28 of the key's hash (the shard uses bits 32.. of it)
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlashLoc(pub u64);

const _: () = assert!(std::mem::size_of::<FlashLoc>() == 8);

impl std::fmt::Debug for FlashLoc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "FlashLoc(block {} x{} tag {:#x}{})",
            self.block(),
            self.nblocks(),
            self.tag(),
            if self.fetched() { " fetched" } else { "" }
        )
    }
}

/// The tag of a key hash.
pub fn tag_of(hash: u64) -> u32 {
    (hash & ((1 << TAG_BITS) - 1)) as u32
}

impl FlashLoc {
    /// A location for the item of `hash` starting at `block`, `nblocks` long (1..=256).
    pub fn new(hash: u64, block: u32, nblocks: u32) -> FlashLoc {
        assert!(block < 1 << BLOCK_BITS, "flash block out of range");
        assert!((1..=MAX_ITEM_BLOCKS).contains(&nblocks), "flash item size");
        FlashLoc(
            u64::from(block)
                | (u64::from(nblocks - 1) << BLOCK_BITS)
                | (u64::from(tag_of(hash)) << TAG_SHIFT),
        )
    }

    pub fn block(self) -> u32 {
        (self.0 & ((1 << BLOCK_BITS) - 1)) as u32
    }

    pub fn nblocks(self) -> u32 {
        ((self.0 >> BLOCK_BITS) & ((1 << NBLOCKS_BITS) - 1)) as u32 + 1
    }

    pub fn tag(self) -> u32 {
        (self.0 >> TAG_SHIFT) as u32
    }

    pub fn fetched(self) -> bool {
        self.0 & FETCHED_BIT != 0
    }

    /// The same location with the fetched bit set.
    pub fn with_fetched(self) -> FlashLoc {
        FlashLoc(self.0 | FETCHED_BIT)
    }

    /// The location without its fetched bit: two entries are the same copy iff these match.
    pub fn place(self) -> u64 {
        self.0 & !FETCHED_BIT
    }
}

thread_local! {
    /// Flash entries with a key's tag that a device read just showed to hold other keys:
    /// (key hash, places). Set by [`crate::Store::spare_flash`] right before a command runs
    /// on this thread, cleared when its `Store::entry` ends.
    static SPARED: std::cell::RefCell<(u64, Vec<(u64, u64)>)> =
        const { std::cell::RefCell::new((0, Vec::new())) };
}

/// The (place, segment seq) spared for `hash` (empty unless set for this very hash).
pub(crate) fn spared(hash: u64) -> Vec<(u64, u64)> {
    SPARED.with(|s| {
        let s = s.borrow();
        if s.0 == hash {
            s.1.clone()
        } else {
            Vec::new()
        }
    })
}

pub(crate) fn set_spared(hash: u64, places: Vec<(u64, u64)>) {
    SPARED.with(|s| *s.borrow_mut() = (hash, places));
}

pub(crate) fn clear_spared() {
    SPARED.with(|s| {
        let mut s = s.borrow_mut();
        if !s.1.is_empty() {
            *s = (0, Vec::new());
        }
    });
}

/// The flash tier as the store sees it. Implemented by `cairn-flash`; every call is made
/// under a shard lock, so an implementation takes only its own short locks and never a
/// shard's.
pub trait FlashTier: Send + Sync {
    /// An item is leaving RAM (the segment-FIFO tail): copy it into the flash write buffer and
    /// return where it will be, or None if it cannot be taken now (the writer is behind, or
    /// the item is too large); the store then evicts it for good. Never blocks on I/O.
    fn admit(&self, hash: u64, key: &[u8], value: &[u8], meta: &ItemMeta) -> Option<FlashLoc>;
    /// The index dropped an entry (overwrite, delete, flush, expiry, reclaim): its bytes on
    /// flash are dead space from now on.
    fn release(&self, loc: FlashLoc);
    /// Entries were put back in the index by recovery (they were live at the checkpoint).
    fn restore(&self, locs: &[FlashLoc]);
    /// The sequence number of `loc`'s segment if it is written and sealed (no item can be
    /// added to it any more), else None.
    fn sealed_seq(&self, loc: FlashLoc) -> Option<u64>;
    /// Whose item `loc` holds: `key`'s, another key's (a shared tag), or unknown (damaged or
    /// unreadable). From the segment buffer while the item is not written yet; else with a
    /// device read that blocks the caller, so callers read candidates beforehand where they
    /// can (`Store::spare_flash`) and this read stays rare.
    fn key_at(&self, loc: FlashLoc, key: &[u8]) -> KeyAt;
}

/// Answer of [`FlashTier::key_at`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyAt {
    /// The item is the key's.
    Key,
    /// The item is another key's.
    Other,
    /// The item is damaged or could not be read: nobody's, as far as a read can tell.
    Unknown,
}
