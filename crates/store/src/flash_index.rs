//! The flash index of one shard: every flash-resident item's 8-byte [`FlashLoc`], in an
//! ordered linear-probing table (Amble and Knuth's "ordered hash table") that grows by half
//! its size, so that it costs 9.3-13.9 bytes an item (with its overflow area) at every item
//! count it grows through past a few thousand (the first table is 81 slots; it never shrinks:
//! after many removals an entry costs more).
//!
//! ```text
//!   slot:   0    1    2    3    4    5    6    7  ...  n-1 | overflow
//!   tag:   t03  t03  t09  ·    t21  t22  t22  ·        ...  |
//!          └ home(t) = t * n / 2^28: the table is sorted by tag, an entry sits at or after
//!            its home, and every slot between its home and it is taken
//! ```
//!
//! Why not hashbrown: its bucket count is a power of two, so right after it doubles a table
//! is 7/16 full and costs 9 / (7/16) = 20.6 bytes an entry (8 of entry, 1 of control byte);
//! that is above issue 13's 16-byte bar at every item count that falls just past a doubling.
//! Here a slot is the entry alone (`u64::MAX`, never a valid location, marks it empty), the
//! table grows from 7/8 full to 1.5x its slots (7/12 full), and it keeps a small overflow
//! area after slot n-1 instead of wrapping around.
//!
//! Because a key's home is monotone in its tag and the slots are kept sorted by tag:
//! - a lookup scans from the home while tags are smaller, takes the equal ones, and stops at
//!   a larger tag or an empty slot, without hashing anything (a miss reads about as many
//!   slots as a hit: (1 + 1/(1 - load)) / 2, 4.5 at 7/8 full);
//! - growing (`resize`) and dropping entries (`retain`) are one pass that places the entries
//!   in order, each at max(its home, the previous entry's slot + 1).

use crate::flash::{FlashLoc, TAG_BITS};

/// An empty slot: the largest tag, fetched bit, 256 blocks from the last block, which is past
/// the end of any device (so never a valid [`FlashLoc`]).
const EMPTY: u64 = u64::MAX;
/// The table grows when it would be more than 7/8 full.
const MAX_LOAD_NUM: usize = 7;
const MAX_LOAD_DEN: usize = 8;
/// Slots of the first table.
const MIN_SLOTS: usize = 64;
/// Slots [`FlashIndex::iter`] reads in a row (4 cache lines) before it jumps.
const SPREAD_RUN: usize = 32;

#[derive(Default)]
pub struct FlashIndex {
    /// `home_slots` home slots, then the overflow area. Empty when nothing was inserted yet.
    slots: Box<[u64]>,
    /// Slots a tag's home can be (n above); the rest of `slots` only takes displaced entries.
    home_slots: usize,
    /// Entries in the table.
    len: usize,
    /// Slots inserts walked past or moved (tests check that recovery's order keeps it low).
    #[cfg(test)]
    walked: u64,
}

