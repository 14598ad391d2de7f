//! cairn in a cluster, with the real parts: Debian's ZooKeeper (membership in ARCUS's layout)
//! and Debian's nutcracker (twemproxy, ketama) in front of several cairn processes.
//!
//! One ZooKeeper serves the whole binary (Java starts slowly); each test uses a service code
//! of its own. The test that restarts ZooKeeper has one of its own.

mod common;
#[path = "common/zookeeper.rs"]
mod zookeeper;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{Conn, Server};
use zookeeper::{Inspector, ZooKeeper};

/// The ZooKeeper shared by this binary's tests (None where it is not installed, outside CI).
fn shared_zookeeper() -> Option<&'static ZooKeeper> {
    static ZK: OnceLock<Option<ZooKeeper>> = OnceLock::new();
    ZK.get_or_init(|| zookeeper::installed().then(ZooKeeper::start))
        .as_ref()
}

fn hostname() -> String {
    cairn_cluster::membership::hostname()
}

/// This server's znode in ARCUS's layout.
fn znode(service: &str, addr: SocketAddr) -> String {
    format!("/arcus/cache_list/{service}/{addr}-{}", hostname())
}

/// `cairn` flags registering with `zk` under `service`, with a short session.
fn member_args<'a>(zk: &'a str, service: &'a str) -> Vec<&'a str> {
    vec![
        "--zookeeper",
        zk,
        "--service-code",
        service,
        "--zookeeper-session-timeout-ms",
        "1000",
    ]
}

#[test]
fn registered_once_recovered_and_removed_on_sigterm() {
    let Some(zk) = shared_zookeeper() else { return };
    let address = zk.address();
    let inspector = Inspector::connect(&address);
    // Persistence on: the ready line comes after recovery, and the znode before it.
    let mut server = Server::start(&member_args(&address, "graceful"));
    let path = znode("graceful", server.addr);
    let (data, owner) = inspector.data(&path).expect("listed once ready");
    assert_eq!(data, b"64MB", "ARCUS writes the memory limit as the data");
    assert_ne!(owner, 0, "the znode is ephemeral");
    assert_eq!(
        inspector.children(&format!("/arcus/cache_server_mapping/{}", server.addr)),
        Some(vec!["graceful".to_string()]),
        "the mapping names the service"
    );
    assert_eq!(
        inspector.children("/arcus/client_list/graceful"),
        Some(vec![]),
        "where ARCUS's clients list themselves"
    );
    let mut c = server.connect();
    assert_eq!(c.exchange(b"set k 0 0 1\r\nv\r\n"), b"STORED\r\n");

    // SIGTERM: the znode is removed before the process exits.
    sigterm(&server.child);
    assert!(server.child.wait().unwrap().success());
    assert_eq!(inspector.data(&path), None, "removed on graceful shutdown");
    assert_eq!(
        inspector.children("/arcus/cache_list/graceful"),
        Some(vec![])
    );
}

#[test]
fn a_killed_node_leaves_when_its_session_times_out() {
    let Some(zk) = shared_zookeeper() else { return };
    let address = zk.address();
    let inspector = Inspector::connect(&address);
    let server = Server::start(&member_args(&address, "killed"));
    let path = znode("killed", server.addr);
    assert!(inspector.data(&path).is_some());
    let killed_at = Instant::now();
    server.kill9();
    inspector.wait_for("the znode to go", Duration::from_secs(60), |i| {
        i.data(&path).is_none()
    });
    eprintln!(
        "znode gone {:?} after kill -9 (session timeout 1 s)",
        killed_at.elapsed()
    );
}

#[test]
fn a_restart_before_the_old_session_ends_replaces_its_znode() {
    let Some(zk) = shared_zookeeper() else { return };
    let address = zk.address();
    let inspector = Inspector::connect(&address);
    let port = zookeeper::free_port().to_string();
    let mut args = member_args(&address, "restarted");
    args.extend(["-p", &port, "--zookeeper-session-timeout-ms", "60000"]);
    let server = Server::start(&args);
    let path = znode("restarted", server.addr);
    let (_, first_owner) = inspector.data(&path).unwrap();
    let dir = tempfile::tempdir().unwrap();
    server.kill9();
    // The old session has a minute left; the new run takes the name over at once.
    let server = Server::start_in(dir.path(), &args);
    let (_, owner) = inspector.data(&path).expect("listed again");
    assert_ne!(owner, first_owner, "the znode belongs to the new session");
    drop(server);
}

