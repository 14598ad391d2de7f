//! Item memory: items appended into large segments, and the byte layout of one item.
//!
//! ```text
//!   Segment (1 MiB, or one oversized item):  [item][item][item]......[free]
//!
//!   item:  klen u8 | state u8 | vlen varint(1..5) | access u16 | [exptime u32] | cas i32
//!          | rev i32 | [flags u32] | key | value
//!          state bits: 0 dead, 1 fetched, 2 stale, 3 win_sent, 4 has_flags, 5 has_exptime
//!   cas of an item      = segment.cas.base + cas, or segment.cas.overflow[offset]  when cas is FAR
//!   revision of an item = segment.rev.base + rev, or segment.rev.overflow[offset]  when rev is FAR
//!   (FAR = i32::MIN)
//! ```
//!
//! Items are never moved in place: an overwrite appends a new copy and marks the old one dead.
//! Flags and the expiry cost nothing when they are 0 (the common case), so the seed's item
//! (15-byte key, 50-byte value, no expiry) takes 13 header + 65 bytes = 78 bytes of segment
//! memory. Setting flags or an expiry on an item that has no room for them writes a new copy.
//!
//! The CAS unique and the revision (the item's mod_revision) are 64-bit numbers kept in 4
//! bytes each: each segment has a base for both (the store's last CAS unique and newest
//! revision when the segment was opened) and an item keeps the signed 32-bit distance to it
//! ([`Far`]). Items written into a segment have CAS uniques and revisions just after its bases;
//! items copied into it (second chance, compaction) keep older ones, up to 2^31 behind. A
//! number whose distance does not fit (an explicit CAS of meta `E`, an item copied forward
//! after more than 2^31 writes since its own, or touched in a segment that old) is kept in
//! the segment's overflow map instead: rare, exact either way, and about 50 bytes then.
//!
//! `access` is the item's last access (meta `l`/`h`, `me`'s `la=`, metadump), in 16 bits
//! relative to the segment's creation time; see [`encode_access`].
//!
//! An item's header reads as the store's `ItemMeta` through [`meta_of`]; [`state_of`] gives
//! the state bits of an `ItemMeta`.
//!
//! Non-goals: no locking (the shard owns its segments), no I/O.

use crate::types::ItemMeta;

/// Size of a regular segment.
pub const SEGMENT_SIZE: usize = 1 << 20;

pub const DEAD: u8 = 1 << 0;
pub const FETCHED: u8 = 1 << 1;
pub const STALE: u8 = 1 << 2;
pub const WIN_SENT: u8 = 1 << 3;
pub const HAS_FLAGS: u8 = 1 << 4;
pub const HAS_EXPTIME: u8 = 1 << 5;

/// Offsets of the fixed header fields, relative to the item start.
const KLEN: usize = 0;
const STATE: usize = 1;
const VLEN: usize = 2;

/// Largest seconds that [`encode_access`]'s 15-bit magnitude holds (about 2.1 years).
const MAX_ACCESS_SECS: u32 = 4095 << 14;

/// Encodes a last access time as 16 bits relative to `created`, the segment's creation time:
///
/// ```text
///   bit 15      sign: set when the access was before the segment was created (an item moved
///               here by eviction's second chance or by compaction keeps its older time)
///   bits 14-11  exponent e        bits 10-0  mantissa m
///   seconds  =  m                      if e == 0   (0 ..= 2047, exact)
///            =  (2048 + m) << (e - 1)  otherwise   (2048 .. about 2.1 years)
/// ```
///
/// So a time is exact for the first 68 minutes of a segment's life; later it is rounded toward
/// the segment's creation by less than 1/2048 of its distance from it (under 43 s a day on),
/// and it saturates past 2.1 years. Two bytes instead of a 4-byte unix time per item.
pub fn encode_access(access: u32, created: u32) -> u16 {
    let (sign, secs) = if access >= created {
        (0, access - created)
    } else {
        (0x8000, created - access)
    };
    let secs = secs.min(MAX_ACCESS_SECS);
    let magnitude = if secs < 2048 {
        secs
    } else {
        // Bits beyond the 11 of the mantissa: 1 for 2048..4095, 2 for 4096..8191, ...
        let e = 32 - secs.leading_zeros() - 11;
        (e << 11) | ((secs >> (e - 1)) - 2048)
    };
    sign | magnitude as u16
}

