//! One write, whole: for a front end that writes one key at a time and replies to each (the
//! gRPC KV service).
//!
//! ```text
//!   write(key, f) ─ admit ─ resolve(key) ─ apply(f) ─ acknowledged(ack) ─> f's result
//! ```
//!
//! Non-goals: batches (a memcached connection calls the steps itself, and acknowledges a
//! pipelined batch once).

use crate::apply::Tx;
use crate::engine::Engine;
use crate::error::WriteError;

impl Engine {
    /// Runs one write of `key` through the whole path: refused as client writes are, waits
    /// for room in the log, brings the key's item back from flash, applies `f`, and returns
    /// `f`'s result once what it wrote is safe in the mode in force (and the replication gate
    /// lets it be acknowledged).
    pub async fn write<R>(
        &self,
        key: &[u8],
        f: impl FnOnce(&Tx<'_>) -> R,
    ) -> Result<R, WriteError> {
        self.admit().await?;
        self.resolve(key).await?;
        let (r, ack) = self.apply(f);
        self.acknowledged(ack).await?;
        Ok(r)
    }
}