impl FlashIndex {
    pub fn new() -> FlashIndex {
        FlashIndex::default()
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes the table allocated.
    pub fn allocation_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.slots)
    }

    fn home(&self, tag: u32) -> usize {
        home_of(tag, self.home_slots)
    }

    /// The entries whose tag is `tag`, with their slots: the walk from the tag's home over
    /// smaller tags, up to a larger tag or an empty slot.
    fn tagged(&self, tag: u32) -> impl Iterator<Item = (usize, FlashLoc)> + '_ {
        let start = self.home(tag);
        self.slots[start..]
            .iter()
            .map(|&s| FlashLoc(s))
            .take_while(move |l| l.0 != EMPTY && l.tag() <= tag)
            .enumerate()
            .filter(move |(_, l)| l.tag() == tag)
            .map(move |(i, l)| (start + i, l))
    }

    /// The entries whose tag is `tag`, in no particular order.
    pub fn with_tag(&self, tag: u32) -> impl Iterator<Item = FlashLoc> + '_ {
        self.tagged(tag).map(|(_, l)| l)
    }

    /// The slot of the entry at `loc`'s place (its fetched bit ignored).
    fn position(&self, loc: FlashLoc) -> Option<usize> {
        self.tagged(loc.tag())
            .find(|(_, l)| l.place() == loc.place())
            .map(|(i, _)| i)
    }

    /// The entry at `loc`'s place (its fetched bit ignored).
    pub fn get(&self, loc: FlashLoc) -> Option<FlashLoc> {
        self.position(loc).map(|i| FlashLoc(self.slots[i]))
    }

    /// Sets the fetched bit of the entry at `loc`'s place (a change that keeps its place in
    /// the table) and returns the entry as it was.
    pub fn mark_fetched(&mut self, loc: FlashLoc) -> Option<FlashLoc> {
        let i = self.position(loc)?;
        let old = FlashLoc(self.slots[i]);
        self.slots[i] = old.with_fetched().0;
        Some(old)
    }

    /// Adds an entry (another with the same tag, or even the same place, may be there).
    pub fn insert(&mut self, loc: FlashLoc) {
        // Never true (a device has fewer than 2^27 blocks), but an EMPTY entry would hide
        // the rest of its run.
        assert_ne!(
            loc.0, EMPTY,
            "the empty slot's bits are not a flash location"
        );
        if (self.len + 1) * MAX_LOAD_DEN > self.home_slots * MAX_LOAD_NUM {
            self.resize(
                if self.home_slots == 0 {
                    MIN_SLOTS
                } else {
                    self.home_slots * 3 / 2
                },
                0,
            );
        }
        loop {
            let tag = loc.tag();
            let mut at = self.home(tag);
            while self.slots[at] != EMPTY && FlashLoc(self.slots[at]).tag() <= tag {
                at += 1;
                if at == self.slots.len() {
                    break;
                }
            }
            // The first empty slot from `at` on; the entries in between move up by one.
            match self.slots[at..].iter().position(|&s| s == EMPTY) {
                Some(free) => {
                    #[cfg(test)]
                    {
                        self.walked += (at - self.home(tag) + free) as u64;
                    }
                    self.slots.copy_within(at..at + free, at + 1);
                    self.slots[at] = loc.0;
                    self.len += 1;
                    return;
                }
                // The overflow area is used up (rare): make it twice as long, then try again.
                None => self.resize(self.home_slots, self.slots.len() - self.home_slots),
            }
        }
    }

    /// Room for `additional` more entries without growing.
    pub fn reserve(&mut self, additional: usize) {
        let want = (self.len + additional) * MAX_LOAD_DEN / MAX_LOAD_NUM + 1;
        if want > self.home_slots {
            // At least the usual step, so that many small reserves (recovery restores a
            // shard's entries a batch at a time) cost no more than the inserts alone would.
            self.resize(want.max(self.home_slots * 3 / 2).max(MIN_SLOTS), 0);
        }
    }

    /// Removes the entry at `loc`'s place (its fetched bit ignored) and returns it.
    pub fn remove(&mut self, loc: FlashLoc) -> Option<FlashLoc> {
        let i = self.position(loc)?;
        let old = FlashLoc(self.slots[i]);
        // Backward shift: each following entry that is past its home moves back one slot.
        let mut hole = i;
        while hole + 1 < self.slots.len() {
            let next = self.slots[hole + 1];
            if next == EMPTY || self.home(FlashLoc(next).tag()) > hole {
                break;
            }
            self.slots[hole] = next;
            hole += 1;
        }
        self.slots[hole] = EMPTY;
        self.len -= 1;
        Some(old)
    }

    /// Keeps only the entries `keep` says yes to.
    pub fn retain(&mut self, mut keep: impl FnMut(FlashLoc) -> bool) {
        // Placed again in order: an entry never moves to a later slot, so this is done in
        // place, reading ahead of where it writes.
        let mut next_free = 0;
        let mut len = 0;
        for i in 0..self.slots.len() {
            let s = std::mem::replace(&mut self.slots[i], EMPTY);
            if s == EMPTY || !keep(FlashLoc(s)) {
                continue;
            }
            let at = self.home(FlashLoc(s).tag()).max(next_free);
            self.slots[at] = s;
            next_free = at + 1;
            len += 1;
        }
        self.len = len;
    }

    /// Every entry, in an order spread over the tags: runs of [`SPREAD_RUN`] slots, taken in
    /// bit-reversed order of their number (run 0, then the one halfway, then a quarter, ...).
    /// A reader that inserts the entries in the order it got them, a batch at a time, into a
    /// table that grows with them (recovery from a checkpoint, which writes them in this
    /// order) then fills that table about evenly. In tag order, each batch's homes would all
    /// fall in the small part of the growing table that its few tags map to, and every insert
    /// would walk one long run of slots: restoring 1.7M entries took 15.5 s instead of 0.15.
    pub fn iter(&self) -> impl Iterator<Item = FlashLoc> + '_ {
        let runs = self.slots.len().div_ceil(SPREAD_RUN);
        let bits = runs.next_power_of_two().trailing_zeros();
        (0..runs.next_power_of_two())
            .map(move |i| match bits {
                0 => 0,
                _ => i.reverse_bits() >> (usize::BITS - bits),
            })
            .filter(move |&run| run < runs)
            .flat_map(move |run| {
                let start = run * SPREAD_RUN;
                self.slots[start..(start + SPREAD_RUN).min(self.slots.len())].iter()
            })
            .filter(|&&s| s != EMPTY)
            .map(|&s| FlashLoc(s))
    }

    /// Every entry, in table order (by tag).
    fn iter_sorted(&self) -> impl Iterator<Item = FlashLoc> + '_ {
        self.slots
            .iter()
            .filter(|&&s| s != EMPTY)
            .map(|&s| FlashLoc(s))
    }

    /// Drops every entry and the table's memory.
    pub fn clear(&mut self) {
        *self = FlashIndex::new();
    }

    /// A table of `home_slots` home slots (at least enough for the entries at 7/8 full) with
    /// the same entries, and at least `spare` free slots after the last one.
    fn resize(&mut self, home_slots: usize, spare: usize) {
        let home_slots = home_slots.max(self.len * MAX_LOAD_DEN / MAX_LOAD_NUM + 1);
        // Where the entries end in the new table: a dry run of the placement below. Entries
        // displaced past the last home slot (many tags near the top: never with a good hash)
        // make the overflow area longer, not the home slots more.
        let mut end = 0;
        for loc in self.iter_sorted() {
            end = home_of(loc.tag(), home_slots).max(end) + 1;
        }
        let slots = (home_slots + overflow(home_slots)).max(end + spare);
        let mut new = FlashIndex {
            slots: vec![EMPTY; slots].into_boxed_slice(),
            home_slots,
            len: self.len,
            #[cfg(test)]
            walked: self.walked,
        };
        let mut next_free = 0;
        for loc in self.iter_sorted() {
            let at = new.home(loc.tag()).max(next_free);
            new.slots[at] = loc.0;
            next_free = at + 1;
        }
        *self = new;
    }
}

