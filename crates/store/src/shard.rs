//! One shard: a compact hash index over a FIFO of segments, with its own memory budget.
//!
//! ```text
//!   index (hashbrown::HashTable<Packed>, 5 bytes a slot + 1 control byte)
//!      │ Loc { segment slot, offset }, packed in 20 + 20 bits
//!      v
//!   slots: [seg 3][seg 0][seg 7] ...      fifo: oldest ──> newest (head, where items append)
//! ```
//!
//! Eviction is segment-FIFO with a second chance: when the budget is reached the oldest
//! segment is emptied; its live items that were fetched since they were written are copied to
//! the head (their fetched bit cleared), the rest are evicted. Whole segments are freed, so
//! memory is returned in large blocks with no fragmentation, and a checkpoint or a flash tier
//! can later work segment by segment.

use std::collections::VecDeque;
use std::sync::Arc;

use hashbrown::HashTable;

use crate::flash::{tag_of, FlashLoc, FlashTier, KeyAt};
use crate::flash_index::FlashIndex;
use crate::segment::{self, meta_of, Header, Segment, DEAD, FETCHED, SEGMENT_SIZE};
use crate::types::{DeleteReason, Mutation, PrevItem, Revision, StoreStats};

/// What a shard calls back into its store for while it makes room or removes items
/// (implemented by `Store`; a trait, so that shards need not know the store's type).
pub trait StoreCalls {
    /// The hash the store files `key` under.
    fn hash(&self, key: &[u8]) -> u64;
    /// Reports a mutation to the sink and returns its revision (`Store::report`).
    fn report(&self, m: &Mutation<'_>) -> Revision;
    /// The last CAS unique handed out (the CAS base of a new segment).
    fn cas_floor(&self) -> u64;
    /// The newest revision reported (the revision base of a new segment).
    fn newest_revision(&self) -> Revision;
}

/// What shard operations that make room or remove items need from the store.
pub struct Env<'a> {
    /// Unix seconds now (expiry).
    pub now: u32,
    /// The key hash, the mutation report (`Store::report`) and the newest revision (the base
    /// of a new segment).
    pub store: &'a dyn StoreCalls,
}

impl Env<'_> {
    fn hash_of(&self, key: &[u8]) -> u64 {
        self.store.hash(key)
    }
}

/// Where an item lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Loc {
    pub slot: u32,
    pub offset: u32,
}

/// Segment slots a shard can number: [`Packed`] keeps a slot in 20 bits (a shard of 1 MiB
/// segments holds up to 1 TiB; the server's shards hold at most a few hundred MiB).
pub const MAX_SEGMENTS: usize = 1 << 20;

/// A [`Loc`] as the index keeps it, in 5 bytes: the slot in the high 20 bits of 40, the offset
/// in the low 20 (an item starts within its 1 MiB segment; an oversized segment holds one
/// item, at 0). With hashbrown's control byte an index slot is 6 bytes instead of the 9 of an
/// aligned `Loc`; the index is about an eighth of the memory of a small item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packed([u8; 5]);

const OFFSET_BITS: u32 = 20;
const _: () = assert!(SEGMENT_SIZE <= 1 << OFFSET_BITS);
const _: () = assert!(std::mem::size_of::<Packed>() == 5);

impl Packed {
    pub fn new(loc: Loc) -> Packed {
        debug_assert!((loc.slot as usize) < MAX_SEGMENTS && loc.offset < 1 << OFFSET_BITS);
        let v = (u64::from(loc.slot) << OFFSET_BITS) | u64::from(loc.offset);
        let b = v.to_le_bytes();
        Packed([b[0], b[1], b[2], b[3], b[4]])
    }

    pub fn loc(self) -> Loc {
        let mut b = [0u8; 8];
        b[..5].copy_from_slice(&self.0);
        let v = u64::from_le_bytes(b);
        Loc {
            slot: (v >> OFFSET_BITS) as u32,
            offset: (v & ((1 << OFFSET_BITS) - 1)) as u32,
        }
    }
}

