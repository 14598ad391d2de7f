//! memcached's binary protocol (the classic one: a 24-byte header, magic 0x80 for a request
//! and 0x81 for a response), with no I/O.
//!
//! ```text
//!   bytes ──> parse(buf, limits) ──> Ok(Some((BinRequest { header, command }, packet len)))
//!                               ├─> Ok(None)                 read more
//!                               └─> Err(BinError)            answer it, drop `consumed`,
//!                                                            skip `swallow`, maybe close
//!   responses <── response::{response, ok, error, value, counter, stat} (one output buffer)
//! ```
//!
//! `header` reads and writes the header and names the opcodes, `request` parses a packet into
//! a [`Command`], `response` holds the status codes and the encoders, `error` the bad request.
//!
//! Non-goals: executing commands (the server does); SASL (parsed, answered by the server);
//! the vbucket and data-type fields (read, ignored); memcached's range and tap opcodes.

pub mod error;
pub mod header;
pub mod request;
pub mod response;

pub use error::BinError;
pub use header::{opcode, Header, HEADER_LEN, REQUEST_MAGIC, RESPONSE_MAGIC};
pub use request::{parse, BinRequest, Command, NO_CREATE};
pub use response::{Reply, Status};

#[cfg(test)]
mod tests;
