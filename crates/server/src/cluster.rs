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
        ctx.persist().cloned(),
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
        Arc::clone(ctx.store()),
        persist,
        repl,
        config,
        stop,
    ));
}

/// `stats replication`: the role, and the lag in revisions and bytes (a primary: of its
/// furthest-ahead replica; a replica: behind the primary's last reported revision), rendered
/// from the typed [`crate::stats::ReplicationStats`] the metrics read too.
pub fn stats(ctx: &Ctx) -> Vec<(&'static str, String)> {
    let Some(r) = &ctx.replication else {
        return vec![("role", "none".into())];
    };
    crate::stats::ReplicationStats::read(r, ctx.hub().map(|h| &**h), ctx.persist().map(|p| &**p))
        .text()
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
        (ctx.replication.clone(), ctx.persist().cloned(), grpc)
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
        store: Arc::clone(ctx.store()),
        persist,
        repl,
    };
    cairn_cluster::Group::join(config, local)
        .await
        .map(Some)
        .map_err(|e| e.to_string())
}
