//! [`ReplicationGate`]: the cluster layer's condition on acknowledgements and its refusal of
//! client writes, which the one durability path (`crate::durability`) consults.
//!
//! ```text
//!   front end ─> Persistence::acknowledged(ticket) ─> safe locally? ─> gate.reached(lsn)
//!                                                                     (a replica holds it)
//! ```
//!
//! Non-goals: replication itself (crates/cluster implements the trait).

use std::future::Future;
use std::pin::Pin;

use cairn_wal::Lsn;

/// A second condition on acknowledgements, set by the cluster layer (crates/cluster): on a
/// primary with sync replication, a write is acknowledged only once a replica holds it
/// durable too; on a replica, client writes are refused. Both front ends go through it, since
/// both call [`crate::Persistence::acknowledged`] and [`crate::Persistence::replication_refusal`]
/// (through cairn-engine).
pub trait ReplicationGate: Send + Sync {
    /// Why client writes are refused now (this node is a replica), if they are.
    fn refusal(&self) -> Option<String>;
    /// What an acknowledgement of `lsn`, already safe locally, still waits for: None when
    /// nothing (the cheap path), else a future that says whether it may be acknowledged.
    #[allow(clippy::type_complexity)]
    fn reached(
        &self,
        lsn: Lsn,
    ) -> Option<Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>>>;
}
