//! The version this server reports: memcached's it speaks, then cairn's own.
//!
//! Non-goals: the `version` command (cmd/misc.rs) and the `stats` line (stats/general.rs),
//! which print it.

/// The version reported by `version` and `stats`.
pub const VERSION: &str = concat!("1.6.21-cairn-", env!("CARGO_PKG_VERSION"));
