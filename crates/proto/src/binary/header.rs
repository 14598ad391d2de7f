//! The 24-byte header every binary-protocol packet starts with, and the opcodes.
//!
//! ```text
//!   byte  0      1       2..4     4        5          6..8              8..12      12..16  16..24
//!       magic  opcode  key len  extras  data type  vbucket | status  body len   opaque   cas
//!       0x80 request, 0x81 response; all numbers big-endian; body = extras, key, value
//! ```
//!
//! Non-goals: what an opcode means (request.rs), the status codes (response.rs).

/// The first byte of a request; a connection whose first byte is this speaks binary.
pub const REQUEST_MAGIC: u8 = 0x80;
/// The first byte of a response.
pub const RESPONSE_MAGIC: u8 = 0x81;
/// Bytes in a header.
pub const HEADER_LEN: usize = 24;

/// The opcodes of memcached's binary protocol (its `protocol_binary.h`).
pub mod opcode {
    pub const GET: u8 = 0x00;
    pub const SET: u8 = 0x01;
    pub const ADD: u8 = 0x02;
    pub const REPLACE: u8 = 0x03;
    pub const DELETE: u8 = 0x04;
    pub const INCREMENT: u8 = 0x05;
    pub const DECREMENT: u8 = 0x06;
    pub const QUIT: u8 = 0x07;
    pub const FLUSH: u8 = 0x08;
    pub const GETQ: u8 = 0x09;
    pub const NOOP: u8 = 0x0a;
    pub const VERSION: u8 = 0x0b;
    pub const GETK: u8 = 0x0c;
    pub const GETKQ: u8 = 0x0d;
    pub const APPEND: u8 = 0x0e;
    pub const PREPEND: u8 = 0x0f;
    pub const STAT: u8 = 0x10;
    pub const SETQ: u8 = 0x11;
    pub const ADDQ: u8 = 0x12;
    pub const REPLACEQ: u8 = 0x13;
    pub const DELETEQ: u8 = 0x14;
    pub const INCREMENTQ: u8 = 0x15;
    pub const DECREMENTQ: u8 = 0x16;
    pub const QUITQ: u8 = 0x17;
    pub const FLUSHQ: u8 = 0x18;
    pub const APPENDQ: u8 = 0x19;
    pub const PREPENDQ: u8 = 0x1a;
    pub const VERBOSITY: u8 = 0x1b;
    pub const TOUCH: u8 = 0x1c;
    pub const GAT: u8 = 0x1d;
    pub const GATQ: u8 = 0x1e;
    pub const SASL_LIST_MECHS: u8 = 0x20;
    pub const SASL_AUTH: u8 = 0x21;
    pub const SASL_STEP: u8 = 0x22;
    pub const GATK: u8 = 0x23;
    pub const GATKQ: u8 = 0x24;
}

/// A packet's header, numbers in host order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    pub magic: u8,
    pub opcode: u8,
    pub key_len: u16,
    pub extras_len: u8,
    /// Always 0 (raw bytes) in memcached; not checked on requests.
    pub data_type: u8,
    /// A request's vbucket id (ignored) or a response's status.
    pub vbucket_or_status: u16,
    /// Extras, key and value together.
    pub body_len: u32,
    /// Echoed in the response, so a client can match replies to quiet requests.
    pub opaque: u32,
    pub cas: u64,
}

impl Header {
    /// Reads a header from the first [`HEADER_LEN`] bytes of `b`.
    pub fn read(b: &[u8; HEADER_LEN]) -> Header {
        let u16_at = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut cas = [0u8; 8];
        cas.copy_from_slice(&b[16..24]);
        Header {
            magic: b[0],
            opcode: b[1],
            key_len: u16_at(2),
            extras_len: b[4],
            data_type: b[5],
            vbucket_or_status: u16_at(6),
            body_len: u32_at(8),
            opaque: u32_at(12),
            cas: u64::from_be_bytes(cas),
        }
    }

    /// Appends the header's 24 bytes.
    pub fn write(&self, out: &mut Vec<u8>) {
        out.push(self.magic);
        out.push(self.opcode);
        out.extend_from_slice(&self.key_len.to_be_bytes());
        out.push(self.extras_len);
        out.push(self.data_type);
        out.extend_from_slice(&self.vbucket_or_status.to_be_bytes());
        out.extend_from_slice(&self.body_len.to_be_bytes());
        out.extend_from_slice(&self.opaque.to_be_bytes());
        out.extend_from_slice(&self.cas.to_be_bytes());
    }

    /// Bytes of the packet: header and body.
    pub fn packet_len(&self) -> usize {
        HEADER_LEN + self.body_len as usize
    }
}
