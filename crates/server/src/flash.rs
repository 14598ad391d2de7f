//! The server's side of the flash tier: opening it at start.
//!
//! ```text
//!   get/gets ──> cmd::get::one_async ──> Flash::get (device read awaited, no lock held)
//!   any other keyed command ──> Engine::resolve(key): Flash::bring_to_ram (the item
//!        is in RAM now, CAS and metadata kept) ──> cmd::execute: the RAM path, unchanged
//! ```
//!
//! Non-goals: bringing an item back before a write (cairn-engine's `resolve`, for every
//! front end).

use std::sync::Arc;

use cairn_flash::{Flash, FlashConfig};

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
