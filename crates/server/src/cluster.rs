//! The server's side of crates/cluster: settings into a membership.

use std::net::SocketAddr;
use std::time::Duration;

use cairn_cluster::membership::{advertised_address, hostname};
use cairn_cluster::MembershipConfig;

use crate::Config;

/// ARCUS's root for a cache node that is not in a replication group.
pub const ARCUS_ROOT: &str = "/arcus";

/// What to register for a server bound to `bound`, if `--zookeeper` is set.
pub fn membership_config(config: &Config, bound: SocketAddr) -> Option<MembershipConfig> {
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
