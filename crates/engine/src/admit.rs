//! Admission: whether a client write may run now, and room for it in the log. Every front
//! end awaits [`Engine::admit`] before a write (a replica's apply, which is no client write,
//! does not).
//!
//! ```text
//!   admit() ─ refusal()? ──────────────────────────> Err: the log failed, or the gate
//!           │                                        refuses (a replica, a lapsed lease)
//!           └ the log's buffer full? park until it has room (backpressure; this task only,
//!             no lock held), then refusal()? again ─> Ok
//! ```
//!
//! Non-goals: the refusal's wording (the front ends').

use crate::engine::Engine;
use crate::error::WriteError;

impl Engine {
    /// Why client writes are refused now, if they are: the log failed (an append or an
    /// fdatasync; cheap when it did not: one atomic load), or the replication gate refuses.
    #[inline]
    pub fn refusal(&self) -> Option<WriteError> {
        let p = self.persist.as_ref()?;
        if let Some(e) = p.write_refusal() {
            return Some(WriteError::LogFailed(e));
        }
        p.replication_refusal().map(WriteError::NotPrimary)
    }

    /// Resolves once a client write may run: at once, or after the log's pending buffer fell
    /// below its bound (it parks only the caller's task, so other connections and reads go
    /// on). An error: the write is refused, and nothing changed.
    pub async fn admit(&self) -> Result<(), WriteError> {
        let Some(p) = &self.persist else {
            return Ok(());
        };
        if let Some(refused) = self.refusal() {
            return Err(refused);
        }
        if !p.has_room() {
            p.room().await;
            // A log that stopped ends the wait too: the write is then refused.
            if let Some(refused) = self.refusal() {
                return Err(refused);
            }
        }
        Ok(())
    }
}
