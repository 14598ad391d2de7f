//! Every figure the server reports, in one list per block that both `stats` and the Prometheus
//! endpoint read, so that a figure added here shows up in both. Each layer hands its figures
//! over as a struct (the store's `StoreStats`, persistence's `PersistStats` with the log's
//! `LogStats`, the flash tier's and the gRPC layer's counters); the modules here turn them
//! into [`Reading`]s, and nothing is printed to text to be parsed back.
//!
//! ```text
//!   StoreStats, counters, process ─> general(ctx) ──────┐
//!   Flash counters and usage ──────> flash(ctx, r) ─────┤ Vec<Reading> ─> cmd/stats.rs:  STAT name value
//!   PersistStats (+ LogStats) ─────> persistence(ctx) ──┤             └─> metrics.rs:    cairn_metric[_total] value
//!   GrpcStats figures ─────────────> grpc(ctx) ─────────┘
//!   Latency (per command family) ─────────────────────────────────────> metrics.rs: histograms
//!   Replication (crates/cluster) ──> ReplicationStats::read ──> text() (stats replication)
//!                                                           └─> metrics.rs: cairn_replication_*
//! ```
//!
//! A [`Reading`] is a name (memcached's), a kind (counter or gauge), a one-line description and
//! a value. Text values (`version`, `mode`) are `stats` only. Counters get `_total` on the
//! endpoint; a reading may give its Prometheus name apart when memcached's name lacks the unit
//! (`uptime` is `cairn_uptime_seconds`).
//!
//! **Adding a stat:** one line in [`general()`] (or, for a counter bumped by commands, one line
//! in the `counters!` list of `meters/counters.rs`). A persistence figure is a field of
//! `PersistStats` (the persist crate) and one line in [`persistence()`] with its names, kind and
//! description.
//!
//! Modules: `reading` (the figure type), `general`, `persistence`, `flash`, `grpc` (the
//! blocks), `replication` (a typed struct of its own: its role label and text lists do not fit
//! a [`Reading`]), `process` (CPU and memory from procfs). What requests bump (counters,
//! latency, kept per thread) is `crate::meters`, re-exported here.

mod flash;
mod general;
mod grpc;
mod persistence;
mod process;
mod reading;
mod replication;

pub use crate::meters::{
    add, bump, Counters, Family, Latency, PerThread, ThreadCounts, CELLS, COUNTERS,
    LATENCY_BOUNDS_S,
};
pub use flash::flash;
pub use general::general;
pub use grpc::grpc;
pub use persistence::persistence;
pub use process::{process_figures, ProcessFigures};
pub use reading::{Kind, Reading, Readings, Value};
pub use replication::{PrimaryStats, ReplicaStats, ReplicationStats, RoleStats};