/// Counters kept per shard and summed by `Store::stats`.
#[derive(Default, Clone, Copy)]
pub struct ShardCounters {
    pub curr_items: u64,
    pub total_items: u64,
    pub bytes: u64,
    pub evictions: u64,
    pub evicted_unfetched: u64,
    pub expired_unfetched: u64,
    pub reclaimed: u64,
    /// Live items whose copy is on flash (counted in `curr_items` too).
    pub flash_items: u64,
    /// Items moved from RAM to flash by eviction.
    pub evicted_to_flash: u64,
    /// Flash entries of other keys removed by a store or delete of a key with their tag
    /// because their item could not be read (damaged, an I/O error).
    pub flash_tag_drops: u64,
    /// Items promoted from flash back to RAM.
    pub flash_promotions: u64,
    /// Items the expiry sweep read (memcached's `crawler_items_checked`).
    pub crawler_items_checked: u64,
}

pub struct Shard {
    /// Key hash -> location of the live copy.
    pub index: HashTable<Packed>,
    /// Tag -> location of a live copy on flash (see `crate::flash`). A key is in at most one
    /// of `index` and `flash`.
    pub flash: FlashIndex,
    /// The flash tier evicted items go to, if one is configured.
    pub tier: Option<Arc<dyn FlashTier>>,
    /// Segment storage; `None` marks a free slot.
    pub slots: Vec<Option<Segment>>,
    /// Slots in age order, oldest first; the last one is the head that takes appends.
    pub fifo: VecDeque<u32>,
    /// Bytes this shard may hold (segments + index).
    pub budget: usize,
    /// Bytes of segments allocated now.
    pub segment_bytes: usize,
    pub counters: ShardCounters,
    /// Where the background reclaim continues: position in `fifo` order.
    pub reclaim_cursor: usize,
    /// Where in a segment the last reclaim stopped at its bound: the segment's slot and the
    /// offset of the next item to read. Forgotten when that segment is freed, so it never
    /// points into a slot's next segment.
    reclaim_resume: Option<(u32, usize)>,
}

/// What happened when room was made for a new item.
pub enum Alloc {
    At(Loc),
    NoRoom,
}

impl Shard {
    pub fn new(budget: usize, tier: Option<Arc<dyn FlashTier>>) -> Shard {
        Shard {
            index: HashTable::new(),
            flash: FlashIndex::new(),
            tier,
            slots: Vec::new(),
            fifo: VecDeque::new(),
            budget,
            segment_bytes: 0,
            counters: ShardCounters::default(),
            reclaim_cursor: 0,
            reclaim_resume: None,
        }
    }

    pub fn memory_used(&self) -> usize {
        // Both indexes by what they allocated (the RAM index's slots and control bytes of
        // every bucket, a table is up to 7/8 full; the flash index's slots).
        self.segment_bytes + self.index.allocation_size() + self.flash.allocation_bytes()
    }

    pub fn seg(&self, slot: u32) -> &Segment {
        self.slots[slot as usize].as_ref().expect("live slot")
    }

    pub fn seg_mut(&mut self, slot: u32) -> &mut Segment {
        self.slots[slot as usize].as_mut().expect("live slot")
    }

    pub fn header(&self, loc: Loc) -> Header {
        self.seg(loc.slot).header(loc.offset as usize)
    }

    /// Finds the live copy of `key`.
    pub fn find(&self, hash: u64, key: &[u8]) -> Option<Loc> {
        self.index
            .find(hash, |p| {
                let loc = p.loc();
                let seg = self.seg(loc.slot);
                seg.key(&seg.header(loc.offset as usize)) == key
            })
            .map(|p| p.loc())
    }

    /// Removes `key` from the index and marks its item dead. Returns where it was and its
    /// header (its bytes stay until the segment is freed).
    pub fn remove(&mut self, hash: u64, key: &[u8]) -> Option<(Loc, Header)> {
        let slots = &self.slots;
        let entry = self
            .index
            .find_entry(hash, |p| {
                let loc = p.loc();
                let seg = slots[loc.slot as usize].as_ref().expect("live slot");
                seg.key(&seg.header(loc.offset as usize)) == key
            })
            .ok()?;
        let loc = entry.remove().0.loc();
        let h = self.header(loc);
        self.seg_mut(loc.slot).kill(loc.offset as usize);
        self.counters.curr_items -= 1;
        self.counters.bytes -= h.item_len(loc.offset as usize) as u64;
        Some((loc, h))
    }

