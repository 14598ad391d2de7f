//! cairn-cluster: cairn beyond one machine.
//!
//! ```text
//!   cairn ──membership──> ZooKeeper (ARCUS's layout, see membership.rs)
//!     /arcus/cache_server_mapping/<ip:port>/<service code>     persistent: which service a
//!                                                               node serves
//!     /arcus/cache_list/<service code>/<ip:port>-<hostname>     ephemeral: "this node is up",
//!                                                               data "<memory limit>MB"
//!     /arcus/client_list/<service code>                         persistent: ARCUS's clients
//!                                                               list themselves in it
//! ```
//!
//! Replication (replication.rs, replica.rs): a replica follows its primary over the gRPC
//! watch (initial state, then every event from a revision on) and reports how far it holds
//! them durable on the Replication stream; the primary's sync mode acknowledges a write only
//! once a replica holds it durable.
//!
//! ARCUS clients (and anything else that reads `cache_list`) hash keys over the live nodes of
//! a service; a node's znode lives exactly as long as its ZooKeeper session, so a node that
//! dies leaves the list once its session times out, and one that stops gracefully removes it
//! at once.
//!
//! Non-goals: this crate holds no data and speaks no cache protocol; it talks to ZooKeeper
//! through the `zookeeper-client` crate (no protocol of our own).

mod error;
pub mod group;
pub mod lease;
pub mod lineage;
pub mod membership;
pub mod replica;
pub mod replication;

pub use error::ClusterError;
pub use group::{Group, GroupConfig};
pub use membership::{Membership, MembershipConfig, MembershipStatus};
pub use replica::FollowerConfig;
pub use replication::{Replication, ReplicationMode, Role};
