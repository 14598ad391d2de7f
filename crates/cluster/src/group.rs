//! Replication groups and failover through ZooKeeper, in ARCUS's replication layout.
//!
//! ```text
//!   /arcus_repl/cache_server_mapping/<ip:port>/<svc>^<group>^<gRPC ip:port>   persistent
//!   /arcus_repl/group_list/<svc>/<group>/<ip:port>-<host>^<gRPC>^<seq>        ephemeral
//!       sequential: a member; data "<state> <revision> <complete>", state follow|cand|primary
//!   /arcus_repl/group_list/<svc>/<group>/primary     ephemeral: the lock; data the
//!                                                    primary's "<ip:port> <gRPC ip:port>"
//!   /arcus_repl/cache_list/<svc>/<group>^M^<ip:port>-<host>   ephemeral: the primary
//!   /arcus_repl/cache_list/<svc>/<group>^S^<ip:port>-<host>   ephemeral: a replica
//!
//!   decide: primary lock held by another ─> replica: follow its gRPC address, listed ^S^;
//!             when the lock goes (its session ended) ─> election
//!           no lock ─> election: member data "cand <durable revision> <complete>" (the
//!             follower stopped first, so the revision is final); wait until every live
//!             member is a candidate (or a session timeout passed); the best (complete
//!             first, then the highest durable revision, then the oldest member) creates
//!             the lock ─> primary: takes writes, listed ^M^; the others follow it
//!   session ended ─> writes refused, follower stopped, a new session, decide again
//! ```
//!
//! A node that becomes primary drops its replica position, so that if it dies and comes
//! back it takes a full copy from the new primary: whatever it held that the new primary
//! never acknowledged is gone before it serves (the start waits for the copy). With
//! `--replication sync` every acknowledged write is durable on a replica, and a replica
//! whose copy is complete is elected before one that is not, so a failover loses no
//! acknowledged write. Only when no complete member is left (the primary and every
//! complete replica are gone) is an incomplete one elected: the group comes back with what
//! it has rather than stay down.

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

