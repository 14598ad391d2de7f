//! `cairnctl cluster status` against a real ZooKeeper (Debian's) with a replication group of
//! two cairn nodes, and a service of ARCUS's plain layout. Skipped with a note when ZooKeeper
//! is not installed, except under CI (`CI` set), where that fails.

mod common;
#[path = "../../server/tests/common/zookeeper.rs"]
mod zookeeper;

use std::time::{Duration, Instant};

use common::{run, Server};
use serde_json::Value;
use zookeeper::ZooKeeper;

/// Flags of a member of group g0 of `svc`, sync replication, a 1 s ZooKeeper session.
fn group_args<'a>(zk: &'a str, svc: &'a str) -> Vec<&'a str> {
    vec![
        "--zookeeper",
        zk,
        "--service-code",
        svc,
        "--replication-group",
        "g0",
        "--replication",
        "sync",
        "--zookeeper-session-timeout-ms",
        "1000",
    ]
}

fn status(zk: &str, svc: &str, json: bool) -> (i32, String, String) {
    let mut args = vec![
        "cluster",
        "status",
        "--zookeeper",
        zk,
        "--service-code",
        svc,
    ];
    if json {
        args.splice(0..0, ["-o", "json"]);
    }
    let out = run(&args);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Polls until `f` holds, for at most a minute.
fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn cluster_status_shows_a_group_as_zookeeper_and_its_members_see_it() {
    if !zookeeper::installed() {
        return;
    }
    let zk = ZooKeeper::start();
    let address = zk.address();
    let args = group_args(&address, "ctl");
    let primary = Server::start(&args);
    let replica = Server::start(&args);
    assert_eq!(replica.stat("replication", "role"), "replica");
    // The replica joins the in-sync set once it caught up.
    let replica_node = replica.stat("replication", "node_id");
    wait_until("the replica in the in-sync set", || {
        primary.stat("replication", "in_sync") == replica_node
    });
    let term = primary.stat("replication", "term");

    let (code, out, err) = status(&address, "ctl", false);
    assert_eq!(code, 0, "{err}");
    let mut lines = out.lines();
    let group = lines.next().unwrap();
    assert!(
        group.starts_with(&format!(
            "group g0: primary lock held by {} (zxid {term}); term {term}, primary node {}",
            primary.addr,
            primary.stat("replication", "node_id")
        )),
        "{out}"
    );
    assert!(
        group.ends_with(&format!("in-sync [{replica_node}]")),
        "{out}"
    );
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
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
            "CONNECTED"
        ]
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows.len(), 2, "{out}");
    let row = |addr: std::net::SocketAddr| {
        rows.iter()
            .find(|r| r[1] == addr.to_string())
            .unwrap_or_else(|| panic!("{addr} not in {out}"))
            .clone()
    };
    let p = row(primary.addr);
    assert_eq!(p[2], primary.grpc.to_string());
    assert_eq!(
        &p[4..9],
        ["primary", "M", "primary", "primary", term.as_str()]
    );
    assert_eq!((p[11], p[12]), ("yes", "held"));
    let r = row(replica.addr);
    assert_eq!(r[3], replica_node);
    assert_eq!(&r[4..9], ["follow", "S", "yes", "replica", term.as_str()]);
    assert_eq!((r[11], r[12], r[13]), ("yes", "held", "yes"));

    // -o json: one object per group, with both sides.
    let (code, out, _) = status(&address, "ctl", true);
    assert_eq!(code, 0);
    let g: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(g["group"], "g0");
    assert_eq!(g["state"]["in_sync"][0], replica_node.as_str());
    assert_eq!(g["lock"]["memcached"], primary.addr.to_string());
    let members = g["members"].as_array().unwrap();
    assert_eq!(members.len(), 2);
    assert!(members
        .iter()
        .any(|m| m["replication"]["role"] == "replica" && m["in_sync"] == "yes"));

    // A member that is gone (kill -9): listed until its session ends, then not.
    drop(replica);
    wait_until("the killed member to leave", || {
        let (_, out, _) = status(&address, "ctl", false);
        out.lines().count() == 3
    });

    // A service of the plain layout (no groups): its cache_list nodes.
    let plain = Server::start(&[
        "--zookeeper",
        &address,
        "--service-code",
        "plainsvc",
        "-m",
        "64",
    ]);
    let (code, out, err) = status(&address, "plainsvc", false);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("service plainsvc (/arcus/cache_list/plainsvc): 1 node(s)\nNODE"),
        "{out}"
    );
    let node: Vec<&str> = out.lines().nth(2).unwrap().split_whitespace().collect();
    assert_eq!(node[0], plain.addr.to_string());
    assert_eq!((node[2], node[3]), ("64MB", "primary"));
    // A service nobody registered: said so, exit 1.
    let (code, _, err) = status(&address, "nobody", false);
    assert_eq!(code, 1);
    assert!(err.contains("no service \"nobody\""), "{err}");
}
