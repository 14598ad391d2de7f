//! A reader's view of the hub's published revision: a watch stream's, or the batch
//! forwarder's (crate::batch). It remembers the revision it last saw and waits for the next.
//!
//! ```text
//!   Hub::subscribe ──> Subscriber { hub, seen } ── latest() ──> published now (remembered)
//!                                               ── changed() ──> returns once published ≠ seen
//! ```
//!
//! Non-goals: reading events (crate::history through the hub).

use std::sync::Arc;

use cairn_store::Revision;

use crate::hub::Hub;

/// A reader's view of [`Hub::published`] (a watch stream's, or the batch forwarder's).
#[derive(Clone)]
pub struct Subscriber {
    /// The hub it reads.
    hub: Arc<Hub>,
    /// The revision last returned by [`Subscriber::latest`].
    seen: Revision,
}

impl Hub {
    /// A reader of `published` that can wait for it to move.
    pub fn subscribe(self: &Arc<Self>) -> Subscriber {
        Subscriber {
            seen: self.published(),
            hub: Arc::clone(self),
        }
    }
}

impl Subscriber {
    /// The newest published revision, which [`Subscriber::changed`] then waits to move past.
    pub fn latest(&mut self) -> Revision {
        self.seen = self.hub.published();
        self.seen
    }

    /// Waits until the published revision is no longer the one [`Subscriber::latest`] last
    /// returned. Cancel safe: dropped, it leaves no count behind.
    pub async fn changed(&mut self) {
        self.hub.published.changed_from(self.seen).await;
    }
}
