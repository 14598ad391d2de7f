//! `cairnctl cluster status --zookeeper Z --service-code S`: what ZooKeeper says of a
//! service's replication groups (members, the primary lock, the group state's term, primary
//! and in-sync set) beside what each member says of itself (`stats replication`), as one
//! table; a service without groups shows its nodes of ARCUS's plain layout instead.
//!
//! ```text
//!   ZooKeeper ──/arcus_repl/group_list/S/*──> groups ──> members (name, data), lock, state,
//!                                                         cache_list M/S
//!        each member ──memcached `stats replication`──> role, term, revision, lag, lease
//!        (none)  ──/arcus/cache_list/S/*──> nodes ──`stats`, `stats replication`──> table
//! ```
//!
//! Non-goals: changing anything (failover force is an admin line on the member).

use std::time::Duration;

use serde_json::json;
use zookeeper_client as zk;

use crate::error::{CtlError, Port, Result};
use crate::layout::{self, GroupState, MemberData, ARCUS_ROOT, REPL_ROOT};
use crate::memcached::{lookup, Memcached};
use crate::output::Out;

/// How long ZooKeeper may take to open a session.
const ZK_TIMEOUT: Duration = Duration::from_secs(10);

async fn connect(ensemble: &str) -> Result<zk::Client> {
    let unreachable = |why: String| CtlError::Unreachable {
        port: Port::ZooKeeper,
        addr: ensemble.to_string(),
        why,
    };
    let connecting = zk::Client::connector()
        .with_session_timeout(ZK_TIMEOUT)
        .with_fail_eagerly()
        .connect(ensemble);
    match tokio::time::timeout(ZK_TIMEOUT, connecting).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(unreachable(e.to_string())),
        Err(_) => Err(unreachable(format!("no session within {ZK_TIMEOUT:?}"))),
    }
}

fn zk_error(path: &str, e: zk::Error) -> CtlError {
    CtlError::ZooKeeper(format!("{path}: {e}"))
}

/// The children of `path`, sorted; empty if it does not exist.
async fn children(client: &zk::Client, path: &str) -> Result<Vec<String>> {
    match client.list_children(path).await {
        Ok(mut c) => {
            c.sort();
            Ok(c)
        }
        Err(zk::Error::NoNode) => Ok(Vec::new()),
        Err(e) => Err(zk_error(path, e)),
    }
}

/// The data of `path` and the zxid that created it, if it exists.
async fn data(client: &zk::Client, path: &str) -> Result<Option<(Vec<u8>, i64)>> {
    match client.get_data(path).await {
        Ok((d, stat)) => Ok(Some((d, stat.czxid))),
        Err(zk::Error::NoNode) => Ok(None),
        Err(e) => Err(zk_error(path, e)),
    }
}

/// A node's `stats` group, or why it could not be read.
async fn node_stats(
    addr: &str,
    group: Option<&str>,
) -> std::result::Result<Vec<(String, String)>, String> {
    let read = async {
        let mut mc = Memcached::connect(addr).await?;
        mc.stats(group).await
    };
    match tokio::time::timeout(Duration::from_secs(5), read).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer within 5 s".into()),
    }
}

/// One member as both sides see it.
struct Member {
    name: layout::MemberName,
    /// Its znode's data (None: unreadable).
    data: Option<MemberData>,
    /// Listed in cache_list as M or S.
    listed: Option<char>,
    /// Its `stats replication`, or why not.
    stats: std::result::Result<Vec<(String, String)>, String>,
}

struct Group {
    name: String,
    /// The primary lock: (memcached, gRPC) and the zxid that created it (the term).
    lock: Option<((String, String), i64)>,
    state: Option<GroupState>,
    /// The group state's raw text when it did not parse.
    state_unreadable: bool,
    members: Vec<Member>,
}

