//! Where a watch stream learns of new revisions: from the hub itself, or, with a batch window
//! (`--watch-batch-ms`), from one task that passes the hub's revision on at most once per
//! window, so that a stream wakes once for all of a window's events
//! (docs/decisions/0022-watch-batch-window-off-by-default.md).
//!
//! ```text
//!   window 0:  Hub ── Subscriber (one per stream, cloned) ──> stream
//!   window W:  Hub ── Subscriber ──> forward_batched: changed? send, sleep W ──>
//!              tokio watch channel ── Receiver (one per stream) ──> stream
//! ```
//!
//! Non-goals: what a stream reads once woken (crate::stream, from the history).

use std::sync::Arc;

use cairn_store::Revision;

use crate::hub::Hub;
use crate::subscriber::Subscriber;

/// Where a stream learns of new revisions: from the hub itself, or with a batch window
/// (`GrpcConfig::batch_window` in crates/grpc) from the channel of [`forward_batched`].
#[derive(Clone)]
pub(crate) enum Published {
    /// No window: the hub's own revision.
    Hub(Subscriber),
    /// A window: the forwarder's revision.
    Batched(tokio::sync::watch::Receiver<Revision>),
}

impl Published {
    /// The hub's revisions for the streams, every one (`window` zero) or at most one a
    /// `window`. With a window, spawns its forwarding task on the current runtime.
    pub(crate) fn new(hub: &Arc<Hub>, window: std::time::Duration) -> Published {
        let mut hub = hub.subscribe();
        if window.is_zero() {
            Published::Hub(hub)
        } else {
            let (tx, rx) = tokio::sync::watch::channel(hub.latest());
            tokio::spawn(forward_batched(hub, tx, window));
            Published::Batched(rx)
        }
    }

    /// The newest revision published, which [`Published::changed`] then waits to move past.
    pub(crate) fn latest(&mut self) -> Revision {
        match self {
            Published::Hub(s) => s.latest(),
            Published::Batched(rx) => *rx.borrow_and_update(),
        }
    }

    /// Waits for a revision after the one [`Published::latest`] last gave; false if no more
    /// will come (the forwarder is gone). Cancel safe.
    pub(crate) async fn changed(&mut self) -> bool {
        match self {
            Published::Hub(s) => {
                s.changed().await;
                true
            }
            Published::Batched(rx) => rx.changed().await.is_ok(),
        }
    }
}

/// Passes the hub's newest published revision on to the streams at most once per `window`.
///
/// Every write publishes a revision and wakes every stream with a watch on it; with many
/// streams and a high write rate those wake-ups are most of the CPU an event costs (each
/// wake-up reads, encodes and sends one or two events). Forwarded at most once per window,
/// a stream wakes once for all the events of the window: an event waits at most `window`
/// longer (none at all after a quiet spell: the first change is forwarded at once). What a
/// stream sends is unchanged: it reads the ring up to the revision it is given, so no event
/// is skipped, doubled or reordered (tests/grpc.rs runs the watch properties with and without
/// a window). Ends when every stream and the service are gone.
async fn forward_batched(
    mut from: Subscriber,
    to: tokio::sync::watch::Sender<Revision>,
    window: std::time::Duration,
) {
    loop {
        tokio::select! {
            _ = from.changed() => {}
            _ = to.closed() => return,
        }
        to.send_replace(from.latest());
        tokio::time::sleep(window).await;
    }
}
