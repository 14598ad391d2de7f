//! One write path: a memcached write and a gRPC write take the same refusals and the same
//! acknowledgements, because both go through cairn-engine's `Engine` (memcached:
//! `cmd::answer` ─ admit, resolve, apply, acknowledged once a batch; gRPC: `Engine::write`).
//!
//! Each test serves one in-process server on both protocols (the memcached port and the gRPC
//! API over the same `Ctx`), on the fault-injecting file system where it needs a log, and
//! checks each rule on both: the reason a client reads is the same, only its wording differs
//! (`SERVER_ERROR <head><why>` against a gRPC status with `<head><why>`).
//!
//! ```text
//!   rule                          memcached                           gRPC
//!   a replica refuses             SERVER_ERROR writes refused: <why>  UNAVAILABLE writes refused: <why>
//!   a failed log refuses          SERVER_ERROR writes refused: <why>  UNAVAILABLE writes refused: <why>
//!   ... the write that found it   SERVER_ERROR persistence failure    UNAVAILABLE persistence failure
//!   -M full                       SERVER_ERROR out of memory ...      RESOURCE_EXHAUSTED out of memory ...
//!   sync replication, no replica  SERVER_ERROR replication: <why>     UNAVAILABLE ... replication: <why>
//!   sync mode                     answered once fdatasync'd           answered once fdatasync'd
//! ```

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_api::pb::{self, kv_client::KvClient};
use cairn_server::config::Config;
use cairn_server::Ctx;
use cairn_testkit::{FaultyFs, Op};
use common::{Conn, InProcess};
use tonic::transport::Channel;

/// One server on both protocols.
struct Both {
    memcached: InProcess,
    /// Serves the gRPC API and runs its client.
    rt: tokio::runtime::Runtime,
    kv: KvClient<Channel>,
}

impl Both {
    fn serve(ctx: Arc<Ctx>) -> Both {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let prepared = rt
            .block_on(cairn_server::grpc::prepare(&ctx, addr))
            .expect("gRPC");
        rt.spawn(prepared.serve(listener, std::future::pending()));
        let kv = rt
            .block_on(KvClient::connect(format!("http://{addr}")))
            .unwrap();
        Both {
            memcached: InProcess::serve(ctx),
            rt,
            kv,
        }
    }

    /// A server on `fs` with the log in sync mode, changed by `f`.
    fn on(fs: &FaultyFs, f: impl FnOnce(&mut Config)) -> Both {
        let mut config = Config {
            persistence: "sync".into(),
            data_dir: PathBuf::from("/faulty"),
            log_segment_mb: 1,
            memory_limit_mb: 16,
            ..Config::default()
        };
        f(&mut config);
        Both::serve(Ctx::open_on(config, Arc::new(fs.clone())).expect("open"))
    }

    /// The first reply line to a memcached `set` of `key` (the connection is dropped after).
    fn memcached_set(&self, key: &str, value: &str) -> String {
        let mut c = self.memcached.connect();
        set_reply(&mut c, key, value)
    }

    /// A gRPC Set of `key`: Ok, or the status's code and message.
    fn grpc_set(&self, key: &str, value: &str) -> Result<(), (tonic::Code, String)> {
        let mut kv = self.kv.clone();
        let request = set_request(key, value);
        self.rt
            .block_on(kv.set(request))
            .map(drop)
            .map_err(|s| (s.code(), s.message().to_string()))
    }
}

fn set_request(key: &str, value: &str) -> pb::SetRequest {
    pb::SetRequest {
        key: key.to_string().into(),
        value: value.to_string().into(),
        ..Default::default()
    }
}

fn set_reply(c: &mut Conn, key: &str, value: &str) -> String {
    c.send(format!("set {key} 0 0 {}\r\n{value}\r\n", value.len()).as_bytes());
    String::from_utf8(c.read_until(b"\r\n")).unwrap()
}

/// The reason after `head` in a memcached reply line `SERVER_ERROR <head><why>\r\n`.
fn memcached_why<'a>(line: &'a str, head: &str) -> &'a str {
    let prefix = format!("SERVER_ERROR {head}");
    line.strip_prefix(&prefix)
        .and_then(|l| l.strip_suffix("\r\n"))
        .unwrap_or_else(|| panic!("expected {prefix:?}..., got {line:?}"))
}

/// The reason after `head` in a gRPC status of `code`.
fn grpc_why<'a>(
    r: &'a Result<(), (tonic::Code, String)>,
    code: tonic::Code,
    head: &str,
) -> &'a str {
    match r {
        Err((c, message)) if *c == code => message
            .strip_prefix(head)
            .unwrap_or_else(|| panic!("expected {head:?}..., got {message:?}")),
        other => panic!("expected {code:?}, got {other:?}"),
    }
}

/// Polls `f` until it holds (a condition, not a guessed wait; a minute without it fails).
fn wait_until(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < deadline, "{what}: never");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_replica_refuses_both() {
    let fs = FaultyFs::new();
    let both = Both::on(&fs, |c| c.replica_of = Some("127.0.0.1:1".into()));
    let line = both.memcached_set("k", "v");
    let memcached = memcached_why(&line, "writes refused: ");
    let grpc = both.grpc_set("k", "v");
    let grpc = grpc_why(&grpc, tonic::Code::Unavailable, "writes refused: ");
    assert_eq!(memcached, grpc);
    assert!(memcached.contains("a replica of"), "{memcached}");
}

