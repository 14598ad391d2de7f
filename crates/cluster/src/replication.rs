//! Replication's shared state: this node's role, and what the primary knows of its replicas.
//!
//! ```text
//!   primary:  Replication.Follow streams ── acked(replica, R, term) ──> replicas{name: R}
//!             committed: the revision every replica the rule names holds durable ──┐
//!               standalone (--replica-of): the furthest connected replica          │
//!               group: the in-sync set (group/state.rs), each of its replicas      │
//!             client write ─> log safe ─> Persistence::acknowledged ─> ReplicationGate │
//!               lease gone (group.rs, lease.rs): refused, not acknowledged          │
//!               sync mode: waits until committed >= the write's revision <──────────┘
//!               (at most `timeout`: then the write is answered with an error)
//!   replica:  ReplicationGate::refusal ─> client writes refused ("a replica of P")
//!             the follower (replica.rs) confirms only while its lease holds, and only to
//!             a primary of the term ZooKeeper names
//! ```
//!
//! The role can change while serving (failover promotes a replica; a former primary rejoins
//! as a replica), so it sits behind a lock that the hot path reads without waiting long.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use tokio::sync::{mpsc, oneshot, watch};

use crate::lease::Lease;
use crate::lineage::Lineage;

/// When the primary acknowledges a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicationMode {
    /// Once it is safe locally (the persistence mode's rule); replicas catch up on their own.
    Async,
    /// Once it is safe locally and the replicas the rule names (see the module doc) hold it
    /// durable.
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
    /// Follows a primary (named by its memcached address in a group, its gRPC address with
    /// --replica-of); refuses client writes.
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
    /// full copy): only a complete member may be elected (group.rs).
    pub complete: AtomicBool,
}

/// A connected replica, as the primary knows it.
#[derive(Clone, Copy, Debug)]
struct Follower {
    /// Every event up to this revision is durable there.
    acked: u64,
    /// The term it follows (acks of another term are ignored).
    term: u64,
    /// Its newest Follow stream: only that stream's end forgets it.
    stream: u64,
}

/// The in-sync set a group's primary waits for, with what it needs to keep it.
#[derive(Debug, Default)]
struct InSync {
    /// Members (memcached addresses) whose acknowledgement every write waits for.
    members: BTreeSet<String>,
    /// The last revision each member acknowledged, kept when its stream ends (it stays in
    /// the set until it is taken out in ZooKeeper).
    acked: BTreeMap<String, u64>,
}

/// A change of the in-sync set the group's primary should make (group.rs writes it to
/// ZooKeeper, then calls [`Replication::apply_in_sync`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InSyncChange {
    pub add: Vec<String>,
    pub remove: Vec<String>,
}

/// An operator's `failover force` on this member, answered by the member task.
pub type ForceRequest = oneshot::Sender<Result<String, String>>;

/// Replication's state on one node (both roles).
pub struct Replication {
    mode: ReplicationMode,
    role: RwLock<Role>,
    /// How long a sync-mode write waits for the replicas before it is answered with an error.
    timeout: Duration,
    /// In a replication group: the in-sync set rules acknowledgements, and the lease
    /// gates them. Standalone (`--replica-of`): the furthest replica does, with no lease.
    group: AtomicBool,
    /// This node's lease on ZooKeeper's word (group only).
    pub lease: Lease,
    /// The current term: the primary's own, or the one a replica follows (0 outside groups).
    term: AtomicU64,
    /// Each connected replica, by its memcached address.
    replicas: Mutex<BTreeMap<String, Follower>>,
    in_sync: Mutex<InSync>,
    /// What sync-mode acknowledgements wait for: every event up to it is durable where the
    /// rule says. Only moves forward.
    committed: watch::Sender<u64>,
    /// The primary's published revisions with the time each was seen (group.rs notes one per
    /// poll): how long a replica has been behind.
    published_at: Mutex<VecDeque<(u64, Instant)>>,
    /// Where the history of the primary followed sits in this node's log (lineage.rs).
    pub lineage: Mutex<Lineage>,
    /// The member task takes operators' force requests from here.
    force: Mutex<Option<mpsc::UnboundedSender<ForceRequest>>>,
    /// Sync-mode writes answered with an error because the replicas did not hold them in time.
    pub timeouts: AtomicU64,
    /// Writes refused or not acknowledged because the lease had ended.
    pub lease_refusals: AtomicU64,
    /// The replica's side.
    pub follower: FollowerFigures,
}

