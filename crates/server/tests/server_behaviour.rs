//! Process-level behaviour: refused starts, graceful shutdown, backpressure, metrics.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
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
fn out_of_range_checkpoint_interval_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cairn.toml");
    let data = dir.path().join("data");
    let refused = |text: &str, flags: &[&str], reason: &str| {
        std::fs::write(&path, text).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(["-p", "0", "--config", path.to_str().unwrap(), "--data-dir"])
            .arg(&data)
            .args(flags)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // A server that starts prints its address; one that refuses closes stdout at exit.
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        if first.contains(" listening on ") {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{text:?} {flags:?}: the server started");
        }
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text:?} {flags:?}: {err}");
        assert!(err.contains(reason), "{text:?} {flags:?}: {err}");
    };
    refused(
        "chkpt_interval_min_logsize = 0\n",
        &[],
        "chkpt_interval_min_logsize: must be between 1 and 1048576 (MiB)",
    );
    refused(
        "chkpt_interval_pct_snapshot = 0\n",
        &[],
        "chkpt_interval_pct_snapshot: must be between 1 and 10000",
    );
    refused(
        "",
        &["--chkpt-interval-pct-snapshot", "10001"],
        "chkpt_interval_pct_snapshot: must be between 1 and 10000",
    );
}

/// Without --enable-admin no client can change a setting or trigger a checkpoint; reading a
/// setting stays open, and the refused line changes nothing. `verbosity N` is open to all, as
/// in memcached (memccapable's `ascii verbosity` expects `OK`): it changes only the log level.
#[test]
fn admin_writes_are_refused_without_enable_admin() {
    let server = Server::start(&["--enable-admin", "false"]);
    let refused = "CLIENT_ERROR admin commands are disabled (start cairn with --enable-admin)\r\n";
    golden(
        &mut server.connect(),
        &[
            ("config async_logging on\r\n", refused),
            ("config async_logging\r\n", "async_logging off\r\nEND\r\n"),
            ("config chkpt_interval_pct_snapshot 50\r\n", refused),
            (
                "config chkpt_interval_pct_snapshot\r\n",
                "chkpt_interval_pct_snapshot 100\r\nEND\r\n",
            ),
            ("checkpoint\r\n", refused),
            ("cache_memlimit 100\r\n", refused),
            ("verbosity 1\r\n", "OK\r\n"),
            // noreply stays silent: the next reply is the version's.
            (
                "verbosity 0 noreply\r\nversion\r\n",
                &format!("VERSION {}\r\n", cairn_server::VERSION),
            ),
        ],
    );
    let stats = String::from_utf8(server.connect().exchange(b"stats settings\r\n")).unwrap();
    assert!(stats.contains("STAT verbosity 0\r\n"), "{stats}");
}

#[test]
fn config_lines_report_refuse_and_set_persistence_settings() {
    let server = Server::start(&["--chkpt-interval-min-logsize", "300"]);
    golden(
        &mut server.connect(),
        &[
            // No value: the current one, then END.
            ("config async_logging\r\n", "async_logging off\r\nEND\r\n"),
            (
                "config chkpt_interval_pct_snapshot\r\n",
                "chkpt_interval_pct_snapshot 100\r\nEND\r\n",
            ),
            (
                "config chkpt_interval_min_logsize\r\n",
                "chkpt_interval_min_logsize 300\r\nEND\r\n",
            ),
            // Out of range: the same ranges as the config file, and nothing changes.
            (
                "config chkpt_interval_min_logsize 0\r\n",
                "CLIENT_ERROR chkpt_interval_min_logsize must be between 1 and 1048576 (MiB)\r\n",
            ),
            (
                "config chkpt_interval_min_logsize 1048577\r\n",
                "CLIENT_ERROR chkpt_interval_min_logsize must be between 1 and 1048576 (MiB)\r\n",
            ),
            (
                "config chkpt_interval_pct_snapshot 0\r\n",
                "CLIENT_ERROR chkpt_interval_pct_snapshot must be between 1 and 10000 (% of the snapshot size)\r\n",
            ),
            (
                "config chkpt_interval_pct_snapshot 10001\r\n",
                "CLIENT_ERROR chkpt_interval_pct_snapshot must be between 1 and 10000 (% of the snapshot size)\r\n",
            ),
            (
                "config chkpt_interval_pct_snapshot -5\r\n",
                "CLIENT_ERROR bad value\r\n",
            ),
            (
                "config async_logging yes\r\n",
                "CLIENT_ERROR async_logging must be on or off\r\n",
            ),
            (
                "config chkpt_interval_pct_snapshot\r\n",
                "chkpt_interval_pct_snapshot 100\r\nEND\r\n",
            ),
            (
                "config chkpt_interval_min_logsize\r\n",
                "chkpt_interval_min_logsize 300\r\nEND\r\n",
            ),
            // A valid value shows in the next query.
            ("config async_logging on\r\n", "OK\r\n"),
            ("config async_logging\r\n", "async_logging on\r\nEND\r\n"),
            ("config chkpt_interval_pct_snapshot 10000\r\n", "OK\r\n"),
            (
                "config chkpt_interval_pct_snapshot\r\n",
                "chkpt_interval_pct_snapshot 10000\r\nEND\r\n",
            ),
            ("config chkpt_interval_min_logsize 1048576\r\n", "OK\r\n"),
            (
                "config chkpt_interval_min_logsize\r\n",
                "chkpt_interval_min_logsize 1048576\r\nEND\r\n",
            ),
            (
                "config chkpt_interval_sometimes\r\n",
                "CLIENT_ERROR usage: config async_logging [on|off] | config chkpt_interval_pct_snapshot [N] | config chkpt_interval_min_logsize [N]\r\n",
            ),
        ],
    );
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
    http.write_all(b"GET /metrics HTTP/1.1\r\nhost: cairn\r\nconnection: close\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    http.read_to_string(&mut body).unwrap();
    assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
    assert!(body.contains("# HELP cairn_get_misses "), "{body}");
    // A counter, by Prometheus conventions: the sample ends in _total.
    assert!(body.contains("\ncairn_get_misses_total 1\n"), "{body}");
}
