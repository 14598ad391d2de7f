//! Protobuf bytes written by hand for the watch's hot path: every event is encoded once, when
//! the hub takes it in, and a response to a watch copies those bytes instead of building and
//! encoding a `pb::Event` per watch.
//!
//! ```text
//!   hub: Event::from_mutation ──> wire = [ type, kv ][ prev_kv ][ reason, revision ]
//!                                        (cairn.v1.Event, fields in tag order; the event's key
//!                                         and values are slices of these bytes)
//!   stream: WatchResponse{header, watch_id, events} ──> header, watch_id written here;
//!           each event: tag 11, length, then the event's wire bytes (without the middle
//!           part unless the watch asked for prev_kv)
//! ```
//!
//! A repeated message field is, on the wire, the concatenation of its elements, each as a
//! length-delimited field; so a response of N events is its header plus N copies of bytes
//! made once, and a fan-out to 1,000 watches costs a copy per watch, not 1,000 encodings.
//! The bytes are those prost writes for the same message (proto3: fields in tag order, zero
//! scalars and empty bytes left out; the tests compare them byte for byte), so a client sees
//! exactly what `pb::WatchResponse` would have given. The wire format is protobuf's; nothing
//! here is cairn's own format.

use bytes::{BufMut, BytesMut};
use prost::encoding::{encode_varint, encoded_len_varint};

/// Wire types of protobuf.
const VARINT: u8 = 0;
const LEN: u8 = 2;

/// A field's key: its number and wire type, one byte for numbers below 16.
const fn key(field: u8, wire_type: u8) -> u8 {
    assert!(field < 16);
    (field << 3) | wire_type
}

/// The bytes of a varint field (0 when the value is 0: proto3 leaves it out).
pub(crate) fn varint_field_len(v: u64) -> usize {
    if v == 0 {
        0
    } else {
        1 + encoded_len_varint(v)
    }
}

fn put_varint_field(buf: &mut impl BufMut, field: u8, v: u64) {
    if v != 0 {
        buf.put_u8(key(field, VARINT));
        encode_varint(v, buf);
    }
}

/// The bytes of a length-delimited field of `len` bytes (0 when empty and `omit_empty`).
fn len_field_len(len: usize, omit_empty: bool) -> usize {
    if len == 0 && omit_empty {
        0
    } else {
        1 + encoded_len_varint(len as u64) + len
    }
}

/// A `cairn.v1.KeyValue` to encode.
pub(crate) struct KeyValueFields<'a> {
    /// Field 1.
    pub key: &'a [u8],
    /// Field 2.
    pub value: &'a [u8],
    /// Field 3.
    pub flags: u32,
    /// Field 4.
    pub expires_at: u32,
    /// Field 5.
    pub cas: u64,
    /// Field 6.
    pub mod_revision: u64,
    /// Field 7.
    pub stale: bool,
}

impl KeyValueFields<'_> {
    /// The message's length (without a field key or length of its own).
    fn len(&self) -> usize {
        len_field_len(self.key.len(), true)
            + len_field_len(self.value.len(), true)
            + varint_field_len(self.flags.into())
            + varint_field_len(self.expires_at.into())
            + varint_field_len(self.cas)
            + varint_field_len(self.mod_revision)
            + varint_field_len(self.stale.into())
    }

    /// Writes the message as field `field` of the enclosing message; returns where in `buf`
    /// the key's and the value's bytes start.
    fn put_as_field(&self, buf: &mut impl Out, field: u8) -> (usize, usize) {
        buf.put_u8(key(field, LEN));
        encode_varint(self.len() as u64, buf);
        let mut put_bytes = |field: u8, b: &[u8]| {
            if !b.is_empty() {
                buf.put_u8(key(field, LEN));
                encode_varint(b.len() as u64, buf);
            }
            let at = buf.written();
            buf.put_slice(b);
            at
        };
        let key_at = put_bytes(1, self.key);
        let value_at = put_bytes(2, self.value);
        put_varint_field(buf, 3, self.flags.into());
        put_varint_field(buf, 4, self.expires_at.into());
        put_varint_field(buf, 5, self.cas);
        put_varint_field(buf, 6, self.mod_revision);
        put_varint_field(buf, 7, self.stale.into());
        (key_at, value_at)
    }
}

/// A buffer an event is encoded into: a `Vec` of its own, or a chunk shared with other
/// events (`event_bytes::Wire::encode`).
pub(crate) trait Out: BufMut {
    /// Bytes written so far.
    fn written(&self) -> usize;
}

impl Out for Vec<u8> {
    fn written(&self) -> usize {
        self.len()
    }
}

impl Out for BytesMut {
    fn written(&self) -> usize {
        self.len()
    }
}

