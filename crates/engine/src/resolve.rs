//! Flash before a write: a command that reads and changes an item must see it even when RAM
//! evicted it to the flash tier, so the engine brings the key's item back to RAM first.
//!
//! ```text
//!   resolve(key) ── no flash tier ──> Ok
//!                └─ Flash::bring_to_ram(store, key, now) (the device read awaited, no lock
//!                   held; CAS and metadata kept) ──> the command runs on RAM, unchanged
//! ```
//!
//! Should the item go back to flash between the two steps (only under extreme RAM churn), the
//! command sees no item, as if it had been evicted, and a store or delete still removes the
//! flash copy: a stale value is never served.
//!
//! Non-goals: plain reads (a get reads flash itself, through `Flash::get`).

use crate::engine::Engine;
use crate::error::WriteError;

impl Engine {
    /// Brings `key`'s item back to RAM if it is on flash, so that the write that follows
    /// runs on it with RAM semantics. An error ([`WriteError::FlashRead`]): the item's read
    /// could not be done, so the write must not run; nothing changed, the client may retry.
    pub async fn resolve(&self, key: &[u8]) -> Result<(), WriteError> {
        let Some(flash) = &self.flash else {
            return Ok(());
        };
        flash
            .bring_to_ram(&self.store, key, self.now())
            .await
            .map_err(WriteError::FlashRead)
    }
}
