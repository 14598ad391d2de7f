//! Elections: who may become the primary when the lock is free, and an operator's force.
//!
//! ```text
//!   no lock ─> member data "cand <revision> <complete> <log id>" (follower stopped first,
//!     so the position is final) ─> wait until every live member is a candidate (or a
//!     session timeout passed) ─> the best eligible candidate creates the lock (exclusive)
//!     ─> group state: term = the lock's zxid, primary = itself, in-sync set empty
//!   eligible: the group state's primary and in-sync members whose position is of the
//!     term's log (state.rs); with no record yet (a new group), every member
//!   best: the most of that log (highest revision), then the oldest member
//!   none alive ─> the group waits (logged); `failover force` on a member makes it the only
//!     eligible one and answers with what is lost
//! ```

use std::time::{Duration, Instant};

use zookeeper_client as zk;

use super::config::POLL;
use super::member::Member;
use super::member_data::{node_id, parse_member, sequence, MemberData};
use super::state::GroupState;
use super::zk::ephemeral;
use crate::error::ClusterError;

/// How often a group that cannot elect anyone says so.
const WAITING_NOTICE: Duration = Duration::from_secs(5);

/// The candidate that should become the primary, if any may: see the module doc.
pub(super) fn best<'a>(
    state: Option<&GroupState>,
    candidates: &'a [(String, MemberData)],
) -> Option<&'a str> {
    candidates
        .iter()
        .filter(|(_, m)| match state {
            None => true,
            Some(s) => {
                GroupState::eligible(Some(s), &m.node)
                    && (s.forced.is_some() || m.log_id == s.log_id)
            }
        })
        .max_by(|(a, x), (b, y)| {
            let rank = |m: &MemberData| match state {
                // A new group: complete copies first.
                None => (m.complete, m.revision),
                Some(_) => (true, m.revision),
            };
            rank(x)
                .cmp(&rank(y))
                .then_with(|| sequence(b).cmp(sequence(a)))
        })
        .map(|(n, _)| n.as_str())
}

