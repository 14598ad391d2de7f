//! cairn-grpc: the gRPC adapters over the store, the log and the watch that the memcached front
//! end uses: the KV service with streaming reads, the etcd-style Watch service (over
//! cairn-watch's streams and hub), the Replication service, their counters, and the server
//! that starts them. The generated API is cairn-api's; this crate only adapts it.
//!
//! ```text
//!   gRPC client ── HTTP/2 (tonic, optional rustls) ──> KV  ──> Store::get (or Flash::get) /
//!                                                      │   Store::entry (after
//!                                                      │   Flash::bring_to_ram)
//!                                                      │         │ mutation (shard lock)
//!                                                      │         v
//!                                                      │   LogSink ─ LSN ─> Hub (cairn-watch)
//!                                                      │   Engine::write: admit, resolve,
//!                                                      │   apply, acknowledged: the one
//!                                                      │   write path (cairn-engine)
//!                                                 Watch ──> cairn_watch::WatchStream: pulls
//!                                                           events from the Hub's ring (or
//!                                                           the command log when behind)
//!   also: grpc.health.v1 (tonic-health), server reflection (tonic-reflection)
//! ```
//!
//! Files: backend.rs (what the services share), server.rs (prepare and serve), kv.rs,
//! watch.rs, replication.rs (the services), replica_acks.rs (the primary's side of
//! replication, which crates/cluster implements), stats.rs (per-method counters), status.rs
//! (status codes as gRPC names them). Time is the engine's clock.
//!
//! The server crate builds a [`Backend`] (its engine and hub) and calls [`prepare`]
//! then [`Prepared::serve`]. This crate never sees the memcached protocol.

mod backend;
mod kv;
mod replica_acks;
pub mod replication;
mod server;
pub mod stats;
mod status;
mod watch;

pub use backend::{Backend, GrpcConfig};
/// The generated messages and services of `cairn.v1` (crates/api), re-exported for
/// compatibility: users of the generated types depend on cairn-api itself.
pub use cairn_api::pb;
/// The watch hub (crates/watch), re-exported for compatibility.
pub use cairn_watch::Hub;
pub use replica_acks::ReplicaAcks;
pub use server::{prepare, Prepared};
pub use stats::GrpcStats;
