//! The gRPC API against the real binary, from Rust (tonic client, the generated stubs):
//! - Mirror: writes of every kind (puts, deletes, expiry, evictions, touch, flush_all) over
//!   memcached and gRPC race a watch's initial state; initial state + events equal the store;
//! - the watch properties (ordered, unique, reliable, resumable, bookmarkable, mirror) over a
//!   randomized run with watchers that come and go and one kill -9 (persistence sync);
//! - resume after kill -9 gets exactly what was missed;
//! - a watcher that never reads holds at most its queue, is canceled with compact_revision
//!   once the history passes it, and delays neither other watchers nor memcached clients;
//! - in sync mode a gRPC write is acknowledged only once fdatasync'd (the fault-injecting file
//!   system holds the sync, then the power fails).

mod common;
#[path = "common/watch.rs"]
mod watch;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_api::pb::{self, kv_client::KvClient, watch_client::WatchClient};
use common::Server;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use watch::{channel, Watch};

type Mirror = BTreeMap<Vec<u8>, Vec<u8>>;

async fn scan_all(kv: &mut KvClient<Channel>, prefix: &[u8]) -> (Mirror, u64) {
    let mut out = Mirror::new();
    let mut token = bytes::Bytes::new();
    let mut revision = 0;
    loop {
        let page = kv
            .scan(pb::ScanRequest {
                prefix: bytes::Bytes::copy_from_slice(prefix),
                limit: 1000,
                page_token: token,
                keys_only: false,
            })
            .await
            .unwrap()
            .into_inner();
        revision = revision.max(page.header.unwrap().revision);
        for kv in page.kvs {
            out.insert(kv.key.to_vec(), kv.value.to_vec());
        }
        token = page.next_page_token;
        if token.is_empty() {
            return (out, revision);
        }
    }
}

/// What a mirror keeps of an item: value, expiry and mod_revision.
type Item = (Vec<u8>, u32, u64);
type FullMirror = BTreeMap<Vec<u8>, Item>;

fn item_of(kv: &pb::KeyValue) -> Item {
    (kv.value.to_vec(), kv.expires_at, kv.mod_revision)
}

