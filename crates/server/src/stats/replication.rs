//! The `stats replication` block and the replication metrics, read once from crates/cluster's
//! [`Replication`] into a typed [`ReplicationStats`], which both renderings take: the text
//! block (`cluster::stats`, the order and spelling ARCUS-style tools and the tests read) and
//! the Prometheus endpoint (`metrics.rs`, `cairn_replication_*`), and the status page.
//!
//! ```text
//!   Replication (role, term, lease, replicas, in-sync set, follower figures)
//!   Hub (published revision, history for the lag in bytes)  ─> read() ─> ReplicationStats
//!        ├─> text():   mode, [node_id, term, lease, lease_refusals], role, ...  (stats replication)
//!        └─> metrics.rs: cairn_replication_role{role}, _lag_revisions, ... (typed, no text parsed)
//! ```
//!
//! Non-goals: counting anything (crates/cluster does), deciding the in-sync set.

use std::sync::atomic::Ordering::Relaxed;

use cairn_cluster::{Replication, ReplicationMode, Role};
use cairn_grpc::Hub;
use cairn_persist::Persistence;

/// What this node is, with the figures of that role.
#[derive(Clone, Debug, PartialEq)]
pub enum RoleStats {
    Primary(PrimaryStats),
    Replica(ReplicaStats),
}

/// A primary's view of its replicas.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PrimaryStats {
    /// The newest revision published.
    pub revision: u64,
    /// Replicas connected now.
    pub replicas: u64,
    /// In a group: the in-sync set (node ids) every sync write waits for.
    pub in_sync: Vec<String>,
    /// In a group: every in-sync replica holds everything up to it.
    pub committed_revision: u64,
    /// The furthest durable revision a connected replica reported.
    pub replica_acked_revision: u64,
    /// Revisions after `replica_acked_revision` (0 with no replica).
    pub lag_revisions: u64,
    /// Keys and values of those revisions still in the in-memory history.
    pub lag_bytes: u64,
}

/// A replica's view of its primary.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReplicaStats {
    /// Who it follows, as `stats replication` names it.
    pub primary: String,
    /// Connected to the primary's watch now.
    pub connected: bool,
    /// Every event of the primary up to it is applied and durable here.
    pub applied_revision: u64,
    /// Holds a complete copy (false during a full copy).
    pub complete: bool,
    /// The newest revision the primary reported.
    pub primary_revision: u64,
    pub lag_revisions: u64,
    /// Bytes received and not yet durable here.
    pub lag_bytes: u64,
    pub received_bytes: u64,
}

/// Everything `stats replication` shows, read at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicationStats {
    /// `--replication`: when a primary acknowledges.
    pub mode: ReplicationMode,
    /// A member of a replication group (`--replication-group`): the lease and the in-sync set
    /// apply.
    pub in_group: bool,
    /// In a group: this member's node id (its command log's id).
    pub node_id: Option<String>,
    /// The term this node leads or follows (0 outside groups).
    pub term: u64,
    /// In a group: the ZooKeeper lease holds now.
    pub lease_held: bool,
    /// Writes refused or not acknowledged because the lease had ended.
    pub lease_refusals: u64,
    /// Sync-mode writes answered with an error because no replica held them in time.
    pub sync_timeouts: u64,
    /// Full copies taken from a primary, and resumes from a revision (the follower's).
    pub full_syncs: u64,
    pub resumes: u64,
    pub role: RoleStats,
}

impl ReplicationStats {
    /// Reads the figures now. `hub` gives the published revision and the lag's bytes;
    /// `persist` the node id of a group member.
    pub fn read(
        r: &Replication,
        hub: Option<&Hub>,
        persist: Option<&Persistence>,
    ) -> ReplicationStats {
        let in_group = r.in_group();
        let f = &r.follower;
        let role = match r.role() {
            Role::Primary => {
                let published = hub.map_or(0, Hub::published);
                let replicas = r.replicas();
                let acked = r.newest_acked();
                let lag = if replicas.is_empty() {
                    0
                } else {
                    published.saturating_sub(acked)
                };
                RoleStats::Primary(PrimaryStats {
                    revision: published,
                    replicas: replicas.len() as u64,
                    in_sync: if in_group {
                        r.in_sync().into_iter().collect()
                    } else {
                        Vec::new()
                    },
                    committed_revision: r.committed(),
                    replica_acked_revision: acked,
                    lag_revisions: lag,
                    lag_bytes: lag_bytes(hub, acked, published, lag),
                })
            }
            Role::Replica { primary } => {
                let applied = f.applied_revision.load(Relaxed);
                let theirs = f.primary_revision.load(Relaxed);
                RoleStats::Replica(ReplicaStats {
                    primary,
                    connected: f.connected.load(Relaxed),
                    applied_revision: applied,
                    complete: f.complete.load(Relaxed),
                    primary_revision: theirs,
                    lag_revisions: theirs.saturating_sub(applied),
                    lag_bytes: f.pending_bytes.load(Relaxed),
                    received_bytes: f.received_bytes.load(Relaxed),
                })
            }
        };
        ReplicationStats {
            mode: r.mode(),
            in_group,
            node_id: in_group
                .then(|| persist.map(cairn_cluster::group::node_id))
                .flatten(),
            term: r.term(),
            lease_held: in_group && r.lease.valid(),
            lease_refusals: r.lease_refusals.load(Relaxed),
            sync_timeouts: r.timeouts.load(Relaxed),
            full_syncs: f.full_syncs.load(Relaxed),
            resumes: f.resumes.load(Relaxed),
            role,
        }
    }

