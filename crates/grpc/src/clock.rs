//! The wall clock in unix seconds, the store's time base (expiry, `now` of reads and writes).
//!
//! ```text
//!   SystemTime::now() ── since the epoch, seconds ──> u32 (0 before 1970)
//! ```
//!
//! Non-goals: the store's own clock, which it has none of.

use std::time::{SystemTime, UNIX_EPOCH};

/// The wall clock in unix seconds (the store's time base).
pub(crate) fn now_unix() -> u32 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as u32)
}
