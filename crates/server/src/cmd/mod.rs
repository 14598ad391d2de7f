//! One file per command family: each takes a parsed request, applies it to the store and
//! encodes the reply into the connection's output buffer; [`answer`] (dispatch.rs) is the
//! one place that routes a request to its file, through the one write path (cairn-engine)
//! for a write.
//!
//! ```text
//!   Request::Get ......... get.rs      (per key, so the connection can flush between keys)
//!   Request::Store ....... storage.rs  Request::Delete ... delete.rs   Request::Arith ... arith.rs
//!   Request::Touch ....... touch.rs    Request::FlushAll  flush.rs     Request::Stats ... stats.rs
//!   Request::Meta ........ meta.rs     version, verbosity, quit, admin  misc.rs, admin.rs
//!   Request::NotSupported  arcus.rs    (ARCUS's collections and attributes; the connection
//!                                       keeps its pipeline state)
//!   Request::LruCrawler .. crawler.rs
//! ```
//!
//! Beside them: `dispatch` ([`answer`], [`Session`]), `flow` ([`Flow`], [`Closed`]),
//! `write_error` (the memcached wording of the engine's refusals), `exptime` (memcached's
//! expiry rule).

pub mod admin;
pub mod arcus;
pub mod arith;
pub mod crawler;
pub mod delete;
pub mod dispatch;
pub mod exptime;
pub mod flow;
pub mod flush;
pub mod get;
pub mod meta;
pub mod misc;
pub mod stats;
pub mod storage;
pub mod touch;
pub mod write_error;

pub use dispatch::{answer, is_write, Session};
pub use flow::{Closed, Flow};
