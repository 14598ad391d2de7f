//! The server's side of the flash tier: opening it at start, and bringing a key's item back
//! from flash before a command that reads and changes it runs under the shard lock.
//!
//! ```text
//!   get/gets ──> cmd::get::one_async ──> Flash::get (device read awaited, no lock held)
//!   any other keyed command ──> resolve(key): Flash::bring_to_ram (the item
//!        is in RAM now, CAS and metadata kept) ──> cmd::execute: the RAM path, unchanged
//! ```
//!
//! Should the item go back to flash between the two steps (only under extreme RAM churn), the
//! command sees no item, as if it had been evicted, and a store or delete still removes the
//! flash copy: a stale value is never served.

use std::sync::Arc;

use cairn_flash::{Flash, FlashConfig};
use cairn_proto::{MetaCmd, Request};

use crate::Ctx;

/// Opens the tier, logging which read engine it uses; the error names the path and reason.
/// `keep`: persistence is on, so what the last checkpoint named may be trusted again.
pub fn open(config: FlashConfig, keep: bool) -> Result<Arc<Flash>, String> {
    #[cfg(feature = "test-hooks")]
    let config = crate::test_hooks::flash_config(config);
    let path = config.path.display().to_string();
    let flash =
        Flash::open_keeping(config.clone(), keep).map_err(|e| format!("refusing to start: {e}"))?;
    if let Some(why) = &flash.uring_unavailable {
        tracing::warn!("flash reads use a pread thread pool: {why}");
    }
    tracing::info!(
        path,
        size = config.size_bytes,
        segment_bytes = config.segment_bytes,
        segments = flash.segment_count(),
        direct_io = config.direct_io,
        io = flash.io_engine(),
        "flash tier on"
    );
    Ok(flash)
}

/// The key a command reads or changes, if it may be on flash (plain retrievals read flash
/// themselves, see `cmd::get`).
fn key_of<'r>(request: &'r Request<'_>) -> Option<&'r [u8]> {
    match request {
        Request::Store { key, .. }
        | Request::Delete { key, .. }
        | Request::Arith { key, .. }
        | Request::Touch { key, .. } => Some(key),
        Request::Meta(m) if m.cmd != MetaCmd::Noop => Some(&m.key),
        _ => None,
    }
}

/// Brings `request`'s key back to RAM if its item is on flash, so the command runs on it
/// with RAM semantics. An error: the item's read could not be done (the reader stopping, a
/// busy ring), so the command must not run; nothing changed.
pub async fn resolve(ctx: &Ctx, request: &Request<'_>) -> std::io::Result<()> {
    let (Some(flash), Some(key)) = (&ctx.flash, key_of(request)) else {
        return Ok(());
    };
    resolve_key(ctx, flash, key).await
}

/// [`resolve`] for one key ([`Flash::bring_to_ram`]).
pub async fn resolve_key(ctx: &Ctx, flash: &Flash, key: &[u8]) -> std::io::Result<()> {
    flash.bring_to_ram(&ctx.store, key, ctx.now()).await
}