    /// Removes `key` from RAM and reports it as deleted for `reason` (expiry, or eviction for
    /// good); counts it. Returns the revision of the removal, None if the key was not there.
    pub fn remove_reported(
        &mut self,
        hash: u64,
        key: &[u8],
        reason: DeleteReason,
        env: &Env<'_>,
    ) -> Option<Revision> {
        let (loc, h) = self.remove(hash, key)?;
        match reason {
            DeleteReason::Expired => {
                self.counters.reclaimed += 1;
                if h.state & FETCHED == 0 {
                    self.counters.expired_unfetched += 1;
                }
            }
            DeleteReason::Evicted => self.evicted_for_good(h.state & FETCHED != 0),
            DeleteReason::Client => {}
        }
        let seg = self.seg(loc.slot);
        Some(env.store.report(&Mutation::Deleted {
            key,
            reason,
            prev: Some(PrevItem {
                value: seg.value(&h),
                meta: meta_of(&h, seg, loc.offset as usize),
            }),
        }))
    }

    /// Points `key` at `loc`, killing any older copy, in RAM or on flash (a key with a RAM
    /// copy has none on flash).
    pub fn link(&mut self, hash: u64, key: &[u8], loc: Loc, env: &Env<'_>) {
        if self.find(hash, key).is_none() {
            self.flash_remove_key(hash, key);
        }
        self.link_ram(hash, key, loc, env);
    }

    /// Points `key` at `loc`, killing an older copy in RAM (moves within RAM, and promotions,
    /// whose caller removes the flash copy it promoted).
    pub fn link_ram(&mut self, hash: u64, key: &[u8], loc: Loc, env: &Env<'_>) {
        let size = {
            let h = self.header(loc);
            h.item_len(loc.offset as usize)
        };
        self.remove(hash, key);
        let slots = &self.slots;
        self.index.insert_unique(hash, Packed::new(loc), |p| {
            let l = p.loc();
            let seg = slots[l.slot as usize].as_ref().expect("live slot");
            env.hash_of(seg.key(&seg.header(l.offset as usize)))
        });
        self.counters.curr_items += 1;
        self.counters.bytes += size as u64;
    }

    /// Finds room for `size` bytes at the head, evicting old segments if allowed.
    ///
    /// A new head segment is opened first, then the oldest segments are emptied until the
    /// shard is back within its budget; fetched survivors move into the new head but always
    /// leave `size` bytes free, so the new item fits.
    pub fn alloc(&mut self, size: usize, evict: bool, env: &Env<'_>) -> Alloc {
        if let Some(&head) = self.fifo.back() {
            if self.seg(head).free() >= size {
                return Alloc::At(Loc {
                    slot: head,
                    offset: self.seg(head).data.len() as u32,
                });
            }
        }
        let capacity = size.max(SEGMENT_SIZE);
        if !evict && !self.fifo.is_empty() && self.memory_used() + capacity > self.budget {
            return Alloc::NoRoom;
        }
        if self.fifo.len() >= MAX_SEGMENTS {
            // Not reachable with the server's shard sizes: refused rather than mis-indexed.
            return Alloc::NoRoom;
        }
        let seg = Segment::new(
            capacity,
            env.now,
            env.store.cas_floor(),
            env.store.newest_revision(),
        );
        let slot = match self.slots.iter().position(Option::is_none) {
            Some(i) => {
                self.slots[i] = Some(seg);
                i as u32
            }
            None => {
                self.slots.push(Some(seg));
                (self.slots.len() - 1) as u32
            }
        };
        self.segment_bytes += capacity;
        self.fifo.push_back(slot);
        while self.memory_used() > self.budget && self.fifo.len() > 1 {
            self.evict_oldest(size, env);
        }
        Alloc::At(Loc {
            slot,
            offset: self.seg(slot).data.len() as u32,
        })
    }

