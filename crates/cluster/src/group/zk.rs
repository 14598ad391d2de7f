//! The ZooKeeper calls every part of a member makes the same way: the znode kinds it
//! creates (open to all, as ARCUS's), and a session with the group's timeout.

use zookeeper_client as zk;

use super::config::GroupConfig;
use crate::error::ClusterError;

pub(crate) fn persistent() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

pub(crate) fn ephemeral() -> zk::CreateOptions<'static> {
    zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all())
}

pub(crate) async fn connect(config: &GroupConfig) -> Result<zk::Client, ClusterError> {
    zk::Client::connector()
        .with_session_timeout(config.session_timeout)
        .connect(&config.ensemble)
        .await
        .map_err(ClusterError::zk(format!("connect to {}", config.ensemble)))
}
