//! Item memory: items appended into large segments, and the byte layout of one item.
//!
//! ```text
//!   Segment (1 MiB, or one oversized item):  [item][item][item]......[free]
//!
//!   item:  klen u8 | state u8 | vlen varint(1..5) | exptime u32 | cas u64 | [flags u32] | key | value
//!          state bits: 0 dead, 1 fetched, 2 stale, 3 win_sent, 4 has_flags
//! ```
//!
//! Items are never moved in place: an overwrite appends a new copy and marks the old one dead.
//! Flags cost nothing when they are 0 (the common case), so the seed's item (15-byte key,
//! 50-byte value) takes 15 header + 65 bytes = 80 bytes of segment memory.
//!
//! Non-goals: no locking (the shard owns its segments), no I/O.

/// Size of a regular segment.
pub const SEGMENT_SIZE: usize = 1 << 20;

pub const DEAD: u8 = 1 << 0;
pub const FETCHED: u8 = 1 << 1;
pub const STALE: u8 = 1 << 2;
pub const WIN_SENT: u8 = 1 << 3;
pub const HAS_FLAGS: u8 = 1 << 4;

/// Offsets of the fixed header fields, relative to the item start.
const KLEN: usize = 0;
const STATE: usize = 1;
const VLEN: usize = 2;

/// One block of item memory.
pub struct Segment {
    /// Item bytes; `data.len()` is the append position, the capacity is the segment size.
    pub data: Vec<u8>,
    /// Bytes of items in this segment that are still live (for compaction decisions).
    pub live_bytes: usize,
    /// Live items in this segment.
    pub live_items: usize,
    /// Unix seconds when the segment was opened (a coarse "stored at" for its items).
    pub created: u32,
}

/// A decoded item header: where each part of the item is.
#[derive(Clone, Copy, Debug)]
pub struct Header {
    pub state: u8,
    pub exptime: u32,
    pub cas: u64,
    pub flags: u32,
    /// Offset of the exptime field (then cas, then optional flags).
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
pub fn item_size(key_len: usize, value_len: usize, flags: u32) -> usize {
    2 + varint_len(value_len) + 4 + 8 + if flags != 0 { 4 } else { 0 } + key_len + value_len
}

impl Segment {
    pub fn new(capacity: usize, now: u32) -> Segment {
        Segment {
            data: Vec::with_capacity(capacity),
            live_bytes: 0,
            live_items: 0,
            created: now,
        }
    }

    pub fn free(&self) -> usize {
        self.data.capacity() - self.data.len()
    }

    /// Appends an item; the caller checked `free() >= item_size(..)`. Returns its offset.
    #[allow(clippy::too_many_arguments)]
    pub fn append(
        &mut self,
        key: &[u8],
        parts: &[&[u8]],
        value_len: usize,
        flags: u32,
        exptime: u32,
        cas: u64,
        state: u8,
    ) -> usize {
        let at = self.data.len();
        let size = item_size(key.len(), value_len, flags);
        assert!(self.free() >= size, "segment overflow");
        assert!(key.len() <= u8::MAX as usize);
        let state = (state & !(DEAD | HAS_FLAGS)) | if flags != 0 { HAS_FLAGS } else { 0 };
        let d = &mut self.data;
        d.push(key.len() as u8);
        d.push(state);
        let mut v = value_len;
        while v >= 0x80 {
            d.push((v as u8) | 0x80);
            v >>= 7;
        }
        d.push(v as u8);
        d.extend_from_slice(&exptime.to_le_bytes());
        d.extend_from_slice(&cas.to_le_bytes());
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
        at
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
        let exptime = u32::from_le_bytes(d[i..i + 4].try_into().expect("4 bytes"));
        let cas = u64::from_le_bytes(d[i + 4..i + 12].try_into().expect("8 bytes"));
        let mut key_at = i + 12;
        let mut flags = 0;
        if state & HAS_FLAGS != 0 {
            flags = u32::from_le_bytes(d[key_at..key_at + 4].try_into().expect("4 bytes"));
            key_at += 4;
        }
        Header {
            state,
            exptime,
            cas,
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

    pub fn set_exptime(&mut self, h: &Header, exptime: u32) {
        self.data[h.fields_at..h.fields_at + 4].copy_from_slice(&exptime.to_le_bytes());
    }

    pub fn set_cas(&mut self, h: &Header, cas: u64) {
        self.data[h.fields_at + 4..h.fields_at + 12].copy_from_slice(&cas.to_le_bytes());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_round_trips() {
        let mut s = Segment::new(4096, 0);
        let a = s.append(b"memtier-1234567", &[&[7u8; 50]], 50, 0, 9, 42, FETCHED);
        let b = s.append(b"k", &[b"ab", b"cd"], 4, 0xdead_beef, 0, 1, 0);
        assert_eq!(b - a, 80, "the seed's item takes 80 bytes");
        let h = s.header(b);
        assert_eq!(
            (s.key(&h), s.value(&h), h.flags, h.cas),
            (&b"k"[..], &b"abcd"[..], 0xdead_beef, 1)
        );
        let h = s.header(a);
        assert_eq!((h.exptime, h.cas, h.state & FETCHED), (9, 42, FETCHED));
        assert_eq!(s.offsets(), vec![a, b]);
        s.kill(a);
        assert_eq!(s.live_items, 1);
        assert_eq!(s.header(a).state & DEAD, DEAD);
        let big = vec![1u8; 300];
        let c = s.append(b"big", &[&big], 300, 0, 0, 3, 0);
        assert_eq!(s.header(c).value_len, 300);
    }
}