async fn read_group(
    client: &zk::Client,
    svc: &str,
    group: &str,
    cache_list: &[String],
) -> Result<Group> {
    let path = format!("{REPL_ROOT}/group_list/{svc}/{group}");
    let lock = data(client, &format!("{path}/primary"))
        .await?
        .and_then(|(d, zxid)| layout::lock(&d).map(|l| (l, zxid)));
    let state_raw = data(client, &format!("{REPL_ROOT}/group_state/{svc}/{group}")).await?;
    let state = state_raw.as_ref().and_then(|(d, _)| layout::group_state(d));
    let mut members = Vec::new();
    for child in children(client, &path).await? {
        let Some(name) = layout::member_name(&child) else {
            continue;
        };
        let data = data(client, &format!("{path}/{child}"))
            .await?
            .and_then(|(d, _)| layout::member_data(&d));
        let listed = cache_list.iter().find_map(|c| {
            let (g, role, node) = layout::listed(c)?;
            (g == group && layout::node_name(&node).0 == name.memcached).then_some(role)
        });
        members.push(Member {
            name,
            data,
            listed,
            stats: Err(String::new()),
        });
    }
    // A handful of members: one after another, each bounded by its own timeout.
    for m in &mut members {
        m.stats = node_stats(&m.name.memcached, Some("replication")).await;
    }
    Ok(Group {
        name: group.to_string(),
        lock,
        state_unreadable: state_raw.is_some() && state.is_none(),
        state,
        members,
    })
}

pub async fn status(ensemble: &str, svc: &str, out: &mut Out) -> Result<()> {
    let client = connect(ensemble).await?;
    let groups = children(&client, &format!("{REPL_ROOT}/group_list/{svc}")).await?;
    if groups.is_empty() {
        return plain(&client, ensemble, svc, out).await;
    }
    let cache_list = children(&client, &format!("{REPL_ROOT}/cache_list/{svc}")).await?;
    let mut read = Vec::new();
    for g in &groups {
        read.push(read_group(&client, svc, g, &cache_list).await?);
    }
    if out.json_mode() {
        for g in &read {
            out.json(&group_json(g))?;
        }
        return Ok(());
    }
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for g in &read {
        notes.push(group_line(g));
        for m in &g.members {
            rows.push(member_row(g, m));
        }
    }
    for n in notes {
        out.line(&n)?;
    }
    out.table(
        &[
            "GROUP",
            "MEMBER",
            "GRPC",
            "NODE_ID",
            "ZK_STATE",
            "LISTED",
            "IN_SYNC",
            "ROLE",
            "TERM",
            "REVISION",
            "LAG",
            "COMPLETE",
            "LEASE",
            "CONNECTED",
        ],
        &rows,
    )
}

/// "group g0: term T, primary ADDR (lock zxid Z), log L, in-sync N1,N2".
fn group_line(g: &Group) -> String {
    let lock = match &g.lock {
        Some(((m, _), zxid)) => format!("primary lock held by {m} (zxid {zxid})"),
        None => "no primary lock (an election is due)".into(),
    };
    let state = match &g.state {
        Some(s) => format!(
            "term {}, primary node {}, log {}, in-sync [{}]{}",
            s.term,
            s.primary,
            s.log_id,
            s.in_sync.join(","),
            s.forced
                .as_ref()
                .map_or(String::new(), |f| format!(", forced {f}"))
        ),
        None if g.state_unreadable => "group state unreadable".into(),
        None => "no group state yet".into(),
    };
    format!("group {}: {lock}; {state}", g.name)
}

fn in_sync(g: &Group, m: &Member) -> &'static str {
    let (Some(s), Some(d)) = (&g.state, &m.data) else {
        return "?";
    };
    if d.node.is_empty() {
        "?"
    } else if s.primary == d.node {
        "primary"
    } else if s.in_sync.contains(&d.node) {
        "yes"
    } else {
        "no"
    }
}

fn member_row(g: &Group, m: &Member) -> Vec<String> {
    let d = m.data.clone().unwrap_or_default();
    let (role, term, revision, lag, complete, lease, connected) = match &m.stats {
        Ok(stats) => {
            let s = lookup(stats);
            let get = |k: &str| s.get(k).copied().unwrap_or("-").to_string();
            let role = get("role");
            let revision = if role == "replica" {
                get("applied_revision")
            } else {
                get("revision")
            };
            let complete = if role == "replica" {
                get("complete")
            } else {
                "yes".into()
            };
            let connected = if role == "replica" {
                get("connected")
            } else {
                "-".into()
            };
            (
                role,
                get("term"),
                revision,
                get("lag_revisions"),
                complete,
                get("lease"),
                connected,
            )
        }
        Err(why) => {
            let dash = || "-".to_string();
            (
                format!("unreachable: {why}"),
                dash(),
                dash(),
                dash(),
                dash(),
                dash(),
                dash(),
            )
        }
    };
    vec![
        g.name.clone(),
        m.name.memcached.clone(),
        m.name.grpc.clone(),
        if d.node.is_empty() {
            "-".into()
        } else {
            d.node.clone()
        },
        if m.data.is_some() {
            d.state.clone()
        } else {
            "?".into()
        },
        m.listed.map_or("-".into(), |c| c.to_string()),
        in_sync(g, m).to_string(),
        role,
        term,
        revision,
        lag,
        complete,
        lease,
        connected,
    ]
}

