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

mod config;
mod election;
mod member;
mod member_data;
pub mod state;
mod zk;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::ClusterError;
use crate::replica;
use crate::replication::Role;
pub use config::{GroupConfig, Local, REPL_ROOT};
use member::Member;
pub use member_data::node_id;
use zk::connect;

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
