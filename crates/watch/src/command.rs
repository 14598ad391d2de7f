//! What a client asks of its watch stream, as the adapter (crates/grpc's watch.rs) read it
//! from a `cairn.v1.WatchRequest`: create a watch, cancel one, or ask where the stream is.
//!
//! ```text
//!   WatchRequest ── adapter ──> Command::Create(CreateWatch) | Cancel(id) | Progress
//!                               (or an error that ends the stream)
//!                ──> WatchStream (crate::stream)
//! ```
//!
//! A create's range and filters come as the adapter read them, or why they could not be:
//! the stream checks the request in the order it always did (room, id, range, filters) and
//! cancels the watch with the first reason. Non-goals: protobuf (the adapter).

use cairn_store::Revision;

use crate::filter::{Filters, KeyRange};

/// One request of a watch stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// A new watch.
    Create(CreateWatch),
    /// Cancel the watch of this id.
    Cancel(i64),
    /// Ask for a progress response for the whole stream (watch id -1).
    Progress,
}

/// A watch to create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateWatch {
    /// The id the client chose; 0: the server chooses one.
    pub watch_id: i64,
    /// The keys to watch, or why the request names none.
    pub range: Result<KeyRange, String>,
    /// The kinds of event to leave out, or why a filter is unknown.
    pub filters: Result<Filters, String>,
    /// Send each event's previous item (the ring's events only: the log keeps none).
    pub prev_kv: bool,
    /// Send a progress response when idle, every progress interval.
    pub progress_notify: bool,
    /// Send the range's items first, then the events after them.
    pub initial_state: bool,
    /// The first revision to send (0: the next one); ignored with `initial_state`.
    pub start_revision: Revision,
    /// The history `start_revision` belongs to (0: any): another one than the hub's cancels
    /// the watch, compacted (watch.proto).
    pub history_id: u64,
}
