//! The io_uring connection engine (`--io-engine uring`) on what its own code does: buffers
//! the kernel owns while a receive or send is in flight (large values, a multi-get flushed in
//! the middle, a pipeline), connections closed with a receive pending, durability waits, and
//! the fallback to tokio's engine when a ring cannot be made. uring is the default on Linux,
//! so every other test runs on it; scripts/test-all.sh runs the wire, connection-thread and
//! persistence tests and pymemcache again on tokio (`CAIRN_TEST_IO_ENGINE=tokio`). Where
//! io_uring is not allowed (some containers), the tests that need it say so and pass, except
//! under CI (`CI` in the environment, set by .ci/run), where that is a failure: a CI machine
//! that cannot run them must not report them as passed.

mod common;

use std::io::{Read, Write};
use std::process::Command;

use common::{golden, Server};

/// False (with a note) where this process may not use io_uring; under CI a failure instead,
/// as for the tests that need ZooKeeper (`common/zookeeper.rs`, `installed`).
fn uring() -> bool {
    match cairn_server::uring::available() {
        Ok(()) => true,
        Err(e) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "io_uring is not available under CI ({e}): the io_uring engine went untested"
            );
            eprintln!("io_uring is not available here ({e}): test skipped");
            false
        }
    }
}

#[test]
fn large_values_a_flushed_multi_get_and_a_pipeline() {
    large_values_multi_get_and_pipeline(&[]);
}

/// The same with a single-shot receive per read (as on a kernel without provided buffer
/// rings) instead of the multishot receive.
#[test]
fn single_shot_receives_serve_the_same() {
    large_values_multi_get_and_pipeline(&[(cairn_server::test_hooks::SINGLE_SHOT_RECV, "1")]);
}

fn large_values_multi_get_and_pipeline(env: &[(&str, &str)]) {
    if !uring() {
        return;
    }
    let server = Server::start_with_env(
        env,
        &[
            "--io-engine",
            "uring",
            "--persistence",
            "off",
            "-t",
            "2",
            "--output-buffer-max",
            "65536",
        ],
    );
    let mut c = server.connect();
    let big = "v".repeat(900_000);
    golden(
        &mut c,
        &[(
            &format!("set big 0 0 {}\r\n{big}\r\n", big.len()),
            "STORED\r\n",
        )],
    );
    // 40 copies of a 900 KB value: the reply is flushed between keys many times over.
    let keys = vec!["big"; 40].join(" ");
    c.send(format!("get {keys}\r\n").as_bytes());
    let got = c.read_until(b"END\r\n");
    let one = format!("VALUE big 0 {}\r\n{big}\r\n", big.len());
    assert_eq!(got.len(), one.len() * 40 + 5);
    assert!(got.starts_with(one.as_bytes()));
    // 5000 pipelined requests in one write, answered in order.
    let mut pipeline = String::new();
    let mut expect = String::new();
    for i in 0..2500 {
        pipeline.push_str(&format!(
            "set k{i} 0 0 {}\r\n{i}\r\nget k{i}\r\n",
            i.to_string().len()
        ));
        expect.push_str(&format!(
            "STORED\r\nVALUE k{i} 0 {}\r\n{i}\r\nEND\r\n",
            i.to_string().len()
        ));
    }
    c.send(pipeline.as_bytes());
    let got = c.read_until(b"k2499 0 4\r\n2499\r\nEND\r\n");
    assert_eq!(String::from_utf8(got).unwrap(), expect);
}

