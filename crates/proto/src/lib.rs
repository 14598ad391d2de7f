//! cairn-proto: the memcached text and meta protocols, with no I/O.
//!
//! ```text
//!   bytes from a socket ──> parse(buf, limits) ──> Ok(Some((Request, consumed)))  answer it
//!                                              ├─> Ok(None)                        read more
//!                                              └─> Err(ProtocolError)             send its reply,
//!                                                                                 drop `consumed`
//!                                                                                 (+ `swallow`)
//!   responses <── encode::* (append to one output buffer, flushed once per read batch)
//! ```
//!
//! The parser is incremental: it never consumes a partial request, so the caller keeps unparsed
//! bytes and calls again after the next read. Every limit (key length, line length, value size,
//! keys per get) is checked before anything is allocated. Errors carry the exact line memcached
//! 1.6 answers and say how many bytes to skip so the stream stays in sync: a malformed storage
//! command whose data length could be read skips its data block, and a CLIENT_ERROR of a command
//! that ends in `noreply` is not answered, so a noreply stream never falls out of step. A line
//! over the line limit and an HTTP request line close the connection without a reply, as
//! memcached does.
//!
//! memcached's binary protocol is the `binary` module: its own parser and encoders, for a
//! connection whose first byte is 0x80.
//!
//! Non-goals: executing commands (the server does), UDP framing.

mod arcus;
pub mod binary;
pub mod encode;
mod error;
mod lex;
mod limits;
mod meta;
mod meta_request;
mod request;
mod slabs;
mod text;

pub use error::{ErrorKind, ProtocolError};
pub use limits::{key_is_valid, Limits, MAX_DATA_LEN, MAX_RETRIEVAL_LINE};
pub use meta_request::{MetaCmd, MetaFlags, MetaMode, MetaRequest, MAX_EXPLICIT_CAS};
pub use request::{
    ArithCreate, Crawler, GetKind, KeyList, Request, ShutdownMode, Slabs, StoreKind,
};
pub use text::parse;

#[cfg(test)]
mod tests;
