//! Replication groups and failover through ZooKeeper, in ARCUS's replication layout.
//!
//! ```text
//!   /arcus_repl/cache_server_mapping/<ip:port>/<svc>^<group>^<gRPC ip:port>   persistent
//!   /arcus_repl/group_list/<svc>/<group>/<ip:port>^<gRPC ip:port>^<seq>      ephemeral
//!       sequential: a member; data "<state> <revision> <complete> <log id>", state
//!       follow|cand|primary, revision of that log (where the member's data stands)
//!   /arcus_repl/group_list/<svc>/<group>/primary     ephemeral: the lock; data the
//!                                                    primary's "<ip:port> <gRPC ip:port>";
//!                                                    the zxid that created it is the term
//!   /arcus_repl/group_state/<svc>/<group>            persistent: term, primary, in-sync
//!                                                    set (state.rs)
//!   /arcus_repl/cache_list/<svc>/<group>^M^<ip:port>-<host>   ephemeral: the primary
//!   /arcus_repl/cache_list/<svc>/<group>^S^<ip:port>-<host>   ephemeral: a replica
//!   /arcus_repl/client_list/<svc>                    persistent: ARCUS clients register here
//!
//!   decide: primary lock held by another ─> replica: follow its gRPC address at its term,
//!             listed ^S^; lease renewed by each read of the lock (lease.rs); when the lock
//!             goes (its session ended) ─> election
//!           no lock ─> election (election.rs): member data "cand ..."; only members the
//!             group state names (the term's primary and its in-sync set) may win; the
//!             one holding the most of the term's log creates the lock ─> primary
//!   primary (member.rs): new term in the group state (in-sync set empty), takes writes
//!             while its lease holds; replicas that catch up join the in-sync set, laggards
//!             leave it (in ZooKeeper first); sync writes wait for every in-sync replica
//!   session ended ─> writes refused, follower stopped, a new session, decide again
//! ```
//!
//! With `--replication sync` every acknowledged write is durable on every member of the
//! in-sync set, and only those members (and the primary) may be elected, so a failover loses
//! no acknowledged write; a member with a partial copy is never elected on its own: the
//! group waits for a complete one, or for an operator's `failover force` on a member, whose
//! answer says what is lost.

mod election;
mod member;
pub mod state;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use cairn_persist::Persistence;
use cairn_store::Store;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use zookeeper_client as zk;

use crate::replica;
use crate::replication::{Replication, Role};
use crate::ClusterError;
use member::Member;

/// ARCUS's root for nodes in replication groups.
pub const REPL_ROOT: &str = "/arcus_repl";

/// How often the group's state is looked at in ZooKeeper.
const POLL: Duration = Duration::from_millis(50);

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

    fn mapping_entry(&self) -> String {
        format!("{}^{}^{}", self.service_code, self.group, self.grpc)
    }

    /// A member's znode, as ARCUS names them: `<ip:port>^<listen ip:port>^<sequence>` (the
    /// listen address here is the gRPC one replicas follow).
    fn member_prefix(&self) -> String {
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

/// A running group member (the task that keeps its role).
pub struct Group {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Group {
    /// Joins the group and returns once the node may serve: it is the primary, or a replica
    /// whose copy is complete (a full copy from the primary, when it needs one, is done).
    /// ZooKeeper unreachable for the session timeout (and at least 10 s) refuses the start.
    pub async fn join(config: GroupConfig, local: Local) -> Result<Group, ClusterError> {
        config.validate()?;
        let config = Arc::new(config);
        local.repl.set_role(Role::Replica {
            primary: "none yet (joining the group)".into(),
        });
        let forces = local.repl.join_group();
        local.repl.follower.complete.store(
            replica::read_position(&config.data_dir).is_some(),
            Ordering::Relaxed,
        );
        let deadline =
            tokio::time::Instant::now() + config.session_timeout.max(Duration::from_secs(10));
        let client = loop {
            match connect(&config).await {
                Ok(c) => break c,
                Err(e) if tokio::time::Instant::now() < deadline => {
                    tracing::warn!("{e}; trying again");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e),
            }
        };
        let (stop, stopped) = watch::channel(false);
        let (ready_tx, mut ready) = watch::channel(false);
        let mut member = Member::new(Arc::clone(&config), local, client, ready_tx, forces);
        member.register().await?;
        let task = tokio::spawn(async move { member.run(stopped).await });
        // Ready, or the task ended (it logs why).
        let _ = ready.wait_for(|r| *r).await;
        if task.is_finished() {
            return Err(ClusterError::Invalid("the group member stopped".into()));
        }
        Ok(Group { stop, task })
    }

    /// Leaves the group (graceful shutdown): the session closes, so its znodes go at once.
    pub async fn leave(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

fn persistent() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

fn ephemeral() -> zk::CreateOptions<'static> {
    zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all())
}

async fn connect(config: &GroupConfig) -> Result<zk::Client, ClusterError> {
    zk::Client::connector()
        .with_session_timeout(config.session_timeout)
        .connect(&config.ensemble)
        .await
        .map_err(ClusterError::zk(format!("connect to {}", config.ensemble)))
}

/// A member's state, from its znode's data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MemberData {
    pub state: String,
    /// Where its data stands: a revision of log `log_id`.
    pub revision: u64,
    pub complete: bool,
    pub log_id: u64,
    /// Who it is in the group state ([`node_id`]; empty in a znode of an earlier build).
    pub node: String,
}

/// A member's name in the group state: its own command log's id, which lives and dies with
/// its data folder (a member whose folder is wiped is a new member, holding nothing), and
/// stays when its address changes.
pub fn node_id(persist: &Persistence) -> String {
    format!("{:016x}", persist.log_id())
}

impl MemberData {
    fn encode(&self) -> Vec<u8> {
        format!(
            "{} {} {} {} {}",
            self.state,
            self.revision,
            u8::from(self.complete),
            self.log_id,
            self.node
        )
        .into_bytes()
    }
}

pub(crate) fn parse_member(data: &[u8]) -> Option<MemberData> {
    let text = std::str::from_utf8(data).ok()?;
    let mut w = text.split_whitespace();
    Some(MemberData {
        state: w.next()?.to_string(),
        revision: w.next()?.parse().ok()?,
        complete: w.next()? == "1",
        log_id: w.next().and_then(|x| x.parse().ok()).unwrap_or(0),
        node: w.next().unwrap_or("").to_string(),
    })
}

/// A member znode's sequence number (what follows its last '^').
pub(crate) fn sequence(name: &str) -> &str {
    name.rsplit('^').next().unwrap_or(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_data_round_trips() {
        let m = MemberData {
            state: "cand".into(),
            revision: 12,
            complete: true,
            log_id: 9,
            node: "00000000000000ab".into(),
        };
        assert_eq!(parse_member(&m.encode()), Some(m));
        let old = parse_member(b"follow 0 0").unwrap();
        assert_eq!((old.revision, old.complete, old.log_id), (0, false, 0));
        assert_eq!(old.node, "");
        assert_eq!(parse_member(b"garbage"), None);
        assert_eq!(sequence("g/a^x^0000000003"), "0000000003");
    }
}