    /// The role's name: `primary` or `replica`.
    pub fn role_name(&self) -> &'static str {
        match self.role {
            RoleStats::Primary(_) => "primary",
            RoleStats::Replica(_) => "replica",
        }
    }

    /// Revisions behind: a primary's furthest replica, or a replica behind its primary.
    pub fn lag_revisions(&self) -> u64 {
        match &self.role {
            RoleStats::Primary(p) => p.lag_revisions,
            RoleStats::Replica(r) => r.lag_revisions,
        }
    }

    pub fn lag_bytes(&self) -> u64 {
        match &self.role {
            RoleStats::Primary(p) => p.lag_bytes,
            RoleStats::Replica(r) => r.lag_bytes,
        }
    }

    /// The `stats replication` lines, in their order: the mode; in a group the node id, term,
    /// lease and lease refusals; then the role's figures.
    pub fn text(&self) -> Vec<(&'static str, String)> {
        let yes_no = |b: bool| if b { "yes" } else { "no" }.to_string();
        let mut out = vec![("mode", self.mode.name().to_string())];
        if self.in_group {
            if let Some(id) = &self.node_id {
                out.push(("node_id", id.clone()));
            }
            out.push(("term", self.term.to_string()));
            out.push((
                "lease",
                if self.lease_held { "held" } else { "none" }.into(),
            ));
            out.push(("lease_refusals", self.lease_refusals.to_string()));
        }
        match &self.role {
            RoleStats::Primary(p) => {
                out.push(("role", "primary".into()));
                out.push(("revision", p.revision.to_string()));
                out.push(("replicas", p.replicas.to_string()));
                if self.in_group {
                    out.push(("in_sync", p.in_sync.join(",")));
                    out.push(("committed_revision", p.committed_revision.to_string()));
                }
                out.push((
                    "replica_acked_revision",
                    p.replica_acked_revision.to_string(),
                ));
                out.push(("lag_revisions", p.lag_revisions.to_string()));
                out.push(("lag_bytes", p.lag_bytes.to_string()));
                out.push(("sync_timeouts", self.sync_timeouts.to_string()));
            }
            RoleStats::Replica(r) => {
                out.push(("role", "replica".into()));
                out.push(("primary", r.primary.clone()));
                out.push(("connected", yes_no(r.connected)));
                out.push(("applied_revision", r.applied_revision.to_string()));
                out.push(("complete", yes_no(r.complete)));
                out.push(("primary_revision", r.primary_revision.to_string()));
                out.push(("lag_revisions", r.lag_revisions.to_string()));
                out.push(("lag_bytes", r.lag_bytes.to_string()));
                out.push(("received_bytes", r.received_bytes.to_string()));
                out.push(("full_syncs", self.full_syncs.to_string()));
                out.push(("resumes", self.resumes.to_string()));
            }
        }
        out
    }
}

/// Bytes (keys and values) of the events after `acked` up to `published`, read from the watch
/// history in memory (a lag older than it counts what is still there).
fn lag_bytes(hub: Option<&Hub>, acked: u64, published: u64, lag: u64) -> u64 {
    let Some(hub) = hub else { return 0 };
    if lag == 0 {
        return 0;
    }
    let from = (acked + 1).max(hub.first_in_memory());
    match hub.read(from, published, usize::MAX) {
        Ok((events, _)) => events
            .iter()
            .map(|e| (e.key().len() + e.value_len as usize) as u64)
            .sum(),
        Err(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_text_keeps_stats_replications_order_for_each_role() {
        let r = Replication::new(ReplicationMode::Sync, Role::Primary, Duration::from_secs(1));
        let s = ReplicationStats::read(&r, None, None);
        let names: Vec<&str> = s.text().iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names,
            [
                "mode",
                "role",
                "revision",
                "replicas",
                "replica_acked_revision",
                "lag_revisions",
                "lag_bytes",
                "sync_timeouts"
            ]
        );
        assert_eq!(s.text()[0].1, "sync");
        assert!(!s.lease_held, "no lease outside a group");
        r.set_role(Role::Replica {
            primary: "p".into(),
        });
        let s = ReplicationStats::read(&r, None, None);
        assert_eq!(s.role_name(), "replica");
        let names: Vec<&str> = s.text().iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names,
            [
                "mode",
                "role",
                "primary",
                "connected",
                "applied_revision",
                "complete",
                "primary_revision",
                "lag_revisions",
                "lag_bytes",
                "received_bytes",
                "full_syncs",
                "resumes"
            ]
        );
    }
}
