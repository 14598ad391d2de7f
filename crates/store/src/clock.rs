//! The wall clock in the store's time base, unix seconds: the one definition of it, for the
//! crates above that truly need the wall clock (recovery and checkpoints in cairn-persist,
//! the flash tier's seed and sweeps, the watch's initial state) and for the ticked clock
//! requests use (cairn-engine's `clock`), which sets itself from it once a second.
//!
//! ```text
//!   SystemTime::now() ── since the epoch, whole seconds ──> u32 (0 before 1970)
//! ```
//!
//! Non-goals: the store itself never reads it (every call takes `now` from its caller).

use std::time::{SystemTime, UNIX_EPOCH};

use crate::types::UnixSecs;

/// The wall clock in unix seconds.
pub fn now_unix() -> UnixSecs {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as u32)
}
