//! One shard: a compact hash index over a FIFO of segments, with its own memory budget.
//!
//! ```text
//!   index (hashbrown::HashTable<Loc>, 8 bytes a slot + 1 control byte)
//!      │ Loc { segment slot, offset }
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

use hashbrown::HashTable;

use crate::segment::{self, Header, Segment, DEAD, FETCHED, SEGMENT_SIZE};
use crate::StoreStats;

/// Where an item lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Loc {
    pub slot: u32,
    pub offset: u32,
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
}

pub struct Shard {
    /// Key hash -> location of the live copy.
    pub index: HashTable<Loc>,
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
}

/// Bytes of one index slot: the 8-byte `Loc` and hashbrown's control byte.
const INDEX_SLOT_BYTES: usize = std::mem::size_of::<Loc>() + 1;
const _: () = assert!(std::mem::size_of::<Loc>() == 8);

/// What happened when room was made for a new item.
pub enum Alloc {
    At(Loc),
    NoRoom,
}

impl Shard {
    pub fn new(budget: usize) -> Shard {
        Shard {
            index: HashTable::new(),
            slots: Vec::new(),
            fifo: VecDeque::new(),
            budget,
            segment_bytes: 0,
            counters: ShardCounters::default(),
            reclaim_cursor: 0,
        }
    }

    pub fn memory_used(&self) -> usize {
        self.segment_bytes + self.index.capacity() * INDEX_SLOT_BYTES
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
            .find(hash, |loc| {
                let seg = self.seg(loc.slot);
                seg.key(&seg.header(loc.offset as usize)) == key
            })
            .copied()
    }

    /// Removes `key` from the index and marks its item dead. Returns the header it had.
    pub fn remove(&mut self, hash: u64, key: &[u8]) -> Option<Header> {
        let slots = &self.slots;
        let entry = self
            .index
            .find_entry(hash, |loc| {
                let seg = slots[loc.slot as usize].as_ref().expect("live slot");
                seg.key(&seg.header(loc.offset as usize)) == key
            })
            .ok()?;
        let (loc, _) = entry.remove();
        let h = self.header(loc);
        self.seg_mut(loc.slot).kill(loc.offset as usize);
        self.counters.curr_items -= 1;
        self.counters.bytes -= h.item_len(loc.offset as usize) as u64;
        Some(h)
    }

    /// Points `key` at `loc`, killing any older copy.
    pub fn link(&mut self, hash: u64, key: &[u8], loc: Loc, hash_of: &dyn Fn(&[u8]) -> u64) {
        let size = {
            let h = self.header(loc);
            h.item_len(loc.offset as usize)
        };
        self.remove(hash, key);
        let slots = &self.slots;
        self.index.insert_unique(hash, loc, |l| {
            let seg = slots[l.slot as usize].as_ref().expect("live slot");
            hash_of(seg.key(&seg.header(l.offset as usize)))
        });
        self.counters.curr_items += 1;
        self.counters.bytes += size as u64;
    }

    /// Finds room for `size` bytes at the head, evicting old segments if allowed.
    ///
    /// A new head segment is opened first, then the oldest segments are emptied until the
    /// shard is back within its budget; fetched survivors move into the new head but always
    /// leave `size` bytes free, so the new item fits.
    pub fn alloc(
        &mut self,
        size: usize,
        evict: bool,
        now: u32,
        hash_of: &dyn Fn(&[u8]) -> u64,
    ) -> Alloc {
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
        let seg = Segment::new(capacity, now);
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
            self.evict_oldest(now, size, hash_of);
        }
        Alloc::At(Loc {
            slot,
            offset: self.seg(slot).data.len() as u32,
        })
    }

    /// Empties and frees the oldest segment (never the head). Live items that were fetched
    /// since they were written get a second chance at the head while it keeps `reserve` free.
    fn evict_oldest(&mut self, now: u32, reserve: usize, hash_of: &dyn Fn(&[u8]) -> u64) {
        let oldest = self.fifo[0];
        let head = *self.fifo.back().expect("non-empty");
        assert_ne!(oldest, head, "the head is never evicted");
        for at in self.seg(oldest).offsets() {
            let h = self.seg(oldest).header(at);
            if h.state & DEAD != 0 {
                continue;
            }
            let key = self.seg(oldest).key(&h).to_vec();
            let hash = hash_of(&key);
            let size = h.item_len(at);
            let second_chance = h.state & FETCHED != 0
                && self.seg(head).free() >= size + reserve
                && (h.exptime == 0 || h.exptime > now);
            if second_chance {
                let from = Loc {
                    slot: oldest,
                    offset: at as u32,
                };
                self.move_item(from, head, hash, &key, hash_of, h.state & !FETCHED);
            } else {
                self.counters.evictions += 1;
                if h.state & FETCHED == 0 {
                    self.counters.evicted_unfetched += 1;
                }
                self.remove(hash, &key);
            }
        }
        self.free_segment(oldest);
    }

    /// Copies a live item to segment `to` and relinks the index to the copy.
    fn move_item(
        &mut self,
        from: Loc,
        to: u32,
        hash: u64,
        key: &[u8],
        hash_of: &dyn Fn(&[u8]) -> u64,
        state: u8,
    ) {
        let h = self.header(from);
        let value = self.seg(from.slot).value(&h).to_vec();
        let offset = self.seg_mut(to).append(
            key,
            &[&value],
            value.len(),
            h.flags,
            h.exptime,
            h.cas,
            state,
        );
        self.link(
            hash,
            key,
            Loc {
                slot: to,
                offset: offset as u32,
            },
            hash_of,
        );
    }

    fn free_segment(&mut self, slot: u32) {
        let seg = self.slots[slot as usize].take().expect("live slot");
        debug_assert_eq!(seg.live_items, 0, "freed a segment with live items");
        self.segment_bytes -= seg.data.capacity();
        self.fifo.retain(|&s| s != slot);
    }

    /// Drops every item.
    pub fn clear(&mut self) {
        self.index.clear();
        self.slots.clear();
        self.fifo.clear();
        self.segment_bytes = 0;
        self.counters.curr_items = 0;
        self.counters.bytes = 0;
        self.reclaim_cursor = 0;
    }

    /// Removes expired items from up to `max_items` items, continuing where the last call
    /// stopped, and compacts segments that are mostly dead. Returns items reclaimed.
    pub fn reclaim(&mut self, now: u32, max_items: usize, hash_of: &dyn Fn(&[u8]) -> u64) -> usize {
        let mut examined = 0;
        let mut reclaimed = 0;
        let mut visited = 0;
        while examined < max_items && visited < self.fifo.len() {
            if self.reclaim_cursor >= self.fifo.len() {
                self.reclaim_cursor = 0;
            }
            let slot = self.fifo[self.reclaim_cursor];
            for at in self.seg(slot).offsets() {
                examined += 1;
                let h = self.seg(slot).header(at);
                if h.state & DEAD == 0 && h.exptime != 0 && h.exptime <= now {
                    let key = self.seg(slot).key(&h).to_vec();
                    self.remove(hash_of(&key), &key);
                    self.counters.reclaimed += 1;
                    if h.state & FETCHED == 0 {
                        self.counters.expired_unfetched += 1;
                    }
                    reclaimed += 1;
                }
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
                            hash_of,
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
        s.memory_used_bytes += self.memory_used() as u64;
    }
}

/// Bytes a new item needs.
pub fn needed(key: &[u8], value_len: usize, flags: u32) -> usize {
    segment::item_size(key.len(), value_len, flags)
}
