//! Every cairnctl command against the real server: what it prints (text and `-o json`), and
//! its errors (exit code 1 and a line that names what to change).

mod common;

use std::time::Duration;

use common::{ctl, ok, run, Server, Streaming};
use serde_json::Value;

fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect()
}

#[test]
fn get_set_delete_touch_and_scan_in_text_json_hex_and_base64() {
    let s = Server::start(&[]);
    let set = ok(
        &s,
        &[
            "set",
            "greeting",
            "hello world",
            "--ttl",
            "100",
            "--flags",
            "7",
        ],
    );
    assert!(set.starts_with("OK revision "), "{set}");
    assert_eq!(ok(&s, &["get", "greeting"]), "hello world\n");
    let item = &json_lines(&ok(&s, &["-o", "json", "get", "greeting"]))[0];
    assert_eq!(item["value"], "hello world");
    assert_eq!(item["flags"], 7);
    assert!(item["expires_at"].as_u64().unwrap() > 0);
    // The same item over memcached: one store.
    assert_eq!(
        s.request("get greeting\r\n", "END\r\n"),
        "VALUE greeting 7 11\r\nhello world\r\nEND\r\n"
    );
    let touched = ok(&s, &["touch", "greeting", "0"]);
    assert!(touched.contains("expires_at 0"), "{touched}");
    assert!(ok(&s, &["delete", "greeting"]).starts_with("DELETED revision "));
    let (code, _, err) = ctl(&s, &["get", "greeting"]);
    assert_eq!(
        (code, err.as_str()),
        (1, "cairnctl: no such key: greeting\n")
    );
    let (code, _, err) = ctl(&s, &["delete", "greeting"]);
    assert_eq!(
        (code, err.as_str()),
        (1, "cairnctl: no such key: greeting\n")
    );

    // Bytes: a value with a newline and a byte that is not UTF-8, in hex and base64.
    ok(&s, &["--hex", "set", "62696e", "610aff"]);
    assert_eq!(ok(&s, &["--hex", "get", "62696e"]), "610aff\n");
    assert_eq!(ok(&s, &["--base64", "get", "Ymlu"]), "YQr/\n");
    // Shown as text, the value stays on one line, escaped.
    assert_eq!(ok(&s, &["scan", "bin"]), "bin\ta\\n\\xff\n");

    // Scan: every page, in key order.
    for i in 0..25 {
        ok(&s, &["set", &format!("user/{i:02}"), &format!("v{i}")]);
    }
    let all = ok(&s, &["scan", "user/", "--page-size", "10"]);
    let keys: Vec<&str> = all.lines().map(|l| l.split('\t').next().unwrap()).collect();
    let want: Vec<String> = (0..25).map(|i| format!("user/{i:02}")).collect();
    assert_eq!(keys, want);
    let items = json_lines(&ok(&s, &["-o", "json", "scan", "user/", "--keys-only"]));
    assert_eq!(items.len(), 25);
    assert!(items[0].get("value").is_none(), "keys only: {}", items[0]);
    assert_eq!(items[3]["key"], "user/03");
    assert_eq!(ok(&s, &["scan", "nothing/"]), "");
}

