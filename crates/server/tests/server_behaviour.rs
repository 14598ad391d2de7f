//! Process-level behaviour: refused starts, graceful shutdown, backpressure, metrics.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use common::{golden, Server};

#[test]
fn bad_config_refuses_to_start_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cairn.toml");
    std::fs::write(&path, "port = 0\nmax_conections = 5\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("max_conections"), "{err}");

    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["-p", "0", "-m", "1", "-I", "1m"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("item_size_max"));
}

#[test]
fn config_file_settings_apply() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cairn.toml");
    std::fs::write(&path, "max_connections = 7\nmemory_limit_mb = 16\n").unwrap();
    let server = Server::start(&["--config", path.to_str().unwrap()]);
    let stats = String::from_utf8(server.connect().exchange(b"stats settings\r\n")).unwrap();
    assert!(stats.contains("STAT maxconns 7\r\n"), "{stats}");
    assert!(stats.contains("STAT maxbytes 16777216\r\n"), "{stats}");
}

#[test]
fn sigterm_finishes_and_exits_zero() {
    let mut server = Server::start(&[]);
    let mut c = server.connect();
    golden(&mut c, &[("set k 0 0 1\r\nx\r\n", "STORED\r\n")]);
    let pid = server.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let status = server.child.wait().unwrap();
    assert!(status.success(), "exit status {status:?}");
    // The open connection was closed by the server, not left hanging.
    assert_eq!(c.read_to_close(), b"");
}

#[test]
fn a_client_that_does_not_read_is_not_buffered_without_bound() {
    let server = Server::start(&["-m", "64"]);
    let mut c = server.connect();
    let value = vec![b'v'; 512 * 1024];
    let mut set = b"set big 0 0 524288\r\n".to_vec();
    set.extend_from_slice(&value);
    set.extend_from_slice(b"\r\n");
    golden(
        &mut c,
        &[(std::str::from_utf8(&set).unwrap(), "STORED\r\n")],
    );

    // Ask for the 512 KiB value over and over without reading a byte of the replies.
    let mut greedy = TcpStream::connect(server.addr).unwrap();
    greedy
        .set_write_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let request = b"get big\r\n".repeat(64);
    let mut sent = 0usize;
    let limit = 64 * 1024 * 1024; // requests that would ask for 4 TiB of replies
    while sent < limit {
        match greedy.write(&request) {
            Ok(n) => sent += n,
            Err(_) => break, // the server stopped reading: backpressure
        }
    }
    assert!(
        sent < limit,
        "the server kept reading {sent} bytes of requests"
    );
    // Everyone else is still served.
    golden(&mut server.connect(), &[("get nope\r\n", "END\r\n")]);
    drop(greedy);
}

#[test]
fn prometheus_endpoint_serves_counters() {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = probe.local_addr().unwrap();
    drop(probe);
    let server = Server::start(&["--metrics-addr", &addr.to_string()]);
    golden(&mut server.connect(), &[("get nope\r\n", "END\r\n")]);
    let mut http = TcpStream::connect(addr).unwrap();
    http.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut body = String::new();
    http.read_to_string(&mut body).unwrap();
    assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
    assert!(body.contains("# HELP cairn_get_misses "), "{body}");
    assert!(body.contains("\ncairn_get_misses 1\n"), "{body}");
}
