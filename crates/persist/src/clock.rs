//! The wall clock in Unix seconds, as the store's TTLs use it during recovery and checkpoints.
//!
//! Non-goals: the server's ticked clock (`cairn_server::ticked_now_unix`), which serves
//! requests.

use std::time::{SystemTime, UNIX_EPOCH};

/// The wall clock in Unix seconds.
pub(crate) fn now_unix() -> u32 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as u32)
}