    /// Evicts old segments until the shard is within its budget again (after the budget
    /// shrank); the head segment stays.
    pub fn shrink_to_budget(&mut self, env: &Env<'_>) {
        while self.memory_used() > self.budget && self.fifo.len() > 1 {
            self.evict_oldest(0, env);
        }
    }

    /// Empties and frees the oldest segment (never the head). Live items that were fetched
    /// since they were written get a second chance at the head while it keeps `reserve` free.
    fn evict_oldest(&mut self, reserve: usize, env: &Env<'_>) {
        let now = env.now;
        let oldest = self.fifo[0];
        let head = *self.fifo.back().expect("non-empty");
        assert_ne!(oldest, head, "the head is never evicted");
        for at in self.seg(oldest).offsets() {
            let h = self.seg(oldest).header(at);
            if h.state & DEAD != 0 {
                continue;
            }
            let key = self.seg(oldest).key(&h).to_vec();
            let hash = env.hash_of(&key);
            let size = h.item_len(at);
            let expired = h.exptime != 0 && h.exptime <= now;
            let second_chance =
                h.state & FETCHED != 0 && self.seg(head).free() >= size + reserve && !expired;
            if second_chance {
                let from = Loc {
                    slot: oldest,
                    offset: at as u32,
                };
                self.move_item(from, head, hash, &key, env, h.state & !FETCHED);
            } else if expired {
                self.remove_reported(hash, &key, DeleteReason::Expired, env);
            } else if !self.move_to_flash(oldest, &h, at, hash, &key, now) {
                self.remove_reported(hash, &key, DeleteReason::Evicted, env);
            }
        }
        self.free_segment(oldest);
    }

    /// The one place where a live item leaves the cache for good because of space (RAM
    /// eviction without a flash copy, or a flash copy dropped by flash eviction or a failed
    /// device). Counts it; a RAM eviction is reported by [`Shard::remove_reported`].
    pub fn evicted_for_good(&mut self, fetched: bool) {
        self.counters.evictions += 1;
        if !fetched {
            self.counters.evicted_unfetched += 1;
        }
    }

    /// Hands the item at `at` of segment `slot` to the flash tier; on success its RAM entry is
    /// replaced by a flash entry. An expired item is not written (it is removed by the caller).
    fn move_to_flash(
        &mut self,
        slot: u32,
        h: &Header,
        at: usize,
        hash: u64,
        key: &[u8],
        now: u32,
    ) -> bool {
        let Some(tier) = self.tier.as_deref() else {
            return false;
        };
        if h.exptime != 0 && h.exptime <= now {
            return false;
        }
        let seg = self.seg(slot);
        let meta = meta_of(h, seg, at);
        let Some(loc) = tier.admit(hash, key, seg.value(h), &meta) else {
            return false;
        };
        self.remove(hash, key);
        self.flash_insert(loc);
        self.counters.evicted_to_flash += 1;
        true
    }

    /// The flash entries that may be `hash`'s key (same tag); usually none or one.
    pub fn flash_candidates(&self, hash: u64) -> Vec<FlashLoc> {
        if self.flash.is_empty() {
            return Vec::new();
        }
        self.flash.with_tag(tag_of(hash)).collect()
    }

    /// Adds a flash entry (the caller made sure no other copy of its key is indexed).
    pub fn flash_insert(&mut self, loc: FlashLoc) {
        self.flash.insert(loc);
        self.counters.curr_items += 1;
        self.counters.flash_items += 1;
    }

