//! Replication's shared state: this node's role, and what the primary knows of its replicas.
//!
//! ```text
//!   primary:  Replication.Follow streams ── acked(replica, R) ──> replicas{name: R}
//!                                                             └─> newest_acked (watch) ─┐
//!             client write ─> log durable ─> Persistence::acknowledged ─> ReplicationGate │
//!               sync mode: waits until newest_acked >= the write's revision <───────────┘
//!               (at most `timeout`: then the write is answered with an error, not acknowledged)
//!   replica:  ReplicationGate::refusal ─> client writes refused ("a replica of P")
//!             the follower (replica.rs) updates applied / primary revision for stats
//! ```
//!
//! The role can change while serving (failover promotes a replica; a former primary rejoins
//! as a replica), so it sits behind a lock that the hot path reads without waiting long.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use tokio::sync::watch;

/// When the primary acknowledges a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicationMode {
    /// Once it is safe locally (the persistence mode's rule); replicas catch up on their own.
    Async,
    /// Once it is safe locally and one replica holds it durable.
    Sync,
}

impl ReplicationMode {
    pub fn parse(s: &str) -> Option<ReplicationMode> {
        match s {
            "async" => Some(ReplicationMode::Async),
            "sync" => Some(ReplicationMode::Sync),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ReplicationMode::Async => "async",
            ReplicationMode::Sync => "sync",
        }
    }
}

/// What this node is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// Takes writes; replicas follow it.
    Primary,
    /// Follows the primary at this gRPC address; refuses client writes.
    Replica { primary: String },
}

/// Figures the follower keeps (a replica's side of `stats replication`).
#[derive(Debug, Default)]
pub struct FollowerFigures {
    /// Connected to the primary's watch now.
    pub connected: AtomicBool,
    /// The primary's revision every event up to which is applied and durable here.
    pub applied_revision: AtomicU64,
    /// The newest revision the primary said it has published.
    pub primary_revision: AtomicU64,
    /// Bytes of events received from the primary (keys and values).
    pub received_bytes: AtomicU64,
    /// Bytes of events received but not yet durable here.
    pub pending_bytes: AtomicU64,
    /// Full copies taken (initial states), and resumes from a revision.
    pub full_syncs: AtomicU64,
    pub resumes: AtomicU64,
    /// The primary's log id (revisions compare within one log only).
    pub primary_log_id: AtomicU64,
    /// Whether this node holds a complete copy up to `applied_revision` (false during a
    /// full copy): only a complete replica may be elected over another (group.rs).
    pub complete: AtomicBool,
}

/// Replication's state on one node (both roles).
pub struct Replication {
    mode: ReplicationMode,
    role: RwLock<Role>,
    /// How long a sync-mode write waits for a replica before it is answered with an error.
    timeout: Duration,
    /// Each connected replica's durable revision.
    replicas: Mutex<BTreeMap<String, u64>>,
    /// The newest durable revision any connected replica reported.
    newest_acked: watch::Sender<u64>,
    /// Sync-mode writes answered with an error because no replica acknowledged in time.
    pub timeouts: AtomicU64,
    /// The replica's side.
    pub follower: FollowerFigures,
}

impl Replication {
    pub fn new(mode: ReplicationMode, role: Role, timeout: Duration) -> Replication {
        Replication {
            mode,
            role: RwLock::new(role),
            timeout,
            replicas: Mutex::new(BTreeMap::new()),
            newest_acked: watch::channel(0).0,
            timeouts: AtomicU64::new(0),
            follower: FollowerFigures::default(),
        }
    }

    pub fn mode(&self) -> ReplicationMode {
        self.mode
    }

    pub fn role(&self) -> Role {
        self.role.read().clone()
    }

    /// Changes the role (failover).
    pub fn set_role(&self, role: Role) {
        *self.role.write() = role;
    }

    /// The newest durable revision a connected replica reported (0: none).
    pub fn newest_acked(&self) -> u64 {
        *self.newest_acked.borrow()
    }

    /// Connected replicas and their durable revisions.
    pub fn replicas(&self) -> Vec<(String, u64)> {
        self.replicas
            .lock()
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }

    fn recompute(&self, replicas: &BTreeMap<String, u64>) {
        let newest = replicas.values().copied().max().unwrap_or(0);
        self.newest_acked.send_if_modified(|v| {
            // Only ever forward: a replica that left does not take back what it held.
            if newest > *v {
                *v = newest;
                true
            } else {
                false
            }
        });
    }
}

impl cairn_grpc::ReplicaAcks for Replication {
    fn refusal(&self) -> Option<String> {
        match self.role() {
            Role::Primary => None,
            Role::Replica { primary } => Some(format!("a replica of {primary}, not a primary")),
        }
    }

    fn acked(&self, replica: &str, durable_revision: u64) {
        let mut r = self.replicas.lock();
        let slot = r.entry(replica.to_string()).or_insert(0);
        *slot = (*slot).max(durable_revision);
        self.recompute(&r);
    }

    fn gone(&self, replica: &str) {
        self.replicas.lock().remove(replica);
    }
}

impl cairn_persist::ReplicationGate for Replication {
    fn refusal(&self) -> Option<String> {
        match &*self.role.read() {
            Role::Primary => None,
            Role::Replica { primary } => Some(format!(
                "this node is a replica of {primary}: send writes to the primary"
            )),
        }
    }

    #[allow(clippy::type_complexity)]
    fn reached(
        &self,
        revision: u64,
    ) -> Option<Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>>> {
        if self.mode != ReplicationMode::Sync || self.newest_acked() >= revision {
            return None;
        }
        Some(Box::pin(async move {
            let mut rx = self.newest_acked.subscribe();
            let reached = async { rx.wait_for(|a| *a >= revision).await.map(|_| ()) };
            match tokio::time::timeout(self.timeout, reached).await {
                Ok(Ok(())) => Ok(()),
                _ => {
                    self.timeouts.fetch_add(1, Ordering::Relaxed);
                    Err(format!(
                        "no replica holds revision {revision} durable after {:?} \
                         (replication sync)",
                        self.timeout
                    ))
                }
            }
        }))
    }
}
