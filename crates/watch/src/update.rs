//! What a watch stream answers, before the adapter (crates/grpc's watch.rs) writes it as a
//! `cairn.v1.WatchResponse`: a watch created or canceled, progress, a chunk of initial
//! state, its end, or a response of events (whose bytes are made already).
//!
//! ```text
//!   WatchStream (crate::stream) ──> Update ── adapter ──> WatchResponse (HTTP/2)
//!       Events(EventBatch) ── EventBatch::encode: the events' own bytes (crate::wire)
//! ```
//!
//! Non-goals: protobuf field numbers and the transport (the adapter).

use cairn_api::pb;
use cairn_store::Revision;

use crate::cursor::EventBatch;

/// One response of a watch stream. In every variant, `watch_id` is the watch's id (-1: the
/// whole stream) and `revision` the response header's.
pub enum Update {
    /// The watch was created.
    Created { watch_id: i64, revision: Revision },
    /// The watch was canceled (or refused): why; `compact_revision` (non-zero) when the
    /// history no longer holds its cursor; `created` when it is the answer to its create.
    Canceled {
        watch_id: i64,
        revision: Revision,
        reason: String,
        compact_revision: Revision,
        created: bool,
    },
    /// The watch (or the whole stream: id -1) has sent everything up to `revision`.
    Progress { watch_id: i64, revision: Revision },
    /// A chunk of the watch's initial state at `revision`.
    InitialItems {
        watch_id: i64,
        revision: Revision,
        items: Vec<pb::KeyValue>,
    },
    /// The watch's initial state at `revision` is complete; its events follow.
    InitialDone { watch_id: i64, revision: Revision },
    /// Events of one watch.
    Events(EventBatch),
}

/// A cancel that is not about compaction, and not the answer to a create.
pub(crate) fn canceled(watch_id: i64, revision: Revision, reason: String) -> Update {
    Update::Canceled {
        watch_id,
        revision,
        reason,
        compact_revision: 0,
        created: false,
    }
}
