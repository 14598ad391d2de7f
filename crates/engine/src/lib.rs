//! cairn-engine: the one write path. Every writer, the memcached connections (text and
//! meta), the gRPC KV service and a replica's apply, goes through [`Engine`]: it decides
//! whether a write may run, brings the key's item back from flash, applies the change to the
//! store (which logs it and hands it to the watch hub through its mutation sink), and returns
//! the acknowledgement the reply waits for. The front ends keep only parsing, the meaning of
//! their own commands, and encoding.
//!
//! ```text
//!   memcached connection          gRPC KV service             replica (cairn-cluster)
//!   (per request; one wait a      (one write at a time:       (a batch of the primary's
//!    batch of pipelined ones)      Engine::write)              events)
//!        │                              │                            │
//!        v                              v                            │
//!   admit().await ─── refusal? the log failed / the gate: a replica, a lapsed lease ─> error
//!        │            room? parks while the log's buffer is full (backpressure)
//!   resolve(key).await ── the key's item back from flash to RAM (flash tier on)
//!        │                              │                            │
//!        v                              v                            v
//!   apply(|tx| store calls) ──> (result, Ack) ───────────────────────────────────────────┐
//!        Store::entry_reporting under the shard lock ─> mutation sink: the log record     │
//!        (its LSN is the revision) and the watch hub ─> the newest revision = the Ack      │
//!                                                                                         v
//!   acknowledged(Ack).await ─ the mode's mark (sync: fdatasync'd; async: in the kernel)    │
//!                             + the replication gate (sync replication waits for a replica)│
//!   durable(Ack).await ────── fdatasync'd whatever the mode (memcached `mn`; a replica) ──┘
//! ```
//!
//! [`WriteError`] is the one list of refusals and failures; each front end words it its
//! own way (memcached `SERVER_ERROR ...`, gRPC status codes). [`Clock`] is the one clock of
//! requests: the ticked wall clock ([`ticked_now_unix`]), which tests can move ahead.
//!
//! Modules: `engine` ([`Engine`]: what it holds), `admit` (refusal and room), `resolve`
//! (flash), `apply` ([`Tx`], [`Ack`]), `acknowledge` (the waits), `write` (all of it for one
//! write), `put` (storing by mode and on a compare: what memcached's set/add/replace/cas and
//! gRPC's Set share), `error`, `clock`.
//!
//! Non-goals: no protocol (replies and the rest of each command's meaning stay with its
//! front end), no I/O of its own (the log is cairn-persist's and cairn-wal's, the device cairn-flash's),
//! no opening or recovery (cairn-persist's; the server builds the parts and hands them over).

mod acknowledge;
mod admit;
mod apply;
mod clock;
mod engine;
mod error;
mod put;
mod resolve;
mod write;

pub use apply::{Ack, Tx};
pub use cairn_store::now_unix;
pub use clock::{start_clock, ticked_now_unix, Clock};
pub use engine::Engine;
pub use error::WriteError;
pub use put::{compare, put, Compare, Mismatch, Put, PutMode};

#[cfg(test)]
mod tests;
