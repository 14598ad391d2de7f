//! The member task: one round after another, follow the primary, run an election, or serve
//! as the primary, keeping the lease (lease.rs) and, as the primary, the in-sync set.
//!
//! ```text
//!   run ─> decide ─┬─ the lock is ours ──────────> serve_as_primary
//!                  ├─ the lock is another's ────> serve_as_replica (follow it at its term)
//!                  └─ no lock ──────────────────> elect (election.rs)
//!          session ended ─> writes refused, follower stopped, new session, register
//! ```

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use zookeeper_client as zk;

use super::config::{GroupConfig, Local, POLL};
use super::member_data::{node_id, MemberData};
use super::state::GroupState;
use super::zk::{connect, ephemeral, persistent};
use crate::error::ClusterError;
use crate::replica::{self, FollowerConfig};
use crate::replication::{ForceRequest, Role};

struct Follower {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

pub(super) struct Member {
    pub(super) config: Arc<GroupConfig>,
    pub(super) local: Local,
    pub(super) client: zk::Client,
    /// This member's znode (with its sequence).
    pub(super) me: String,
    follower: Option<Follower>,
    ready: watch::Sender<bool>,
    /// Operators' `failover force` requests (answered in elections, refused otherwise).
    pub(super) forces: mpsc::UnboundedReceiver<ForceRequest>,
}

impl Member {
    pub(super) fn new(
        config: Arc<GroupConfig>,
        local: Local,
        client: zk::Client,
        ready: watch::Sender<bool>,
        forces: mpsc::UnboundedReceiver<ForceRequest>,
    ) -> Member {
        Member {
            config,
            local,
            client,
            me: String::new(),
            follower: None,
            ready,
            forces,
        }
    }

    pub(super) fn session_ended(&self) -> bool {
        self.client.state().is_terminated()
    }

