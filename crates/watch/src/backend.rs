//! What every watch stream of a server reads from and counts into: the store (initial
//! state), the command log (history older than the ring), the hub, the counters, and the
//! progress interval.
//!
//! ```text
//!   crates/grpc Backend ──> WatchBackend { store, persist, hub, stats, progress interval }
//!                              └──> Streams::new ──> every WatchStream holds an Arc of it
//! ```
//!
//! Non-goals: the gRPC settings (crates/grpc's backend.rs).

use std::sync::Arc;
use std::time::Duration;

use cairn_persist::Persistence;
use cairn_store::Store;

use crate::hub::Hub;
use crate::stats::WatchStats;

/// See the module doc.
pub struct WatchBackend {
    /// The cache, scanned for initial states.
    pub store: Arc<Store>,
    /// Command log and checkpoints; None without persistence (then the ring is all the
    /// history there is).
    pub persist: Option<Arc<Persistence>>,
    /// The published events and revisions.
    pub hub: Arc<Hub>,
    /// The streams' counters (`grpc_watch_*` in `stats grpc`).
    pub stats: Arc<WatchStats>,
    /// How often watches with progress_notify get a progress response while idle.
    pub progress_notify_interval: Duration,
}
