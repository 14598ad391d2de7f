//! cairn-watch: the watch, in the domain layer beside persistence. The hub gives every
//! mutation a revision, publishes it only once it can no longer be lost, and keeps the
//! events in an in-memory history bounded in bytes, with the command log behind it; a watch
//! stream holds its watches' cursors, ranges and filters, scans initial states, and steps
//! through the history in batched responses. The gRPC crate is only its adapter (requests
//! in, responses out), as etcd's `v3rpc/watch.go` is over `mvcc/watchable_store.go`.
//!
//! ```text
//!   store ─ mutation ─> persist (LSN, safe mark) ─> Hub (hub.rs) ── event (event.rs: one
//!                                                    │   buffer, the cairn.v1.Event bytes,
//!                                                    │   wire.rs, event_bytes.rs)
//!                                                    ├─ pending slots (pending.rs)
//!                                                    ├─ history ring (history.rs)
//!                                                    └─ published revision (published.rs)
//!   crates/grpc watch.rs ── Command (command.rs) ──> WatchStream (stream.rs)
//!                        <── Update (update.rs) ───   ├ woken: subscriber.rs, batch.rs
//!                                                     ├ steps: step.rs (each event read
//!                                                     │   once a step, for every watch)
//!                                                     ├ values of the history's skeletons
//!                                                     │   (persistence on): resolve.rs,
//!                                                     │   into the step's read
//!                                                     │   (step_read.rs), shared by the
//!                                                     │   streams (recent.rs)
//!                                                     ├ watches: cursor.rs, filter.rs
//!                                                     ├ initial state: initial_state.rs
//!                                                     └ older events: log_reader.rs
//! ```
//!
//! Non-goals: no transport, no request decoding or message building beyond the event bytes
//! it pre-encodes (`cairn.v1.Event`, from cairn-api, as etcd's mvcc keeps mvccpb), no
//! memcached protocol.

mod backend;
mod batch;
mod command;
mod cursor;
mod event;
mod event_bytes;
mod filter;
mod history;
mod hub;
mod initial_state;
mod limits;
mod log_reader;
mod pending;
mod prefetch;
mod published;
mod recent;
mod resolve;
mod spare;
mod stats;
mod step;
mod step_read;
mod stream;
mod subscriber;
#[cfg(test)]
mod test_items;
mod update;
mod wire;

pub use backend::WatchBackend;
pub use command::{Command, CreateWatch};
pub use cursor::EventBatch;
pub use event::{Event, EventKind, ItemState};
pub use filter::{Filters, KeyRange};
pub use history::ReadError;
pub use hub::{newest_assigned, Hub};
pub use initial_state::key_value;
pub use stats::{HubStats, WatchStats};
pub use stream::{Streams, WatchStream};
pub use subscriber::Subscriber;
pub use update::Update;