/// The unix time [`encode_access`] encoded relative to `created`.
pub fn decode_access(code: u16, created: u32) -> u32 {
    let e = u32::from(code >> 11) & 0xf;
    let m = u32::from(code) & 0x7ff;
    let secs = if e == 0 { m } else { (2048 + m) << (e - 1) };
    if code & 0x8000 == 0 {
        created.saturating_add(secs)
    } else {
        created.saturating_sub(secs)
    }
}

/// One block of item memory.
pub struct Segment {
    /// Item bytes; `data.len()` is the append position, the capacity is the segment size.
    pub data: Vec<u8>,
    /// Bytes of items in this segment that are still live (for compaction decisions).
    pub live_bytes: usize,
    /// Live items in this segment.
    pub live_items: usize,
    /// Items appended with an expiry. Only these can ever expire here: an expiry is written
    /// in place only into an item that has the field ([`Segment::exptime_fits`]), so the
    /// expiry sweep skips a segment where this is 0.
    pub expiring: usize,
    /// Unix seconds when the segment was opened: the base of its items' last access times.
    pub created: u32,
    /// The CAS uniques of items here (see the module doc).
    pub cas: Far,
    /// The revisions of items here (see the module doc).
    pub rev: Far,
}

/// 64-bit numbers of a segment's items kept as 32-bit distances to a base, or in an overflow
/// map by item offset when the distance does not fit.
#[derive(Debug, Default)]
pub struct Far {
    pub base: u64,
    pub overflow: std::collections::HashMap<u32, u64>,
}

/// The stored distance that says "look in the overflow map".
const FAR: i32 = i32::MIN;

impl Far {
    fn new(base: u64) -> Far {
        Far {
            base,
            overflow: std::collections::HashMap::new(),
        }
    }

    /// The number stored as `stored` by the item at `at`.
    fn get(&self, at: usize, stored: i32) -> u64 {
        if stored != FAR {
            return self.base.wrapping_add_signed(i64::from(stored));
        }
        self.overflow[&(at as u32)]
    }

    /// What the item at `at` (whose field holds `old` now) stores for `value`; keeps the
    /// overflow map in step.
    fn put(&mut self, at: usize, old: i32, value: u64) -> i32 {
        let distance = i64::try_from(i128::from(value) - i128::from(self.base))
            .ok()
            .and_then(|d| i32::try_from(d).ok())
            .filter(|&d| d != FAR);
        match distance {
            Some(d) => {
                if old == FAR {
                    self.overflow.remove(&(at as u32));
                }
                d
            }
            None => {
                self.overflow.insert(at as u32, value);
                FAR
            }
        }
    }
}

/// A decoded item header: where each part of the item is.
#[derive(Clone, Copy, Debug)]
pub struct Header {
    pub state: u8,
    /// Last access, encoded relative to the segment's `created` ([`decode_access`]).
    pub access: u16,
    pub exptime: u32,
    /// The stored CAS distance (see [`Segment::cas`]).
    pub cas: i32,
    /// The stored revision distance (see [`Segment::revision`]).
    pub rev: i32,
    pub flags: u32,
    /// Offset of the access field (then the optional exptime, cas, rev, the optional flags).
    pub fields_at: usize,
    pub key_at: usize,
    pub key_len: usize,
    pub value_at: usize,
    pub value_len: usize,
}

impl Header {
    /// Total bytes of the item.
    pub fn item_len(&self, item_at: usize) -> usize {
        self.value_at + self.value_len - item_at
    }
}

