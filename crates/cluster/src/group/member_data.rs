//! A member znode's data (`<state> <revision> <complete> <log id> <node id>`) and its name's
//! parts, and the node id members go by in the group state.

use cairn_persist::Persistence;

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
    pub(crate) fn encode(&self) -> Vec<u8> {
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
