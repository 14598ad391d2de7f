//! The watch's figures: the hub's ([`HubStats`], a snapshot) and the watch streams' counters
//! ([`WatchStats`]). The gRPC crate renders both in `stats grpc` and for Prometheus, under
//! the names it always had (`watch_*`, `grpc_watch_*`).
//!
//! ```text
//!   Hub::stats() ──> HubStats ─┐
//!   WatchStream ──> WatchStats ┴─> GrpcStats::figures (crates/grpc) ──> stats / metrics
//! ```
//!
//! Non-goals: names, descriptions and output (crates/grpc's stats.rs).

use std::sync::atomic::AtomicU64;

use cairn_store::Revision;

/// Figures for stats.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HubStats {
    /// The newest revision published to watchers.
    pub published_revision: Revision,
    /// Whether the history is kept (from the first watch on).
    pub history_active: bool,
    /// The oldest revision the in-memory history answers for.
    pub history_first_revision: Revision,
    /// Events in the in-memory history.
    pub history_events: u64,
    /// Bytes of the in-memory history, as its bound counts them.
    pub history_bytes: u64,
    /// The bound of the in-memory history (`watch_history_mb`).
    pub history_limit_bytes: u64,
    /// Revisions handed to the hub and not yet published (waiting to be safe).
    pub pending_revisions: u64,
}

/// The watch streams' counters, shared by every stream (and every gRPC thread).
#[derive(Debug, Default)]
pub struct WatchStats {
    /// Watch streams open now.
    pub watch_streams: AtomicU64,
    /// Watches open now (over all streams).
    pub watches: AtomicU64,
    /// Events sent to watchers.
    pub watch_events_sent: AtomicU64,
    /// Initial-state items sent to watchers.
    pub watch_initial_items_sent: AtomicU64,
    /// Watch responses sent (events, initial state, progress, created, canceled).
    pub watch_responses_sent: AtomicU64,
    /// Watches canceled because the history no longer held their revision.
    pub watch_compacted: AtomicU64,
    /// Events read back from the command log for watchers behind the in-memory history.
    pub watch_events_from_log: AtomicU64,
    /// Records read from the command log to make the history's events whole (persistence
    /// on): values of items changed since their event, and previous items.
    pub watch_values_from_log: AtomicU64,
}