fn varint_len(mut v: usize) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

/// Bytes an item with these sizes occupies.
pub fn item_size(key_len: usize, value_len: usize, flags: u32, exptime: u32) -> usize {
    let optional = |present: bool| if present { 4 } else { 0 };
    2 + varint_len(value_len)
        + 2
        + optional(exptime != 0)
        + 4
        + 4
        + optional(flags != 0)
        + key_len
        + value_len
}

impl Segment {
    /// A segment whose items' CAS uniques and revisions are mostly just after `cas_base` and
    /// `rev_base`.
    pub fn new(capacity: usize, now: u32, cas_base: u64, rev_base: u64) -> Segment {
        Segment {
            data: Vec::with_capacity(capacity),
            live_bytes: 0,
            live_items: 0,
            expiring: 0,
            created: now,
            cas: Far::new(cas_base),
            rev: Far::new(rev_base),
        }
    }

    pub fn free(&self) -> usize {
        self.data.capacity() - self.data.len()
    }

    /// Appends an item with CAS unique `cas` and revision `rev`; the caller checked `free() >= item_size(..)`.
    /// `access` is the unix time of its last access. Returns its offset.
    #[allow(clippy::too_many_arguments)]
    pub fn append(
        &mut self,
        key: &[u8],
        parts: &[&[u8]],
        value_len: usize,
        flags: u32,
        exptime: u32,
        cas: u64,
        rev: u64,
        state: u8,
        access: u32,
    ) -> usize {
        let at = self.data.len();
        let size = item_size(key.len(), value_len, flags, exptime);
        assert!(self.free() >= size, "segment overflow");
        assert!(key.len() <= u8::MAX as usize);
        let state = (state & !(DEAD | HAS_FLAGS | HAS_EXPTIME))
            | if flags != 0 { HAS_FLAGS } else { 0 }
            | if exptime != 0 { HAS_EXPTIME } else { 0 };
        let access = encode_access(access, self.created);
        let d = &mut self.data;
        d.push(key.len() as u8);
        d.push(state);
        let mut v = value_len;
        while v >= 0x80 {
            d.push((v as u8) | 0x80);
            v >>= 7;
        }
        d.push(v as u8);
        d.extend_from_slice(&access.to_le_bytes());
        if exptime != 0 {
            d.extend_from_slice(&exptime.to_le_bytes());
        }
        // Placeholders: set_cas and set_revision below write the distances (or the overflow
        // marks).
        d.extend_from_slice(&[0; 8]);
        if flags != 0 {
            d.extend_from_slice(&flags.to_le_bytes());
        }
        d.extend_from_slice(key);
        for p in parts {
            d.extend_from_slice(p);
        }
        assert_eq!(d.len() - at, size, "item size mismatch");
        self.live_bytes += size;
        self.live_items += 1;
        if exptime != 0 {
            self.expiring += 1;
        }
        let h = self.header(at);
        self.set_cas(at, &h, cas);
        self.set_revision(at, &h, rev);
        at
    }

    /// The CAS unique of the item at `at` (whose header is `h`).
    pub fn cas(&self, at: usize, h: &Header) -> u64 {
        self.cas.get(at, h.cas)
    }

    /// The revision of the item at `at` (whose header is `h`).
    pub fn revision(&self, at: usize, h: &Header) -> u64 {
        self.rev.get(at, h.rev)
    }

    /// Where the cas field of an item is (the rev field follows it).
    fn cas_at(h: &Header) -> usize {
        h.fields_at + 2 + if h.state & HAS_EXPTIME != 0 { 4 } else { 0 }
    }

    /// Sets the CAS unique of the item at `at`.
    pub fn set_cas(&mut self, at: usize, h: &Header, cas: u64) {
        let stored = self.cas.put(at, h.cas, cas);
        let field = Segment::cas_at(h);
        self.data[field..field + 4].copy_from_slice(&stored.to_le_bytes());
    }