impl Member {
    pub(super) async fn elect(&mut self) -> Result<(), ClusterError> {
        let group = self.config.group_path();
        let lock = self.config.lock_path();
        self.refuse_writes("none (an election is under way)");
        self.set_state("cand")
            .await
            .map_err(ClusterError::zk("member state"))?;
        let waited_since = Instant::now();
        let mut noticed = Instant::now();
        loop {
            if self.session_ended() {
                return Ok(());
            }
            if self.client.check_stat(&lock).await.ok().flatten().is_some() {
                // Someone won: follow them.
                self.refuse_forces("a primary is serving: nothing to force");
                return Ok(());
            }
            let mut state = self.read_state().await?;
            while let Ok(reply) = self.forces.try_recv() {
                let answer = self.force(state.as_ref()).await;
                let _ = reply.send(answer);
                state = self.read_state().await?;
            }
            let names = self
                .client
                .list_children(&group)
                .await
                .map_err(ClusterError::zk(format!("list {group}")))?;
            let mut candidates = Vec::new();
            let mut undecided = 0;
            for n in names.iter().filter(|n| n.contains('^')) {
                let path = format!("{group}/{n}");
                match self.client.get_data(&path).await {
                    Ok((data, _)) => match parse_member(&data) {
                        Some(m) if m.state == "cand" => candidates.push((path, m)),
                        _ => undecided += 1,
                    },
                    Err(zk::Error::NoNode) => {}
                    Err(e) => return Err(ClusterError::zk(format!("read {path}"))(e)),
                }
            }
            // Members still following a primary that is gone notice within a poll; one
            // that does not for a whole session timeout is as good as dead.
            let settled = undecided == 0 || waited_since.elapsed() >= self.session_timeout();
            let winner = best(state.as_ref().map(|(s, _)| s), &candidates);
            if settled && winner == Some(self.me.as_str()) {
                return self.take_the_lock(state.map(|(_, v)| v)).await;
            }
            if settled && winner.is_none() && noticed.elapsed() >= WAITING_NOTICE {
                noticed = Instant::now();
                let members = state
                    .as_ref()
                    .map(|(s, _)| s.complete_members().join(", "))
                    .unwrap_or_default();
                tracing::warn!(
                    "replication group: no member holding every acknowledged write is alive \
                     ({members}); waiting for one (`failover force` on a member makes it the \
                     primary with what it holds)"
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// This member won: the lock, then the group state of the new term (compared with the
    /// version read, so an operator's force in between wins and this member stands down).
    async fn take_the_lock(&mut self, version: Option<i32>) -> Result<(), ClusterError> {
        let lock = self.config.lock_path();
        let data = format!("{} {}", self.config.advertise, self.config.grpc);
        let sent = Instant::now();
        let stat = match self
            .client
            .create(&lock, data.as_bytes(), &ephemeral())
            .await
        {
            Ok((stat, _)) => stat,
            Err(zk::Error::NodeExists) => return Ok(()),
            Err(e) => return Err(ClusterError::zk(format!("create {lock}"))(e)),
        };
        self.local
            .repl
            .lease
            .renew(sent, self.client.session_timeout());
        let state = GroupState {
            term: stat.czxid as u64,
            primary: node_id(&self.local.persist),
            log_id: self.local.persist.log_id(),
            in_sync: Default::default(),
            forced: None,
        };
        match self.write_state(&state, version).await? {
            Some(v) => self.serve_as_primary(state, v).await,
            None => {
                self.client
                    .delete(&lock, None)
                    .await
                    .map_err(ClusterError::zk(format!("delete {lock}")))?;
                Ok(())
            }
        }
    }

    /// An operator's `failover force`: this member becomes the only one that may be elected,
    /// whatever it holds. The answer says what is lost.
    async fn force(&self, state: Option<&(GroupState, i32)>) -> Result<String, String> {
        let me = node_id(&self.local.persist);
        let Some((s, version)) = state else {
            return Err(
                "the group has no record yet: any member may be elected; nothing to force".into(),
            );
        };
        let mine = self.data("cand");
        let lost = if GroupState::eligible(Some(s), &me) && mine.log_id == s.log_id {
            format!(
                "it holds every write acknowledged in term {}: nothing is lost",
                s.term
            )
        } else {
            format!(
                "it holds revision {} of log {}; every write acknowledged in term {} that it \
                 lacks is lost (the members that hold them all: {})",
                mine.revision,
                mine.log_id,
                s.term,
                s.complete_members().join(", ")
            )
        };
        let next = GroupState {
            forced: Some(me.clone()),
            ..s.clone()
        };
        match self.write_state(&next, Some(*version)).await {
            Ok(Some(_)) => {
                tracing::warn!("replication group: forced to become the primary: {lost}");
                Ok(format!("{me} becomes the primary: {lost}"))
            }
            Ok(None) => Err("the group state changed meanwhile: try again".into()),
            Err(e) => Err(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(addr: &str, seq: u32) -> String {
        format!("/g/{addr}-host^grpc^{seq:010}")
    }

    /// A candidate `node` at `seq` whose data stands at `revision` of `log_id`.
    fn cand(
        node: &str,
        seq: u32,
        revision: u64,
        complete: bool,
        log_id: u64,
    ) -> (String, MemberData) {
        let data = MemberData {
            state: "cand".into(),
            revision,
            complete,
            log_id,
            node: node.into(),
        };
        (path(node, seq), data)
    }

    #[test]
    fn a_new_group_elects_the_complete_member_with_the_highest_revision_then_the_oldest() {
        let c = vec![
            cand("a", 3, 90, false, 1),
            cand("b", 1, 50, true, 2),
            cand("c", 2, 70, true, 3),
            cand("d", 4, 70, true, 4),
        ];
        assert_eq!(best(None, &c), Some(c[2].0.as_str()));
        assert_eq!(best(None, &c[..1]), Some(c[0].0.as_str()));
        assert_eq!(best(None, &[]), None);
    }

    #[test]
    fn only_members_the_group_state_names_may_win_and_the_furthest_of_the_terms_log() {
        let state = GroupState {
            term: 9,
            primary: "p".into(),
            log_id: 7,
            in_sync: ["r".to_string(), "s".to_string()].into(),
            forced: None,
        };
        let half_copied = cand("x", 1, 500, false, 3);
        let behind = cand("r", 2, 40, true, 7);
        let ahead = cand("s", 3, 60, true, 7);
        // A member of the set that lost its position (a copy begun) is not of the term's log.
        let restarted_copy = cand("s", 4, 90, false, 11);
        assert_eq!(best(Some(&state), std::slice::from_ref(&half_copied)), None);
        let c = vec![half_copied.clone(), behind.clone(), ahead.clone()];
        assert_eq!(best(Some(&state), &c), Some(ahead.0.as_str()));
        assert_eq!(best(Some(&state), &[restarted_copy]), None);
        // The term's own primary, back with its log.
        let primary = cand("p", 5, 65, false, 7);
        let c = vec![behind, ahead, primary.clone()];
        assert_eq!(best(Some(&state), &c), Some(primary.0.as_str()));
        // Forced: only that member, whatever it holds.
        let forced = GroupState {
            forced: Some("x".into()),
            ..state
        };
        let c = vec![half_copied.clone(), primary];
        assert_eq!(best(Some(&forced), &c), Some(half_copied.0.as_str()));
    }
}
