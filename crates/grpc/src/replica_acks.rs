//! The primary's side of replication, as the Replication service (crate::replication) calls
//! it: whether it takes replicas, its term, where a replica may resume, and the replicas'
//! reports. crates/cluster implements it; the server hands it over in the [`Backend`].
//!
//! ```text
//!   Follow stream ── first ack ──> refusal? term, resume_from(position, own)
//!                 ── every ack ──> acked(replica, stream, durable_revision, term)
//!                 ── its end ───> gone(replica, stream)
//! ```
//!
//! Non-goals: what sync replication does with the acknowledgements (crates/cluster).
//!
//! [`Backend`]: crate::Backend

/// The primary's side of replication (crates/cluster implements it).
pub trait ReplicaAcks: Send + Sync {
    /// Why this node does not take replicas now (it is a replica itself), if it does not.
    fn refusal(&self) -> Option<String>;
    /// This primary's term (0 outside a replication group).
    fn term(&self) -> u64;
    /// Where a replica whose data stands at `position` (a log id and a revision of that log)
    /// may resume in this primary's log, whose id and newest published revision are `own`;
    /// None: it takes a full copy.
    fn resume_from(&self, position: (u64, u64), own: (u64, u64)) -> Option<u64>;
    /// `replica`, following `term` on Follow stream `stream`, holds every event up to
    /// `durable_revision` durable. Stream ids grow: a replica that reconnects before its old
    /// stream ended reports on a higher one.
    fn acked(&self, replica: &str, stream: u64, durable_revision: u64, term: u64);
    /// `replica`'s stream `stream` ended (a newer stream of the same replica stays).
    fn gone(&self, replica: &str, stream: u64);
}