/// The fields of a `cairn.v1.Event`, to encode in three parts (see [`EventLayout`]).
pub(crate) struct EventFields<'a> {
    /// `Event.type` (PUT = 0, DELETE = 1, FLUSH = 2).
    pub kind: i32,
    /// `Event.kv`: the new item (a Put) or the key (a Delete); None for a Flush.
    pub kv: Option<KeyValueFields<'a>>,
    /// `Event.prev_kv`: the item before, if the event carries one.
    pub prev_kv: Option<KeyValueFields<'a>>,
    /// `Event.reason`.
    pub reason: i32,
    /// `Event.revision`.
    pub revision: u64,
}

/// Where the parts of an encoded `cairn.v1.Event` lie in its bytes: `[..prev_at]` holds
/// fields 1-2 (type, kv), `[prev_at..tail_at]` field 3 (prev_kv, empty without one),
/// `[tail_at..]` fields 4-5 (reason, revision). And where the kv's key and value, and
/// prev_kv's value, start.
pub(crate) struct EventLayout {
    /// Where prev_kv starts.
    pub prev_at: usize,
    /// Where reason and revision start.
    pub tail_at: usize,
    /// Offsets of the kv's key and value (0 without a kv).
    pub key_at: usize,
    pub value_at: usize,
    /// Offset of prev_kv's value (0 without one).
    pub prev_value_at: usize,
}

impl EventFields<'_> {
    /// The encoding's length in bytes.
    pub(crate) fn len(&self) -> usize {
        let kv_len = self
            .kv
            .as_ref()
            .map_or(0, |kv| len_field_len(kv.len(), false));
        let prev_len = self
            .prev_kv
            .as_ref()
            .map_or(0, |kv| len_field_len(kv.len(), false));
        varint_field_len(self.kind as u64)
            + kv_len
            + prev_len
            + varint_field_len(self.reason as u64)
            + varint_field_len(self.revision)
    }

    /// Encodes the event at the end of `bytes`; the layout's offsets count from where the
    /// event starts.
    pub(crate) fn encode_into(&self, bytes: &mut impl Out) -> EventLayout {
        let base = bytes.written();
        // Enum fields are int32: a negative one would take 10 bytes; these never are.
        put_varint_field(bytes, 1, self.kind as u64);
        let (key_at, value_at) = match &self.kv {
            Some(kv) => {
                let (k, v) = kv.put_as_field(bytes, 2);
                (k - base, v - base)
            }
            None => (0, 0),
        };
        let prev_at = bytes.written() - base;
        let prev_value_at = match &self.prev_kv {
            Some(kv) => kv.put_as_field(bytes, 3).1 - base,
            None => 0,
        };
        let tail_at = bytes.written() - base;
        put_varint_field(bytes, 4, self.reason as u64);
        put_varint_field(bytes, 5, self.revision);
        debug_assert_eq!(bytes.written() - base, self.len());
        EventLayout {
            prev_at,
            tail_at,
            key_at,
            value_at,
            prev_value_at,
        }
    }
}

/// The parts of one encoded event a response carries: the event without its prev_kv, or whole.
#[inline]
pub(crate) fn event_parts(
    wire: &[u8],
    prev_at: usize,
    tail_at: usize,
    prev_kv: bool,
) -> [&[u8]; 2] {
    if prev_kv {
        [wire, &[]]
    } else {
        [&wire[..prev_at], &wire[tail_at..]]
    }
}

/// The bytes one event adds to a response: its field key, its length and its `parts`.
#[inline]
pub(crate) fn event_field_len([a, b]: [&[u8]; 2]) -> usize {
    let n = a.len() + b.len();
    1 + encoded_len_varint(n as u64) + n
}

/// The length of what [`put_events_response`] writes for the same arguments.
pub(crate) fn events_response_len<'a>(
    watch_id: i64,
    revision: u64,
    history_id: u64,
    events: impl Iterator<Item = [&'a [u8]; 2]>,
) -> usize {
    let header = varint_field_len(revision) + varint_field_len(history_id);
    let events: usize = events.map(event_field_len).sum();
    1 + encoded_len_varint(header as u64) + header + varint_field_len(watch_id as u64) + events
}

/// Writes a `cairn.v1.WatchResponse` with `header.revision`, `header.history_id`, `watch_id`
/// and the events whose encoded parts `events` yields (as [`event_parts`] gives them), and
/// nothing else set.
pub(crate) fn put_events_response<'a>(
    buf: &mut impl BufMut,
    watch_id: i64,
    revision: u64,
    history_id: u64,
    events: impl Iterator<Item = [&'a [u8]; 2]>,
) {
    // header: always present (prost writes a set message field even when it is empty).
    buf.put_u8(key(1, LEN));
    encode_varint(
        (varint_field_len(revision) + varint_field_len(history_id)) as u64,
        buf,
    );
    put_varint_field(buf, 1, revision);
    put_varint_field(buf, 2, history_id);
    // int64: a negative id is written as its 64-bit two's complement (10 bytes).
    put_varint_field(buf, 2, watch_id as u64);
    for [a, b] in events {
        buf.put_u8(key(11, LEN));
        encode_varint((a.len() + b.len()) as u64, buf);
        buf.put_slice(a);
        buf.put_slice(b);
    }
}
