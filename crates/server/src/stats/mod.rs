//! Every figure the server reports, in one list per block that both `stats` and the Prometheus
//! endpoint read, so that a figure added here shows up in both.
//!
//! ```text
//!   general(ctx) ──────> Vec<Reading> ──> cmd/stats.rs:  STAT name value        (memcached)
//!   persistence(ctx) ─┤                └─> metrics.rs:  cairn_metric[_total] value (Prometheus)
//!   grpc(ctx) ────────┤
//!   flash(ctx, r) ────┘
//!   Latency (per command family) ───────> metrics.rs: histograms
//! ```
//!
//! A [`Reading`] is a name (memcached's), a kind (counter or gauge), a one-line description and
//! a value. Text values (`version`, `mode`) are `stats` only. Counters get `_total` on the
//! endpoint; a reading may give its Prometheus name apart when memcached's name lacks the unit
//! (`uptime` is `cairn_uptime_seconds`).
//!
//! **Adding a stat:** one line in [`general()`] (or, for a counter bumped by commands, one line
//! in the `counters!` list of `counters.rs`). Persistence figures come from
//! `Persistence::stats()` (the persist crate); each needs a row in `persistence::PERSISTENCE`
//! with its kind and description, which a test checks.
//!
//! Modules: `reading` (the figure type), `general`, `persistence`, `flash`, `grpc` (the
//! blocks), `counters` and `latency` (what requests bump), `per_thread` (where those live),
//! `process` (CPU and memory from procfs).

mod counters;
mod flash;
mod general;
mod grpc;
mod latency;
mod per_thread;
mod persistence;
mod process;
mod reading;

pub use counters::{add, bump, Counters, ThreadCounts, COUNTERS};
pub use flash::flash;
pub use general::general;
pub use grpc::grpc;
pub use latency::{Family, Latency, LATENCY_BOUNDS_S};
pub use per_thread::{PerThread, CELLS};
pub use persistence::persistence;
pub use process::{process_figures, ProcessFigures};
pub use reading::{Kind, Reading, Readings, Value};
