//! `cairn-bench suite arcus`: the ARCUS persistence seed's scenarios, every target side by
//! side in one run, each server started here on a free loopback port with its own temporary
//! data directory and stopped afterwards.
//!
//! ```text
//!   for each repeat, for each target (A B C A B C ...):
//!     start server ─> insert every key once (P:P, 1:0) ─> RSS after insert
//!       ─> retrieval R:R 0:1 ─> mixed 1:9 (a checkpoint mid-phase for cairn async/sync)
//!       ─> mixed 3:7 ─> mixed 5:5
//!       ─> cairn async/sync: kill -9, restart on the same data directory, read recovery stats
//!       ─> stop
//!   report: markdown table (medians over repeats), ratios, checkpoint dip, recovery,
//!           JSON with per-second timelines, SVG charts
//! ```
//!
//! The files:
//!
//! ```text
//!   target.rs   Target: the servers to measure, from the flags
//!   servers.rs  starting each target, kill -9 and restart, stopping it
//!   phases.rs   the phases of one target and what each measured (a Row)
//!   run.rs      every target, every repeat, then the report: results.md, results.json, SVGs
//! ```

mod phases;
mod run;
mod servers;
mod target;

pub use run::run;
