//! [`Engine`]: what the one write path holds, the store and the layers around it, and the
//! clock every front end reads.
//!
//! ```text
//!   Engine { store, persist?, flash?, hub?, clock }
//!     built by the server (cairn-server's ctx.rs) after recovery; shared (Arc) by the
//!     memcached connections, the gRPC services and a replica's follower
//! ```
//!
//! Non-goals: opening any of the parts (the server opens them, cairn-persist recovers).

use std::sync::Arc;

use cairn_flash::Flash;
use cairn_persist::{Mode, Persistence};
use cairn_store::{Store, UnixSecs};
use cairn_watch::Hub;

use crate::clock::Clock;

/// The one write path, and the parts it writes through.
pub struct Engine {
    /// The cache every front end reads and writes.
    pub(crate) store: Arc<Store>,
    /// Command log and checkpoints; None in `off` mode. Every write is refused while it
    /// refuses, waits for its room, and is acknowledged by its marks.
    pub(crate) persist: Option<Arc<Persistence>>,
    /// The flash tier RAM evictions go to, if one is configured: a write first brings its
    /// key's item back to RAM from there.
    pub(crate) flash: Option<Arc<Flash>>,
    /// The watch hub, when the gRPC API is on. Writes reach it through the store's mutation
    /// sink (the log's observer, or the sink itself without a log), never from here.
    pub(crate) hub: Option<Arc<Hub>>,
    /// The time requests run at.
    pub(crate) clock: Clock,
}

impl Engine {
    /// An engine over these parts. `store` must be `persist`'s store when there is a log.
    pub fn new(
        store: Arc<Store>,
        persist: Option<Arc<Persistence>>,
        flash: Option<Arc<Flash>>,
        hub: Option<Arc<Hub>>,
    ) -> Engine {
        if let Some(p) = &persist {
            assert!(
                Arc::ptr_eq(&p.store(), &store),
                "the engine's store is its log's store"
            );
        }
        Engine {
            store,
            persist,
            flash,
            hub,
            clock: Clock::default(),
        }
    }

    /// The cache (reads, visits and settings go to it directly; writes go through
    /// [`Engine::apply`]).
    #[inline]
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// The command log and checkpoints, if persistence is on.
    #[inline]
    pub fn persist(&self) -> Option<&Arc<Persistence>> {
        self.persist.as_ref()
    }

    /// The flash tier, if one is on.
    #[inline]
    pub fn flash(&self) -> Option<&Arc<Flash>> {
        self.flash.as_ref()
    }

    /// The watch hub, if the gRPC API is on.
    #[inline]
    pub fn hub(&self) -> Option<&Arc<Hub>> {
        self.hub.as_ref()
    }

    /// The persistence mode in force.
    #[inline]
    pub fn mode(&self) -> Mode {
        self.persist.as_ref().map_or(Mode::Off, |p| p.mode())
    }

    /// The time in unix seconds, as every front end's commands, TTLs and last access times
    /// use it (see [`Clock::now`]).
    #[inline]
    pub fn now(&self) -> UnixSecs {
        self.clock.now()
    }

    /// The clock (tests move it ahead).
    #[inline]
    pub fn clock(&self) -> &Clock {
        &self.clock
    }
}
