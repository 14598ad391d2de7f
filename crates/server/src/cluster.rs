//! The server's side of crates/cluster: settings into a membership, a replication state and
//! a follower.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use cairn_cluster::membership::{advertised_address, hostname};
use cairn_cluster::{MembershipConfig, Replication, ReplicationMode, Role};
use cairn_persist::Persistence;

use crate::{Config, Ctx};

/// ARCUS's root for a cache node that is not in a replication group.
pub const ARCUS_ROOT: &str = "/arcus";

/// What to register for a server bound to `bound`, if `--zookeeper` is set.
pub fn membership_config(config: &Config, bound: SocketAddr) -> Option<MembershipConfig> {
    // A group member is listed by its group, under /arcus_repl.
    if config.replication_group.is_some() {
        return None;
    }
    let ensemble = config.zookeeper.clone()?;
    Some(MembershipConfig {
        advertise: advertised_address(bound, &ensemble),
        ensemble,
        root: ARCUS_ROOT.into(),
        service_code: config.service_code.clone().unwrap_or_default(),
        hostname: hostname(),
        memory_limit_mb: config.memory_limit_mb,
        session_timeout: Duration::from_millis(config.zookeeper_session_timeout_ms),
    })
}

/// The replication state for these settings. The gate on the durability path (refusing
/// client writes on a replica, waiting for a replica in sync mode) is installed only where it
/// has something to do, so a plain node's writes do not pass through it.
pub fn replication(config: &Config, persist: &Arc<Persistence>) -> Arc<Replication> {
    let mode = ReplicationMode::parse(&config.replication).unwrap_or(ReplicationMode::Async);
    let role = match &config.replica_of {
        Some(primary) => Role::Replica {
            primary: format!("the primary at gRPC address {primary}"),
        },
        None => Role::Primary,
    };
    let gated = config.replica_of.is_some()
        || mode == ReplicationMode::Sync
        || config.replication_group.is_some();
    let r = Arc::new(Replication::new(
        mode,
        role,
        Duration::from_millis(config.replication_timeout_ms),
    ));
    if gated {
        persist.set_replication_gate(Arc::clone(&r) as Arc<dyn cairn_persist::ReplicationGate>);
    }
    r
}

/// Starts following the primary if this node is a replica (`--replica-of`); the task ends
/// when `stop` turns true.
pub fn start_follower(ctx: &Arc<Ctx>, local: SocketAddr, stop: tokio::sync::watch::Receiver<bool>) {
    let (Some(primary), Some(repl), Some(persist)) = (
        ctx.config.replica_of.clone(),
        ctx.replication.clone(),
        ctx.persist.clone(),
    ) else {
        return;
    };
    let config = cairn_cluster::FollowerConfig {
        primary,
        // Outside a group there is no term to check.
        term: 0,
        name: local.to_string(),
        data_dir: ctx.config.snapshot_dir(),
    };
    tokio::spawn(cairn_cluster::replica::follow(
        Arc::clone(&ctx.store),
        persist,
        repl,
        config,
        stop,
    ));
}