#[test]
fn a_mapping_to_another_service_refuses_the_start() {
    let Some(zk) = shared_zookeeper() else { return };
    let address = zk.address();
    let inspector = Inspector::connect(&address);
    let port = zookeeper::free_port();
    let mapping = format!("/arcus/cache_server_mapping/127.0.0.1:{port}");
    inspector.mkdir(&format!("{mapping}/someone-else"));
    let dir = tempfile::tempdir().unwrap();
    // No gRPC listener: the default port (50051) may be taken by another server on this
    // machine, which would refuse the start for a reason this test is not about.
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args([
            "-p",
            &port.to_string(),
            "--grpc-listen",
            "off",
            "--data-dir",
        ])
        .arg(dir.path())
        .args(member_args(&address, "mine"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refusing to start") && err.contains("someone-else"),
        "{err}"
    );
    assert_eq!(inspector.children("/arcus/cache_list/mine"), None);
    // The ZooKeeper is shared: a later test's node may get this port.
    inspector.delete(&format!("{mapping}/someone-else"));
    inspector.delete(&mapping);
}

#[test]
fn zookeeper_restarts_and_the_node_registers_again() {
    if !zookeeper::installed() {
        return;
    }
    let mut zk = ZooKeeper::start();
    let address = zk.address();
    // A session that outlives a quick restart of ZooKeeper on a busy machine.
    let mut args = member_args(&address, "outage");
    args.extend(["--zookeeper-session-timeout-ms", "4000"]);
    let server = Server::start(&args);
    let path = znode("outage", server.addr);
    assert!(Inspector::connect(&address).data(&path).is_some());

    // A crash of ZooKeeper that keeps its data: back within the session, the znode is there.
    zk.restart(false);
    let inspector = Inspector::connect(&address);
    inspector.wait_for("the znode after a restart", Duration::from_secs(60), |i| {
        i.data(&path).is_some()
    });
    drop(inspector);

    // A lost ensemble: every session and znode gone. The node opens a new session and
    // registers again, parents and mapping included.
    zk.restart(true);
    let inspector = Inspector::connect(&address);
    inspector.wait_for(
        "the znode after a wiped restart",
        Duration::from_secs(60),
        |i| i.data(&path).is_some(),
    );
    assert_eq!(
        inspector.children(&format!("/arcus/cache_server_mapping/{}", server.addr)),
        Some(vec!["outage".to_string()])
    );
    // And it still serves.
    let mut c = server.connect();
    assert_eq!(c.exchange(b"set k 0 0 1\r\nv\r\n"), b"STORED\r\n");
}

// ---- twemproxy (nutcracker) --------------------------------------------------------------

/// Debian's nutcracker in front of `servers`, ketama over md5, each node ejected after
/// one failure for a minute (so a killed node stays out for the whole test).
struct Nutcracker {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Nutcracker {
    fn installed() -> bool {
        let found = Command::new("nutcracker").arg("--version").output().is_ok();
        if !found {
            assert!(
                std::env::var_os("CI").is_none(),
                "nutcracker missing under CI"
            );
            eprintln!("nutcracker not installed: skipped (apt-get install nutcracker)");
        }
        found
    }

    fn start(servers: &[SocketAddr]) -> Nutcracker {
        let dir = tempfile::tempdir().unwrap();
        let port = zookeeper::free_port();
        let mut yml = format!(
            "cairn:\n  listen: 127.0.0.1:{port}\n  hash: md5\n  distribution: ketama\n  \
             timeout: 2000\n  auto_eject_hosts: true\n  server_retry_timeout: 60000\n  \
             server_failure_limit: 1\n  servers:\n"
        );
        for (i, s) in servers.iter().enumerate() {
            yml.push_str(&format!("   - {s}:1 node{i}\n"));
        }
        let conf = dir.path().join("nutcracker.yml");
        std::fs::write(&conf, yml).unwrap();
        let stats_port = zookeeper::free_port().to_string();
        let child = Command::new("nutcracker")
            .arg("-c")
            .arg(&conf)
            .args(["-s", &stats_port, "-o"])
            .arg(dir.path().join("nutcracker.log"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn nutcracker");
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        // Ready once it accepts connections.
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(addr).is_err() {
            assert!(Instant::now() < deadline, "nutcracker did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Nutcracker {
            child,
            addr,
            _dir: dir,
        }
    }
}

impl Drop for Nutcracker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One request through a fresh connection: nutcracker closes the client's connection on a
/// command it does not pass, and on a failed server.
fn one_request(addr: SocketAddr, request: &[u8], end: &[u8]) -> Result<Vec<u8>, Vec<u8>> {
    let mut c = Conn::new(addr);
    c.send(request);
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    use std::io::Read;
    while !got.ends_with(end) {
        match c.stream.read(&mut buf) {
            Ok(0) | Err(_) => return Err(got),
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    Ok(got)
}

/// Which node holds each key, asked of each node directly.
fn placement(nodes: &[&Server], keys: &[String]) -> BTreeMap<String, usize> {
    let mut found = BTreeMap::new();
    for (i, node) in nodes.iter().enumerate() {
        let mut c = node.connect();
        for k in keys {
            let reply = c.exchange(format!("mg {k} v\r\n").as_bytes());
            if reply.starts_with(b"VA ") {
                assert!(found.insert(k.clone(), i).is_none(), "{k} is on two nodes");
            }
        }
    }
    found
}

#[test]
fn nutcracker_spreads_keys_and_a_dead_node_remaps_only_its_own() {
    if !Nutcracker::installed() {
        return;
    }
    let nodes: Vec<Server> = (0..3)
        .map(|_| Server::start(&["--persistence", "off"]))
        .collect();
    let proxy = Nutcracker::start(&nodes.iter().map(|s| s.addr).collect::<Vec<_>>());
    let keys: Vec<String> = (0..600).map(|i| format!("key:{i}")).collect();
    let mut c = Conn::new(proxy.addr);
    for k in &keys {
        c.send(format!("set {k} 0 0 {}\r\n{k}\r\n", k.len()).as_bytes());
        assert_eq!(c.read_until(b"\r\n"), b"STORED\r\n");
    }

    // Spread: every key on exactly one node, each node with a fair share (ketama over 3 equal
    // nodes gives each about a third; 15% is far below what its 160 points per node allow).
    let before = placement(&nodes.iter().collect::<Vec<_>>(), &keys);
    assert_eq!(before.len(), keys.len(), "every key stored somewhere");
    for i in 0..nodes.len() {
        let n = before.values().filter(|&&n| n == i).count();
        assert!(
            n >= keys.len() * 15 / 100,
            "node {i} holds only {n} keys: {:?}",
            (0..3)
                .map(|j| before.values().filter(|&&n| n == j).count())
                .collect::<Vec<_>>()
        );
    }

    // Kill node 0. Its keys fail until nutcracker ejects it (after one failure); then they
    // go to the other two, while every other key stays where it was.
    let mut nodes = nodes;
    nodes.remove(0).kill9();
    let lost: Vec<&String> = keys.iter().filter(|k| before[*k] == 0).collect();
    let probe = lost[0];
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = one_request(
            proxy.addr,
            format!("set {probe} 0 0 1\r\nx\r\n").as_bytes(),
            b"\r\n",
        );
        if r.as_deref() == Ok(b"STORED\r\n") {
            break;
        }
        assert!(Instant::now() < deadline, "node 0 never ejected: {r:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut c = Conn::new(proxy.addr);
    for k in &keys {
        c.send(format!("get {k}\r\n").as_bytes());
        let reply = c.read_until(b"END\r\n");
        if before[k] != 0 {
            assert_eq!(
                reply,
                format!("VALUE {k} 0 {}\r\n{k}\r\nEND\r\n", k.len()).as_bytes(),
                "{k} stayed on its node"
            );
        }
    }
    for k in &lost {
        c.send(format!("set {k} 0 0 {}\r\n{k}\r\n", k.len()).as_bytes());
        assert_eq!(c.read_until(b"\r\n"), b"STORED\r\n");
    }
    let after = placement(&nodes.iter().collect::<Vec<_>>(), &keys);
    for k in &keys {
        if before[k] != 0 {
            assert_eq!(after[k] + 1, before[k], "{k} moved although its node lives");
        }
    }
    let remapped: BTreeSet<usize> = lost.iter().map(|k| after[*k]).collect();
    assert_eq!(
        remapped,
        BTreeSet::from([0, 1]),
        "the dead node's keys spread over both survivors"
    );
}

#[test]
fn nutcracker_passes_the_classic_commands_and_not_the_meta_ones() {
    if !Nutcracker::installed() {
        return;
    }
    let node = Server::start(&["--persistence", "off"]);
    let proxy = Nutcracker::start(&[node.addr]);
    // What nutcracker 0.5.0 parses and forwards: storage, retrieval, cas, arithmetic,
    // delete, touch. Every reply is cairn's.
    let passed: &[(&str, &str)] = &[
        ("set a 5 0 2\r\nhi\r\n", "STORED\r\n"),
        ("add a 0 0 1\r\nx\r\n", "NOT_STORED\r\n"),
        ("replace a 6 0 3\r\nhey\r\n", "STORED\r\n"),
        ("append a 0 0 1\r\n!\r\n", "STORED\r\n"),
        ("prepend a 0 0 1\r\n>\r\n", "STORED\r\n"),
        ("get a\r\n", "VALUE a 6 5\r\n>hey!\r\nEND\r\n"),
        ("set n 0 0 1\r\n1\r\n", "STORED\r\n"),
        ("incr n 41\r\n", "42\r\n"),
        ("decr n 2\r\n", "40\r\n"),
        ("touch n 100\r\n", "TOUCHED\r\n"),
        ("delete n\r\n", "DELETED\r\n"),
        ("get n\r\n", "END\r\n"),
    ];
    let mut c = Conn::new(proxy.addr);
    for (request, expected) in passed {
        c.send(request.as_bytes());
        let got = c.read_until(b"\r\n");
        let got = if expected.ends_with("END\r\n") && !got.ends_with(b"END\r\n") {
            [got, c.read_until(b"END\r\n")].concat()
        } else {
            got
        };
        assert_eq!(String::from_utf8_lossy(&got), *expected, "{request:?}");
    }
    // gets and cas through the proxy: the unique is cairn's.
    c.send(b"gets a\r\n");
    let reply = String::from_utf8(c.read_until(b"END\r\n")).unwrap();
    let unique = reply.split_whitespace().nth(4).unwrap().to_string();
    c.send(format!("cas a 0 0 1 {unique}\r\nz\r\n").as_bytes());
    assert_eq!(c.read_until(b"\r\n"), b"STORED\r\n");
    c.send(format!("cas a 0 0 1 {unique}\r\nw\r\n").as_bytes());
    assert_eq!(c.read_until(b"\r\n"), b"EXISTS\r\n");

    // What it does not pass: the meta commands, gat/gats and stats. nutcracker closes the
    // client's connection without a reply (the node never sees them).
    for request in [
        "mg a v\r\n",
        "ms b 1\r\nx\r\n",
        "md a\r\n",
        "ma n\r\n",
        "mn\r\n",
        "gat 0 a\r\n",
        "stats\r\n",
    ] {
        assert_eq!(
            one_request(proxy.addr, request.as_bytes(), b"\r\n"),
            Err(vec![]),
            "{request:?} is not passed"
        );
    }
    let mut direct = node.connect();
    assert_eq!(
        direct.exchange(b"mg b v\r\n"),
        b"EN\r\n",
        "ms b never arrived"
    );
}

// ---- replicas by log shipping ------------------------------------------------------------

/// `stats <group>` as a map.
fn stats(c: &mut Conn, group: &str) -> BTreeMap<String, String> {
    c.send(format!("stats {group}\r\n").as_bytes());
    let text = String::from_utf8(c.read_until(b"END\r\n")).unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("STAT "))
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn stat_u64(c: &mut Conn, group: &str, name: &str) -> u64 {
    stats(c, group)
        .get(name)
        .unwrap_or_else(|| panic!("no stat {name}"))
        .parse()
        .unwrap()
}

/// Waits until `replica` has applied everything `primary` has published.
fn caught_up(primary: &Server, replica: &Server) {
    let (mut p, mut r) = (primary.connect(), replica.connect());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let want = stat_u64(&mut p, "replication", "revision");
        let got = stat_u64(&mut r, "replication", "applied_revision");
        if got >= want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "replica stuck at {got}, primary at {want}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every key's value, flags and CAS unique as `mg` and `me` show them, and apart its expiry
/// (`me`'s exp=, seconds left: two reads may straddle a second).
fn item_view(c: &mut Conn, key: &str) -> (String, i64) {
    let got = c.exchange(format!("mg {key} v f c\r\nme {key}\r\n").as_bytes());
    let text = String::from_utf8(got).unwrap();
    let mut exp = 0;
    // `me`'s la= (last access) and fetch= are this node's own.
    let view = text
        .split(' ')
        .filter(|w| match w.strip_prefix("exp=") {
            Some(n) => {
                exp = n.parse().unwrap();
                false
            }
            None => !w.starts_with("la=") && !w.starts_with("fetch="),
        })
        .collect::<Vec<_>>()
        .join(" ");
    (view, exp)
}

fn assert_same_items(primary: &Server, replica: &Server, keys: &[String]) {
    let (mut p, mut r) = (primary.connect(), replica.connect());
    for k in keys {
        let (theirs, their_exp) = item_view(&mut p, k);
        let (ours, our_exp) = item_view(&mut r, k);
        assert_eq!(ours, theirs, "{k}");
        assert!(
            (our_exp - their_exp).abs() <= 1,
            "{k}: exp={our_exp}, primary's {their_exp}"
        );
    }
}

fn replica_args(primary: &Server) -> String {
    primary
        .grpc_addr
        .expect("the primary's gRPC address")
        .to_string()
}

#[test]
fn a_replica_catches_up_from_empty_and_from_behind_and_refuses_writes() {
    let primary = Server::start(&[]);
    let mut p = primary.connect();
    let keys: Vec<String> = (0..300).map(|i| format!("r:{i}")).collect();
    for (i, k) in keys.iter().enumerate() {
        let exptime = if i % 7 == 0 { 3600 } else { 0 };
        p.send(format!("set {k} {i} {exptime} {}\r\n{k}\r\n", k.len()).as_bytes());
        assert_eq!(p.read_until(b"\r\n"), b"STORED\r\n");
    }
    for k in keys.iter().step_by(5) {
        assert_eq!(
            p.exchange(format!("delete {k}\r\n").as_bytes()),
            b"DELETED\r\n"
        );
    }
    assert_eq!(p.exchange(b"incr r:0 1\r\n"), b"NOT_FOUND\r\n");
    assert_eq!(
        p.exchange(b"set n 0 0 2\r\n41\r\nincr n 1\r\n"),
        b"STORED\r\n42\r\n"
    );

    // From empty: a full copy, then the live stream.
    let dir = tempfile::tempdir().unwrap();
    let target = replica_args(&primary);
    let args = ["--replica-of", target.as_str()];
    let replica = Server::start_in(dir.path(), &args);
    caught_up(&primary, &replica);
    let mut all = keys.clone();
    all.push("n".into());
    assert_same_items(&primary, &replica, &all);
    let mut r = replica.connect();
    assert_eq!(stat_u64(&mut r, "replication", "full_syncs"), 1);
    let refused = String::from_utf8(r.exchange(b"set w 0 0 1\r\nx\r\n")).unwrap();
    assert!(
        refused.starts_with("SERVER_ERROR writes refused: this node is a replica of"),
        "{refused}"
    );
    assert_eq!(r.exchange(b"mg w v\r\n"), b"EN\r\n");
    assert_eq!(p.exchange(b"append n 0 0 1\r\n!\r\n"), b"STORED\r\n");
    caught_up(&primary, &replica);
    assert_same_items(&primary, &replica, &["n".to_string()]);

    // From behind: the replica dies, the primary moves on, the replica resumes from its last
    // applied revision (not a second full copy).
    replica.kill9();
    for k in keys.iter().step_by(3) {
        p.send(format!("set {k} 9 0 3\r\nnew\r\n").as_bytes());
        assert_eq!(p.read_until(b"\r\n"), b"STORED\r\n");
    }
    for k in keys.iter().skip(1).step_by(4) {
        p.send(format!("delete {k}\r\n").as_bytes());
        let _ = p.read_until(b"\r\n");
    }
    let replica = Server::start_in(dir.path(), &args);
    caught_up(&primary, &replica);
    assert_same_items(&primary, &replica, &all);
    let mut r = replica.connect();
    let s = stats(&mut r, "replication");
    assert_eq!(
        (s["resumes"].as_str(), s["full_syncs"].as_str()),
        ("1", "0"),
        "{s:?}"
    );
    assert_eq!(s["lag_revisions"], "0");
    let mut p = primary.connect();
    let s = stats(&mut p, "replication");
    assert_eq!(
        (s["role"].as_str(), s["replicas"].as_str()),
        ("primary", "1"),
        "{s:?}"
    );
}

#[test]
fn sync_replication_acknowledges_only_what_a_replica_holds() {
    // 2 s: long enough that a loaded 2-core CI machine's replica answers in time (300 ms
    // failed once there), short enough for the no-replica case below to end soon.
    let primary = Server::start(&["--replication", "sync", "--replication-timeout-ms", "2000"]);
    let mut p = primary.connect();
    // No replica: the write is not acknowledged.
    p.send(b"set alone 0 0 1\r\nx\r\n");
    let reply = String::from_utf8(p.read_to_close()).unwrap();
    assert!(
        reply.starts_with("SERVER_ERROR replication: no replica"),
        "{reply:?}"
    );

    let target = replica_args(&primary);
    let replica = Server::start(&["--replica-of", target.as_str()]);
    let mut r = replica.connect();
    let mut p = primary.connect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while stat_u64(&mut r, "replication", "applied_revision") == 0
        || stats(&mut p, "replication")["replicas"] != "1"
    {
        assert!(Instant::now() < deadline, "the replica never caught up");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Each STORED means the replica holds the write: it reads it at once.
    for i in 0..50 {
        p.send(format!("set s:{i} {i} 0 1\r\nv\r\n").as_bytes());
        assert_eq!(p.read_until(b"\r\n"), b"STORED\r\n", "write {i}");
        assert_eq!(
            r.exchange(format!("mg s:{i} v f\r\n").as_bytes()),
            format!("VA 1 f{i}\r\nv\r\n").as_bytes(),
            "write {i} acknowledged but not on the replica"
        );
    }
}

// ---- failover through ZooKeeper ----------------------------------------------------------

/// `cairn` flags for a member of replication group `g0` of service `svc`, with sync
/// replication and a 1 s session.
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

/// Polls `f` every 20 ms until it holds, for at most a minute.
fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every acknowledged write (Some: the value set; None: deleted) is what `server` answers.
fn assert_acked_writes(server: &Server, acked: &BTreeMap<String, Option<String>>, round: usize) {
    let mut c = server.connect();
    for (key, value) in acked {
        let got = c.exchange(format!("mg {key} v\r\n").as_bytes());
        let want = match value {
            Some(v) => format!("VA {} \r\n{v}\r\n", v.len()).replace(" \r\n", "\r\n"),
            None => "EN\r\n".to_string(),
        };
        assert_eq!(
            String::from_utf8_lossy(&got),
            want,
            "round {round}: {key} on {}",
            server.addr
        );
    }
}

#[test]
fn failover_loses_no_acknowledged_write_and_the_old_primary_rejoins_as_a_replica() {
    let Some(zk) = shared_zookeeper() else { return };
    let address = zk.address();
    let args = group_args(&address, "failover");
    let inspector = Inspector::connect(&address);
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    // The first member alone is the primary; the second takes a full copy before it serves.
    let mut nodes = [
        Some(Server::start_in(dirs[0].path(), &args)),
        Some(Server::start_in(dirs[1].path(), &args)),
    ];
    let role = |s: &Server| stats(&mut s.connect(), "replication")["role"].clone();
    assert_eq!(role(nodes[0].as_ref().unwrap()), "primary");
    assert_eq!(role(nodes[1].as_ref().unwrap()), "replica");
    let mut primary = 0;
    let mut acked: BTreeMap<String, Option<String>> = BTreeMap::new();
    for round in 0..10 {
        let p = nodes[primary].as_ref().unwrap();
        let mut c = p.connect();
        wait_until("the replica to follow the primary", || {
            stats(&mut c, "replication")["replicas"] == "1"
        });
        // SYNC writes: each STORED / DELETED is durable here and on the replica.
        for j in 0..20 {
            let (key, value) = (format!("f:{round}:{j}"), format!("v{round}.{j}"));
            c.send(format!("set {key} 0 0 {}\r\n{value}\r\n", value.len()).as_bytes());
            assert_eq!(c.read_until(b"\r\n"), b"STORED\r\n", "round {round}: {key}");
            acked.insert(key, Some(value));
        }
        if round > 0 {
            for j in (0..20).step_by(4) {
                let key = format!("f:{}:{j}", round - 1);
                assert_eq!(
                    c.exchange(format!("delete {key}\r\n").as_bytes()),
                    b"DELETED\r\n"
                );
                acked.insert(key, None);
            }
        }
        // kill -9 the primary; the replica is elected once the primary's session ends.
        let replica = 1 - primary;
        nodes[primary].take().unwrap().kill9();
        let new = nodes[replica].as_ref().unwrap();
        wait_until("the election", || role(new) == "primary");
        assert_acked_writes(new, &acked, round);
        let listed = inspector
            .children("/arcus_repl/cache_list/failover")
            .unwrap();
        let m = format!("g0^M^{}-{}", new.addr, hostname());
        assert!(listed.contains(&m), "round {round}: {listed:?} lacks {m}");
        // The old primary comes back as a replica, with a full copy of the new primary's
        // data (what it held that the new primary never acknowledged is gone).
        let back = Server::start_in(dirs[primary].path(), &args);
        assert_eq!(role(&back), "replica", "round {round}");
        assert_acked_writes(&back, &acked, round);
        nodes[primary] = Some(back);
        primary = replica;
    }
}

#[test]
fn a_former_primary_discards_what_the_new_primary_never_acknowledged() {
    let Some(zk) = shared_zookeeper() else { return };
    let address = zk.address();
    let mut args = group_args(&address, "discard");
    args.extend(["--replication-timeout-ms", "2000"]);
    let role = |s: &Server| stats(&mut s.connect(), "replication")["role"].clone();
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let a = Server::start_in(dirs[0].path(), &args);
    let b = Server::start_in(dirs[1].path(), &args);
    let mut c = a.connect();
    wait_until("the replica to follow", || {
        stats(&mut c, "replication")["replicas"] == "1"
    });
    assert_eq!(c.exchange(b"set k 0 0 1\r\nk\r\n"), b"STORED\r\n");
    // The replica stops (gracefully); a write on the primary then has no replica to hold it:
    // it stays in the primary's log, never acknowledged.
    let mut b = b;
    sigterm(&b.child);
    assert!(b.child.wait().unwrap().success());
    c.send(b"set u 0 0 1\r\nu\r\n");
    let reply = String::from_utf8(c.read_to_close()).unwrap();
    assert!(reply.starts_with("SERVER_ERROR replication"), "{reply}");
    a.kill9();
    // The replica comes back and is elected (alone); it never had u.
    let b = Server::start_in(dirs[1].path(), &args);
    wait_until("the election", || role(&b) == "primary");
    assert_eq!(
        b.connect().exchange(b"mg k v\r\nmg u v\r\n"),
        b"VA 1\r\nk\r\nEN\r\n"
    );
    // The former primary rejoins as a replica: u is gone before it serves.
    let a = Server::start_in(dirs[0].path(), &args);
    assert_eq!(role(&a), "replica");
    assert_eq!(
        a.connect().exchange(b"mg k v\r\nmg u v\r\n"),
        b"VA 1\r\nk\r\nEN\r\n"
    );
}

/// After a failover the members that kept up resume from the new primary (its lineage maps
/// their position in the old primary's log to its own): no full copy, counted by each
/// member's `full_syncs` and `resumes`, across several failovers in a group of three.
#[test]
fn replicas_that_kept_up_resume_after_a_failover_without_a_full_copy() {
    let Some(zk) = shared_zookeeper() else { return };
    let address = zk.address();
    let mut args = group_args(&address, "resume");
    args.extend(["--zookeeper-session-timeout-ms", "2000"]);
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut nodes: Vec<Option<Server>> = dirs
        .iter()
        .map(|d| Some(Server::start_in(d.path(), &args)))
        .collect();
    let role = |s: &Server| stats(&mut s.connect(), "replication")["role"].clone();
    let mut acked = BTreeMap::new();
    for round in 0..3 {
        let primary = (0..3)
            .find(|&i| nodes[i].as_ref().is_some_and(|s| role(s) == "primary"))
            .expect("a primary");
        let p = nodes[primary].as_ref().unwrap();
        let mut c = p.connect();
        wait_until("both replicas in sync", || {
            stats(&mut c, "replication")["in_sync"].split(',').count() == 2
        });
        for j in 0..50 {
            let (key, value) = (format!("r{round}:{j}"), format!("v{round}.{j}"));
            c.send(format!("set {key} 0 0 {}\r\n{value}\r\n", value.len()).as_bytes());
            assert_eq!(c.read_until(b"\r\n"), b"STORED\r\n", "round {round}: {key}");
            acked.insert(key, Some(value));
        }
        let copies_before: Vec<(usize, u64)> = (0..3)
            .filter(|&i| i != primary)
            .map(|i| {
                let mut r = nodes[i].as_ref().unwrap().connect();
                (i, stat_u64(&mut r, "replication", "full_syncs"))
            })
            .collect();
        nodes[primary].take().unwrap().kill9();
        let survivors: Vec<usize> = copies_before.iter().map(|&(i, _)| i).collect();
        wait_until("the election", || {
            survivors
                .iter()
                .any(|&i| role(nodes[i].as_ref().unwrap()) == "primary")
        });
        let new = *survivors
            .iter()
            .find(|&&i| role(nodes[i].as_ref().unwrap()) == "primary")
            .unwrap();
        let other = *survivors.iter().find(|&&i| i != new).unwrap();
        let o = nodes[other].as_ref().unwrap();
        let mut oc = o.connect();
        wait_until("the other replica to follow the new primary", || {
            let s = stats(&mut oc, "replication");
            s["role"] == "replica" && s["connected"] == "yes" && s["complete"] == "yes"
        });
        let before = copies_before.iter().find(|&&(i, _)| i == other).unwrap().1;
        let s = stats(&mut oc, "replication");
        assert_eq!(
            s["full_syncs"].parse::<u64>().unwrap(),
            before,
            "round {round}: the replica that kept up took a full copy: {s:?}"
        );
        assert!(s["resumes"].parse::<u64>().unwrap() >= 1, "{s:?}");
        assert_acked_writes(nodes[new].as_ref().unwrap(), &acked, round);
        assert_acked_writes(o, &acked, round);
        // The old primary comes back (as a replica: a copy, or a resume if it held nothing
        // the new primary lacks).
        nodes[primary] = Some(Server::start_in(dirs[primary].path(), &args));
        assert_acked_writes(nodes[primary].as_ref().unwrap(), &acked, round);
    }
}

/// SIGTERM by PID: a graceful stop.
fn sigterm(child: &Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}
