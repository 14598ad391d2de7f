//! The gRPC API against the real binary, from Rust (tonic client, the generated stubs): the
//! watch's initial state raced by memcached writes ends equal to the store, resume after
//! kill -9 with persistence sync gets exactly what was missed, and a sync write over gRPC is
//! on disk before it is acknowledged.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use cairn_grpc::pb::{self, kv_client::KvClient, watch_client::WatchClient};
use common::Server;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

type Mirror = BTreeMap<Vec<u8>, Vec<u8>>;

async fn channel(server: &Server) -> Channel {
    let addr = server.grpc_addr.expect("gRPC is on");
    Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .expect("connect")
}

/// A watch stream: requests in through `tx`, responses out of `rx`.
struct Watch {
    tx: mpsc::Sender<pb::WatchRequest>,
    rx: tonic::Streaming<pb::WatchResponse>,
}

impl Watch {
    async fn open(ch: Channel, create: pb::WatchCreateRequest) -> Watch {
        let (tx, rx) = mpsc::channel(4);
        tx.send(pb::WatchRequest {
            request_union: Some(pb::watch_request::RequestUnion::CreateRequest(create)),
        })
        .await
        .unwrap();
        let rx = WatchClient::new(ch)
            .watch(ReceiverStream::new(rx))
            .await
            .expect("watch")
            .into_inner();
        let mut w = Watch { tx, rx };
        let first = w.next().await;
        assert!(first.created && !first.canceled, "{first:?}");
        w
    }

    async fn next(&mut self) -> pb::WatchResponse {
        tokio::time::timeout(Duration::from_secs(30), self.rx.message())
            .await
            .expect("a response within 30 s (a safety net, not a wait)")
            .expect("stream ok")
            .expect("stream open")
    }
}

/// Applies events to a mirror; returns the last revision applied.
fn apply(mirror: &mut Mirror, events: &[pb::Event]) -> u64 {
    let mut last = 0;
    for e in events {
        assert!(e.revision > last, "ordered");
        last = e.revision;
        match pb::event::EventType::try_from(e.r#type).unwrap() {
            pb::event::EventType::Put => {
                let kv = e.kv.as_ref().unwrap();
                mirror.insert(kv.key.to_vec(), kv.value.to_vec());
            }
            pb::event::EventType::Delete => {
                mirror.remove(&e.kv.as_ref().unwrap().key[..]);
            }
            pb::event::EventType::Flush => mirror.clear(),
        }
    }
    last
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initial_state_raced_by_memcached_writes_mirrors_the_store() {
    let server = Server::start(&["--persistence", "async"]);
    let ch = channel(&server).await;
    let mut kv = KvClient::new(ch.clone());
    let mut c = server.connect();
    for i in 0..3000 {
        c.send(format!("set m/{i} 0 0 4 noreply\r\nv{:03}\r\n", i % 1000).as_bytes());
    }
    c.send(b"mn\r\n");
    c.read_until(b"MN\r\n");
    // Writes over memcached while the initial state is being sent.
    let addr = server.addr;
    let writer = std::thread::spawn(move || {
        let mut c = common::Conn::new(addr);
        for i in 0..3000 {
            match i % 5 {
                0 => c.send(format!("delete m/{} noreply\r\n", i * 7 % 3000).as_bytes()),
                _ => c.send(
                    format!(
                        "set m/{} 0 0 4 noreply\r\nw{:03}\r\n",
                        i * 13 % 3500,
                        i % 1000
                    )
                    .as_bytes(),
                ),
            }
        }
        c.send(b"mn\r\n");
        c.read_until(b"MN\r\n");
    });
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
    let mut mirror = Mirror::new();
    // Unique: no (key, revision) twice over the initial state and the events.
    let mut seen = std::collections::HashSet::new();
    let r = loop {
        let m = w.next().await;
        for kv in m.initial_items {
            assert!(seen.insert((kv.key.clone(), kv.mod_revision)));
            assert!(
                mirror.insert(kv.key.to_vec(), kv.value.to_vec()).is_none(),
                "no key twice"
            );
        }
        if m.initial_state_done {
            break m.header.unwrap().revision;
        }
    };
    writer.join().unwrap();
    let (want, at) = scan_all(&mut kv, b"m/").await;
    // Apply events after R until the mirror has caught up with the revision of the scan.
    let mut last = r;
    while last < at {
        let m = w.next().await;
        if !m.events.is_empty() {
            assert!(m.events[0].revision > last, "ordered and after R");
            for e in &m.events {
                let key = e.kv.as_ref().map(|kv| kv.key.clone()).unwrap_or_default();
                assert!(seen.insert((key, e.revision)), "{e:?} twice");
            }
            last = apply(&mut mirror, &m.events);
        } else if m.progress_notify {
            last = last.max(m.header.unwrap().revision);
        }
        if last < at && m.events.is_empty() && !m.progress_notify {
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
    assert_eq!(mirror, want, "initial state + events after R = the store");
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