use crate::replica::{self, FollowerConfig};
use crate::replication::{Replication, Role};
use crate::ClusterError;

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
        for (what, name) in [("service code", &self.service_code), ("group", &self.group)] {
            if name.is_empty() || name.contains(['/', '^']) || name == "." || name == ".." {
                return Err(ClusterError::Invalid(format!(
                    "{what} {name:?}: it names a znode (not empty, no '/' or '^')"
                )));
            }
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

    pub fn cache_list(&self) -> String {
        format!("{REPL_ROOT}/cache_list/{}", self.service_code)
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

    fn member_prefix(&self) -> String {
        format!("{}/{}^{}^", self.group_path(), self.node_name(), self.grpc)
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
        let mut member = Member {
            config: Arc::clone(&config),
            local,
            client,
            me: String::new(),
            follower: None,
            ready: ready_tx,
        };
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

struct Follower {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

struct Member {
    config: Arc<GroupConfig>,
    local: Local,
    client: zk::Client,
    /// This member's znode (with its sequence).
    me: String,
    follower: Option<Follower>,
    ready: watch::Sender<bool>,
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
#[derive(Debug, PartialEq, Eq)]
struct MemberData {
    state: String,
    revision: u64,
    complete: bool,
}

fn parse_member(data: &[u8]) -> Option<MemberData> {
    let text = std::str::from_utf8(data).ok()?;
    let mut w = text.split_whitespace();
    Some(MemberData {
        state: w.next()?.to_string(),
        revision: w.next()?.parse().ok()?,
        complete: w.next()? == "1",
    })
}

/// A member znode's sequence number (what follows its last '^').
fn sequence(name: &str) -> &str {
    name.rsplit('^').next().unwrap_or(name)
}

/// The member with the best claim: complete first, then the highest durable revision, then
/// the oldest (lowest sequence; names end with it).
fn best(members: &[(String, MemberData)]) -> Option<&str> {
    members
        .iter()
        .max_by(|(a, x), (b, y)| {
            (x.complete, x.revision)
                .cmp(&(y.complete, y.revision))
                .then_with(|| sequence(b).cmp(sequence(a)))
        })
        .map(|(n, _)| n.as_str())
}

impl Member {
    fn session_ended(&self) -> bool {
        self.client.state().is_terminated()
    }

    /// Mapping, folders, and this member's znode.
    async fn register(&mut self) -> Result<(), ClusterError> {
        let c = &self.config;
        let mapping = c.mapping_path();
        self.client
            .mkdir(&mapping, &persistent())
            .await
            .map_err(ClusterError::zk(format!("create {mapping}")))?;
        let entry = format!("{mapping}/{}", c.mapping_entry());
        match self.client.create(&entry, &[], &persistent()).await {
            Ok(_) | Err(zk::Error::NodeExists) => {}
            Err(e) => return Err(ClusterError::zk(format!("create {entry}"))(e)),
        }
        for dir in [c.group_path(), c.cache_list()] {
            self.client
                .mkdir(&dir, &persistent())
                .await
                .map_err(ClusterError::zk(format!("create {dir}")))?;
        }
        let prefix = c.member_prefix();
        let seq = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
        let (_, n) = self
            .client
            .create(&prefix, &self.member_data("follow"), &seq)
            .await
            .map_err(ClusterError::zk(format!("create {prefix}")))?;
        self.me = format!("{prefix}{n}");
        Ok(())
    }

    fn member_data(&self, state: &str) -> Vec<u8> {
        let f = &self.local.repl.follower;
        format!(
            "{state} {} {}",
            f.applied_revision.load(Ordering::Relaxed),
            u8::from(f.complete.load(Ordering::Relaxed))
        )
        .into_bytes()
    }

    async fn set_state(&self, state: &str) -> Result<(), zk::Error> {
        self.client
            .set_data(&self.me, &self.member_data(state), None)
            .await
            .map(|_| ())
    }

    /// Lists this node in cache_list as the primary or a replica (and not as the other).
    async fn list_as(&self, primary: bool) -> Result<(), zk::Error> {
        let data = format!("{}MB", self.config.memory_limit_mb);
        match self
            .client
            .delete(&self.config.listed_path(!primary), None)
            .await
        {
            Ok(()) | Err(zk::Error::NoNode) => {}
            Err(e) => return Err(e),
        }
        match self
            .client
            .create(
                &self.config.listed_path(primary),
                data.as_bytes(),
                &ephemeral(),
            )
            .await
        {
            Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn stop_following(&mut self) {
        if let Some(f) = self.follower.take() {
            let _ = f.stop.send(true);
            let _ = f.task.await;
        }
    }

    fn refuse_writes(&self, why: &str) {
        self.local.repl.set_role(Role::Replica {
            primary: why.to_string(),
        });
    }

    async fn run(mut self, mut stop: watch::Receiver<bool>) {
        loop {
            let r = tokio::select! {
                r = self.decide() => r,
                _ = stop.changed() => break,
            };
            if let Err(e) = r {
                tracing::warn!("replication group: {e}");
            }
            if *stop.borrow() {
                break;
            }
            if self.session_ended() {
                self.stop_following().await;
                self.refuse_writes("none (the ZooKeeper session ended)");
                tracing::warn!("replication group: ZooKeeper session ended; joining again");
                let mut backoff = Duration::from_millis(100);
                loop {
                    let again = async {
                        self.client = connect(&self.config).await?;
                        self.register().await
                    };
                    let r = tokio::select! {
                        r = again => r,
                        _ = stop.changed() => return self.leave().await,
                    };
                    match r {
                        Ok(()) => break,
                        Err(e) => tracing::warn!("joining again: {e}; in {backoff:?}"),
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = stop.changed() => return self.leave().await,
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            } else {
                tokio::time::sleep(POLL).await;
            }
        }
        self.leave().await;
    }

    async fn leave(mut self) {
        self.stop_following().await;
        // Dropping the last client closes the session, which removes every ephemeral znode of
        // this node at once; the cache_list entry goes first, so clients move away sooner.
        for primary in [true, false] {
            let path = self.config.listed_path(primary);
            let _ =
                tokio::time::timeout(self.config.session_timeout, self.client.delete(&path, None))
                    .await;
        }
    }

    /// One round: follow the primary while there is one, or run an election. Returns when
    /// the round is over (the primary went, the session ended, an error).
    async fn decide(&mut self) -> Result<(), ClusterError> {
        let lock = self.config.lock_path();
        let held = match self.client.get_data(&lock).await {
            Ok((data, stat)) => Some((data, stat)),
            Err(zk::Error::NoNode) => None,
            Err(e) => return Err(ClusterError::zk(format!("read {lock}"))(e)),
        };
        match held {
            Some((_, stat)) if stat.ephemeral_owner == self.client.session_id().0 => {
                self.serve_as_primary().await
            }
            Some((data, stat)) => {
                let text = String::from_utf8_lossy(&data).to_string();
                let grpc = text.split_whitespace().nth(1).unwrap_or("").to_string();
                self.serve_as_replica(grpc, stat.czxid).await
            }
            None => self.elect().await,
        }
    }

    async fn serve_as_replica(
        &mut self,
        primary: String,
        lock_id: i64,
    ) -> Result<(), ClusterError> {
        let lock = self.config.lock_path();
        // A round that ended on an error may have left its follower running.
        self.stop_following().await;
        tracing::info!(%primary, "replication group: following the primary");
        self.local.repl.set_role(Role::Replica {
            primary: primary.clone(),
        });
        let (stop, stopped) = watch::channel(false);
        let follower = FollowerConfig {
            primary: primary.clone(),
            name: self.config.advertise.to_string(),
            data_dir: self.config.data_dir.clone(),
        };
        let task = tokio::spawn(replica::follow(
            Arc::clone(&self.local.store),
            Arc::clone(&self.local.persist),
            Arc::clone(&self.local.repl),
            follower,
            stopped,
        ));
        self.follower = Some(Follower { stop, task });
        self.set_state("follow")
            .await
            .map_err(ClusterError::zk("member state"))?;
        self.list_as(false)
            .await
            .map_err(ClusterError::zk("cache_list"))?;
        // Until the lock goes (or changes hands): ready once the copy is complete.
        loop {
            if self.local.repl.follower.complete.load(Ordering::Relaxed) {
                self.ready.send_replace(true);
            }
            if self.session_ended() {
                return Ok(());
            }
            match self.client.check_stat(&lock).await {
                Ok(Some(stat)) if stat.czxid == lock_id => {}
                Ok(_) => break,
                Err(zk::Error::ConnectionLoss) => {}
                Err(e) => return Err(ClusterError::zk(format!("stat {lock}"))(e)),
            }
            tokio::time::sleep(POLL).await;
        }
        tracing::info!(%primary, "replication group: the primary is gone");
        // Stop applying first, so the revision offered in the election is final.
        self.stop_following().await;
        self.refuse_writes("none (an election is under way)");
        Ok(())
    }

    async fn elect(&mut self) -> Result<(), ClusterError> {
        let group = self.config.group_path();
        let lock = self.config.lock_path();
        self.refuse_writes("none (an election is under way)");
        self.set_state("cand")
            .await
            .map_err(ClusterError::zk("member state"))?;
        let waited_since = tokio::time::Instant::now();
        loop {
            if self.session_ended() {
                return Ok(());
            }
            if self.client.check_stat(&lock).await.ok().flatten().is_some() {
                // Someone won: follow them.
                return Ok(());
            }
            let names = self
                .client
                .list_children(&group)
                .await
                .map_err(ClusterError::zk(format!("list {group}")))?;
            let mut members = Vec::new();
            let mut undecided = 0;
            for n in names.iter().filter(|n| n.contains('^')) {
                let path = format!("{group}/{n}");
                match self.client.get_data(&path).await {
                    Ok((data, _)) => match parse_member(&data) {
                        Some(m) if m.state == "cand" => members.push((path, m)),
                        _ => undecided += 1,
                    },
                    Err(zk::Error::NoNode) => {}
                    Err(e) => return Err(ClusterError::zk(format!("read {path}"))(e)),
                }
            }
            // Members still following a primary that is gone notice within a poll; one
            // that does not for a whole session timeout is as good as dead.
            let settled = undecided == 0 || waited_since.elapsed() >= self.config.session_timeout;
            if settled && best(&members) == Some(self.me.as_str()) {
                let data = format!("{} {}", self.config.advertise, self.config.grpc);
                match self
                    .client
                    .create(&lock, data.as_bytes(), &ephemeral())
                    .await
                {
                    Ok(_) => return self.serve_as_primary().await,
                    Err(zk::Error::NodeExists) => return Ok(()),
                    Err(e) => return Err(ClusterError::zk(format!("create {lock}"))(e)),
                }
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn serve_as_primary(&mut self) -> Result<(), ClusterError> {
        self.stop_following().await;
        // Never resume from a position again: if this node dies while primary, it comes
        // back with a full copy of whatever the next primary holds.
        replica::drop_position(&self.config.data_dir)
            .map_err(|e| ClusterError::Invalid(format!("replica position: {e}")))?;
        let f = &self.local.repl.follower;
        f.complete.store(false, Ordering::Relaxed);
        f.applied_revision.store(0, Ordering::Relaxed);
        self.set_state("primary")
            .await
            .map_err(ClusterError::zk("member state"))?;
        self.list_as(true)
            .await
            .map_err(ClusterError::zk("cache_list"))?;
        // Writes are taken once clients can find the node as the primary.
        self.local.repl.set_role(Role::Primary);
        tracing::info!("replication group: this node is the primary");
        self.ready.send_replace(true);
        // Primary for as long as the session lives.
        while !self.session_ended() {
            tokio::time::sleep(POLL).await;
        }
        self.refuse_writes("none (the ZooKeeper session ended)");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(state: &str, revision: u64, complete: bool) -> MemberData {
        MemberData {
            state: state.into(),
            revision,
            complete,
        }
    }

    #[test]
    fn the_complete_member_with_the_highest_revision_wins_then_the_oldest() {
        let members = vec![
            ("g/a^x^0000000003".to_string(), m("cand", 90, false)),
            ("g/b^x^0000000001".to_string(), m("cand", 50, true)),
            ("g/c^x^0000000002".to_string(), m("cand", 70, true)),
            ("g/a^x^0000000004".to_string(), m("cand", 70, true)),
        ];
        assert_eq!(best(&members), Some("g/c^x^0000000002"));
        assert_eq!(best(&members[..1]), Some("g/a^x^0000000003"));
        assert_eq!(best(&[]), None);
    }

    #[test]
    fn member_data_round_trips() {
        assert_eq!(parse_member(b"cand 12 1"), Some(m("cand", 12, true)));
        assert_eq!(parse_member(b"follow 0 0"), Some(m("follow", 0, false)));
        assert_eq!(parse_member(b"garbage"), None);
    }
}