    /// Removes `key`'s own flash copy, if it has one. Every entry with the key's tag is checked
    /// first, so that another key's is never dropped for sharing it: one a device read made
    /// before this lock was taken showed to hold another key ([`crate::Store::spare_flash`],
    /// its segment unchanged since) stays without a read; the others are asked of the tier
    /// ([`FlashTier::key_at`]: a buffer compare, or a device read). An entry whose item is
    /// damaged or unreadable goes too (as a damaged read would make it go; counted in
    /// `flash_tag_drops` and evicted). Returns (own copies removed, others dropped).
    pub fn flash_remove_key(&mut self, hash: u64, key: &[u8]) -> (usize, usize) {
        let candidates = self.flash_candidates(hash);
        if candidates.is_empty() {
            // The common case: no clone of the tier's Arc (an atomic on a line every thread
            // storing into any shard shares: 4% of a replay's samples before).
            return (0, 0);
        }
        let Some(tier) = self.tier.clone() else {
            return (0, 0);
        };
        let spared = crate::flash::spared(hash);
        let (mut own, mut dropped) = (0, 0);
        for loc in candidates {
            let read_before = spared
                .iter()
                .any(|&(place, seq)| place == loc.place() && tier.sealed_seq(loc) == Some(seq));
            let whose = if read_before {
                KeyAt::Other
            } else {
                tier.key_at(loc, key)
            };
            match whose {
                KeyAt::Other => continue,
                KeyAt::Key => own += 1,
                KeyAt::Unknown => {
                    dropped += 1;
                    self.counters.flash_tag_drops += 1;
                    self.evicted_for_good(loc.fetched());
                }
            }
            self.flash_remove_place(loc);
        }
        (own, dropped)
    }

    /// The entry for exactly this copy (fetched bit ignored), if it is still indexed.
    pub fn flash_get(&self, loc: FlashLoc) -> Option<FlashLoc> {
        self.flash.get(loc)
    }

    /// Marks the entry for exactly this copy (fetched bit ignored) fetched, if it is still
    /// indexed; returns the entry as it was.
    pub fn flash_mark_fetched(&mut self, loc: FlashLoc) -> Option<FlashLoc> {
        self.flash.mark_fetched(loc)
    }

    /// Removes the entry for exactly this copy; returns whether it was indexed.
    pub fn flash_remove_place(&mut self, loc: FlashLoc) -> bool {
        match self.flash.remove(loc) {
            Some(old) => {
                self.flash_released(old);
                true
            }
            None => false,
        }
    }

    /// Accounts for a flash entry that left the index.
    fn flash_released(&mut self, loc: FlashLoc) {
        self.counters.curr_items -= 1;
        self.counters.flash_items -= 1;
        if let Some(tier) = &self.tier {
            tier.release(loc);
        }
    }

    /// Copies a live item to segment `to` and relinks the index to the copy.
    fn move_item(&mut self, from: Loc, to: u32, hash: u64, key: &[u8], env: &Env<'_>, state: u8) {
        let h = self.header(from);
        let value = self.seg(from.slot).value(&h).to_vec();
        let access = self.seg(from.slot).access(&h);
        let rev = self.seg(from.slot).revision(from.offset as usize, &h);
        let cas = self.seg(from.slot).cas(from.offset as usize, &h);
        let offset = self.seg_mut(to).append(
            key,
            &[&value],
            value.len(),
            h.flags,
            h.exptime,
            cas,
            rev,
            state,
            access,
        );
        self.link_ram(
            hash,
            key,
            Loc {
                slot: to,
                offset: offset as u32,
            },
            env,
        );
    }

    fn free_segment(&mut self, slot: u32) {
        let seg = self.slots[slot as usize].take().expect("live slot");
        debug_assert_eq!(seg.live_items, 0, "freed a segment with live items");
        self.segment_bytes -= seg.data.capacity();
        self.fifo.retain(|&s| s != slot);
        if self.reclaim_resume.is_some_and(|(s, _)| s == slot) {
            self.reclaim_resume = None;
        }
    }

    /// Drops every item.
    pub fn clear(&mut self) {
        if let Some(tier) = &self.tier {
            for loc in self.flash.iter() {
                tier.release(loc);
            }
        }
        self.flash.clear();
        self.counters.flash_items = 0;
        self.index.clear();
        self.slots.clear();
        self.fifo.clear();
        self.segment_bytes = 0;
        self.counters.curr_items = 0;
        self.counters.bytes = 0;
        self.reclaim_cursor = 0;
        self.reclaim_resume = None;
    }

