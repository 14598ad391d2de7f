//! The metrics address beyond `stats`: the replication figures (`cairn_replication_*`), typed
//! from the replication state, against a primary and a replica (`--replica-of`), each agreeing
//! with `stats replication` on both roles; and the status page (`/`) with its data
//! (`/status.json`). The page in a real browser: tests/status-page.
//!
//! Breaking it: exporting the primary's figures on the replica (or none of them) fails the
//! per-role checks; a help line missing fails the `# HELP` check.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{Conn, Server};

/// The samples of `GET /metrics` (name with labels -> value) and its text.
fn scrape(addr: SocketAddr) -> (BTreeMap<String, f64>, String) {
    let mut http = TcpStream::connect(addr).unwrap();
    http.write_all(b"GET /metrics HTTP/1.1\r\nhost: cairn\r\nconnection: close\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    http.read_to_string(&mut body).unwrap();
    assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
    let samples = body
        .lines()
        .filter(|l| l.starts_with("cairn_replication_"))
        .filter_map(|l| l.rsplit_once(' '))
        .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
        .collect();
    (samples, body)
}

fn stats(c: &mut Conn, group: &str) -> BTreeMap<String, String> {
    c.send(format!("stats {group}\r\n").as_bytes());
    let text = String::from_utf8(c.read_until(b"END\r\n")).unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("STAT "))
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn metrics_port() -> SocketAddr {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    probe.local_addr().unwrap()
}

#[test]
fn replication_figures_are_exported_for_the_primary_and_the_replica() {
    let (pm, rm) = (metrics_port(), metrics_port());
    let primary = Server::start(&["--metrics-addr", &pm.to_string()]);
    let target = primary.grpc_addr.unwrap().to_string();
    let replica = Server::start(&["--metrics-addr", &rm.to_string(), "--replica-of", &target]);
    let mut p = primary.connect();
    for i in 0..20 {
        p.send(format!("set m:{i} 0 0 1\r\nx\r\n").as_bytes());
        assert_eq!(p.read_until(b"\r\n"), b"STORED\r\n");
    }
    let mut r = replica.connect();
    let deadline = Instant::now() + Duration::from_secs(60);
    // Caught up, and the primary has the replica's acknowledgement of it (acks follow the
    // apply).
    while stats(&mut p, "replication")["replicas"] != "1"
        || stats(&mut r, "replication")["applied_revision"]
            != stats(&mut p, "replication")["revision"]
        || stats(&mut p, "replication")["lag_revisions"] != "0"
    {
        assert!(Instant::now() < deadline, "the replica never caught up");
        std::thread::sleep(Duration::from_millis(20));
    }

    let (m, text) = scrape(pm);
    let names = [
        "role",
        "sync",
        "group",
        "replicas",
        "lag_revisions",
        "lag_bytes",
        "sync_timeouts",
        "lease_held",
        "lease_refusals",
        "connected",
        "complete",
        "full_syncs",
        "resumes",
        "in_sync_members",
        "term",
    ];
    for n in names {
        assert!(
            text.contains(&format!("# HELP cairn_replication_{n} ")),
            "no help for {n}:\n{text}"
        );
    }
    let want_primary = [
        ("cairn_replication_role{role=\"primary\"}", 1.0),
        ("cairn_replication_role{role=\"replica\"}", 0.0),
        ("cairn_replication_sync", 0.0),
        ("cairn_replication_group", 0.0),
        ("cairn_replication_replicas", 1.0),
        ("cairn_replication_lag_revisions", 0.0),
        ("cairn_replication_lag_bytes", 0.0),
        ("cairn_replication_sync_timeouts_total", 0.0),
        ("cairn_replication_lease_held", 0.0),
        ("cairn_replication_lease_refusals_total", 0.0),
        ("cairn_replication_connected", 0.0),
        ("cairn_replication_complete", 1.0),
        ("cairn_replication_in_sync_members", 0.0),
        ("cairn_replication_term", 0.0),
    ];
    for (k, v) in want_primary {
        assert_eq!(m.get(k), Some(&v), "primary {k}: {m:?}");
    }

    let (m, _) = scrape(rm);
    let s = stats(&mut r, "replication");
    let want_replica = [
        ("cairn_replication_role{role=\"primary\"}", 0.0),
        ("cairn_replication_role{role=\"replica\"}", 1.0),
        ("cairn_replication_replicas", 0.0),
        ("cairn_replication_connected", 1.0),
        ("cairn_replication_complete", 1.0),
        (
            "cairn_replication_full_syncs_total",
            s["full_syncs"].parse().unwrap(),
        ),
        (
            "cairn_replication_resumes_total",
            s["resumes"].parse().unwrap(),
        ),
    ];
    for (k, v) in want_replica {
        assert_eq!(m.get(k), Some(&v), "replica {k}: {m:?}");
    }
    assert!(m["cairn_replication_full_syncs_total"] >= 1.0, "{m:?}");

    // A primary under --replication sync with no replica: sync is 1, replicas 0 (what the
    // "no in-sync replica" alert looks for).
    let sm = metrics_port();
    let lonely = Server::start(&["--metrics-addr", &sm.to_string(), "--replication", "sync"]);
    let (m, _) = scrape(sm);
    assert_eq!(m["cairn_replication_sync"], 1.0);
    assert_eq!(m["cairn_replication_replicas"], 0.0);
    drop(lonely);
}

#[test]
fn the_status_page_and_its_data_are_served_beside_the_metrics() {
    let pm = metrics_port();
    let server = Server::start(&["--metrics-addr", &pm.to_string()]);
    let mut c = server.connect();
    c.send(b"set k 0 0 1\r\nv\r\nget k\r\n");
    c.read_until(b"END\r\n");
    let get = |path: &str| {
        let mut http = TcpStream::connect(pm).unwrap();
        http.write_all(
            format!("GET {path} HTTP/1.1\r\nhost: cairn\r\nconnection: close\r\n\r\n").as_bytes(),
        )
        .unwrap();
        let mut body = String::new();
        http.read_to_string(&mut body).unwrap();
        body
    };
    let page = get("/");
    assert!(page.starts_with("HTTP/1.1 200 OK"), "{page}");
    assert!(page.contains("content-type: text/html"), "{page}");
    assert!(
        page.contains("status.json") && page.contains("<svg"),
        "{page}"
    );
    let json = get("/status.json");
    let body = json.split("\r\n\r\n").nth(1).unwrap();
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(v["figures"]["curr_items"], 1);
    assert_eq!(v["figures"]["get_hits_total"], 1);
    assert!(v["commands"]["get"].as_u64().unwrap() >= 1, "{v}");
    assert!(v["commands"]["set"].as_u64().unwrap() >= 1, "{v}");
    assert!(
        v["log"]["dsync_write"]["count"].as_u64().unwrap()
            + v["log"]["fdatasync"]["count"].as_u64().unwrap()
            >= 1,
        "{v}"
    );
    assert_eq!(v["replication"]["role"], "primary");
    assert_eq!(v["texts"]["mode"], "sync");
    assert!(get("/metrics").contains("cairn_replication_role"));
    assert!(get("/nope").starts_with("HTTP/1.1 404"));
}
