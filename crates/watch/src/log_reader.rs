//! Events older than the in-memory history, read back from the command log for a watch
//! whose cursor the ring has passed (persistence on; no previous items: the log keeps none).
//!
//! ```text
//!   stream step, watch behind the ring ── read_log(cursor) ──> spawn_blocking:
//!     Persistence::read_history(cursor ..= min(published, first_in_memory - 1),
//!       ≤ MAX_EVENTS_PER_STEP events, ≤ MAX_LOG_BYTES_PER_STEP) ── Event::from_record
//!     ──> Ok(events, next) | Err(oldest still held, why): the watch is canceled (compacted)
//! ```
//!
//! Non-goals: which watch reads the log when (crate::stream, one watch a step, round robin).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use cairn_store::Revision;

use crate::backend::WatchBackend;
use crate::event::Event;
use crate::limits::{MAX_EVENTS_PER_STEP, MAX_LOG_BYTES_PER_STEP};

/// Reads the events of a watch behind the in-memory history from the command log, up to
/// where the ring starts. Err: (the oldest revision still available, why) when the log does
/// not hold the cursor either, there is no log, or the watch wants previous items, which only
/// the ring keeps.
#[allow(clippy::type_complexity)]
pub(crate) async fn read_log(
    b: &Arc<WatchBackend>,
    cursor: Revision,
    prev_kv: bool,
    first_in_memory: Revision,
    published: Revision,
) -> Result<(Vec<Arc<Event>>, Revision), (Revision, String)> {
    let gone = |first: Revision| {
        format!("the history no longer holds revision {cursor} (it starts at {first})")
    };
    let Some(p) = b.persist.clone() else {
        return Err((first_in_memory, gone(first_in_memory)));
    };
    if prev_kv {
        return Err((
            first_in_memory,
            format!(
                "revision {cursor} is older than the in-memory history (from \
                 {first_in_memory}), and only that keeps previous items (prev_kv)"
            ),
        ));
    }
    let upto = published.min(first_in_memory - 1);
    // Blocking file reads, on a blocking thread: the runtime's thread goes on serving the
    // other streams and calls meanwhile.
    let read = tokio::task::spawn_blocking(move || {
        let mut events = Vec::new();
        let r = p.read_history(
            cursor,
            upto,
            MAX_EVENTS_PER_STEP,
            MAX_LOG_BYTES_PER_STEP,
            |lsn, rec| {
                if let Some(e) = Event::from_record(&rec, lsn) {
                    events.push(Arc::new(e));
                }
            },
        );
        r.map(|next| (events, next))
    })
    .await;
    let r = match read {
        Ok(r) => r,
        Err(e) => {
            return Err((
                first_in_memory,
                format!("reading the command log failed: {e}"),
            ));
        }
    };
    match r {
        Ok((events, next)) => {
            b.stats
                .watch_events_from_log
                .fetch_add(events.len() as u64, Ordering::Relaxed);
            Ok((events, next))
        }
        Err(cairn_persist::HistoryError::Compacted { first }) => Err((first, gone(first))),
        Err(e) => {
            tracing::error!("watch: reading the command log failed: {e}");
            Err((
                first_in_memory,
                format!("reading the command log failed: {e}"),
            ))
        }
    }
}
