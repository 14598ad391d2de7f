//! memcached's binary protocol on the server: each parsed packet (cairn_proto::binary) answered
//! through the same command files as the text protocol (storage.rs, delete.rs, arith.rs,
//! touch.rs, get.rs, flush.rs, stats.rs) and the one write path (cairn-engine).
//!
//! ```text
//!   connection (first byte 0x80) ─> step(ctx, session, input) ─> parse ─> answer.rs ─> cmd/*.rs
//!   a UDP datagram's payload (crate::udp::answer) ─> step, step, ...
//!        writes: Engine::admit ─> Engine::resolve(key) ─> Engine::apply(|tx| cmd file) ─> Ack
//! ```
//!
//! `step` answers one packet (or its error) and says how the stream goes on; `answer` is the
//! dispatch of one request; `stats` re-words the
//! text protocol's stats as binary packets; `wording` holds the statuses of the engine's
//! refusals.
//!
//! Non-goals: SASL (answered "unknown command", or refused under `-Y`); memcached's range,
//! tap and vbucket opcodes.

pub mod answer;
pub mod stats;
pub mod step;
pub mod wording;

pub use step::{step, Step};
