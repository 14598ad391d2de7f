//! The bounds of one watch stream: watches, response sizes, work per step, initial-state
//! chunks and the command log read per step. One place, so that the stream, its watches'
//! cursors, the initial-state scan and the log reader agree.
//!
//! ```text
//!   stream ── ≤ MAX_WATCHES_PER_STREAM watches ── a step reads ≤ MAX_EVENTS_PER_STEP events
//!     (ring or log: ≤ MAX_LOG_BYTES_PER_STEP) ── a response ≤ MAX_EVENTS_PER_RESPONSE events,
//!     ≤ MAX_BYTES_PER_RESPONSE ── initial state: chunks of ≤ MAX_ITEMS_PER_CHUNK items,
//!     INITIAL_QUEUE of them ahead
//! ```
//!
//! Non-goals: the gRPC message size limit (crates/grpc's config).

/// Most watches one stream holds. Each costs a cursor and a share of its stream's one task;
/// a create past the limit is canceled with the reason, and the stream and its other watches
/// go on.
pub(crate) const MAX_WATCHES_PER_STREAM: usize = 1000;
/// Most events (and bytes of them) in one response.
pub(crate) const MAX_EVENTS_PER_RESPONSE: usize = 1000;
pub(crate) const MAX_BYTES_PER_RESPONSE: usize = 1 << 20;
/// Most events examined per step for one watch (so one watch cannot hold the stream long).
pub(crate) const MAX_EVENTS_PER_STEP: usize = 4096;
/// Initial-state items per response (and the byte bound above).
pub(crate) const MAX_ITEMS_PER_CHUNK: usize = 4096;
/// Initial-state chunks produced ahead of sending.
pub(crate) const INITIAL_QUEUE: usize = 2;
/// Most payload bytes read from the command log in one step of a watch behind the ring.
pub(crate) const MAX_LOG_BYTES_PER_STEP: usize = 4 << 20;
