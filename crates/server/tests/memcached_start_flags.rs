//! memcached's start flags that operators' scripts pass, against the real binary: the ones
//! that change nothing here start the server, serving, with one log line each; `-d` and
//! `-R 0` refuse to start with the reason (exit code 2); `-u USER` started as root runs
//! the server as USER.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

use common::Server;

/// The server's whole log, once it is killed.
fn log_of(mut s: Server) -> String {
    let mut stderr = s.child.stderr.take().unwrap();
    let _ = s.child.kill();
    let _ = s.child.wait();
    let mut log = String::new();
    stderr.read_to_string(&mut log).unwrap();
    log
}

#[test]
fn memcacheds_tuning_flags_start_a_serving_server_and_are_logged() {
    let s = Server::start_logging(&[
        "-C",
        "-R",
        "5",
        "-B",
        "auto",
        "-e",
        "/dev/shm/cairn-memory-file",
        "-o",
        "slab_reassign,slab_automove=1,lru_crawler,lru_maintainer,hash_algorithm=murmur3,modern",
        "-o",
        "no_lru_crawler,relaxed_privileges",
    ]);
    let mut c = s.connect();
    assert_eq!(c.exchange(b"set k 0 0 1\r\nv\r\n"), b"STORED\r\n");
    // -C leaves CAS on: gets shows a unique, and cas with it stores.
    let got = String::from_utf8(c.exchange(b"gets k\r\n")).unwrap();
    let unique: u64 = got
        .lines()
        .next()
        .and_then(|l| l.split(' ').nth(4))
        .and_then(|u| u.parse().ok())
        .unwrap_or_else(|| panic!("gets: {got}"));
    assert_ne!(unique, 0, "{got}");
    let cas = format!("cas k 0 0 1 {unique}\r\nw\r\n");
    assert_eq!(c.exchange(cas.as_bytes()), b"STORED\r\n");
    assert!(!std::path::Path::new("/dev/shm/cairn-memory-file").exists());
    let log = log_of(s);
    for note in [
        "-C: accepted",
        "-R 5: ignored",
        "-B auto",
        "-e /dev/shm/cairn-memory-file: ignored",
        "-o slab_reassign: ignored",
        "-o slab_automove=1: ignored",
        "-o lru_crawler: ignored",
        "-o lru_maintainer: ignored",
        "-o hash_algorithm=murmur3: ignored",
        "-o modern: ignored",
        "-o no_lru_crawler: ignored",
        "-o relaxed_privileges: ignored",
    ] {
        assert_eq!(
            log.matches(note).count(),
            1,
            "one log line for {note:?} in:\n{log}"
        );
    }
}

/// Runs `cairn -p 0 --grpc-listen off ARGS`, which must refuse to start: its exit code and
/// its stderr. One that prints its ready line instead fails the test, and is killed.
fn refused(args: &[&str]) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["-p", "0", "--grpc-listen", "off", "--data-dir"])
        .arg(dir.path())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run cairn");
    // Its stdout ends when it exits; a ready line first means it serves.
    let ready = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .any(|l| l.starts_with("cairn listening"));
    if ready {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{args:?}: the server started");
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn daemonize_and_bad_values_refuse_to_start_with_the_reason() {
    for (args, why) in [
        (&["-d"][..], "does not daemonize"),
        (&["-B", "utf8"][..], "auto, ascii or binary"),
        (&["-R", "0"][..], "max_reqs_per_event"),
        (&["-u", "no-such-user-here"][..], "no such user"),
    ] {
        if args[0] == "-u" && !running_as_root() {
            continue; // -u is looked at only when root, as memcached does
        }
        let (code, err) = refused(args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(why), "{args:?}: {err}");
    }
}

fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
}

/// The uid of `user` in /etc/passwd.
fn uid_of(user: &str) -> Option<u32> {
    std::fs::read_to_string("/etc/passwd")
        .ok()?
        .lines()
        .find(|l| l.split(':').next() == Some(user))
        .and_then(|l| l.split(':').nth(2)?.parse().ok())
}

/// Started as root with `-u nobody`, the server runs as nobody (all four uids) and serves
/// from a folder nobody may write; started as anyone else, `-u` is ignored.
#[test]
fn dash_u_as_root_runs_the_server_as_that_user() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir(&data).unwrap();
    for (p, mode) in [(tmp.path(), 0o755), (data.as_path(), 0o777)] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let s = Server::start_in(&data, &["-u", "nobody"]);
    let mut c = s.connect();
    assert_eq!(c.exchange(b"set k 0 0 1\r\nv\r\n"), b"STORED\r\n");
    let status = std::fs::read_to_string(format!("/proc/{}/status", s.child.id())).unwrap();
    let uids: Vec<&str> = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .unwrap()
        .split_whitespace()
        .collect();
    let want = if running_as_root() {
        uid_of("nobody").expect("a nobody user").to_string()
    } else {
        // SAFETY: getuid has no preconditions.
        unsafe { libc::getuid() }.to_string()
    };
    assert_eq!(uids, [want.as_str(); 4], "{status}");
    s.kill9();
}