/// The home slot of `tag` in a table of `home_slots` home slots: monotone in the tag.
fn home_of(tag: u32, home_slots: usize) -> usize {
    ((u64::from(tag) * home_slots as u64) >> TAG_BITS) as usize
}

/// Slots after the last home slot for entries displaced past it: about 1.6% more.
fn overflow(home_slots: usize) -> usize {
    home_slots / 64 + 16
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(tag: u32, block: u32) -> FlashLoc {
        FlashLoc::new(u64::from(tag), block, 1)
    }

    /// The table's own invariants: sorted by tag, each entry at or after its home with every
    /// slot in between taken, and `len` right.
    fn check(t: &FlashIndex) {
        let mut prev_tag = 0;
        let mut count = 0;
        for (i, &s) in t.slots.iter().enumerate() {
            if s == EMPTY {
                continue;
            }
            let tag = FlashLoc(s).tag();
            assert!(tag >= prev_tag, "slot {i}: tag {tag} after {prev_tag}");
            prev_tag = tag;
            let home = t.home(tag);
            assert!(home <= i, "slot {i} before its home {home}");
            assert!(
                t.slots[home..i].iter().all(|&s| s != EMPTY),
                "gap before slot {i}"
            );
            count += 1;
        }
        assert_eq!(count, t.len);
    }

    /// A small random generator, so that the test needs no crate and repeats exactly.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    #[test]
    fn matches_a_plain_list_through_random_inserts_removes_and_retains() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let mut t = FlashIndex::new();
        let mut model: Vec<FlashLoc> = Vec::new();
        let mut block = 0;
        for step in 0..60_000 {
            match rng.next() % 10 {
                // Inserts: few distinct tags some of the time, so that equal tags and long
                // runs are common; the top tags too, whose homes are at the table's end.
                0..=5 => {
                    let tag = match rng.next() % 4 {
                        0 => (rng.next() % 16) as u32,
                        1 => (1 << TAG_BITS) - 1 - (rng.next() % 8) as u32,
                        _ => (rng.next() % (1 << TAG_BITS)) as u32,
                    };
                    block += 1;
                    let l = loc(tag, block);
                    t.insert(l);
                    model.push(l);
                }
                6..=8 if !model.is_empty() => {
                    let l = model.swap_remove((rng.next() % model.len() as u64) as usize);
                    assert_eq!(t.remove(l.with_fetched()), Some(l));
                    assert_eq!(t.remove(l), None);
                }
                9 if step % 100 == 9 => {
                    let cut = rng.next() % 4;
                    t.retain(|l| u64::from(l.block()) % 4 != cut);
                    model.retain(|l| u64::from(l.block()) % 4 != cut);
                    check(&t);
                }
                _ if !model.is_empty() => {
                    let i = (rng.next() % model.len() as u64) as usize;
                    let l = model[i];
                    assert_eq!(t.mark_fetched(l.with_fetched()), Some(l));
                    assert_eq!(t.get(l), Some(l.with_fetched()));
                    model[i] = l.with_fetched();
                }
                _ => {}
            }
            if step % 1000 == 0 {
                check(&t);
            }
            assert_eq!(t.len(), model.len());
        }
        check(&t);
        for &l in &model {
            let same_tag: Vec<FlashLoc> = t.with_tag(l.tag()).collect();
            assert!(same_tag.contains(&l), "{l:?} not found under its tag");
            let expected = model.iter().filter(|m| m.tag() == l.tag()).count();
            assert_eq!(same_tag.len(), expected);
        }
        let mut all: Vec<u64> = t.iter().map(|l| l.0).collect();
        let mut want: Vec<u64> = model.iter().map(|l| l.0).collect();
        all.sort_unstable();
        want.sort_unstable();
        assert_eq!(all, want);
    }

    #[test]
    fn costs_at_most_14_bytes_an_entry_at_every_size_past_the_first_table() {
        let mut t = FlashIndex::new();
        let mut rng = Rng(7);
        let mut worst: f64 = 0.0;
        for i in 1..=200_000u32 {
            t.insert(loc((rng.next() % (1 << TAG_BITS)) as u32, i));
            if i >= 10_000 {
                worst = worst.max(t.allocation_bytes() as f64 / f64::from(i));
            }
        }
        check(&t);
        assert!(worst <= 14.0, "worst {worst:.2} bytes an entry");
    }

    #[test]
    fn a_miss_on_an_empty_or_cleared_table_finds_nothing() {
        let mut t = FlashIndex::new();
        assert_eq!(t.with_tag(5).count(), 0);
        assert_eq!(t.get(loc(5, 1)), None);
        assert_eq!(t.mark_fetched(loc(5, 1)), None);
        assert_eq!(t.remove(loc(5, 1)), None);
        t.insert(loc(5, 1));
        t.insert(loc(5, 2));
        assert_eq!(t.with_tag(5).count(), 2);
        assert_eq!(t.with_tag(4).count(), 0);
        t.clear();
        assert_eq!(t.with_tag(5).count(), 0);
        assert_eq!(t.allocation_bytes(), 0);
        t.insert(loc(5, 3));
        assert_eq!(t.with_tag(5).collect::<Vec<_>>(), vec![loc(5, 3)]);
        check(&t);
    }

    #[test]
    fn many_entries_at_the_top_tags_lengthen_the_overflow_area_only() {
        // Their homes are all the last home slot, so they all go past it. A table that grew
        // its home slots until its fixed overflow area held them would cost 64x as much.
        let mut t = FlashIndex::new();
        for i in 0..5_000u32 {
            t.insert(loc((1 << TAG_BITS) - 1 - i % 8, i));
        }
        check(&t);
        assert_eq!(t.with_tag((1 << TAG_BITS) - 1).count(), 625);
        let per_entry = t.allocation_bytes() as f64 / 5_000.0;
        assert!(per_entry <= 40.0, "{per_entry:.1} bytes an entry");
    }

    #[test]
    fn many_small_reserves_grow_the_table_by_steps() {
        // As recovery restores a shard's entries, a batch at a time: each reserve that grows
        // must grow by the usual step, or the table is copied once a batch.
        let mut t = FlashIndex::new();
        let mut sizes = 0;
        let mut last = 0;
        for i in 0..100_000u32 {
            t.reserve(1);
            t.insert(loc(i.wrapping_mul(2_654_435_761) >> 4, i));
            if t.allocation_bytes() != last {
                sizes += 1;
                last = t.allocation_bytes();
            }
        }
        // 64 home slots, then x1.5 up to 100,000 / (7/8): 20 sizes (a few more if an overflow
        // area ran out); growing to the exact need made a size for nearly every batch.
        assert!(sizes <= 24, "{sizes} table sizes");
        check(&t);
    }

    #[test]
    fn a_table_rebuilt_in_its_iteration_order_fills_evenly() {
        // As recovery rebuilds it from a checkpoint: the entries in `iter` order, 4,096 at a
        // time, each batch after a reserve for it.
        let mut rng = Rng(11);
        let mut t = FlashIndex::new();
        for i in 0..300_000u32 {
            t.insert(loc((rng.next() % (1 << TAG_BITS)) as u32, i));
        }
        let order: Vec<FlashLoc> = t.iter().collect();
        assert_eq!(order.len(), 300_000);
        let mut rebuilt = FlashIndex::new();
        for batch in order.chunks(4096) {
            rebuilt.reserve(batch.len());
            for &l in batch {
                rebuilt.insert(l);
            }
        }
        check(&rebuilt);
        let per_insert = rebuilt.walked as f64 / order.len() as f64;
        // This order walked 13 slots an insert when written; tag order walked 26,546.
        assert!(per_insert < 40.0, "{per_insert:.1} slots walked an insert");
    }

    #[test]
    fn reserve_then_inserts_do_not_grow_again() {
        let mut t = FlashIndex::new();
        t.reserve(10_000);
        let bytes = t.allocation_bytes();
        for i in 0..10_000u32 {
            t.insert(loc(i.wrapping_mul(2_654_435_761) >> 4, i));
        }
        assert_eq!(t.allocation_bytes(), bytes);
        check(&t);
    }
}
