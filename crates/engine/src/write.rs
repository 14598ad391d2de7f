//! One write, whole: for a front end that writes one key at a time and replies to each (the
//! gRPC KV service); and the same without the wait, for one that acknowledges a batch of
//! writes at once (the binary protocol).
//!
//! ```text
//!   apply_write(key, f) ─ admit ─ resolve(key) ─ apply(f) ─> (f's result, Ack)
//!   write(key, f) ─ apply_write ─ acknowledged(ack) ─> f's result
//! ```
//!
//! Non-goals: the text protocol's dispatch, which admits a request before it knows its key
//! and calls the steps itself.

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
        let (r, ack) = self.apply_write(Some(key), f).await?;
        self.acknowledged(ack).await?;
        Ok(r)
    }

    /// [`Engine::write`] without the wait: refused as client writes are, waits for room in
    /// the log, brings `key`'s item back from flash (if a key is named), applies `f`; the
    /// caller acknowledges the returned [`Ack`](crate::Ack) with its batch.
    pub async fn apply_write<R>(
        &self,
        key: Option<&[u8]>,
        f: impl FnOnce(&Tx<'_>) -> R,
    ) -> Result<(R, crate::Ack), WriteError> {
        self.admit().await?;
        if let Some(key) = key {
            self.resolve(key).await?;
        }
        Ok(self.apply(f))
    }
}