    /// Sets the revision of the item at `at`.
    pub fn set_revision(&mut self, at: usize, h: &Header, rev: u64) {
        let stored = self.rev.put(at, h.rev, rev);
        let field = Segment::cas_at(h) + 4;
        self.data[field..field + 4].copy_from_slice(&stored.to_le_bytes());
    }

    /// Decodes the header of the item at `at`.
    pub fn header(&self, at: usize) -> Header {
        let d = &self.data;
        let key_len = d[at + KLEN] as usize;
        let state = d[at + STATE];
        let mut value_len = 0usize;
        let mut shift = 0;
        let mut i = at + VLEN;
        loop {
            let b = d[i];
            value_len |= ((b & 0x7f) as usize) << shift;
            i += 1;
            if b & 0x80 == 0 {
                break;
            }
            shift += 7;
        }
        let fields_at = i;
        let access = u16::from_le_bytes(d[i..i + 2].try_into().expect("2 bytes"));
        i += 2;
        let mut exptime = 0;
        if state & HAS_EXPTIME != 0 {
            exptime = u32::from_le_bytes(d[i..i + 4].try_into().expect("4 bytes"));
            i += 4;
        }
        let cas = i32::from_le_bytes(d[i..i + 4].try_into().expect("4 bytes"));
        let rev = i32::from_le_bytes(d[i + 4..i + 8].try_into().expect("4 bytes"));
        let mut key_at = i + 8;
        let mut flags = 0;
        if state & HAS_FLAGS != 0 {
            flags = u32::from_le_bytes(d[key_at..key_at + 4].try_into().expect("4 bytes"));
            key_at += 4;
        }
        Header {
            state,
            access,
            exptime,
            cas,
            rev,
            flags,
            fields_at,
            key_at,
            key_len,
            value_at: key_at + key_len,
            value_len,
        }
    }

    pub fn key(&self, h: &Header) -> &[u8] {
        &self.data[h.key_at..h.key_at + h.key_len]
    }

    pub fn value(&self, h: &Header) -> &[u8] {
        &self.data[h.value_at..h.value_at + h.value_len]
    }

    pub fn set_state(&mut self, at: usize, state: u8) {
        self.data[at + STATE] = state;
    }

    /// The unix time of the item's last access.
    pub fn access(&self, h: &Header) -> u32 {
        decode_access(h.access, self.created)
    }

    pub fn set_access(&mut self, h: &Header, access: u32) {
        let code = encode_access(access, self.created);
        self.data[h.fields_at..h.fields_at + 2].copy_from_slice(&code.to_le_bytes());
    }

    /// Whether `exptime` can be written in place: the item has an expiry field, or needs none.
    pub fn exptime_fits(h: &Header, exptime: u32) -> bool {
        exptime == 0 || h.state & HAS_EXPTIME != 0
    }

    /// Writes a new expiry in place; the caller checked [`Segment::exptime_fits`].
    pub fn set_exptime(&mut self, h: &Header, exptime: u32) {
        if h.state & HAS_EXPTIME == 0 {
            assert_eq!(exptime, 0, "no room for an expiry in this item");
            return;
        }
        let at = h.fields_at + 2;
        self.data[at..at + 4].copy_from_slice(&exptime.to_le_bytes());
    }

    /// Marks the item at `at` dead and updates the live counters.
    pub fn kill(&mut self, at: usize) {
        let h = self.header(at);
        assert_eq!(h.state & DEAD, 0, "item killed twice");
        self.set_state(at, h.state | DEAD);
        self.live_bytes -= h.item_len(at);
        self.live_items -= 1;
    }

    /// Offsets of every item in the segment, dead or alive.
    pub fn offsets(&self) -> Vec<usize> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < self.data.len() {
            out.push(at);
            let h = self.header(at);
            at += h.item_len(at);
        }
        out
    }
}

