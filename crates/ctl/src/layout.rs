//! The znodes of ARCUS's ZooKeeper layout as cairn writes them, read back: names and data
//! parsed, nothing fetched (`cluster.rs` fetches).
//!
//! ```text
//!   /arcus_repl/group_list/<svc>/<group>/<ip:port>^<gRPC ip:port>^<seq>
//!        data "<follow|cand|primary> <revision> <complete 0|1> <log id> <node id>"
//!   /arcus_repl/group_list/<svc>/<group>/primary        the lock: "<ip:port> <gRPC ip:port>";
//!                                                        the zxid that created it is the term
//!   /arcus_repl/group_state/<svc>/<group>                "cairn-group 1\nterm T\nprimary N\n
//!                                                         log L\nin_sync N1,N2\n[forced N\n]"
//!   /arcus_repl/cache_list/<svc>/<group>^M|S^<ip:port>-<host>   who clients see, by role
//!   /arcus/cache_list/<svc>/<ip:port>-<host>             a node outside groups, data "<N>MB"
//! ```
//!
//! The writers are in crates/cluster (`group/member_data.rs`, `group/state.rs`,
//! `group/config.rs`, `membership.rs`); this reads the same text without depending on the
//! server's crates. A znode that does not parse is shown as such, never guessed at.

/// ARCUS's root for replication groups, and for nodes outside groups.
pub const REPL_ROOT: &str = "/arcus_repl";
pub const ARCUS_ROOT: &str = "/arcus";

/// A member znode's name: `<ip:port>^<gRPC ip:port>^<sequence>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberName {
    /// Where clients reach it (memcached).
    pub memcached: String,
    /// Where replicas follow it (gRPC).
    pub grpc: String,
    pub sequence: String,
}

pub fn member_name(name: &str) -> Option<MemberName> {
    let mut parts = name.split('^');
    let m = MemberName {
        memcached: parts.next()?.to_string(),
        grpc: parts.next()?.to_string(),
        sequence: parts.next()?.to_string(),
    };
    parts.next().is_none().then_some(m)
}

/// A member znode's data.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberData {
    /// follow, cand or primary.
    pub state: String,
    /// Where its data stands: a revision of log `log_id`.
    pub revision: u64,
    /// It holds a complete copy (not a full copy under way).
    pub complete: bool,
    pub log_id: u64,
    /// Its node id (empty from an earlier build).
    pub node: String,
}

pub fn member_data(data: &[u8]) -> Option<MemberData> {
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

/// The group's durable record.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupState {
    pub term: u64,
    /// The term's primary: its node id.
    pub primary: String,
    pub log_id: u64,
    /// Node ids of the members that hold every write acknowledged in the term.
    pub in_sync: Vec<String>,
    /// An operator forced this member to be the next primary.
    pub forced: Option<String>,
}

pub fn group_state(data: &[u8]) -> Option<GroupState> {
    let text = std::str::from_utf8(data).ok()?;
    let mut lines = text.lines();
    if lines.next()? != "cairn-group 1" {
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

/// The primary lock's data: the primary's memcached and gRPC addresses.
pub fn lock(data: &[u8]) -> Option<(String, String)> {
    let text = std::str::from_utf8(data).ok()?;
    let (m, g) = text.trim().split_once(' ')?;
    Some((m.to_string(), g.to_string()))
}

/// A replication layout cache_list name: `(group, 'M' or 'S', "<ip:port>-<host>")`.
pub fn listed(name: &str) -> Option<(String, char, String)> {
    let mut parts = name.splitn(3, '^');
    let group = parts.next()?.to_string();
    let role = parts.next()?;
    let node = parts.next()?.to_string();
    let role = match role {
        "M" => 'M',
        "S" => 'S',
        _ => return None,
    };
    Some((group, role, node))
}

/// ARCUS's node name `<ip:port>-<hostname>` as (address, host name).
pub fn node_name(name: &str) -> (String, String) {
    match name.split_once('-') {
        Some((addr, host)) => (addr.to_string(), host.to_string()),
        None => (name.to_string(), String::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_znode_cairn_writes_parses() {
        assert_eq!(
            member_name("127.0.0.1:11211^127.0.0.1:50051^0000000003"),
            Some(MemberName {
                memcached: "127.0.0.1:11211".into(),
                grpc: "127.0.0.1:50051".into(),
                sequence: "0000000003".into(),
            })
        );
        assert_eq!(member_name("primary"), None);
        let d = member_data(b"cand 12 1 9 00000000000000ab").unwrap();
        assert_eq!(
            (d.state.as_str(), d.revision, d.complete, d.log_id),
            ("cand", 12, true, 9)
        );
        assert_eq!(d.node, "00000000000000ab");
        assert_eq!(member_data(b"follow 0 0").unwrap().node, "");
        assert_eq!(member_data(b"garbage"), None);
        let s = group_state(b"cairn-group 1\nterm 42\nprimary aa\nlog 7\nin_sync bb,cc\n").unwrap();
        assert_eq!(s.term, 42);
        assert_eq!(s.primary, "aa");
        assert_eq!(s.in_sync, vec!["bb".to_string(), "cc".to_string()]);
        assert_eq!(s.forced, None);
        assert_eq!(
            group_state(b"cairn-group 1\nterm 1\nprimary a\nlog 1\nin_sync \nforced b\n")
                .unwrap()
                .forced,
            Some("b".into())
        );
        assert_eq!(group_state(b"something else"), None);
        assert_eq!(
            lock(b"127.0.0.1:1 127.0.0.1:2"),
            Some(("127.0.0.1:1".into(), "127.0.0.1:2".into()))
        );
        assert_eq!(
            listed("g0^M^127.0.0.1:11211-host-a"),
            Some(("g0".into(), 'M', "127.0.0.1:11211-host-a".into()))
        );
        assert_eq!(
            node_name("127.0.0.1:11211-host-a"),
            ("127.0.0.1:11211".into(), "host-a".into())
        );
    }
}