    /// Removes expired items from up to `max_items` items, continuing where the last call
    /// stopped, and compacts segments that are mostly dead. Returns items reclaimed.
    pub fn reclaim(&mut self, max_items: usize, env: &Env<'_>) -> usize {
        let now = env.now;
        let hash_of = |k: &[u8]| env.hash_of(k);
        let mut examined = 0;
        let mut reclaimed = 0;
        let mut visited = 0;
        while examined < max_items && visited < self.fifo.len() {
            if self.reclaim_cursor >= self.fifo.len() {
                self.reclaim_cursor = 0;
            }
            let slot = self.fifo[self.reclaim_cursor];
            let mut at = match self.reclaim_resume.take() {
                Some((s, at)) if s == slot => at,
                _ => 0,
            };
            // A segment none of whose items was written with an expiry has none to reclaim:
            // skipped without reading its items (the sweep read every item of 1 MiB
            // segments twice a second: 3.7% of a persistence-off insert run's CPU).
            if self.seg(slot).expiring == 0 {
                examined += 1;
                at = self.seg(slot).data.len();
            }
            // Item by item, so that the bound holds within a segment too (a 1 MiB segment of
            // small items is some 10,000 of them, read under the shard lock).
            while at < self.seg(slot).data.len() {
                if examined >= max_items {
                    self.reclaim_resume = Some((slot, at));
                    return reclaimed;
                }
                let h = self.seg(slot).header(at);
                let next = at + h.item_len(at);
                examined += 1;
                self.counters.crawler_items_checked += 1;
                if h.state & DEAD == 0 && h.exptime != 0 && h.exptime <= now {
                    let key = self.seg(slot).key(&h).to_vec();
                    self.remove_reported(hash_of(&key), &key, DeleteReason::Expired, env);
                    reclaimed += 1;
                }
                at = next;
            }
            let head = *self.fifo.back().expect("non-empty");
            let seg = self.seg(slot);
            if slot != head
                && seg.live_bytes * 4 < seg.data.capacity()
                && self.seg(head).free() >= seg.live_bytes
            {
                // Mostly dead: move the survivors to the head and give the memory back.
                for at in self.seg(slot).offsets() {
                    let h = self.seg(slot).header(at);
                    if h.state & DEAD == 0 {
                        let key = self.seg(slot).key(&h).to_vec();
                        self.move_item(
                            Loc {
                                slot,
                                offset: at as u32,
                            },
                            head,
                            hash_of(&key),
                            &key,
                            env,
                            h.state,
                        );
                    }
                }
                self.free_segment(slot);
            } else {
                self.reclaim_cursor += 1;
            }
            visited += 1;
        }
        reclaimed
    }

    /// Adds this shard's figures to `s`.
    pub fn add_stats(&self, s: &mut StoreStats) {
        let c = &self.counters;
        s.curr_items += c.curr_items;
        s.total_items += c.total_items;
        s.bytes += c.bytes;
        s.evictions += c.evictions;
        s.evicted_unfetched += c.evicted_unfetched;
        s.expired_unfetched += c.expired_unfetched;
        s.reclaimed += c.reclaimed;
        s.flash_items += c.flash_items;
        s.evicted_to_flash += c.evicted_to_flash;
        s.flash_tag_drops += c.flash_tag_drops;
        s.flash_promotions += c.flash_promotions;
        s.crawler_items_checked += c.crawler_items_checked;
        s.flash_index_bytes += self.flash.allocation_bytes() as u64;
        s.memory_used_bytes += self.memory_used() as u64;
        s.segments += self.fifo.len() as u64;
        if let Some(&oldest) = self.fifo.front() {
            let created = self.seg(oldest).created;
            if s.oldest_segment_created == 0 || created < s.oldest_segment_created {
                s.oldest_segment_created = created;
            }
        }
    }
}

/// Bytes a new item needs.
pub fn needed(key: &[u8], value_len: usize, flags: u32, exptime: u32) -> usize {
    segment::item_size(key.len(), value_len, flags, exptime)
}