/// The metadata of the item at offset `at` of `seg`, whose header is `h`.
pub(crate) fn meta_of(h: &Header, seg: &Segment, at: usize) -> ItemMeta {
    ItemMeta {
        flags: h.flags,
        exptime: h.exptime,
        cas: seg.cas(at, h),
        last_access: seg.access(h),
        fetched: h.state & FETCHED != 0,
        stale: h.state & STALE != 0,
        win_sent: h.state & WIN_SENT != 0,
        mod_revision: seg.revision(at, h),
    }
}

/// The state bits of an item with metadata `m` (fetched, stale, win_sent).
pub(crate) fn state_of(m: &ItemMeta) -> u8 {
    (if m.fetched { FETCHED } else { 0 })
        | (if m.stale { STALE } else { 0 })
        | (if m.win_sent { WIN_SENT } else { 0 })
}

const _: () = assert!(DEAD != FETCHED);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_round_trips() {
        let mut s = Segment::new(4096, 1000, 40, 500);
        let a = s.append(
            b"memtier-1234567",
            &[&[7u8; 50]],
            50,
            0,
            0,
            42,
            501,
            FETCHED,
            1000,
        );
        let b = s.append(b"k", &[b"ab", b"cd"], 4, 0xdead_beef, 9, 1, 7, 0, 1200);
        assert_eq!(b - a, 78, "the seed's item takes 78 bytes");
        assert_eq!(s.revision(a, &s.header(a)), 501);
        assert_eq!(
            s.revision(b, &s.header(b)),
            7,
            "an older revision, behind the base"
        );
        let c = s.append(
            b"memtier-1234567",
            &[&[7u8; 50]],
            50,
            0,
            9,
            43,
            502,
            0,
            1000,
        );
        assert_eq!(
            c - b,
            2 + 1 + 2 + 4 + 4 + 4 + 4 + 1 + 4,
            "expiry and flags cost 4 bytes each"
        );
        let h = s.header(b);
        assert_eq!(
            (
                s.key(&h),
                s.value(&h),
                h.flags,
                h.exptime,
                s.cas(b, &h),
                s.access(&h)
            ),
            (&b"k"[..], &b"abcd"[..], 0xdead_beef, 9, 1, 1200)
        );
        let h = s.header(a);
        assert_eq!(
            (h.exptime, s.cas(a, &h), h.state & FETCHED),
            (0, 42, FETCHED)
        );
        s.set_access(&h, 1300);
        s.set_cas(a, &h, 44);
        let h = s.header(a);
        assert_eq!(
            (s.access(&h), s.cas(a, &h), s.value(&h)),
            (1300, 44, &[7u8; 50][..])
        );
        let h = s.header(c);
        assert!(Segment::exptime_fits(&h, 77));
        s.set_exptime(&h, 77);
        s.set_cas(c, &h, 45);
        let h = s.header(c);
        assert_eq!(
            (h.exptime, s.cas(c, &h), s.key(&h)),
            (77, 45, &b"memtier-1234567"[..])
        );
        assert!(!Segment::exptime_fits(&s.header(a), 77));
        assert_eq!(s.offsets(), vec![a, b, c]);
        s.kill(a);
        assert_eq!(s.live_items, 2);
        assert_eq!(s.header(a).state & DEAD, DEAD);
        let big = vec![1u8; 300];
        let d = s.append(b"big", &[&big], 300, 0, 0, 3, 503, 0, 1000);
        assert_eq!(s.header(d).value_len, 300);
        // The fields written in place leave the revision alone.
        let h = s.header(c);
        assert_eq!(s.revision(c, &h), 502);
    }

    #[test]
    fn revisions_far_from_the_base_overflow_exactly() {
        let base = 5u64 << 32;
        let mut s = Segment::new(4096, 0, 0, base);
        let far_back = s.append(b"old", &[b"v"], 1, 0, 9, 1, 3, 0, 0);
        let far_ahead = s.append(b"new", &[b"v"], 1, 0, 0, 1, base + (1 << 31), 0, 0);
        let near = s.append(b"mid", &[b"v"], 1, 0, 0, 1, base - (1 << 31) + 1, 0, 0);
        let rev = |s: &Segment, at| s.revision(at, &s.header(at));
        assert_eq!(rev(&s, far_back), 3);
        assert_eq!(rev(&s, far_ahead), base + (1 << 31));
        assert_eq!(rev(&s, near), base - (1 << 31) + 1);
        assert_eq!(s.rev.overflow.len(), 2);
        // Back within reach: the overflow entry goes.
        let h = s.header(far_back);
        s.set_revision(far_back, &h, base + 10);
        assert_eq!(rev(&s, far_back), base + 10);
        assert_eq!(s.rev.overflow.len(), 1);
        assert_eq!(rev(&s, far_ahead), base + (1 << 31));
        let h = s.header(far_ahead);
        s.set_revision(far_ahead, &h, u64::MAX);
        assert_eq!(rev(&s, far_ahead), u64::MAX);
    }

    #[test]
    fn cas_uniques_far_from_the_base_overflow_exactly() {
        let base = 7u64 << 40;
        let mut s = Segment::new(4096, 0, base, 0);
        // The usual case, a fresh unique just after the base: nothing in the map.
        let fresh = s.append(b"a", &[b"v"], 1, 0, 0, base + 1, 1, 0, 0);
        // Meta E sets any unique, here far behind and far ahead of the base.
        let behind = s.append(b"b", &[b"v"], 1, 0, 0, 12, 2, 0, 0);
        let ahead = s.append(b"c", &[b"v"], 1, 9, 9, u64::MAX, 3, 0, 0);
        let cas = |s: &Segment, at| s.cas(at, &s.header(at));
        assert_eq!(
            (cas(&s, fresh), cas(&s, behind), cas(&s, ahead)),
            (base + 1, 12, u64::MAX)
        );
        assert_eq!(s.cas.overflow.len(), 2);
        assert!(s.rev.overflow.is_empty(), "the revisions stay near theirs");
        // Rewritten in place: into reach and out of it again; the neighbours stay.
        let h = s.header(behind);
        s.set_cas(behind, &h, base - 5);
        assert_eq!((cas(&s, behind), s.cas.overflow.len()), (base - 5, 1));
        let h = s.header(fresh);
        s.set_cas(fresh, &h, base + (1 << 31));
        assert_eq!(cas(&s, fresh), base + (1 << 31));
        assert_eq!(s.cas.overflow.len(), 2);
        let h = s.header(ahead);
        assert_eq!((h.flags, h.exptime, s.revision(ahead, &h)), (9, 9, 3));
        assert_eq!(s.revision(fresh, &s.header(fresh)), 1);
    }

    #[test]
    fn access_times_are_exact_for_68_minutes_then_close() {
        let created = 1_700_000_000;
        for secs in [0, 1, 2047, 2048, 4095] {
            assert_eq!(
                decode_access(encode_access(created + secs, created), created),
                created + secs
            );
            assert_eq!(
                decode_access(encode_access(created - secs, created), created),
                created - secs
            );
        }
        for secs in [4096u32, 86_400, 7 * 86_400, 365 * 86_400, 2 * 365 * 86_400] {
            let back = decode_access(encode_access(created + secs, created), created);
            assert!(
                back <= created + secs,
                "rounded toward the segment's creation"
            );
            assert!(created + secs - back <= secs / 2048, "{secs}: {back}");
            let back = decode_access(encode_access(created - secs, created), created);
            assert!(back >= created - secs && back - (created - secs) <= secs / 2048);
        }
        // Saturates rather than wrapping.
        let far = created + 10 * 365 * 86_400;
        assert_eq!(
            decode_access(encode_access(far, created), created),
            created + MAX_ACCESS_SECS
        );
        assert_eq!(
            decode_access(encode_access(0, created), created),
            created - MAX_ACCESS_SECS
        );
    }
}
