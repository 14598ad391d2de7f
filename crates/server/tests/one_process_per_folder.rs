//! One process per data folder and per flash file: a second server started on the folder (or
//! the flash file) of a running one refuses to start, naming the holder's PID, so that two
//! processes never write the same log and the first one's acknowledged writes survive.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

use common::Server;

/// Runs a second `cairn` with `args` and returns its log, asserting that it refused to start
/// (it exits; one that prints its ready line instead fails the test, and is killed).
fn refused(args: &[&str]) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["-p", "0", "--grpc-listen", "off"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run cairn");
    // Its stdout ends when it exits; a ready line first means it serves.
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let ready = stdout
        .lines()
        .map_while(Result::ok)
        .any(|l| l.starts_with("cairn listening"));
    if ready {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the second server started and served");
    }
    let mut log = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert!(!child.wait().unwrap().success(), "exit 0: {log}");
    log
}

#[test]
fn a_second_server_on_a_data_folder_refuses_and_the_first_keeps_its_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let first = Server::start_in(tmp.path(), &["--persistence", "sync"]);
    let mut c = first.connect();
    for i in 0..50 {
        let value = format!("v{i}");
        c.send(format!("set k{i} 0 0 {}\r\n{value}\r\n", value.len()).as_bytes());
        assert_eq!(c.read_until(b"\r\n"), b"STORED\r\n");
    }
    let dir = tmp.path().to_str().unwrap();
    let log = refused(&["--persistence", "sync", "--data-dir", dir]);
    let pid = first.child.id().to_string();
    assert!(
        log.contains("in use") && log.contains(&pid),
        "the refusal names the folder's holder (PID {pid}): {log}"
    );
    // The same with the log in a folder of its own (ARCUS's logs_path): each folder is held.
    let elsewhere = tempfile::tempdir().unwrap();
    let log = refused(&[
        "--data-dir",
        elsewhere.path().to_str().unwrap(),
        "--logs-path",
        &format!("{dir}/log"),
    ]);
    assert!(log.contains("in use") && log.contains(&pid), "{log}");
    // The first server still serves and still holds every acknowledged write, after a
    // kill -9 and a restart too.
    assert_eq!(c.exchange(b"mg k49 v\r\n"), b"VA 3\r\nv49\r\n");
    first.kill9();
    let again = Server::start_in(tmp.path(), &["--persistence", "sync"]);
    let mut c = again.connect();
    for i in 0..50 {
        let value = format!("v{i}");
        assert_eq!(
            c.exchange(format!("mg k{i} v\r\n").as_bytes()),
            format!("VA {}\r\n{value}\r\n", value.len()).as_bytes(),
            "k{i} lost"
        );
    }
}

#[test]
fn a_second_server_on_a_flash_file_refuses() {
    let tmp = tempfile::tempdir().unwrap();
    let flash = tmp.path().join("flash.dat");
    let flash = flash.to_str().unwrap();
    let args = [
        "--persistence",
        "off",
        "--flash-path",
        flash,
        "--flash-size",
        "64m",
    ];
    let first = Server::start(&args);
    let other = tempfile::tempdir().unwrap();
    let mut second = vec!["--data-dir", other.path().to_str().unwrap()];
    second.extend(args);
    let log = refused(&second);
    let pid = first.child.id().to_string();
    assert!(
        log.contains("flash.dat") && log.contains("in use") && log.contains(&pid),
        "the refusal names the flash file and its holder (PID {pid}): {log}"
    );
    let mut c = first.connect();
    assert_eq!(c.exchange(b"set a 0 0 1\r\nx\r\n"), b"STORED\r\n");
}