fn stats_json(stats: &std::result::Result<Vec<(String, String)>, String>) -> serde_json::Value {
    match stats {
        Ok(s) => serde_json::Value::Object(
            s.iter()
                .map(|(k, v)| (k.clone(), crate::output::json_number_or_text(v)))
                .collect(),
        ),
        Err(why) => json!({"error": why}),
    }
}

fn group_json(g: &Group) -> serde_json::Value {
    let members: Vec<serde_json::Value> = g
        .members
        .iter()
        .map(|m| {
            json!({
                "memcached": m.name.memcached,
                "grpc": m.name.grpc,
                "sequence": m.name.sequence,
                "znode": m.data.as_ref().map(|d| json!({
                    "state": d.state, "revision": d.revision, "complete": d.complete,
                    "log_id": d.log_id, "node_id": d.node,
                })),
                "listed": m.listed.map(|c| c.to_string()),
                "in_sync": in_sync(g, m),
                "replication": stats_json(&m.stats),
            })
        })
        .collect();
    json!({
        "group": g.name,
        "lock": g.lock.as_ref().map(|((m, grpc), zxid)| json!({"memcached": m, "grpc": grpc, "zxid": zxid})),
        "state": g.state.as_ref().map(|s| json!({
            "term": s.term, "primary": s.primary, "log_id": s.log_id,
            "in_sync": s.in_sync, "forced": s.forced,
        })),
        "members": members,
    })
}

/// A service of ARCUS's plain layout: its cache_list nodes.
async fn plain(client: &zk::Client, ensemble: &str, svc: &str, out: &mut Out) -> Result<()> {
    let path = format!("{ARCUS_ROOT}/cache_list/{svc}");
    let nodes = children(client, &path).await?;
    if nodes.is_empty() && data(client, &path).await?.is_none() {
        return Err(CtlError::ZooKeeper(format!(
            "no service {svc:?} at {ensemble}: neither {REPL_ROOT}/group_list/{svc} nor {path} \
             exists (is --service-code right?)"
        )));
    }
    let mut rows = Vec::new();
    for n in &nodes {
        let (addr, host) = layout::node_name(n);
        let memory = data(client, &format!("{path}/{n}"))
            .await?
            .map(|(d, _)| String::from_utf8_lossy(&d).into_owned())
            .unwrap_or_default();
        let general = node_stats(&addr, None).await;
        let repl = node_stats(&addr, Some("replication")).await;
        if out.json_mode() {
            out.json(&json!({
                "node": addr, "host": host, "memory": memory,
                "stats": stats_json(&general), "replication": stats_json(&repl),
            }))?;
            continue;
        }
        let row = match (&general, &repl) {
            (Ok(g), Ok(r)) => {
                let (g, r) = (lookup(g), lookup(r));
                let get = |m: &std::collections::BTreeMap<&str, &str>, k: &str| {
                    m.get(k).copied().unwrap_or("-").to_string()
                };
                vec![
                    addr.clone(),
                    host.clone(),
                    memory.clone(),
                    get(&r, "role"),
                    get(&g, "curr_items"),
                    get(&g, "uptime"),
                    get(&g, "version"),
                ]
            }
            (Err(why), _) | (_, Err(why)) => vec![
                addr.clone(),
                host.clone(),
                memory.clone(),
                format!("unreachable: {why}"),
                "-".into(),
                "-".into(),
                "-".into(),
            ],
        };
        rows.push(row);
    }
    if out.json_mode() {
        return Ok(());
    }
    out.line(&format!("service {svc} ({path}): {} node(s)", nodes.len()))?;
    out.table(
        &[
            "NODE", "HOST", "MEMORY", "ROLE", "ITEMS", "UPTIME", "VERSION",
        ],
        &rows,
    )
}
