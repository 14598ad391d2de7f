//! What a group member registers, and where: its settings and the paths of ARCUS's
//! replication layout (see the group module's doc for the whole tree).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use cairn_persist::Persistence;
use cairn_store::Store;

use crate::error::ClusterError;
use crate::replication::Replication;

/// ARCUS's root for nodes in replication groups.
pub const REPL_ROOT: &str = "/arcus_repl";

/// How often the group's state is looked at in ZooKeeper.
pub(crate) const POLL: Duration = Duration::from_millis(50);

/// What a group member registers, and where.
#[derive(Clone, Debug)]
pub struct GroupConfig {
    /// ZooKeeper's connect string: `host:port[,host:port...][/chroot]`.
    pub ensemble: String,
    pub service_code: String,
    /// The replication group's name.
    pub group: String,
    /// Where clients reach this node (memcached).
    pub advertise: SocketAddr,
    /// Where replicas reach this node (its gRPC address).
    pub grpc: SocketAddr,
    pub hostname: String,
    /// `-m`, written as the cache_list znode's data (`"<N>MB"`).
    pub memory_limit_mb: u64,
    pub session_timeout: Duration,
    /// The data folder (the replica position goes there).
    pub data_dir: PathBuf,
}

impl GroupConfig {
    pub fn validate(&self) -> Result<(), ClusterError> {
        let s = &self.service_code;
        if s.is_empty() || s.contains(['/', '^']) || s == "." || s == ".." {
            return Err(ClusterError::Invalid(format!(
                "service code {s:?}: it names a znode (not empty, no '/' or '^')"
            )));
        }
        // ARCUS's clients cut each cache_list name at its first '-' and split the rest on ','
        // and '^': a group name with any of them makes them drop every node of the service.
        let g = &self.group;
        if g.is_empty() || !g.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(ClusterError::Invalid(format!(
                "group {g:?}: ARCUS's clients read only letters, digits and '_' in a group's name"
            )));
        }
        Ok(())
    }

    /// `<ip:port>-<hostname>`, ARCUS's node name.
    pub fn node_name(&self) -> String {
        format!("{}-{}", self.advertise, self.hostname)
    }

    pub fn group_path(&self) -> String {
        format!(
            "{REPL_ROOT}/group_list/{}/{}",
            self.service_code, self.group
        )
    }

    pub fn lock_path(&self) -> String {
        format!("{}/primary", self.group_path())
    }

    /// The group's durable record (state.rs).
    pub fn state_path(&self) -> String {
        format!(
            "{REPL_ROOT}/group_state/{}/{}",
            self.service_code, self.group
        )
    }

    pub fn cache_list(&self) -> String {
        format!("{REPL_ROOT}/cache_list/{}", self.service_code)
    }

    /// Where ARCUS clients of the service register themselves.
    pub fn client_list(&self) -> String {
        format!("{REPL_ROOT}/client_list/{}", self.service_code)
    }

    /// This node's cache_list znode as the primary (`M`) or a replica (`S`).
    pub fn listed_path(&self, primary: bool) -> String {
        let role = if primary { 'M' } else { 'S' };
        format!(
            "{}/{}^{role}^{}",
            self.cache_list(),
            self.group,
            self.node_name()
        )
    }

    pub fn mapping_path(&self) -> String {
        format!("{REPL_ROOT}/cache_server_mapping/{}", self.advertise)
    }

    pub(crate) fn mapping_entry(&self) -> String {
        format!("{}^{}^{}", self.service_code, self.group, self.grpc)
    }

    /// A member's znode, as ARCUS names them: `<ip:port>^<listen ip:port>^<sequence>` (the
    /// listen address here is the gRPC one replicas follow).
    pub(crate) fn member_prefix(&self) -> String {
        format!("{}/{}^{}^", self.group_path(), self.advertise, self.grpc)
    }

    /// How long a replica may stay behind before the primary takes it out of the in-sync set.
    pub fn lag_bound(replication_timeout: Duration) -> Duration {
        replication_timeout / 2
    }
}

/// What the node needs to follow a primary.
pub struct Local {
    pub store: Arc<Store>,
    pub persist: Arc<Persistence>,
    pub repl: Arc<Replication>,
}