#[test]
fn refused_keys_and_unreachable_servers_exit_1_and_say_what_to_change() {
    // A key over 250 bytes is refused before anything is sent: no server at all here.
    let long = "k".repeat(251);
    let out = run(&["--endpoint", "127.0.0.1:1", "get", &long]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("the key is 251 bytes: cairn's keys are at most 250 bytes"),
        "{err}"
    );
    for bad in ["", "a b"] {
        let out = run(&["--endpoint", "127.0.0.1:1", "set", bad, "v"]);
        assert_eq!(out.status.code(), Some(1), "key {bad:?}");
    }
    // 250 bytes is a key (it reaches the server, which is not there).
    let out = run(&["--endpoint", "127.0.0.1:1", "get", &"k".repeat(250)]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot reach"), "{err}");

    let port = common::free_port();
    let addr = format!("127.0.0.1:{port}");
    for (args, flag) in [
        (vec!["--endpoint", addr.as_str(), "get", "k"], "--endpoint"),
        (
            vec!["--endpoint", addr.as_str(), "watch", "p/"],
            "--endpoint",
        ),
        (vec!["--memcached", addr.as_str(), "stats"], "--memcached"),
        (
            vec!["--memcached", addr.as_str(), "checkpoint"],
            "--memcached",
        ),
        (
            vec!["--memcached", addr.as_str(), "top", "--count", "1"],
            "--memcached",
        ),
    ] {
        let out = run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.starts_with("cairnctl: cannot reach cairn's") && err.contains(&addr),
            "{args:?}: {err}"
        );
        assert!(
            err.contains(&format!("{flag} HOST:PORT names another address")),
            "{args:?}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "one line: {err}");
    }
    let out = run(&[
        "cluster",
        "status",
        "--zookeeper",
        &addr,
        "--service-code",
        "s",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot reach ZooKeeper") && err.contains("--zookeeper"),
        "{err}"
    );
}

#[test]
fn checkpoint_and_health_and_the_servers_refusal_of_admin_lines() {
    let admin = Server::start(&["--enable-admin"]);
    let out = ok(&admin, &["checkpoint"]);
    assert!(out.starts_with("OK: checkpoint taken in "), "{out}");
    assert_eq!(admin.stat("persistence", "checkpoints_done"), "1");
    let j = json_lines(&ok(&admin, &["-o", "json", "checkpoint"]));
    assert_eq!(j[0]["checkpoint"], "OK");

    let plain = Server::start(&[]);
    let (code, out, err) = ctl(&plain, &["checkpoint"]);
    assert_eq!(code, 1);
    assert_eq!(out, "");
    assert_eq!(
        err,
        format!(
            "cairnctl: the server at {} refused: CLIENT_ERROR admin commands are disabled \
             (start cairn with --enable-admin)\n",
            plain.addr
        )
    );

    let health = ok(&plain, &["health"]);
    assert!(health.starts_with("PORT"), "{health}");
    assert!(
        health.contains("server SERVING, cairn.v1.KV SERVING, cairn.v1.Watch SERVING"),
        "{health}"
    );
    assert!(health.contains("VERSION 1.6"), "{health}");
    let j = json_lines(&ok(&plain, &["-o", "json", "health"]));
    assert_eq!(j.len(), 2);
    assert!(j.iter().all(|c| c["ok"] == true), "{j:?}");
    // The gRPC port is not there: unhealthy, exit 1, the memcached side still reported.
    let (code, out, err) = ctl(
        &plain,
        &[
            "--endpoint",
            &format!("127.0.0.1:{}", common::free_port()),
            "health",
        ],
    );
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("FAILED") && out.contains("VERSION"), "{out}");
    assert!(err.starts_with("cairnctl: unhealthy: grpc at "), "{err}");
}

#[test]
fn stats_of_every_group_as_tables_and_json() {
    let s = Server::start(&["--enable-admin"]);
    ok(&s, &["set", "k", "v"]);
    let general = ok(&s, &["stats"]);
    let header = general.lines().next().unwrap();
    assert_eq!(
        header.split_whitespace().collect::<Vec<_>>(),
        ["NAME", "VALUE"]
    );
    // Aligned: every value starts in the column of VALUE.
    let column = header.find("VALUE").unwrap();
    for line in general.lines() {
        let (name, value) = line.split_at(column);
        assert!(
            name.ends_with(' ') && !value.starts_with(' '),
            "{line:?} in\n{general}"
        );
    }
    assert!(general.contains("\ncurr_items "), "{general}");
    for (group, field) in [
        ("persistence", "mode"),
        ("replication", "role"),
        ("grpc", "grpc_set_requests"),
    ] {
        let j = &json_lines(&ok(&s, &["-o", "json", "stats", group]))[0];
        assert!(j.get(field).is_some(), "stats {group}: {j}");
    }
    let j = &json_lines(&ok(&s, &["-o", "json", "stats", "grpc"]))[0];
    assert_eq!(j["grpc_set_requests"], 1, "numbers are numbers: {j}");
    let j = &json_lines(&ok(&s, &["-o", "json", "stats", "replication"]))[0];
    assert_eq!(j["role"], "primary");
    // Without a flash tier: no figures, said so.
    assert_eq!(
        ok(&s, &["stats", "flash"]),
        "(the server reports no figures in this group)\n"
    );
    let flash = tempfile::tempdir().unwrap();
    let path = flash.path().join("f");
    let with_flash = Server::start(&[
        "--flash-path",
        path.to_str().unwrap(),
        "--flash-size",
        "16m",
        "--flash-direct-io",
        "false",
    ]);
    let j = &json_lines(&ok(&with_flash, &["-o", "json", "stats", "flash"]))[0];
    assert!(j.get("flash_items").is_some(), "{j}");
}

#[test]
fn top_refreshes_count_times_with_rates_of_the_last_interval() {
    let s = Server::start(&[]);
    // Load during the view: gets that hit and miss, over memcached.
    let addr = s.addr;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            use std::io::{Read, Write};
            let mut c = std::net::TcpStream::connect(addr).unwrap();
            let mut buf = [0u8; 4096];
            c.write_all(b"set hit 0 0 1\r\nx\r\n").unwrap();
            let _ = c.read(&mut buf).unwrap();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                c.write_all(b"get hit\r\nget miss\r\n").unwrap();
                let mut got = Vec::new();
                while got.windows(5).filter(|w| w == b"END\r\n").count() < 2 {
                    let n = c.read(&mut buf).unwrap();
                    got.extend_from_slice(&buf[..n]);
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let text = ok(&s, &["top", "--count", "2", "--interval", "0.5"]);
    let frames: Vec<&str> = text
        .split("\n\n")
        .filter(|f| !f.trim().is_empty())
        .collect();
    assert_eq!(frames.len(), 2, "{text}");
    for label in [
        "OPS/S", "HITS", "ITEMS", "MEMORY", "LOG", "CKPT", "REPL", "WATCH",
    ] {
        assert!(frames[1].contains(&format!("\n{label}")), "{label}: {text}");
    }
    assert!(!text.contains('\x1b'), "no terminal codes into a pipe");
    let j = json_lines(&ok(
        &s,
        &["-o", "json", "top", "--count", "2", "--interval", "0.5"],
    ));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    load.join().unwrap();
    assert_eq!(j.len(), 2);
    let last = &j[1];
    assert!(
        last["ops_per_second"]["get"].as_f64().unwrap() > 0.0,
        "{last}"
    );
    let ratio = last["hit_ratio"].as_f64().unwrap();
    assert!((0.3..0.7).contains(&ratio), "one hit, one miss: {ratio}");
    assert_eq!(last["replication"]["role"], "primary");
    assert_eq!(last["persistence"], "sync");
}

#[test]
fn watch_shows_each_event_once_with_its_state_and_previous_items() {
    let s = Server::start(&[]);
    ok(&s, &["set", "w/a", "1"]);
    let ends = s.endpoints().to_vec();
    let args = |extra: &[&str]| {
        let mut a = ends.clone();
        a.extend(extra.iter().map(|x| x.to_string()));
        a
    };
    let mut state = Streaming::start(&args(&["watch", "w/", "--initial-state"]));
    let first = state.until(Duration::from_secs(20), |l| l.starts_with("RESYNC "));
    assert!(first.ends_with(" initial 1"), "{first}");
    assert!(state
        .until(Duration::from_secs(20), |_| true)
        .ends_with(" ITEM w/a 1"));
    // The server keeps its watch history from its first watch on (the one above): previous
    // items are there for the events after it, here from the overwrite of w/a on.
    ok(&s, &["set", "w/a", "2"]);
    let put = state.until(Duration::from_secs(20), |_| true);
    let (revision, shape) = put.split_once(' ').unwrap();
    assert_eq!(shape, "PUT w/a 2", "{put}");
    let mut prev = Streaming::start(&args(&[
        "-o",
        "json",
        "watch",
        "w/",
        "--prev-kv",
        "--from-revision",
        revision,
    ]));
    ok(&s, &["delete", "w/a"]);
    s.request("set other 0 0 1\r\nx\r\n", "\r\n");
    s.request("flush_all\r\n", "OK\r\n");
    let lines = state.take(2, Duration::from_secs(20));
    let shape: Vec<String> = lines
        .iter()
        .map(|l| l.split_once(' ').unwrap().1.to_string())
        .collect();
    assert_eq!(shape, ["DELETE w/a client", "FLUSH"], "{lines:?}");
    let events: Vec<Value> = prev
        .take(3, Duration::from_secs(20))
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events[0]["type"], "PUT");
    assert_eq!(events[0]["prev"]["value"], "1");
    assert_eq!(events[1]["type"], "DELETE");
    assert_eq!(events[1]["reason"], "client");
    assert_eq!(events[1]["prev"]["value"], "2");
    assert_eq!(events[2]["type"], "FLUSH");
    let revs: Vec<u64> = events
        .iter()
        .map(|e| e["revision"].as_u64().unwrap())
        .collect();
    assert!(revs.windows(2).all(|w| w[0] < w[1]), "{revs:?}");
    // A revision the server has not reached: its refusal, exit 1.
    let (code, _, err) = ctl(&s, &["watch", "w/", "--from-revision", "999999999"]);
    assert_eq!(code, 1);
    assert!(err.contains("in the server's future"), "{err}");
}

#[test]
fn a_compacted_history_stops_the_watch_or_relists_with_relist() {
    // No persistence and a 1 MiB history: 300 values of 8 KB push the first revisions out.
    let s = Server::start(&["--persistence", "off", "--watch-history-mb", "1"]);
    ok(&s, &["set", "c/kept", "k"]);
    let big = "y".repeat(8000);
    for _ in 0..300 {
        ok(&s, &["set", "c/big", &big]);
    }
    let (code, _, err) = ctl(&s, &["watch", "c/", "--from-revision", "1"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("needs revision 1, but the server's history starts at")
            && err.contains("--relist"),
        "{err}"
    );
    let mut args = s.endpoints().to_vec();
    args.extend(["watch", "c/", "--from-revision", "1", "--relist"].map(String::from));
    let mut w = Streaming::start(&args);
    let resync = w.until(Duration::from_secs(20), |l| l.starts_with("RESYNC "));
    assert!(resync.ends_with(" compacted 2"), "{resync}");
    let items = w.take(2, Duration::from_secs(20));
    assert!(
        items.iter().any(|l| l.ends_with(" ITEM c/kept k")),
        "{items:?}"
    );
    ok(&s, &["set", "c/after", "a"]);
    w.until(Duration::from_secs(20), |l| l.ends_with(" PUT c/after a"));
}
