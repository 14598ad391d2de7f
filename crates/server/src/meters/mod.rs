//! What requests bump as they are served: memcached's counters (`cmd_get`, `get_hits`,
//! `bytes_read`...) and the command latency histograms, each kept per thread and added up
//! when read. The shared state ([`crate::ctx::Ctx`]) holds them; the `stats` blocks and the
//! Prometheus endpoint read them.
//!
//! ```text
//!   connection / command ─> bump(&ctx.counters.cmd_get), ctx.latency.observe(family, d)
//!        └─> this thread's cell (PerThread) ─> stats/, metrics.rs: the sum over the cells
//! ```
//!
//! Modules: `counters` (the `counters!` list), `latency` (families and buckets),
//! `per_thread` (where both live).
//!
//! Non-goals: rendering them (stats/, metrics.rs); the figures the layers count themselves.

mod counters;
mod latency;
mod per_thread;

pub use counters::{add, bump, Counters, ThreadCounts, COUNTERS};
pub use latency::{Family, Latency, LATENCY_BOUNDS_S};
pub use per_thread::{PerThread, CELLS};
