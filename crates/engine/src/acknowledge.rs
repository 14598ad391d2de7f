//! Acknowledgement: what a reply waits for before it may leave. The rule of the mode in
//! force, then the replication gate's; `durable` is the fence of memcached's `mn` and of a
//! replica's batch.
//!
//! ```text
//!   acknowledged(ack) ── empty, or no log ──> Ok at once
//!      └ a thread-local wait first, if the front end has one (the io_uring engine's one wait
//!        a thread: acknowledged_after) ─> Persistence::acknowledged: sync: fdatasync'd;
//!        async: in the kernel ─> the gate: sync replication, a replica holds it (or times
//!        out: Replication), the lease ─> Ok
//!   durable(ack) ───── fdatasync'd whatever the mode (async: asks for one at once)
//! ```
//!
//! Waiting parks the caller's task only: no lock is held and no thread is blocked; all the
//! writers waiting share the log's next write (group commit).
//!
//! Non-goals: how a front end batches (a memcached connection merges its pipelined
//! requests' acks and waits once before it writes their replies).

use std::future::Future;

use cairn_persist::Persistence;
use cairn_wal::Lsn;

use crate::apply::Ack;
use crate::engine::Engine;
use crate::error::WriteError;

impl Engine {
    /// Resolves once everything `ack` covers is safe in the mode in force and the
    /// replication gate lets it be acknowledged. An error: it may not be acknowledged
    /// ([`WriteError::NotSafe`], [`WriteError::Replication`]).
    pub async fn acknowledged(&self, ack: Ack) -> Result<(), WriteError> {
        self.acknowledged_after(ack, |_, _| std::future::ready(()))
            .await
    }

    /// [`Engine::acknowledged`], awaiting `local(persist, lsn)` first when there is an LSN to
    /// wait for: a front end's own wait for the log's safe mark, shared by the requests of
    /// one thread (cairn-server's io_uring engine), after which the log's own wait finds the
    /// mark reached.
    pub async fn acknowledged_after<'e, W: Future<Output = ()>>(
        &'e self,
        ack: Ack,
        local: impl FnOnce(&'e Persistence, Lsn) -> W,
    ) -> Result<(), WriteError> {
        if ack.is_empty() {
            return Ok(());
        }
        let Some(p) = &self.persist else {
            return Ok(());
        };
        if let Some(lsn) = ack.0.lsn() {
            local(p, lsn).await;
        }
        p.acknowledged(ack.0).await.map_err(WriteError::from)
    }

    /// Resolves once everything `ack` covers is durable, whatever the mode (a fence: in
    /// async mode it asks for an fdatasync at once).
    pub async fn durable(&self, ack: Ack) -> Result<(), WriteError> {
        match &self.persist {
            Some(p) => p.durable(ack.0).await.map_err(WriteError::NotSafe),
            None => Ok(()),
        }
    }
}