/// `stats replication`: the role, and the lag in revisions and bytes (a primary: of its
/// furthest-ahead replica; a replica: behind the primary's last reported revision).
pub fn stats(ctx: &Ctx) -> Vec<(&'static str, String)> {
    let Some(r) = &ctx.replication else {
        return vec![("role", "none".into())];
    };
    use std::sync::atomic::Ordering::Relaxed;
    let mut out = vec![("mode", r.mode().name().to_string())];
    if r.in_group() {
        if let Some(p) = &ctx.persist {
            out.push(("node_id", cairn_cluster::group::node_id(p)));
        }
        out.push(("term", r.term().to_string()));
        out.push((
            "lease",
            if r.lease.valid() { "held" } else { "none" }.into(),
        ));
        out.push(("lease_refusals", r.lease_refusals.load(Relaxed).to_string()));
    }
    match r.role() {
        Role::Primary => {
            let published = ctx.hub.as_ref().map_or(0, |h| h.published());
            let replicas = r.replicas();
            let acked = r.newest_acked();
            let lag = if replicas.is_empty() {
                0
            } else {
                published.saturating_sub(acked)
            };
            out.push(("role", "primary".into()));
            out.push(("revision", published.to_string()));
            out.push(("replicas", replicas.len().to_string()));
            if r.in_group() {
                let in_sync: Vec<String> = r.in_sync().into_iter().collect();
                out.push(("in_sync", in_sync.join(",")));
                out.push(("committed_revision", r.committed().to_string()));
            }
            out.push(("replica_acked_revision", acked.to_string()));
            out.push(("lag_revisions", lag.to_string()));
            out.push((
                "lag_bytes",
                lag_bytes(ctx, acked, published, lag).to_string(),
            ));
            out.push(("sync_timeouts", r.timeouts.load(Relaxed).to_string()));
        }
        Role::Replica { primary } => {
            let f = &r.follower;
            let applied = f.applied_revision.load(Relaxed);
            let theirs = f.primary_revision.load(Relaxed);
            out.push(("role", "replica".into()));
            out.push(("primary", primary));
            out.push((
                "connected",
                if f.connected.load(Relaxed) {
                    "yes"
                } else {
                    "no"
                }
                .into(),
            ));
            out.push(("applied_revision", applied.to_string()));
            out.push((
                "complete",
                if f.complete.load(Relaxed) {
                    "yes"
                } else {
                    "no"
                }
                .into(),
            ));
            out.push(("primary_revision", theirs.to_string()));
            out.push(("lag_revisions", theirs.saturating_sub(applied).to_string()));
            out.push(("lag_bytes", f.pending_bytes.load(Relaxed).to_string()));
            out.push(("received_bytes", f.received_bytes.load(Relaxed).to_string()));
            out.push(("full_syncs", f.full_syncs.load(Relaxed).to_string()));
            out.push(("resumes", f.resumes.load(Relaxed).to_string()));
        }
    }
    out
}

/// Bytes (keys and values) of the events after `acked` up to `published`, read from the watch
/// history in memory (a lag older than it counts what is still there).
fn lag_bytes(ctx: &Ctx, acked: u64, published: u64, lag: u64) -> u64 {
    let Some(hub) = &ctx.hub else { return 0 };
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

/// Joins the replication group (`--replication-group`), if there is one: returns once this
/// node may serve (primary, or a replica with a complete copy).
pub async fn join_group(
    ctx: &Arc<Ctx>,
    bound: SocketAddr,
    grpc: Option<SocketAddr>,
) -> Result<Option<cairn_cluster::Group>, String> {
    let c = &ctx.config;
    let (Some(group), Some(ensemble), Some(svc)) =
        (&c.replication_group, &c.zookeeper, &c.service_code)
    else {
        return Ok(None);
    };
    let (Some(repl), Some(persist), Some(grpc)) =
        (ctx.replication.clone(), ctx.persist.clone(), grpc)
    else {
        return Err("a replication group needs persistence and the gRPC API".into());
    };
    let advertise = advertised_address(bound, ensemble);
    let config = cairn_cluster::GroupConfig {
        ensemble: ensemble.clone(),
        service_code: svc.clone(),
        group: group.clone(),
        advertise,
        grpc: SocketAddr::new(
            if grpc.ip().is_unspecified() {
                advertise.ip()
            } else {
                grpc.ip()
            },
            grpc.port(),
        ),
        hostname: hostname(),
        memory_limit_mb: c.memory_limit_mb,
        session_timeout: Duration::from_millis(c.zookeeper_session_timeout_ms),
        data_dir: c.snapshot_dir(),
    };
    let local = cairn_cluster::group::Local {
        store: Arc::clone(&ctx.store),
        persist,
        repl,
    };
    cairn_cluster::Group::join(config, local)
        .await
        .map(Some)
        .map_err(|e| e.to_string())
}
