//! Responses: the status codes and the encoders that append a complete response packet to
//! one output buffer (so a pipelined batch is answered with a single write).
//!
//! ```text
//!   response(out, &Reply { opcode, status, opaque, cas }, extras, key, value)
//!     └─> 0x81 header (lengths from the parts) + extras + key + value
//!   error(out, opcode, opaque, status, text)   a status other than success, its text as value
//! ```
//!
//! Non-goals: deciding which status a command gets (the server does).

use super::header::{Header, RESPONSE_MAGIC};

/// A response's status, with memcached's codes (`protocol_binary.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum Status {
    Success = 0x0000,
    KeyNotFound = 0x0001,
    KeyExists = 0x0002,
    TooLarge = 0x0003,
    InvalidArguments = 0x0004,
    NotStored = 0x0005,
    NonNumeric = 0x0006,
    AuthError = 0x0020,
    UnknownCommand = 0x0081,
    OutOfMemory = 0x0082,
    NotSupported = 0x0083,
    InternalError = 0x0084,
    Busy = 0x0085,
    TemporaryFailure = 0x0086,
}

impl Status {
    /// The code on the wire.
    pub fn code(self) -> u16 {
        self as u16
    }

    /// The text memcached sends as an error response's value (`write_bin_error`).
    pub fn text(self) -> &'static str {
        match self {
            Status::Success => "",
            Status::KeyNotFound => "Not found",
            Status::KeyExists => "Data exists for key.",
            Status::TooLarge => "Too large.",
            Status::InvalidArguments => "Invalid arguments",
            Status::NotStored => "Not stored.",
            Status::NonNumeric => "Non-numeric server-side value for incr or decr",
            Status::AuthError => "Auth failure.",
            Status::UnknownCommand => "Unknown command",
            Status::OutOfMemory => "Out of memory",
            Status::NotSupported => "Not supported",
            Status::InternalError => "Internal error",
            Status::Busy => "Busy",
            Status::TemporaryFailure => "Temporary failure",
        }
    }
}

/// What a response echoes of its request, and its outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reply {
    pub opcode: u8,
    pub status: Status,
    pub opaque: u32,
    /// The item's CAS unique after the command (0 when there is none).
    pub cas: u64,
}

/// Appends a response packet: header, then `extras`, `key` and `value`.
pub fn response(out: &mut Vec<u8>, reply: &Reply, extras: &[u8], key: &[u8], value: &[u8]) {
    debug_assert!(extras.len() <= usize::from(u8::MAX) && key.len() <= usize::from(u16::MAX));
    let body = extras.len() + key.len() + value.len();
    Header {
        magic: RESPONSE_MAGIC,
        opcode: reply.opcode,
        key_len: key.len() as u16,
        extras_len: extras.len() as u8,
        data_type: 0,
        vbucket_or_status: reply.status.code(),
        body_len: u32::try_from(body).unwrap_or(u32::MAX),
        opaque: reply.opaque,
        cas: reply.cas,
    }
    .write(out);
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// Appends a success with nothing in its body (a store, a delete, a noop, ...).
pub fn ok(out: &mut Vec<u8>, opcode: u8, opaque: u32, cas: u64) {
    let reply = Reply {
        opcode,
        status: Status::Success,
        opaque,
        cas,
    };
    response(out, &reply, &[], &[], &[]);
}

/// Appends an error response: `status`, with `text` as its value (memcached's wording is
/// [`Status::text`]).
pub fn error(out: &mut Vec<u8>, opcode: u8, opaque: u32, status: Status, text: &str) {
    let reply = Reply {
        opcode,
        status,
        opaque,
        cas: 0,
    };
    response(out, &reply, &[], &[], text.as_bytes());
}

/// Appends a retrieval hit: the flags as 4 bytes of extras, the key for GetK/GatK, the value.
pub fn value(out: &mut Vec<u8>, reply: &Reply, flags: u32, key: &[u8], value: &[u8]) {
    response(out, reply, &flags.to_be_bytes(), key, value);
}

/// Appends an incr/decr result: the new value as 8 bytes.
pub fn counter(out: &mut Vec<u8>, opcode: u8, opaque: u32, cas: u64, n: u64) {
    let reply = Reply {
        opcode,
        status: Status::Success,
        opaque,
        cas,
    };
    response(out, &reply, &[], &[], &n.to_be_bytes());
}

/// Appends one stat of a Stat reply (name as key, figure as value); an empty name and value
/// end the reply.
pub fn stat(out: &mut Vec<u8>, opaque: u32, name: &[u8], figure: &[u8]) {
    let reply = Reply {
        opcode: super::header::opcode::STAT,
        status: Status::Success,
        opaque,
        cas: 0,
    };
    response(out, &reply, &[], name, figure);
}