    /// Mapping, folders, and this member's znode.
    pub(super) async fn register(&mut self) -> Result<(), ClusterError> {
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
        for dir in [c.group_path(), c.cache_list(), c.client_list()] {
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

    /// Where this member's data stands, as its znode says: its position (a revision of a
    /// log) and whether its copy is complete.
    pub(super) fn data(&self, state: &str) -> MemberData {
        let (log_id, revision) = replica::position_of(&self.local.persist, &self.config.data_dir);
        MemberData {
            state: state.to_string(),
            revision,
            complete: self.local.repl.follower.complete.load(Ordering::Relaxed),
            log_id,
            node: node_id(&self.local.persist),
        }
    }

    fn member_data(&self, state: &str) -> Vec<u8> {
        self.data(state).encode()
    }

    pub(super) async fn set_state(&self, state: &str) -> Result<(), zk::Error> {
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

    pub(super) fn refuse_writes(&self, why: &str) {
        self.local.repl.set_role(Role::Replica {
            primary: why.to_string(),
        });
    }

    /// Answers force requests that came while this member cannot take them.
    pub(super) fn refuse_forces(&mut self, why: &str) {
        while let Ok(reply) = self.forces.try_recv() {
            let _ = reply.send(Err(why.to_string()));
        }
    }

    pub(super) async fn run(mut self, mut stop: watch::Receiver<bool>) {
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
                self.local.repl.lease.revoke();
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
        self.local.repl.lease.revoke();
        // Dropping the last client closes the session, which removes every ephemeral znode of
        // this node at once; the cache_list entry goes first, so clients move away sooner.
        for primary in [true, false] {
            let path = self.config.listed_path(primary);
            let _ =
                tokio::time::timeout(self.config.session_timeout, self.client.delete(&path, None))
                    .await;
        }
    }

    /// Reads the group state and its version (None: no record yet).
    pub(super) async fn read_state(&self) -> Result<Option<(GroupState, i32)>, ClusterError> {
        let path = self.config.state_path();
        match self.client.get_data(&path).await {
            Ok((data, stat)) => Ok(Some((
                GroupState::parse(&data)
                    .ok_or_else(|| ClusterError::Invalid(format!("{path} holds no group state")))?,
                stat.version,
            ))),
            Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(ClusterError::zk(format!("read {path}"))(e)),
        }
    }

    /// Writes the group state if it is still at `version` (None: creates it); returns the new
    /// version, or None when someone else changed it first.
    pub(super) async fn write_state(
        &self,
        state: &GroupState,
        version: Option<i32>,
    ) -> Result<Option<i32>, ClusterError> {
        let path = self.config.state_path();
        let r = match version {
            Some(v) => self
                .client
                .set_data(&path, &state.encode(), Some(v))
                .await
                .map(|stat| stat.version),
            None => {
                let parent = path.rsplit_once('/').map_or("", |(p, _)| p);
                self.client
                    .mkdir(parent, &persistent())
                    .await
                    .map_err(ClusterError::zk(format!("create {parent}")))?;
                self.client
                    .create(&path, &state.encode(), &persistent())
                    .await
                    .map(|(stat, _)| stat.version)
            }
        };
        match r {
            Ok(v) => Ok(Some(v)),
            Err(zk::Error::BadVersion | zk::Error::NodeExists) => Ok(None),
            Err(e) => Err(ClusterError::zk(format!("write {path}"))(e)),
        }
    }

    /// One round: follow the primary while there is one, or run an election. Returns when
    /// the round is over (the primary went, the session ended, an error).
    async fn decide(&mut self) -> Result<(), ClusterError> {
        let lock = self.config.lock_path();
        let sent = Instant::now();
        let held = match self.client.get_data(&lock).await {
            Ok((data, stat)) => Some((data, stat)),
            Err(zk::Error::NoNode) => None,
            Err(e) => return Err(ClusterError::zk(format!("read {lock}"))(e)),
        };
        match held {
            Some((_, stat)) if stat.ephemeral_owner == self.client.session_id().0 => {
                // Ours from an earlier round (an error cut it short): the term is its zxid.
                self.local
                    .repl
                    .lease
                    .renew(sent, self.client.session_timeout());
                match self.read_state().await? {
                    Some((state, version)) if state.term == stat.czxid as u64 => {
                        self.serve_as_primary(state, version).await
                    }
                    // Elected but the state never said so: give the lock back, elect again.
                    _ => self
                        .client
                        .delete(&lock, None)
                        .await
                        .map_err(ClusterError::zk(format!("delete {lock}"))),
                }
            }
            Some((data, stat)) => {
                let text = String::from_utf8_lossy(&data).to_string();
                let mut words = text.split_whitespace();
                let memcached = words.next().unwrap_or("").to_string();
                let grpc = words.next().unwrap_or("").to_string();
                if memcached == self.config.advertise.to_string()
                    && grpc == self.config.grpc.to_string()
                {
                    // Our own lock, left by this node's previous run (killed, restarted within
                    // its session's timeout): that process is gone (this one holds its port
                    // and its data folder), so the lock goes now and the group elects at once.
                    tracing::info!(
                        "replication group: removing the lock of this node's previous run"
                    );
                    return match self.client.delete(&lock, Some(stat.version)).await {
                        Ok(()) | Err(zk::Error::NoNode | zk::Error::BadVersion) => Ok(()),
                        Err(e) => Err(ClusterError::zk(format!("delete {lock}"))(e)),
                    };
                }
                self.local
                    .repl
                    .lease
                    .renew(sent, self.client.session_timeout());
                self.serve_as_replica(memcached, grpc, stat.czxid).await
            }
            None => self.elect().await,
        }
    }

    async fn serve_as_replica(
        &mut self,
        memcached: String,
        grpc: String,
        lock_id: i64,
    ) -> Result<(), ClusterError> {
        let lock = self.config.lock_path();
        // A round that ended on an error may have left its follower running.
        self.stop_following().await;
        let term = lock_id as u64;
        tracing::info!(primary = %memcached, term, "replication group: following the primary");
        self.local.repl.set_term(term, BTreeSet::new());
        self.local.repl.set_role(Role::Replica {
            primary: memcached.clone(),
        });
        let (stop, stopped) = watch::channel(false);
        let follower = FollowerConfig {
            primary: grpc,
            term,
            name: node_id(&self.local.persist),
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
            self.refuse_forces("a primary is serving: nothing to force");
            if self.session_ended() {
                return Ok(());
            }
            let sent = Instant::now();
            match self.client.check_stat(&lock).await {
                Ok(Some(stat)) if stat.czxid == lock_id => {
                    // Confirms go on only while ZooKeeper says this primary is the primary.
                    self.local
                        .repl
                        .lease
                        .renew(sent, self.client.session_timeout());
                }
                Ok(_) => break,
                Err(zk::Error::ConnectionLoss) => {}
                Err(e) => return Err(ClusterError::zk(format!("stat {lock}"))(e)),
            }
            tokio::time::sleep(POLL).await;
        }
        tracing::info!(primary = %memcached, "replication group: the primary is gone");
        // Stop applying first, so the position offered in the election is final.
        self.stop_following().await;
        self.refuse_writes("none (an election is under way)");
        Ok(())
    }

    /// Takes writes for the term in `state` (written by the election) while the lock and
    /// the lease hold, keeping the in-sync set.
    pub(super) async fn serve_as_primary(
        &mut self,
        mut state: GroupState,
        mut version: i32,
    ) -> Result<(), ClusterError> {
        self.stop_following().await;
        let repl = Arc::clone(&self.local.repl);
        let persist = Arc::clone(&self.local.persist);
        // Where the followed primary's history sits in our log ends here: the replicas still
        // at a position of that log resume from it (lineage.rs).
        let applied = repl.follower.applied_revision.load(Ordering::Relaxed);
        if applied > 0 {
            repl.lineage.lock().note(applied, persist.appended_lsn());
        }
        // Never resume from a position again: if this node dies while primary, it comes
        // back with its own log as its position.
        replica::drop_position(&self.config.data_dir)
            .map_err(|e| ClusterError::Invalid(format!("replica position: {e}")))?;
        let f = &repl.follower;
        f.complete.store(false, Ordering::Relaxed);
        f.applied_revision.store(0, Ordering::Relaxed);
        repl.set_term(state.term, state.in_sync.clone());
        self.set_state("primary")
            .await
            .map_err(ClusterError::zk("member state"))?;
        self.list_as(true)
            .await
            .map_err(ClusterError::zk("cache_list"))?;
        // Writes are taken once clients can find the node as the primary.
        repl.set_role(Role::Primary);
        tracing::info!(
            term = state.term,
            "replication group: this node is the primary"
        );
        self.ready.send_replace(true);
        let lock = self.config.lock_path();
        let lag_bound = GroupConfig::lag_bound(repl.timeout());
        // Primary for as long as the session and the lock live.
        let mut give_back = false;
        while !self.session_ended() {
            self.refuse_forces("this node is the primary: nothing to force");
            let sent = Instant::now();
            match self.client.get_data(&lock).await {
                Ok((_, stat)) if stat.ephemeral_owner == self.client.session_id().0 => {
                    repl.lease.renew(sent, self.client.session_timeout());
                }
                Ok(_) | Err(zk::Error::NoNode) => break,
                Err(_) => {}
            }
            repl.note_published(persist.safe_lsn());
            // Joins first here (this node waits for them from now on), then in ZooKeeper;
            // leaves first in ZooKeeper, then here: the record never names a member this node
            // does not wait for. The record is written from the set this node waits for, so
            // a write that failed is made again at the next poll.
            let change = repl.in_sync_change(lag_bound);
            let (added, leaving) = match &change {
                Some(c) => (repl.add_in_sync(&c.add), c.remove.clone()),
                None => (Vec::new(), Vec::new()),
            };
            let mut next = state.clone();
            next.in_sync = repl.in_sync();
            for m in &leaving {
                next.in_sync.remove(m);
            }
            if next != state {
                match self.write_state(&next, Some(version)).await {
                    Ok(Some(v)) => {
                        tracing::info!(
                            joined = ?added, left = ?leaving,
                            "replication group: in-sync set changed"
                        );
                        repl.remove_in_sync(&leaving);
                        state = next;
                        version = v;
                    }
                    Ok(None) => {
                        // Changed by someone else (an operator's force): step down.
                        tracing::warn!(
                            "replication group: the group state changed under the primary; \
                             stepping down"
                        );
                        give_back = true;
                        break;
                    }
                    Err(e) => tracing::warn!("replication group: {e}"),
                }
            }
            tokio::time::sleep(POLL).await;
        }
        repl.lease.revoke();
        self.refuse_writes("none (this node stopped being the primary)");
        if give_back && !self.session_ended() {
            // The lock is still ours: give it back so the group elects again at once.
            let _ = self.client.delete(&lock, None).await;
        }
        Ok(())
    }

    /// How long to wait for the session's members before deciding alone.
    pub(super) fn session_timeout(&self) -> Duration {
        self.config.session_timeout
    }
}
