//! The group's durable record in ZooKeeper: which term is current, who is its primary, and
//! which members hold every write acknowledged in it (the in-sync set). Only a member on
//! this record may be elected, so a member whose session lapsed is still known complete, and
//! one that never finished its copy is never elected on its own.
//!
//! ```text
//!   /arcus_repl/group_state/<svc>/<group>    persistent, changed with the version read:
//!     cairn-group 1
//!     term 8589934601            the zxid that created the primary lock of this term
//!     primary 3f2a...            the term's primary (its node id: see `group::node_id`)
//!     log 1234567                the primary's command log id: revisions of this term
//!     in_sync 9c01...,77e4...    node ids
//!     forced 77e4...             (only after an operator's `failover force`)
//! ```
//!
//! Members are named by node id, not address: a member keeps its name when it comes back on
//! another address, and loses it with its data folder (then it holds nothing).
//!
//! Who writes it: the primary of the term (when elected, and to change the in-sync set: a
//! member leaves it in ZooKeeper before the primary stops waiting for it; one joins it only
//! after the primary waits for it), and an operator's force. Every write compares the
//! version read, so two writers never both win.

use std::collections::BTreeSet;

/// The record's first line.
const MAGIC: &str = "cairn-group 1";

/// What the record says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupState {
    /// The current term (0: none yet).
    pub term: u64,
    /// The term's primary: its node id.
    pub primary: String,
    /// The primary's command log id (the numbering of this term's revisions).
    pub log_id: u64,
    /// The members other than the primary that hold every write acknowledged in this term.
    pub in_sync: BTreeSet<String>,
    /// An operator forced this member to be the next primary, whatever it holds.
    pub forced: Option<String>,
}

impl GroupState {
    pub fn encode(&self) -> Vec<u8> {
        let in_sync: Vec<&str> = self.in_sync.iter().map(String::as_str).collect();
        let mut text = format!(
            "{MAGIC}\nterm {}\nprimary {}\nlog {}\nin_sync {}\n",
            self.term,
            self.primary,
            self.log_id,
            in_sync.join(",")
        );
        if let Some(f) = &self.forced {
            text.push_str(&format!("forced {f}\n"));
        }
        text.into_bytes()
    }

    /// None for bytes that are not such a record.
    pub fn parse(data: &[u8]) -> Option<GroupState> {
        let text = std::str::from_utf8(data).ok()?;
        let mut lines = text.lines();
        if lines.next()? != MAGIC {
            return None;
        }
        let mut s = GroupState::default();
        for line in lines {
            let (key, value) = line.split_once(' ').unwrap_or((line, ""));
            match key {
                "term" => s.term = value.parse().ok()?,
                "primary" => s.primary = value.to_string(),
                "log" => s.log_id = value.parse().ok()?,
                "in_sync" => {
                    s.in_sync = value
                        .split(',')
                        .filter(|m| !m.is_empty())
                        .map(str::to_string)
                        .collect()
                }
                "forced" => s.forced = Some(value.to_string()),
                _ => {}
            }
        }
        Some(s)
    }

    /// Whether `member` (a node id) may be elected. With no record yet (a new
    /// group) every member may; once there is one, only the term's primary and the in-sync
    /// members, or only the member an operator forced.
    pub fn eligible(state: Option<&GroupState>, member: &str) -> bool {
        match state {
            None => true,
            Some(s) => match &s.forced {
                Some(f) => f == member,
                None => s.primary == member || s.in_sync.contains(member),
            },
        }
    }

    /// The members that hold every acknowledged write of the term: the primary and the
    /// in-sync set.
    pub fn complete_members(&self) -> Vec<String> {
        let mut all: Vec<String> = vec![self.primary.clone()];
        all.extend(self.in_sync.iter().cloned());
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_round_trips_and_says_who_may_be_elected() {
        let s = GroupState {
            term: 42,
            primary: "10.0.0.1:11211".into(),
            log_id: 7,
            in_sync: ["10.0.0.2:11211".to_string()].into(),
            forced: None,
        };
        assert_eq!(GroupState::parse(&s.encode()), Some(s.clone()));
        assert!(GroupState::eligible(Some(&s), "10.0.0.1:11211"));
        assert!(GroupState::eligible(Some(&s), "10.0.0.2:11211"));
        assert!(!GroupState::eligible(Some(&s), "10.0.0.3:11211"));
        assert!(GroupState::eligible(None, "10.0.0.3:11211"));
        let forced = GroupState {
            forced: Some("10.0.0.3:11211".into()),
            ..s.clone()
        };
        assert_eq!(GroupState::parse(&forced.encode()), Some(forced.clone()));
        assert!(GroupState::eligible(Some(&forced), "10.0.0.3:11211"));
        assert!(!GroupState::eligible(Some(&forced), "10.0.0.1:11211"));
        let empty = GroupState {
            in_sync: BTreeSet::new(),
            ..s
        };
        assert_eq!(GroupState::parse(&empty.encode()), Some(empty));
        assert_eq!(GroupState::parse(b"garbage"), None);
    }
}
