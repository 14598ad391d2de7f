//! A failing disk under the real server: after a failed fdatasync or a full disk, writes get
//! `SERVER_ERROR`, nothing unacknowledged is acknowledged, and reads go on.
//!
//! The server runs in this process on a real TCP socket; only its file system is the
//! fault-injecting one of cairn-wal (an in-memory disk that fails on request).

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use cairn_server::config::Config;
use cairn_server::Ctx;
use cairn_testkit::{FaultyFs, Op};
use common::{Conn, InProcess};

/// A sync-mode server on `fs`, served in this process until the value is dropped.
fn serve(fs: &FaultyFs) -> InProcess {
    let config = Config {
        persistence: "sync".into(),
        data_dir: PathBuf::from("/faulty"),
        // Small segments, so that a full disk shows at the first segment switch.
        log_segment_mb: 1,
        item_size_max: 128 << 10,
        ..Config::default()
    };
    InProcess::serve(Ctx::open_on(config, Arc::new(fs.clone())).expect("open"))
}

/// The first line of the reply to `request`.
fn ask(c: &mut Conn, request: &str) -> String {
    c.send(request.as_bytes());
    String::from_utf8(c.read_until(b"\r\n")).unwrap()
}

/// Breaks the disk with `fail`, then writes 64 KiB values until one is refused (a full disk
/// shows only when the log needs its next segment file). Every acknowledged write stays
/// readable, and every later write is refused.
fn check_refuses_writes_and_serves_reads(fail: impl Fn(&FaultyFs), what: &str) {
    let fs = FaultyFs::new();
    let s = serve(&fs);
    let mut c = Conn::new(s.addr);
    fail(&fs);
    let value = "v".repeat(64 << 10);
    let mut stored = 0;
    let refused = loop {
        assert!(stored < 64, "{what}: 4 MiB acknowledged on a broken disk");
        let reply = ask(
            &mut c,
            &format!("set k{stored} 0 0 {}\r\n{value}\r\n", value.len()),
        );
        if reply != "STORED\r\n" {
            break reply;
        }
        stored += 1;
    };
    assert!(
        refused.starts_with("SERVER_ERROR"),
        "{what}: a write not on disk was answered {refused:?}"
    );
    // The connection that saw the failure is closed; a new one is served.
    let mut c = Conn::new(s.addr);
    for i in 0..stored {
        c.send(format!("get k{i}\r\n").as_bytes());
        let reply = c.read_until(b"END\r\n");
        assert_eq!(
            reply.len(),
            format!("VALUE k{i} 0 65536\r\n").len() + value.len() + 7,
            "{what}: k{i}"
        );
    }
    let reply = ask(&mut c, "set other 0 0 1\r\no\r\n");
    assert!(
        reply.starts_with("SERVER_ERROR writes refused"),
        "{what}: {reply:?}"
    );
    c.send(b"stats persistence\r\n");
    let stats = String::from_utf8(c.read_until(b"END\r\n")).unwrap();
    assert!(stats.contains("STAT writes_refused yes"), "{what}: {stats}");
}

#[test]
fn a_failed_fdatasync_refuses_writes_and_serves_reads() {
    check_refuses_writes_and_serves_reads(|fs| fs.fail_after(Op::Sync, 0, 5), "EIO");
}

#[test]
fn a_full_disk_refuses_writes_and_serves_reads() {
    check_refuses_writes_and_serves_reads(|fs| fs.set_space_left(Some(0)), "ENOSPC");
}