/// Clients that go away with a receive pending, in the middle of a request, or without
/// reading their replies: the server goes on serving the others, and `stats` counts them out.
#[test]
fn connections_that_vanish_leave_the_engine_serving() {
    if !uring() {
        return;
    }
    let server = Server::start(&["--io-engine", "uring", "--persistence", "off", "-t", "2"]);
    for i in 0..50 {
        let mut c = std::net::TcpStream::connect(server.addr).unwrap();
        match i % 3 {
            0 => {}
            1 => c.write_all(b"set half 0 0 10\r\nabc").unwrap(),
            _ => {
                // A reply the client never reads.
                let keys = vec!["nothing"; 20_000].join(" ");
                c.write_all(format!("get {keys}\r\n").as_bytes()).unwrap();
            }
        }
        drop(c);
    }
    let mut c = server.connect();
    golden(&mut c, &[("set k 0 0 1\r\nv\r\n", "STORED\r\n")]);
    // Every vanished connection is closed (curr_connections counts this one only).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        c.send(b"stats\r\n");
        let stats = String::from_utf8(c.read_until(b"END\r\n")).unwrap();
        if stats.contains("STAT curr_connections 1\r\n") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{stats}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Sync persistence: a STORED sent over the ring was durable (survives kill -9), and the `mn`
/// fence waits for the log as on the tokio engine.
#[test]
fn acknowledged_writes_survive_a_kill() {
    if !uring() {
        return;
    }
    let mut server = Server::start(&["--io-engine", "uring", "--persistence", "sync"]);
    let dir = server.dir.clone();
    let mut c = server.connect();
    golden(
        &mut c,
        &[
            ("set a 0 0 1\r\n1\r\n", "STORED\r\n"),
            // golden fences each row with `mn`: the noreply write is durable before MN.
            ("set b 0 0 1 noreply\r\n2\r\n", ""),
        ],
    );
    // kill -9, keeping `server` (and so its temporary folder) for the restart.
    let _ = server.child.kill();
    let _ = server.child.wait();
    let again = Server::start_in(&dir, &["--io-engine", "uring", "--persistence", "sync"]);
    let mut c = again.connect();
    golden(
        &mut c,
        &[(
            "get a b\r\n",
            "VALUE a 0 1\r\n1\r\nVALUE b 0 1\r\n2\r\nEND\r\n",
        )],
    );
}

/// Async persistence on the ring: each connection thread hands its requests' log records to
/// the kernel itself, once per turn, and answers the requests that write covered in that same
/// turn (a second pass over the tasks it woke, which may append more). A STORED came only
/// once its record was written (it survives kill -9), and no reply waits for the log's
/// syncer: its flush interval is a minute here, so a thread that went to sleep on records it
/// had appended would leave its replies waiting past the client's read timeout.
#[test]
fn async_writes_are_acknowledged_once_written_without_waiting_for_the_syncer() {
    if !uring() {
        return;
    }
    let args = [
        "--io-engine",
        "uring",
        "--persistence",
        "async",
        "--async-flush-ms",
        "60000",
        "-t",
        "2",
    ];
    let mut server = Server::start(&args);
    let dir = server.dir.clone();
    let clients: Vec<_> = (0..4)
        .map(|t| {
            let mut c = server.connect();
            std::thread::spawn(move || {
                for round in 0..3 {
                    // A pipeline of writes and reads in one send: the thread appends, writes
                    // and answers it over several turns.
                    let (mut pipeline, mut expect) = (String::new(), String::new());
                    for i in 0..400 {
                        let (k, v) = (format!("c{t}-{round}-{i}"), format!("v{i}"));
                        pipeline
                            .push_str(&format!("set {k} 0 0 {}\r\n{v}\r\nget {k}\r\n", v.len()));
                        expect.push_str(&format!(
                            "STORED\r\nVALUE {k} 0 {}\r\n{v}\r\nEND\r\n",
                            v.len()
                        ));
                    }
                    c.send(pipeline.as_bytes());
                    let got =
                        c.read_until(format!("c{t}-{round}-399 0 4\r\nv399\r\nEND\r\n").as_bytes());
                    assert_eq!(String::from_utf8(got).unwrap(), expect);
                }
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    // kill -9, keeping `server` (and so its temporary folder) for the restart.
    let _ = server.child.kill();
    let _ = server.child.wait();
    let again = Server::start_in(&dir, &args);
    let mut c = again.connect();
    for t in 0..4 {
        for round in 0..3 {
            let keys: Vec<String> = (0..400).map(|i| format!("c{t}-{round}-{i}")).collect();
            c.send(format!("get {}\r\n", keys.join(" ")).as_bytes());
            let got = String::from_utf8(c.read_until(b"END\r\n")).unwrap();
            assert_eq!(
                got.matches("VALUE ").count(),
                400,
                "{t}-{round} lost writes"
            );
        }
    }
}

/// The engine in force, as `stats settings` reports it.
fn engine_in_force(server: &Server) -> String {
    let mut c = server.connect();
    c.send(b"stats settings\r\n");
    let text = String::from_utf8(c.read_until(b"END\r\n")).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("STAT io_engine "))
        .unwrap_or_else(|| panic!("{text}"));
    line["STAT io_engine ".len()..].to_string()
}

/// A ring that cannot be made (here by the test switch, elsewhere by a kernel without
/// io_uring or a sandbox that forbids it) starts the server on tokio's engine, which serves.
#[test]
fn a_refused_ring_falls_back_to_the_tokio_engine() {
    let refuse = [(cairn_server::test_hooks::REFUSE_IO_URING, "1")];
    let server = Server::start_with_env(&refuse, &["--io-engine", "uring", "--persistence", "off"]);
    assert_eq!(engine_in_force(&server), "tokio");
    let mut c = server.connect();
    golden(
        &mut c,
        &[
            ("set k 0 0 1\r\nv\r\n", "STORED\r\n"),
            ("get k\r\n", "VALUE k 0 1\r\nv\r\nEND\r\n"),
        ],
    );
    if uring() {
        let server = Server::start(&["--io-engine", "uring", "--persistence", "off"]);
        assert_eq!(engine_in_force(&server), "uring");
    }
    let server = Server::start(&["--io-engine", "tokio", "--persistence", "off"]);
    assert_eq!(engine_in_force(&server), "tokio");
}

/// Without `--io-engine`, Linux serves on io_uring where it is allowed.
#[cfg(target_os = "linux")]
#[test]
fn the_default_engine_is_uring_where_io_uring_is_allowed() {
    if !uring() || std::env::var_os("CAIRN_TEST_IO_ENGINE").is_some() {
        return;
    }
    let server = Server::start(&["--persistence", "off"]);
    assert_eq!(engine_in_force(&server), "uring");
}

#[test]
fn an_unknown_engine_refuses_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["-p", "0", "--grpc-listen", "off", "--data-dir"])
        .arg(dir.path())
        .args(["--io-engine", "epoll"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("io_engine") && err.contains("must be tokio or uring"),
        "{err}"
    );
}

/// `stats conns` lists the engine's connections with their addresses.
#[test]
fn stats_conns_lists_uring_connections() {
    if !uring() {
        return;
    }
    let server = Server::start(&["--io-engine", "uring", "--persistence", "off"]);
    let mut c = server.connect();
    let mine = c.stream.local_addr().unwrap();
    c.send(b"stats conns\r\n");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.ends_with(b"END\r\n") {
        let n = c.stream.read(&mut buf).unwrap();
        assert!(n > 0);
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8(got).unwrap();
    assert!(text.contains(&format!(":addr tcp:{mine}\r\n")), "{text}");
}

/// The sockets a ring's registered file table holds now, from the kernel's own listing
/// (`/proc/PID/fdinfo` of the server's rings: one `N: socket:[inode]` line per slot in use).
fn registered_sockets(pid: u32) -> usize {
    let mut n = 0;
    for entry in std::fs::read_dir(format!("/proc/{pid}/fdinfo")).unwrap() {
        let Ok(info) = std::fs::read_to_string(entry.unwrap().path()) else {
            continue;
        };
        let mut in_files = false;
        for line in info.lines() {
            if line.starts_with("UserFiles:") {
                in_files = true;
            } else if in_files && line.trim_start().contains(": socket:[") {
                n += 1;
            } else if in_files {
                in_files = false;
            }
        }
    }
    n
}

/// Waits (polling, with a deadline) until the rings hold `want` registered sockets.
fn until_registered(server: &Server, want: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let n = registered_sockets(server.child.id());
        if n == want {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{n} sockets registered, {want} expected"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Sockets go through the ring's registered file table: with 4 slots, 6 connections at once
/// fill it (the other 2 are served by descriptor); slots of ended connections are emptied,
/// and reused by the connections after them; a connection the server ends (`quit`) is closed
/// (the client reads to the end) although the table held a reference to its socket.
#[test]
fn registered_file_slots_are_emptied_and_reused() {
    if !uring() {
        return;
    }
    let server = Server::start_with_env(
        &[(cairn_server::test_hooks::FIXED_FILES, "4")],
        &["--io-engine", "uring", "--persistence", "off", "-t", "1"],
    );
    let mut open: Vec<_> = (0..6).map(|_| server.connect()).collect();
    for (i, c) in open.iter_mut().enumerate() {
        let set = format!("set k{i} 0 0 1\r\n{i}\r\n");
        golden(c, &[(set.as_str(), "STORED\r\n")]);
    }
    until_registered(&server, 4);
    drop(open);
    until_registered(&server, 0);
    for i in 0..20 {
        let mut c = server.connect();
        c.send(format!("get k{}\r\nquit\r\n", i % 6).as_bytes());
        let mut got = Vec::new();
        c.stream
            .read_to_end(&mut got)
            .expect("the server closes the connection after quit");
        assert_eq!(
            String::from_utf8(got).unwrap(),
            format!("VALUE k{0} 0 1\r\n{0}\r\nEND\r\n", i % 6)
        );
    }
    // Two at once again: both registered (their slots were freed by the ones before).
    let mut two: Vec<_> = (0..2).map(|_| server.connect()).collect();
    for c in two.iter_mut() {
        golden(c, &[("get k0\r\n", "VALUE k0 0 1\r\n0\r\nEND\r\n")]);
    }
    until_registered(&server, 2);
}