impl Replication {
    pub fn new(mode: ReplicationMode, role: Role, timeout: Duration) -> Replication {
        Replication {
            mode,
            role: RwLock::new(role),
            timeout,
            group: AtomicBool::new(false),
            lease: Lease::default(),
            term: AtomicU64::new(0),
            replicas: Mutex::new(BTreeMap::new()),
            in_sync: Mutex::new(InSync::default()),
            committed: watch::channel(0).0,
            published_at: Mutex::new(VecDeque::new()),
            lineage: Mutex::new(Lineage::default()),
            force: Mutex::new(None),
            timeouts: AtomicU64::new(0),
            lease_refusals: AtomicU64::new(0),
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

    /// How long a sync-mode write waits for its replicas.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// This node is a member of a replication group (group.rs): the in-sync set and the
    /// lease rule acknowledgements from now on.
    pub fn join_group(&self) -> mpsc::UnboundedReceiver<ForceRequest> {
        self.group.store(true, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        *self.force.lock() = Some(tx);
        rx
    }

    pub fn in_group(&self) -> bool {
        self.group.load(Ordering::Relaxed)
    }

    pub fn term(&self) -> u64 {
        self.term.load(Ordering::Relaxed)
    }

    /// A new term: the one this node now leads with `in_sync` as its in-sync set, or follows.
    /// Replicas of another term are forgotten; `committed` starts from what the set holds.
    pub fn set_term(&self, term: u64, in_sync: BTreeSet<String>) {
        self.term.store(term, Ordering::Relaxed);
        self.replicas.lock().retain(|_, f| f.term == term);
        let mut s = self.in_sync.lock();
        s.acked.retain(|m, _| in_sync.contains(m));
        s.members = in_sync;
        self.published_at.lock().clear();
    }

    /// The newest revision `committed` reached (sync mode: every acknowledged write is at or
    /// before it).
    pub fn committed(&self) -> u64 {
        *self.committed.borrow()
    }

    /// The in-sync set this primary waits for.
    pub fn in_sync(&self) -> BTreeSet<String> {
        self.in_sync.lock().members.clone()
    }

    /// Connected replicas and their durable revisions.
    pub fn replicas(&self) -> Vec<(String, u64)> {
        self.replicas
            .lock()
            .iter()
            .map(|(k, f)| (k.clone(), f.acked))
            .collect()
    }

    /// The furthest durable revision a connected replica reported (0: none).
    pub fn newest_acked(&self) -> u64 {
        self.replicas
            .lock()
            .values()
            .map(|f| f.acked)
            .max()
            .unwrap_or(0)
    }

    /// An operator asks this member to become the primary whatever it holds; the answer
    /// says what is lost. Only in a group.
    pub async fn force(&self) -> Result<String, String> {
        let tx = self
            .force
            .lock()
            .clone()
            .ok_or("this node is not in a replication group")?;
        let (reply, answer) = oneshot::channel();
        tx.send(reply)
            .map_err(|_| "the group member task stopped".to_string())?;
        answer
            .await
            .map_err(|_| "the group member task stopped".to_string())?
    }

    /// Recomputes `committed` from the replicas' acknowledgements.
    fn recompute(&self) {
        let newest = if self.in_group() {
            let s = self.in_sync.lock();
            // No replica in the set: nothing is held elsewhere, so nothing moves.
            s.members
                .iter()
                .map(|m| s.acked.get(m).copied().unwrap_or(0))
                .min()
                .unwrap_or(0)
        } else {
            self.newest_acked()
        };
        self.committed.send_if_modified(|v| {
            if newest > *v {
                *v = newest;
                true
            } else {
                false
            }
        });
    }

    /// The group's primary notes its published revision (every poll), for the replicas' lag.
    pub fn note_published(&self, revision: u64) {
        let mut p = self.published_at.lock();
        if p.back().is_none_or(|&(r, _)| r < revision) {
            p.push_back((revision, Instant::now()));
        }
        // An hour of polls is far more than any lag bound.
        while p.len() > 72_000 {
            p.pop_front();
        }
    }

    /// How long a replica that holds everything up to `acked` has been behind: since the
    /// first revision after it was published (zero when it holds the newest).
    fn behind_for(&self, acked: u64) -> Duration {
        let p = self.published_at.lock();
        let i = p.partition_point(|&(r, _)| r <= acked);
        p.get(i).map_or(Duration::ZERO, |&(_, at)| at.elapsed())
    }

    /// What the in-sync set should become (group.rs asks every poll): replicas of this term
    /// that hold everything committed and are less than half of `lag_bound` behind join it;
    /// members behind for longer than `lag_bound` (or gone as long) leave it, but in sync
    /// mode never the last one (a write then waits, and fails, rather than be held by this
    /// node alone).
    pub fn in_sync_change(&self, lag_bound: Duration) -> Option<InSyncChange> {
        let term = self.term();
        let committed = self.committed();
        let connected = self.replicas.lock().clone();
        let s = self.in_sync.lock();
        let add: Vec<String> = connected
            .iter()
            .filter(|(m, f)| {
                !s.members.contains(*m)
                    && f.term == term
                    && f.acked >= committed
                    && self.behind_for(f.acked) < lag_bound / 2
            })
            .map(|(m, _)| m.clone())
            .collect();
        let mut remove: Vec<String> = s
            .members
            .iter()
            .filter(|m| self.behind_for(s.acked.get(*m).copied().unwrap_or(0)) > lag_bound)
            .cloned()
            .collect();
        if self.mode == ReplicationMode::Sync && remove.len() == s.members.len() && add.is_empty() {
            // Keep the one that holds the most.
            remove.sort_by_key(|m| s.acked.get(m).copied().unwrap_or(0));
            remove.pop();
        }
        (!add.is_empty() || !remove.is_empty()).then_some(InSyncChange { add, remove })
    }

    /// Members join the set this primary waits for (before ZooKeeper's record names them),
    /// each only if it still holds everything committed.
    pub fn add_in_sync(&self, members: &[String]) -> Vec<String> {
        let committed = self.committed();
        let connected = self.replicas.lock().clone();
        let mut s = self.in_sync.lock();
        let mut added = Vec::new();
        for m in members {
            if let Some(f) = connected.get(m) {
                if f.term == self.term() && f.acked >= committed {
                    s.members.insert(m.clone());
                    s.acked.insert(m.clone(), f.acked);
                    added.push(m.clone());
                }
            }
        }
        drop(s);
        self.recompute();
        added
    }

    /// Members left the set in ZooKeeper's record: stop waiting for them.
    pub fn remove_in_sync(&self, members: &[String]) {
        let mut s = self.in_sync.lock();
        for m in members {
            s.members.remove(m);
            s.acked.remove(m);
        }
        drop(s);
        self.recompute();
    }

    /// Why this node may not acknowledge now: the lease ended (group only).
    fn lease_refusal(&self) -> Option<String> {
        if !self.in_group() || self.lease.valid() {
            return None;
        }
        self.lease_refusals.fetch_add(1, Ordering::Relaxed);
        Some(format!(
            "this node has not heard from ZooKeeper for too long (lease ended {:?} ago): it may \
             no longer be the primary",
            self.lease.expired_for()
        ))
    }
}

impl cairn_grpc::ReplicaAcks for Replication {
    fn refusal(&self) -> Option<String> {
        match self.role() {
            Role::Primary => None,
            Role::Replica { primary } => Some(format!("a replica of {primary}, not a primary")),
        }
    }

    fn term(&self) -> u64 {
        Replication::term(self)
    }

    fn resume_from(&self, position: (u64, u64), own: (u64, u64)) -> Option<u64> {
        let (log_id, revision) = position;
        if log_id == 0 {
            return None;
        }
        if log_id == own.0 {
            // Our own log: anything we published is still ours (a position past it holds
            // events we never made safe: a copy).
            return (revision <= own.1).then_some(revision);
        }
        self.lineage.lock().resume_from(log_id, revision)
    }

    fn acked(&self, replica: &str, stream: u64, durable_revision: u64, term: u64) {
        if term != self.term() {
            return;
        }
        {
            let mut r = self.replicas.lock();
            let f = r.entry(replica.to_string()).or_insert(Follower {
                acked: 0,
                term,
                stream,
            });
            f.acked = f.acked.max(durable_revision);
            f.term = term;
            f.stream = f.stream.max(stream);
        }
        {
            let mut s = self.in_sync.lock();
            if s.members.contains(replica) {
                let a = s.acked.entry(replica.to_string()).or_insert(0);
                *a = (*a).max(durable_revision);
            }
        }
        self.recompute();
    }

    fn gone(&self, replica: &str, stream: u64) {
        let mut r = self.replicas.lock();
        if r.get(replica).is_some_and(|f| f.stream == stream) {
            r.remove(replica);
        }
    }
}

impl cairn_persist::ReplicationGate for Replication {
    fn refusal(&self) -> Option<String> {
        match &*self.role.read() {
            Role::Primary => self.lease_refusal(),
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
        if let Some(why) = self.lease_refusal() {
            return Some(Box::pin(std::future::ready(Err(why))));
        }
        if self.mode != ReplicationMode::Sync || self.committed() >= revision {
            return None;
        }
        Some(Box::pin(async move {
            let mut rx = self.committed.subscribe();
            let reached = async { rx.wait_for(|a| *a >= revision).await.map(|_| ()) };
            match tokio::time::timeout(self.timeout, reached).await {
                Ok(Ok(())) => match self.lease_refusal() {
                    // Held by the replicas, but this node may have been replaced meanwhile.
                    Some(why) => Err(why),
                    None => Ok(()),
                },
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

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_grpc::ReplicaAcks;

    fn group_primary(mode: ReplicationMode) -> Replication {
        let r = Replication::new(mode, Role::Primary, Duration::from_secs(1));
        let _force = r.join_group();
        r.lease.renew(Instant::now(), Duration::from_secs(60));
        r.set_term(5, BTreeSet::new());
        r
    }

    #[test]
    fn in_a_group_every_in_sync_replica_must_hold_a_write() {
        let r = group_primary(ReplicationMode::Sync);
        r.acked("a", 1, 10, 5);
        assert_eq!(
            r.committed(),
            0,
            "no in-sync replica yet: nothing committed"
        );
        // a holds everything committed (0): it joins.
        let change = r.in_sync_change(Duration::from_secs(1)).unwrap();
        assert_eq!(change.add, vec!["a".to_string()]);
        assert_eq!(r.add_in_sync(&change.add), vec!["a".to_string()]);
        assert_eq!(r.committed(), 10);
        r.acked("b", 1, 9, 5);
        assert!(
            r.add_in_sync(&["b".to_string()]).is_empty(),
            "b lacks 10, which is committed"
        );
        r.acked("b", 1, 10, 5);
        assert_eq!(r.add_in_sync(&["b".to_string()]), vec!["b".to_string()]);
        r.acked("a", 1, 20, 5);
        assert_eq!(r.committed(), 10, "b holds only up to 10");
        r.acked("b", 1, 15, 5);
        assert_eq!(r.committed(), 15);
        // An ack of another term counts for nothing.
        r.acked("b", 1, 30, 4);
        assert_eq!(r.committed(), 15);
        // b leaves the set: a alone rules.
        r.remove_in_sync(&["b".to_string()]);
        assert_eq!(r.committed(), 20);
        // A replica behind what is committed cannot join (it would miss acknowledged writes).
        r.acked("c", 1, 12, 5);
        assert!(r.add_in_sync(&["c".to_string()]).is_empty());
    }

    #[test]
    fn a_member_behind_for_longer_than_the_bound_leaves_but_never_the_last_in_sync_mode() {
        for mode in [ReplicationMode::Sync, ReplicationMode::Async] {
            let r = group_primary(mode);
            r.acked("a", 1, 1, 5);
            r.add_in_sync(&["a".to_string()]);
            r.note_published(1);
            r.note_published(2);
            std::thread::sleep(Duration::from_millis(30));
            let change = r.in_sync_change(Duration::from_millis(10));
            match mode {
                ReplicationMode::Sync => assert_eq!(change, None, "the last one stays"),
                ReplicationMode::Async => {
                    assert_eq!(change.unwrap().remove, vec!["a".to_string()])
                }
            }
        }
    }

    #[test]
    fn a_replica_that_reconnects_stays_counted_when_its_old_stream_ends() {
        let r = group_primary(ReplicationMode::Sync);
        r.acked("a", 1, 10, 5);
        // a reconnects (stream 2) before the primary saw stream 1 end.
        r.acked("a", 2, 10, 5);
        r.gone("a", 1);
        assert_eq!(r.replicas(), vec![("a".to_string(), 10)]);
        r.gone("a", 2);
        assert!(r.replicas().is_empty());
    }

    #[test]
    fn resume_positions_in_the_own_log_and_through_the_lineage() {
        let r = group_primary(ReplicationMode::Async);
        assert_eq!(r.resume_from((7, 40), (7, 50)), Some(40));
        assert_eq!(
            r.resume_from((7, 60), (7, 50)),
            None,
            "past what we published"
        );
        assert_eq!(r.resume_from((0, 0), (7, 50)), None);
        {
            let mut l = r.lineage.lock();
            l.follow(3);
            l.note(100, 20);
        }
        assert_eq!(r.resume_from((3, 100), (7, 50)), Some(20));
        assert_eq!(r.resume_from((3, 101), (7, 50)), None);
    }

    #[test]
    fn without_a_lease_a_group_primary_refuses_and_does_not_acknowledge() {
        use cairn_persist::ReplicationGate;
        let r = group_primary(ReplicationMode::Async);
        assert_eq!(ReplicationGate::refusal(&r), None);
        assert!(r.reached(1).is_none());
        r.lease.revoke();
        assert!(ReplicationGate::refusal(&r).is_some());
        assert!(r.reached(1).is_some(), "the acknowledgement is withheld");
        // Standalone (no group): no lease to lose.
        let alone = Replication::new(
            ReplicationMode::Async,
            Role::Primary,
            Duration::from_secs(1),
        );
        assert_eq!(ReplicationGate::refusal(&alone), None);
    }
}
