//! The load generator: `threads` OS threads, each a single-threaded tokio runtime driving
//! `clients` connections; each connection keeps `pipeline` requests in flight (closed loop,
//! memtier's default) or sends at fixed intended times (`--rate`, open loop: latency counts from
//! the intended send time, so a stalled server is not hidden by coordinated omission).
//!
//! ```text
//!   thread ─┬─ client 0: [send pipeline] ─> [read replies, record latency] ─> ...
//!           └─ client 1: ...
//!   per thread: HDR histograms (set, get, all) + a per-second timeline; merged at the end
//! ```
//!
//! Non-goals: clustering, TLS, authentication.
//!
//! The files:
//!
//! ```text
//!   config.rs  LoadConfig, Protocol: what one run does
//!   engine.rs  run(): the threads, their connections, the merge of their figures
//!   wire.rs    the requests written and the replies parsed (memcached text, Redis RESP)
//!   result.rs  LoadResult: counts, HDR histograms, the per-second timeline, the error bar
//! ```

mod config;
mod engine;
mod result;
mod wire;

pub use config::{LoadConfig, Protocol};
pub use engine::run;
pub use result::{check_error_rate, histogram, LoadResult, MAX_ERROR_RATE};
pub use wire::value_for;