#[test]
fn a_failed_log_refuses_both() {
    // memcached's write finds the failure first: not acknowledged; then both are refused.
    let fs = FaultyFs::new();
    let both = Both::on(&fs, |_| {});
    assert_eq!(both.memcached_set("before", "v"), "STORED\r\n");
    assert_eq!(both.grpc_set("before", "v"), Ok(()));
    fs.fail_after(Op::Sync, 0, 5);
    assert_eq!(
        both.memcached_set("found", "v"),
        "SERVER_ERROR persistence failure: the write could not be made durable\r\n"
    );
    let line = both.memcached_set("after", "v");
    let memcached = memcached_why(&line, "writes refused: ");
    let grpc = both.grpc_set("after", "v");
    assert_eq!(
        memcached,
        grpc_why(&grpc, tonic::Code::Unavailable, "writes refused: ")
    );

    // gRPC's write finds it first: not acknowledged either; then both are refused.
    let fs = FaultyFs::new();
    let both = Both::on(&fs, |_| {});
    fs.fail_after(Op::Sync, 0, 5);
    let found = both.grpc_set("found", "v");
    grpc_why(
        &found,
        tonic::Code::Unavailable,
        "persistence failure: the write could not be made safe: ",
    );
    let grpc = both.grpc_set("after", "v");
    let line = both.memcached_set("after", "v");
    assert_eq!(
        memcached_why(&line, "writes refused: "),
        grpc_why(&grpc, tonic::Code::Unavailable, "writes refused: ")
    );
}

#[test]
fn a_full_store_without_eviction_refuses_both() {
    // -M with the smallest store: fill every shard from memcached until writes fail.
    let both = Both::serve(
        Ctx::open(Config {
            persistence: "off".into(),
            memory_limit_mb: 8,
            disable_evictions: true,
            ..Config::default()
        })
        .expect("open"),
    );
    let value = "v".repeat(256 << 10);
    let mut c = both.memcached.connect();
    let mut refused_in_a_row = 0;
    for i in 0.. {
        assert!(i < 1000, "8 MiB never filled");
        match set_reply(&mut c, &format!("fill{i}"), &value).as_str() {
            "STORED\r\n" => refused_in_a_row = 0,
            "SERVER_ERROR out of memory storing object\r\n" => refused_in_a_row += 1,
            other => panic!("{other:?}"),
        }
        if refused_in_a_row == 50 {
            break;
        }
    }
    assert_eq!(
        both.memcached_set("one-more", &value),
        "SERVER_ERROR out of memory storing object\r\n"
    );
    assert_eq!(
        both.grpc_set("one-more", &value),
        Err((
            tonic::Code::ResourceExhausted,
            "out of memory storing object".into()
        ))
    );
}

#[test]
fn a_sync_replication_timeout_withholds_both() {
    let fs = FaultyFs::new();
    let both = Both::on(&fs, |c| {
        c.replication = "sync".into();
        c.replication_timeout_ms = 100;
    });
    // No replica holds anything: neither write is acknowledged, for the same reason.
    let mut c = both.memcached.connect();
    c.send(b"set m 0 0 1\r\nv\r\n");
    let line = String::from_utf8(c.read_to_close()).unwrap();
    let memcached = memcached_why(&line, "replication: ");
    let grpc = both.grpc_set("g", "v");
    let grpc = grpc_why(
        &grpc,
        tonic::Code::Unavailable,
        "persistence failure: the write could not be made safe: replication: ",
    );
    let shape = |why: &str| {
        why.split_whitespace()
            .filter(|w| w.parse::<u64>().is_err())
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(shape(memcached), shape(grpc), "{memcached} / {grpc}");
    assert!(
        memcached.starts_with("no replica holds revision"),
        "{memcached}"
    );
}

#[test]
fn a_sync_write_of_either_is_answered_once_fdatasynced() {
    let fs = FaultyFs::new();
    let both = Both::on(&fs, |_| {});
    fs.hold_syncs(true);
    // memcached: the reply waits for the held fdatasync.
    let mut c = both.memcached.connect();
    c.send(b"set m 0 0 1\r\nv\r\n");
    wait_until("memcached's fdatasync held", || fs.syncs_held() > 0);
    c.stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut byte = [0u8; 1];
    let early = std::io::Read::read(&mut c.stream, &mut byte);
    assert!(early.is_err(), "answered before its fdatasync returned");
    c.stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    fs.hold_syncs(false);
    assert_eq!(c.read_until(b"\r\n"), b"STORED\r\n");
    // gRPC: the same.
    fs.hold_syncs(true);
    let mut kv = both.kv.clone();
    let mut held = both
        .rt
        .spawn(async move { kv.set(set_request("g", "v")).await.map(drop) });
    wait_until("gRPC's fdatasync held", || fs.syncs_held() > 0);
    let early = both
        .rt
        .block_on(async { tokio::time::timeout(Duration::from_millis(200), &mut held).await });
    assert!(early.is_err(), "answered before its fdatasync returned");
    fs.hold_syncs(false);
    both.rt.block_on(held).unwrap().unwrap();
}
