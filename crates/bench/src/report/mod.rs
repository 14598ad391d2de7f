//! Figures the suite derives from what it measured, as pure functions so they can be unit
//! tested without a server: throughput ratios against a baseline, the throughput dip while a
//! checkpoint runs, and the markdown tables for those and for recovery after `kill -9`.
//!
//! ```text
//!   summary (medians) ───────────────────> ratios ─────────> "ratios" table, JSON "ratios"
//!   row.timeline_ops + checkpoint_window ─> checkpoint_dip ─> "checkpoint" table, JSON row field
//!   Recovery (one per cairn async/sync run) ────────────────> "recovery" table, JSON "recovery"
//! ```
//!
//! Non-goals: statistics beyond medians; the machine is noisy, so the report gives ratios from
//! one side-by-side run rather than confidence intervals.
//!
//! The files:
//!
//! ```text
//!   summary.rs  rows of the same target and scenario folded into their medians
//!   table.rs    the results table and the recovery table
//!   ratios.rs   throughput ratios, against memcached, the durability goals
//!   dip.rs      the throughput dip while a checkpoint ran, and its table
//! ```

mod dip;
mod ratios;
mod summary;
mod table;
#[cfg(test)]
mod tests;

pub use dip::{checkpoint_dip, dip_table};
pub use ratios::{against_memcached_table, durability_goals, ratio_table, ratios};
pub use summary::{median, summarize};
pub use table::{recovery_table, table};
