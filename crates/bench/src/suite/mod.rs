//! `cairn-bench suite SCENARIO`: scenario sets that start every server themselves, run the same
//! phases against each side by side, and write their tables and JSON to `--out-dir`.
//!
//! ```text
//!   args.rs   SuiteArgs: the flags of every scenario set
//!   arcus/    the ARCUS seed's scenarios: cairn's modes beside memcached and Redis
//!   flash/    the fatcache seed's F1-F6: cairn's flash tier beside memcached's extstore and fio
//! ```

pub mod arcus;
mod args;
pub mod flash;

pub use args::SuiteArgs;