/// Items a mirror still shows at `now`: it drops the expired ones itself (the expiry time is
/// in the item).
fn alive(m: &FullMirror, now: u32) -> FullMirror {
    m.iter()
        .filter(|(_, (_, exp, _))| *exp == 0 || *exp > now)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The memcached writer racing the initial state: sets, big sets (evictions), deletes,
/// sets that are expired at once and gets that then remove them (expiry events), touches
/// and one flush_all, each acknowledged.
fn memcached_racer(addr: std::net::SocketAddr, seed: u64, ops: usize) {
    let mut c = common::Conn::new(addr);
    let mut r = cairn_testkit::Rng::new(seed);
    let big = "B".repeat(100_000);
    for i in 0..ops {
        if i == ops / 2 {
            c.send(b"flush_all\r\n");
            c.read_until(b"OK\r\n");
            continue;
        }
        let key = format!("m/{}", r.below(3500));
        match r.below(20) {
            0..=2 => {
                c.send(format!("delete {key}\r\n").as_bytes());
                c.read_until(b"\r\n");
            }
            3 => {
                c.send(format!("set {key} 0 -1 4\r\nx{:03}\r\n", i % 1000).as_bytes());
                c.read_until(b"STORED\r\n");
            }
            4 | 5 => {
                c.send(format!("get {key}\r\n").as_bytes());
                c.read_until(b"END\r\n");
            }
            6 => {
                let ttl = if r.below(2) == 0 { "-1" } else { "3600" };
                c.send(format!("touch {key} {ttl}\r\n").as_bytes());
                c.read_until(b"\r\n");
            }
            7 | 8 => {
                let key = format!("m/big{}", r.below(400));
                c.send(format!("set {key} 0 0 {}\r\n{big}\r\n", big.len()).as_bytes());
                c.read_until(b"STORED\r\n");
            }
            _ => {
                c.send(format!("set {key} 0 3600 4\r\nw{:03}\r\n", i % 1000).as_bytes());
                c.read_until(b"STORED\r\n");
            }
        }
    }
}

/// The gRPC writer racing the initial state: sets (some expired at once, some with a TTL),
/// deletes and gets.
async fn grpc_racer(mut kv: KvClient<Channel>, seed: u64, ops: usize) {
    let mut r = cairn_testkit::Rng::new(seed);
    for i in 0..ops {
        let key: bytes::Bytes = format!("m/{}", r.below(3500)).into();
        let status = match r.below(10) {
            0 | 1 => kv
                .delete(pb::DeleteRequest { key, compare: None })
                .await
                .err(),
            2 => kv.get(pb::GetRequest { key }).await.err(),
            n => kv
                .set(pb::SetRequest {
                    key,
                    value: format!("g{i:03}").into(),
                    expires_at: if n == 3 { 1 } else { 0 },
                    ttl_seconds: if n == 4 { 600 } else { 0 },
                    ..Default::default()
                })
                .await
                .err(),
        };
        if let Some(s) = status {
            assert_eq!(s.code(), tonic::Code::NotFound, "{s:?}");
        }
    }
}

/// Applies events to a full mirror; returns the last revision applied.
fn apply_full(mirror: &mut FullMirror, events: &[pb::Event]) -> u64 {
    let mut last = 0;
    for e in events {
        assert!(e.revision > last, "ordered");
        last = e.revision;
        match pb::event::EventType::try_from(e.r#type).unwrap() {
            pb::event::EventType::Put => {
                let kv = e.kv.as_ref().unwrap();
                assert_eq!(kv.mod_revision, e.revision, "{e:?}");
                mirror.insert(kv.key.to_vec(), item_of(kv));
            }
            pb::event::EventType::Delete => {
                mirror.remove(&e.kv.as_ref().unwrap().key[..]);
            }
            pb::event::EventType::Flush => mirror.clear(),
        }
    }
    last
}

/// Every item under `prefix` (value, expiry, mod_revision) and the highest revision the pages
/// were read at.
async fn scan_items(kv: &mut KvClient<Channel>, prefix: &[u8]) -> (FullMirror, u64) {
    let mut out = FullMirror::new();
    let mut token = bytes::Bytes::new();
    let mut revision = 0;
    loop {
        let page = kv
            .scan(pb::ScanRequest {
                prefix: bytes::Bytes::copy_from_slice(prefix),
                limit: 1000,
                page_token: token,
                keys_only: false,
            })
            .await
            .unwrap()
            .into_inner();
        revision = revision.max(page.header.unwrap().revision);
        for kv in page.kvs {
            out.insert(kv.key.to_vec(), item_of(&kv));
        }
        token = page.next_page_token;
        if token.is_empty() {
            return (out, revision);
        }
    }
}

/// The model check of the watch's mirror (issue 14, "Mirror"): writes of every kind over
/// memcached and gRPC (puts, deletes, expiry, evictions, touch, flush_all) race a watch's
/// initial state; the initial state and then the events after its revision R, applied in
/// order by a client that also drops expired items itself, equal a full scan, value, expiry
/// and mod_revision of every item; no (key, revision) arrives twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initial_state_raced_by_writes_of_every_kind_mirrors_the_store() {
    let seed = cairn_testkit::Rng::seed();
    let server = Server::start(&["--persistence", "async", "-m", "16"]);
    let ch = channel(&server).await;
    let mut kv = KvClient::new(ch.clone());
    let mut c = server.connect();
    for i in 0..3000 {
        c.send(format!("set m/{i} 0 0 4 noreply\r\nv{:03}\r\n", i % 1000).as_bytes());
    }
    c.send(b"mn\r\n");
    c.read_until(b"MN\r\n");
    let addr = server.addr;
    let mc = std::thread::spawn(move || memcached_racer(addr, seed, 3000));
    let grpc = tokio::spawn(grpc_racer(KvClient::new(ch.clone()), seed ^ 0x9e37, 1500));
    let mut w = Watch::open(
        ch.clone(),
        pb::WatchCreateRequest {
            key: "m/".into(),
            prefix: true,
            initial_state: true,
            ..Default::default()
        },
    )
    .await;
    let mut mirror = FullMirror::new();
    // Unique: no (key, revision) twice over the initial state and the events.
    let mut seen = std::collections::HashSet::new();
    let r = loop {
        let m = w.next().await;
        for kv in m.initial_items {
            assert!(seen.insert((kv.key.clone(), kv.mod_revision)));
            assert!(
                mirror.insert(kv.key.to_vec(), item_of(&kv)).is_none(),
                "no key twice"
            );
        }
        if m.initial_state_done {
            break m.header.unwrap().revision;
        }
    };
    mc.join().unwrap();
    grpc.await.unwrap();
    let (want, at) = scan_items(&mut kv, b"m/").await;
    // Expiry times are far past or an hour ahead: `now` needs no precision.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as u32;
    // Apply events after R until the mirror has caught up with the revision of the scan.
    let mut last = r;
    let mut kinds = std::collections::HashSet::new();
    while last < at {
        let m = w.next().await;
        if !m.events.is_empty() {
            assert!(m.events[0].revision > last, "ordered and after R");
            for e in &m.events {
                let key = e.kv.as_ref().map(|kv| kv.key.clone()).unwrap_or_default();
                assert!(seen.insert((key, e.revision)), "{e:?} twice");
                kinds.insert((e.r#type, e.reason));
            }
            last = apply_full(&mut mirror, &m.events);
        } else if m.progress_notify {
            last = last.max(m.header.unwrap().revision);
        } else {
            panic!("unexpected response {m:?}");
        }
        if last < at {
            // Nothing in flight may be missing: ask where the stream stands.
            w.tx.send(pb::WatchRequest {
                request_union: Some(pb::watch_request::RequestUnion::ProgressRequest(
                    pb::WatchProgressRequest {},
                )),
            })
            .await
            .unwrap();
        }
    }
    assert_eq!(
        alive(&mirror, now),
        alive(&want, now),
        "seed {seed}: initial state + events after R = the store"
    );
    use pb::event::{DeleteReason as R, EventType as T};
    for kind in [
        (T::Put, R::None),
        (T::Delete, R::Client),
        (T::Delete, R::Expired),
        (T::Delete, R::Evicted),
        (T::Flush, R::Flushed),
    ] {
        assert!(
            kinds.contains(&(kind.0 as i32, kind.1 as i32)),
            "seed {seed}: the run had no {kind:?} after R"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_after_kill9_gets_exactly_what_was_missed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let server = Server::start_in(&dir, &["--persistence", "sync"]);
    let ch = channel(&server).await;
    let mut kv = KvClient::new(ch.clone());
    let mut w = Watch::open(
        ch.clone(),
        pb::WatchCreateRequest {
            key: "k/".into(),
            prefix: true,
            ..Default::default()
        },
    )
    .await;
    let mut acked = Vec::new();
    for i in 0..20 {
        let r = kv
            .set(pb::SetRequest {
                key: format!("k/{i}").into(),
                value: format!("v{i}").into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        acked.push(r.mod_revision);
    }
    // The watcher saw the first 10 events only (it stops reading there).
    let mut seen = Vec::new();
    while seen.len() < 10 {
        seen.extend(w.next().await.events.into_iter().map(|e| e.revision));
    }
    seen.truncate(10);
    drop(w);
    drop(kv);
    // More writes over memcached, acknowledged (sync), then kill -9.
    let mut c = server.connect();
    for i in 20..30 {
        c.send(format!("set k/{i} 0 0 2\r\nv{}\r\n", i % 10).as_bytes());
        c.read_until(b"STORED\r\n");
    }
    c.send(b"delete k/3\r\n");
    c.read_until(b"DELETED\r\n");
    server.kill9();
    let server = Server::start_in(&dir, &["--persistence", "sync"]);
    let ch = channel(&server).await;
    let mut w = Watch::open(
        ch.clone(),
        pb::WatchCreateRequest {
            key: "k/".into(),
            prefix: true,
            start_revision: seen.last().unwrap() + 1,
            ..Default::default()
        },
    )
    .await;
    let mut rest = Vec::new();
    while rest.len() < 21 {
        rest.extend(w.next().await.events);
    }
    let revs: Vec<u64> = rest.iter().map(|e| e.revision).collect();
    assert_eq!(
        &revs[..10],
        &acked[10..],
        "the gRPC writes it missed, in order"
    );
    assert!(revs.windows(2).all(|p| p[0] < p[1]), "ordered, unique");
    let last = rest.last().unwrap();
    assert_eq!(
        (last.r#type, &last.kv.as_ref().unwrap().key[..]),
        (pb::event::EventType::Delete as i32, &b"k/3"[..])
    );
    // A new write after the restart gets a revision past everything before it.
    let mut kv = KvClient::new(ch);
    let r = kv
        .set(pb::SetRequest {
            key: "k/new".into(),
            value: "x".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(r.mod_revision > last.revision);
}

/// Resident memory of a process, from /proc.
fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    kb * 1024
}

/// Writes `count` 4 KiB values over memcached (keys `s/0` .. `s/4999`, cycling from
/// `first`), then `s/mark`, each acknowledged, on a blocking thread.
async fn write_round(mut c: common::Conn, first: usize, count: usize) -> common::Conn {
    tokio::task::spawn_blocking(move || {
        let value = "v".repeat(4096);
        for i in first..first + count {
            c.send(format!("set s/{} 0 0 {}\r\n{value}\r\n", i % 5000, value.len()).as_bytes());
            c.read_until(b"STORED\r\n");
        }
        c.send(b"set s/mark 0 0 1\r\nx\r\n");
        c.read_until(b"STORED\r\n");
        c
    })
    .await
    .unwrap()
}

/// Reads a watch until the put of `s/mark`; returns how many puts it saw.
async fn read_to_mark(w: &mut Watch) -> usize {
    let mut puts = 0;
    loop {
        let m = w.next().await;
        assert!(!m.canceled, "the reading watcher keeps up: {m:?}");
        for e in m.events {
            if e.r#type == pb::event::EventType::Put as i32 {
                puts += 1;
                if &e.kv.as_ref().unwrap().key[..] == b"s/mark" {
                    return puts;
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_that_never_reads_is_bounded_and_canceled_and_others_keep_up() {
    let server = Server::start(&[
        "--persistence",
        "off",
        "-m",
        "64",
        "--watch-history-mb",
        "16",
    ]);
    let create = || pb::WatchCreateRequest {
        key: "s/".into(),
        prefix: true,
        ..Default::default()
    };
    // Fill the store (48 MiB) and the history (16 MiB of -m, kept from the first watch on:
    // an overwrite's event holds the new and the previous value, an eviction's the value)
    // first, so that what grows after is what the watchers hold.
    let _starts_the_history = Watch::open(channel(&server).await, create()).await;
    let mut c = write_round(server.connect(), 0, 15_000).await;
    // The stalled watcher has a connection of its own and never reads after `created`.
    let mut stalled = Watch::open(channel(&server).await, create()).await;
    let mut reader = Watch::open(channel(&server).await, create()).await;
    let before = rss_bytes(server.child.id());
    // 120 MiB of values in rounds of 250 (about 3 MiB of events, a tenth of the history), far
    // more than the history, the store and the stalled watcher's queue. A memcached client
    // writes; the other watcher reads every round (in step with the writes, so that it never
    // falls out of the history itself).
    const ROUNDS: usize = 120;
    const PER_ROUND: usize = 250;
    for round in 0..ROUNDS {
        let (conn, puts) = tokio::join!(
            write_round(c, round * PER_ROUND, PER_ROUND),
            read_to_mark(&mut reader)
        );
        c = conn;
        assert_eq!(
            puts,
            PER_ROUND + 1,
            "round {round}: the reading watcher got every write"
        );
    }
    let grown = rss_bytes(server.child.id()).saturating_sub(before);
    assert!(
        grown < 40 << 20,
        "the server grew by {} MiB for a watcher that does not read",
        grown >> 20
    );
    // When it reads at last: what was queued, then the cancel with compact_revision.
    let mut last_seen = 0;
    let canceled = loop {
        let m = stalled.next().await;
        if m.canceled {
            break m;
        }
        if let Some(e) = m.events.last() {
            last_seen = e.revision;
        }
    };
    assert!(
        canceled.compact_revision > last_seen + 1,
        "compact_revision {} after revision {last_seen}",
        canceled.compact_revision
    );
    assert!(
        canceled.cancel_reason.contains("initial_state"),
        "{canceled:?}"
    );
    // The server still serves memcached clients and new watches.
    let mut fresh = Watch::open(channel(&server).await, create()).await;
    c = write_round(c, 0, 1).await;
    assert_eq!(read_to_mark(&mut fresh).await, 2);
    drop(c);
}

/// One event as a watcher saw it: (revision, key, Some(value) for a put, None for a delete;
/// a flush has an empty key and None).
type Seen = (u64, Vec<u8>, Option<Vec<u8>>);

fn seen(e: &pb::Event) -> Seen {
    let kv = e.kv.clone().unwrap_or_default();
    let value = (e.r#type == pb::event::EventType::Put as i32).then(|| kv.value.to_vec());
    (e.revision, kv.key.to_vec(), value)
}

/// The state after applying `events` (with revision <= `upto`) in order.
fn state_at(events: &[Seen], upto: u64) -> BTreeMap<Vec<u8>, (Vec<u8>, u64)> {
    let mut m = BTreeMap::new();
    for (rev, key, value) in events.iter().filter(|e| e.0 <= upto) {
        match value {
            Some(v) => {
                m.insert(key.clone(), (v.clone(), *rev));
            }
            None if key.is_empty() => m.clear(),
            None => {
                m.remove(key);
            }
        }
    }
    m
}

/// A watch segment: what one connection of a watcher saw, from `start` on.
struct Segment {
    start: u64,
    events: Vec<Seen>,
    /// Progress revisions, each with how many events had arrived before it.
    bookmarks: Vec<(u64, usize)>,
}

/// Reads a segment of up to `responses` responses (events and progress) from a new watch at
/// `start` (0: from now).
async fn segment(ch: Channel, start: u64, responses: usize) -> Segment {
    let mut w = Watch::open_raw(
        ch,
        pb::WatchCreateRequest {
            key: "p/".into(),
            prefix: true,
            start_revision: start,
            progress_notify: true,
            ..Default::default()
        },
    )
    .await;
    let created = w.next().await;
    assert!(created.created && !created.canceled, "{created:?}");
    let mut s = Segment {
        start: if start == 0 {
            created.header.unwrap().revision + 1
        } else {
            start
        },
        events: Vec::new(),
        bookmarks: Vec::new(),
    };
    for _ in 0..responses {
        let m = w.next().await;
        assert!(!m.canceled, "{m:?}");
        if m.progress_notify {
            s.bookmarks
                .push((m.header.unwrap().revision, s.events.len()));
        }
        s.events.extend(m.events.iter().map(seen));
    }
    s
}

/// Checks a segment against the reference stream: exactly the reference's events from its
/// start on (Ordered, Unique, Reliable, Resumable), and bookmarks that never run ahead of an
/// event (Bookmarkable).
fn check_segment(s: &Segment, reference: &[Seen], what: &str) {
    let last = s.events.last().map_or(0, |e| e.0);
    let covered = s.bookmarks.iter().map(|b| b.0).max().unwrap_or(0).max(last);
    let want: Vec<&Seen> = reference
        .iter()
        .filter(|e| e.0 >= s.start && e.0 <= covered)
        .collect();
    let got: Vec<&Seen> = s.events.iter().filter(|e| e.0 <= covered).collect();
    assert_eq!(
        got, want,
        "{what}: the events from {} to {covered}",
        s.start
    );
    for &(b, before) in &s.bookmarks {
        if let Some(next) = s.events.get(before) {
            assert!(b < next.0, "{what}: bookmark {b} ahead of event {}", next.0);
        }
    }
}

/// How a watch stream read by a task ended.
#[derive(Debug)]
enum StreamEnd {
    /// The test stopped it.
    Stopped,
    /// The server ended it.
    Closed,
    Failed(tonic::Status),
}

/// How a writer of the random run ended.
#[derive(Debug)]
enum WriterEnd {
    /// Every write it was to make was acknowledged.
    Done { acked: usize },
    /// A write failed after `acked` acknowledged ones; `after_kill`: the test had announced
    /// the kill by then.
    CutOff {
        acked: usize,
        after_kill: bool,
        error: String,
    },
}

/// A task's result; its panic, if it panicked, goes on in the caller.
async fn joined<T>(task: tokio::task::JoinHandle<T>) -> T {
    match task.await {
        Ok(v) => v,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// A thread's result; its panic, if it panicked, goes on in the caller.
fn joined_thread<T>(thread: std::thread::JoinHandle<T>) -> T {
    thread
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// The memcached writer of the random run: text and meta sets and deletes on `p/0`..`p/39`,
/// `limit` of them (or until the connection fails). Each reply must be one of the replies of
/// its command; a failure of the connection ends it, noting whether the kill was announced.
fn memcached_writer(
    addr: std::net::SocketAddr,
    seed: u64,
    limit: usize,
    killed: &AtomicBool,
    acked: &AtomicUsize,
) -> WriterEnd {
    use std::io::{BufRead, Write};
    let mut r = cairn_testkit::Rng::new(seed);
    let stream = std::net::TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut replies = std::io::BufReader::new(stream.try_clone().unwrap());
    let mut stream = stream;
    for i in 0..limit {
        let key = format!("p/{}", r.below(40));
        let (req, allowed): (String, &[&str]) = match r.below(10) {
            0 => (
                format!("delete {key}\r\n"),
                &["DELETED\r\n", "NOT_FOUND\r\n"],
            ),
            1 => (format!("md {key}\r\n"), &["HD\r\n", "NF\r\n"]),
            2 => (format!("ms {key} 3\r\nm{:02}\r\n", i % 100), &["HD\r\n"]),
            _ => (
                format!("set {key} 0 0 4\r\nt{:03}\r\n", i % 1000),
                &["STORED\r\n"],
            ),
        };
        let mut line = String::new();
        let sent = stream.write_all(req.as_bytes());
        let failure = match sent.and_then(|()| replies.read_line(&mut line)) {
            Ok(0) => Some("closed".to_string()),
            Ok(_) => None,
            Err(e) => Some(e.to_string()),
        };
        if let Some(error) = failure {
            return WriterEnd::CutOff {
                acked: acked.load(Ordering::Acquire),
                after_kill: killed.load(Ordering::Acquire),
                error,
            };
        }
        assert!(
            allowed.contains(&line.as_str()),
            "{req:?} answered {line:?}"
        );
        acked.fetch_add(1, Ordering::AcqRel);
    }
    WriterEnd::Done {
        acked: acked.load(Ordering::Acquire),
    }
}

/// The gRPC writer of the random run: sets and deletes on `p/0`..`p/39`, `limit` of them (or
/// until one fails). A delete of a missing key (NOT_FOUND) is an answer, any other error ends
/// it, noting whether the kill was announced.
async fn grpc_writer(
    mut kv: KvClient<Channel>,
    seed: u64,
    limit: usize,
    killed: &AtomicBool,
    acked: &AtomicUsize,
) -> WriterEnd {
    let mut r = cairn_testkit::Rng::new(seed);
    for i in 0..limit {
        let key = format!("p/{}", r.below(40));
        let result = if r.below(5) == 0 {
            kv.delete(pb::DeleteRequest {
                key: key.into(),
                compare: None,
            })
            .await
            .map(|_| ())
        } else {
            kv.set(pb::SetRequest {
                key: key.into(),
                value: format!("g{i:04}").into(),
                ..Default::default()
            })
            .await
            .map(|_| ())
        };
        match result {
            Ok(()) => {}
            Err(e) if e.code() == tonic::Code::NotFound => {}
            Err(e) => {
                return WriterEnd::CutOff {
                    acked: acked.load(Ordering::Acquire),
                    after_kill: killed.load(Ordering::Acquire),
                    error: e.to_string(),
                }
            }
        }
        acked.fetch_add(1, Ordering::AcqRel);
    }
    WriterEnd::Done {
        acked: acked.load(Ordering::Acquire),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_properties_hold_over_a_random_run_with_a_kill_9() {
    let seed = cairn_testkit::Rng::seed();
    let rng = std::sync::Arc::new(std::sync::Mutex::new(cairn_testkit::Rng::new(seed)));
    let below = {
        let rng = std::sync::Arc::clone(&rng);
        move |n: u64| rng.lock().unwrap().below(n)
    };
    let tmp = tempfile::tempdir().unwrap();
    // Phase 0 without a batch window (streams wake at every write), phase 1 (after the
    // kill) with one of 3 ms, so every property below holds both ways.
    let args = |batch_ms: &'static str| {
        [
            "--persistence",
            "sync",
            "--watch-history-mb",
            "1",
            "--watch-progress-notify-ms",
            "20",
            "--watch-batch-ms",
            batch_ms,
        ]
    };
    let mut server = Server::start_in(tmp.path(), &args("0"));
    // The reference: one watch from the first revision on, resumed after the kill.
    let mut reference: Vec<Seen> = Vec::new();
    let mut segments: Vec<(Segment, String)> = Vec::new();
    for phase in 0..2 {
        let ch = channel(&server).await;
        let resume = reference.last().map_or(1, |e| e.0 + 1);
        let (ref_tx, mut ref_rx) = mpsc::unbounded_channel();
        // Open before the writers start (the created response read), then read by a task.
        let mut ref_watch = Watch::open(
            ch.clone(),
            pb::WatchCreateRequest {
                key: "p/".into(),
                prefix: true,
                start_revision: resume,
                ..Default::default()
            },
        )
        .await;
        let (stop_ref, mut ref_stopped) = tokio::sync::oneshot::channel::<()>();
        let ref_task = tokio::spawn(async move {
            loop {
                let m = tokio::select! {
                    _ = &mut ref_stopped => return StreamEnd::Stopped,
                    m = ref_watch.rx.message() => m,
                };
                match m {
                    Ok(Some(m)) => {
                        assert!(!m.canceled, "reference: {m:?}");
                        for e in &m.events {
                            ref_tx.send(seen(e)).expect("the test holds the receiver");
                        }
                    }
                    Ok(None) => return StreamEnd::Closed,
                    Err(status) => return StreamEnd::Failed(status),
                }
            }
        });
        // Writers: memcached text and meta, and gRPC. In phase 0 they write until the kill
        // cuts them off (so it comes in the middle of their writes); in phase 1 `ops` each.
        let ops = 250 + below(100);
        let limit = if phase == 0 { usize::MAX } else { ops as usize };
        let killed = Arc::new(AtomicBool::new(false));
        let acked = [Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0))];
        let mc = std::thread::spawn({
            let (addr, seed) = (server.addr, below(u64::MAX));
            let (killed, acked) = (Arc::clone(&killed), Arc::clone(&acked[0]));
            move || memcached_writer(addr, seed, limit, &killed, &acked)
        });
        let grpc_writer = tokio::spawn({
            let (kv, seed) = (KvClient::new(ch.clone()), below(u64::MAX));
            let (killed, acked) = (Arc::clone(&killed), Arc::clone(&acked[1]));
            async move { grpc_writer(kv, seed, limit, &killed, &acked).await }
        });
        // Watchers that come and go: from now, from a revision seen, resumed at last + 1.
        for i in 0..6 {
            while let Ok(e) = ref_rx.try_recv() {
                reference.push(e);
            }
            let start = match below(3) {
                0 => 0,
                _ if reference.is_empty() => 0,
                _ => reference[below(reference.len() as u64) as usize].0,
            };
            let s = segment(ch.clone(), start, 1 + below(4) as usize).await;
            let next = s.events.last().map_or(s.start, |e| e.0 + 1);
            let resumed = segment(ch.clone(), next, 1 + below(4) as usize).await;
            segments.push((s, format!("phase {phase} watcher {i}")));
            segments.push((resumed, format!("phase {phase} watcher {i} resumed")));
        }
        if phase == 0 {
            // kill -9 in the middle of the writes (sync: what was published is on disk), once
            // each writer has had a random number of writes acknowledged.
            let kill_at = 50 + below(200) as usize;
            let deadline = Instant::now() + Duration::from_secs(60);
            while acked.iter().any(|a| a.load(Ordering::Acquire) < kill_at) {
                if mc.is_finished() {
                    let end = joined_thread(mc);
                    panic!("seed {seed}: the memcached writer stopped before the kill: {end:?}");
                }
                if grpc_writer.is_finished() {
                    let end = joined(grpc_writer).await;
                    panic!("seed {seed}: the gRPC writer stopped before the kill: {end:?}");
                }
                assert!(
                    Instant::now() < deadline,
                    "seed {seed}: the writers never reached {kill_at} acknowledged writes: {acked:?}"
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let dir = server.dir.clone();
            killed.store(true, Ordering::Release);
            server.kill9();
            // Each writer was cut off by the kill, not before it; so was the reference.
            let ends = [
                ("memcached", joined_thread(mc)),
                ("gRPC", joined(grpc_writer).await),
            ];
            for (who, end) in ends {
                match end {
                    WriterEnd::CutOff {
                        acked,
                        after_kill: true,
                        error,
                    } => eprintln!(
                        "phase 0: the {who} writer, {acked} writes acknowledged, cut off by the \
                         kill: {error}"
                    ),
                    end => panic!("seed {seed}: the {who} writer did not end at the kill: {end:?}"),
                }
            }
            match joined(ref_task).await {
                StreamEnd::Failed(status) => {
                    eprintln!("phase 0: the reference cut off by the kill: {status}")
                }
                StreamEnd::Closed => eprintln!("phase 0: the reference closed by the kill"),
                StreamEnd::Stopped => unreachable!("phase 0 does not stop the reference"),
            }
            while let Ok(e) = ref_rx.try_recv() {
                reference.push(e);
            }
            server = Server::start_in(&dir, &args("3"));
        } else {
            for end in [joined_thread(mc), joined(grpc_writer).await] {
                assert!(
                    matches!(end, WriterEnd::Done { acked } if acked == ops as usize),
                    "seed {seed}: phase 1 had no kill, every write is acknowledged: {end:?}"
                );
            }
            // Every reference event up to the final revision, then stop it.
            let (want, at) = scan_all(&mut KvClient::new(ch.clone()), b"p/").await;
            while reference.last().map_or(0, |e| e.0) < at
                && state_at(&reference, u64::MAX)
                    .iter()
                    .map(|(k, (v, _))| (k.clone(), v.clone()))
                    .collect::<Mirror>()
                    != want
            {
                reference.push(
                    tokio::time::timeout(Duration::from_secs(30), ref_rx.recv())
                        .await
                        .expect("the reference catches up (a safety net)")
                        .expect("the reference stream is open"),
                );
            }
            // The reference ran until stopped: it never failed, closed or panicked.
            let _ = stop_ref.send(());
            let end = joined(ref_task).await;
            assert!(
                matches!(end, StreamEnd::Stopped),
                "seed {seed}: the reference {end:?}"
            );
            // Mirror: the reference applied in order equals the store.
            let mirror: Mirror = state_at(&reference, u64::MAX)
                .into_iter()
                .map(|(k, (v, _))| (k, v))
                .collect();
            assert_eq!(mirror, want, "seed {seed}: the reference mirrors the store");
            // Mirror from an initial state: its items are the reference's state at R.
            let mut w = Watch::open(
                ch.clone(),
                pb::WatchCreateRequest {
                    key: "p/".into(),
                    prefix: true,
                    initial_state: true,
                    ..Default::default()
                },
            )
            .await;
            let mut items = Vec::new();
            let r = loop {
                let m = w.next().await;
                items.extend(m.initial_items);
                if m.initial_state_done {
                    break m.header.unwrap().revision;
                }
            };
            // Exactly the reference's state at R: every item it holds, nothing more.
            let at_r = state_at(&reference, r);
            let mut initial = BTreeMap::new();
            for kv in &items {
                let item = (kv.value.to_vec(), kv.mod_revision);
                assert!(
                    initial.insert(kv.key.to_vec(), item).is_none(),
                    "seed {seed}: initial item {kv:?} twice"
                );
            }
            let text = |m: &BTreeMap<Vec<u8>, (Vec<u8>, u64)>| -> BTreeMap<String, (String, u64)> {
                m.iter()
                    .map(|(k, (v, rev))| {
                        let t = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
                        (t(k), (t(v), *rev))
                    })
                    .collect()
            };
            assert_eq!(
                text(&initial),
                text(&at_r),
                "seed {seed}: the initial state at {r} is the reference's state there"
            );
        }
    }
    assert!(
        reference.windows(2).all(|w| w[0].0 < w[1].0),
        "seed {seed}: ordered"
    );
    for (s, what) in &segments {
        check_segment(s, &reference, &format!("seed {seed}: {what}"));
    }
}

/// Serves `ctx`'s gRPC API in this process (on `rt`), on a free loopback port.
fn serve_grpc(
    rt: &tokio::runtime::Runtime,
    ctx: &std::sync::Arc<cairn_server::Ctx>,
) -> std::net::SocketAddr {
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let prepared = rt
        .block_on(cairn_server::grpc::prepare(ctx, addr))
        .expect("gRPC");
    rt.spawn(prepared.serve(listener, std::future::pending()));
    addr
}

fn set_request(key: &str) -> pb::SetRequest {
    pb::SetRequest {
        key: key.to_string().into(),
        value: "durable?".into(),
        ..Default::default()
    }
}

/// Contract 1 (one durability path): in sync mode a gRPC write is answered only once its
/// record is fdatasync'd. On the fault-injecting file system: a Set whose fdatasync is held
/// when the power fails is not acknowledged (UNAVAILABLE); a Set that was acknowledged is
/// there after a power cut.
#[test]
fn a_sync_grpc_write_is_acknowledged_only_once_fdatasynced() {
    use cairn_testkit::FaultyFs;
    let fs = FaultyFs::new();
    let config = cairn_server::config::Config {
        persistence: "sync".into(),
        data_dir: std::path::PathBuf::from("/faulty"),
        log_segment_mb: 1,
        memory_limit_mb: 16,
        ..cairn_server::config::Config::default()
    };
    let open = || {
        cairn_server::Ctx::open_on(config.clone(), std::sync::Arc::new(fs.clone())).expect("open")
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let ctx = open();
    let addr = serve_grpc(&rt, &ctx);
    let mut kv = rt
        .block_on(KvClient::connect(format!("http://{addr}")))
        .unwrap();
    fs.hold_syncs(true);
    let held = rt.spawn({
        let mut kv = kv.clone();
        async move { kv.set(set_request("held")).await }
    });
    // Wait until the log's fdatasync of that write is held (a condition, polled; a minute
    // without it fails instead of hanging).
    let deadline = Instant::now() + Duration::from_secs(60);
    while fs.syncs_held() == 0 {
        assert!(
            Instant::now() < deadline,
            "the write's fdatasync was never held"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    fs.power_loss();
    let r = rt.block_on(held).unwrap();
    assert_eq!(
        r.map(|_| ()).unwrap_err().code(),
        tonic::Code::Unavailable,
        "a write that was never fdatasync'd must not be acknowledged"
    );
    drop(kv);
    drop(ctx);
    // After recovery: an acknowledged write survives a power cut.
    let ctx = open();
    let addr = serve_grpc(&rt, &ctx);
    kv = rt
        .block_on(KvClient::connect(format!("http://{addr}")))
        .unwrap();
    let acked = rt
        .block_on(kv.set(set_request("acked")))
        .unwrap()
        .into_inner();
    drop(kv);
    cairn_testkit::power_cut(&fs, ctx);
    let ctx = open();
    match ctx.store().get(b"acked", cairn_server::now_unix()) {
        cairn_store::ReadOutcome::Hit(item) => {
            assert_eq!(item.meta.mod_revision, acked.mod_revision)
        }
        _ => panic!("an acknowledged gRPC write was lost in a power cut"),
    }
}

/// What a watch must get: its filters and range over the reference's events.
struct Spec {
    create: pb::WatchCreateRequest,
    /// Compare previous items too (prev_kv watches).
    prev: bool,
}

impl Spec {
    fn wants(&self, e: &pb::Event) -> bool {
        let c = &self.create;
        let put = e.r#type == pb::event::EventType::Put as i32;
        let filtered = |f: pb::watch_create_request::FilterType| c.filters.contains(&(f as i32));
        if (put && filtered(pb::watch_create_request::FilterType::Noput))
            || (!put && filtered(pb::watch_create_request::FilterType::Nodelete))
        {
            return false;
        }
        let Some(kv) = &e.kv else { return true }; // a flush matches every watch
        let key = &kv.key[..];
        if c.prefix {
            key.starts_with(&c.key)
        } else if c.range_end.is_empty() {
            key == &c.key[..]
        } else {
            key >= &c.key[..] && key < &c.range_end[..]
        }
    }
}

/// An event as these tests compare it: revision, type, key, value, previous value.
fn event_of(e: &pb::Event, prev: bool) -> (u64, i32, Vec<u8>, Vec<u8>, Option<Vec<u8>>) {
    let kv = e.kv.clone().unwrap_or_default();
    let prev = prev
        .then(|| e.prev_kv.as_ref().map(|p| p.value.to_vec()))
        .flatten();
    (
        e.revision,
        e.r#type,
        kv.key.to_vec(),
        kv.value.to_vec(),
        prev,
    )
}

/// Random puts and deletes over gRPC on keys a/0..9, b/0..9, c/0..4 from 8 writers; returns
/// how many made an event (a delete of a missing key makes none).
async fn random_writes(ch: &Channel, seed: u64, count: u64) -> u64 {
    let mut writers = tokio::task::JoinSet::new();
    for w in 0..8 {
        let mut kv = KvClient::new(ch.clone());
        let mut rng = cairn_testkit::Rng::new(seed ^ (w + 1));
        writers.spawn(async move {
            let mut events = 0;
            for i in 0..count / 8 {
                let key = match rng.below(3) {
                    0 => format!("a/{}", rng.below(10)),
                    1 => format!("b/{}", rng.below(10)),
                    _ => format!("c/{}", rng.below(5)),
                };
                if rng.below(4) == 0 {
                    let r = kv
                        .delete(pb::DeleteRequest {
                            key: key.into(),
                            ..Default::default()
                        })
                        .await;
                    match r {
                        Ok(_) => events += 1,
                        Err(s) if s.code() == tonic::Code::NotFound => {}
                        Err(s) => panic!("delete: {s}"),
                    }
                } else {
                    let value = format!("{w}-{i}-{}", "v".repeat(200));
                    kv.set(pb::SetRequest {
                        key: key.into(),
                        value: value.into(),
                        ..Default::default()
                    })
                    .await
                    .expect("set");
                    events += 1;
                }
            }
            events
        });
    }
    let mut events = 0;
    while let Some(n) = writers.join_next().await {
        events += n.unwrap();
    }
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_watches_on_one_stream_each_get_exactly_their_events() {
    // A stream serves its watches together: those whose cursor the ring holds share one read
    // of it, one behind the ring reads the command log. Each watch must still get exactly its
    // own events: the reference is one watch of everything, alone on its stream.
    let seed = cairn_testkit::Rng::seed();
    let server = Server::start(&["--persistence", "sync", "--watch-history-mb", "1"]);
    let ch = channel(&server).await;
    let mut reference = Watch::open(
        ch.clone(),
        pb::WatchCreateRequest {
            prefix: true,
            prev_kv: true,
            ..Default::default()
        },
    )
    .await;
    let mut all: Vec<pb::Event> = Vec::new();
    // Enough writes (about 600 B an event with its previous item) that the 1 MiB ring no
    // longer holds the first ones.
    let mut made = random_writes(&ch, seed, 3200).await;
    while (all.len() as u64) < made {
        all.extend(reference.next().await.events);
    }
    // A revision the ring still holds (it holds the last ~1,600 events).
    let in_ring = all[all.len() - 1000].revision;
    let prefix = |p: &str| pb::WatchCreateRequest {
        key: p.to_string().into(),
        prefix: true,
        ..Default::default()
    };
    use pb::watch_create_request::FilterType;
    let specs = [
        // From the first revision: behind the ring, read from the command log.
        (prefix("a/"), 1, false),
        (
            pb::WatchCreateRequest {
                filters: vec![FilterType::Nodelete as i32],
                ..prefix("b/")
            },
            0,
            false,
        ),
        (
            pb::WatchCreateRequest {
                key: "a/5".into(),
                range_end: "b/3".into(),
                ..Default::default()
            },
            in_ring,
            false,
        ),
        (
            pb::WatchCreateRequest {
                key: "a/1".into(),
                ..Default::default()
            },
            0,
            false,
        ),
        (
            pb::WatchCreateRequest {
                prev_kv: true,
                ..prefix("")
            },
            in_ring + 500,
            true,
        ),
        (
            pb::WatchCreateRequest {
                filters: vec![FilterType::Noput as i32],
                ..prefix("c/")
            },
            0,
            false,
        ),
    ];
    let (tx, rx) = mpsc::channel(16);
    let stream = WatchClient::new(ch.clone())
        .watch(ReceiverStream::new(rx))
        .await
        .expect("watch")
        .into_inner();
    let mut watches = BTreeMap::new();
    for (i, (create, start, prev)) in specs.into_iter().enumerate() {
        let id = i as i64 + 1;
        let create = pb::WatchCreateRequest {
            watch_id: id,
            start_revision: start,
            ..create
        };
        tx.send(pb::WatchRequest {
            request_union: Some(pb::watch_request::RequestUnion::CreateRequest(
                create.clone(),
            )),
        })
        .await
        .unwrap();
        watches.insert(id, (Spec { create, prev }, start, Vec::new()));
    }
    // Drained while the writes go on: a stream that is not read stops where flow control
    // stops it, and the ring would pass its watches.
    let (resp_tx, mut responses) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut stream = stream;
        while let Ok(Some(m)) = stream.message().await {
            if resp_tx.send(m).is_err() {
                return;
            }
        }
    });
    made += random_writes(&ch, seed.rotate_left(17), 400).await;
    while (all.len() as u64) < made {
        all.extend(reference.next().await.events);
    }
    let end = all.last().unwrap().revision;
    // Read the stream until a progress response says every watch was sent everything up to
    // `end` (responses on a stream keep their order).
    let progress = pb::WatchRequest {
        request_union: Some(pb::watch_request::RequestUnion::ProgressRequest(
            pb::WatchProgressRequest {},
        )),
    };
    tx.send(progress.clone()).await.unwrap();
    loop {
        let m = tokio::time::timeout(Duration::from_secs(30), responses.recv())
            .await
            .expect("a response within 30 s (a safety net, not a wait)")
            .expect("stream open");
        assert!(!m.canceled, "seed {seed}: {m:?}");
        if m.watch_id == -1 && m.progress_notify {
            if m.header.unwrap().revision >= end {
                break;
            }
            tx.send(progress.clone()).await.unwrap();
            continue;
        }
        let (spec, start, got) = watches.get_mut(&m.watch_id).expect("a watch of ours");
        if m.created {
            if *start == 0 {
                *start = m.header.unwrap().revision + 1;
            }
            continue;
        }
        got.extend(m.events.iter().map(|e| event_of(e, spec.prev)));
    }
    for (id, (spec, start, got)) in &watches {
        let want: Vec<_> = all
            .iter()
            .filter(|e| e.revision >= *start && spec.wants(e))
            .map(|e| event_of(e, spec.prev))
            .collect();
        assert!(!want.is_empty(), "seed {seed}: watch {id} expects events");
        assert!(
            got == &want,
            "seed {seed}: watch {id} ({:?}) from {start}: got {} events, want {} (first \
             difference at {:?})",
            spec.create,
            got.len(),
            want.len(),
            got.iter().zip(&want).position(|(g, w)| g != w)
        );
    }
}
