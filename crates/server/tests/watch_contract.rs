//! The watch's contract (proto/cairn/v1/watch.proto) at its hardest cases, against the real
//! binary:
//! - a watch with prev_kv over a large overwrite after many small events gets every event
//!   (broken: a bound checked before an event is added lets a response pass the server's own
//!   message limit, which fails the stream, and every resume at that revision);
//! - events older than the in-memory history are read from the command log once each (a step
//!   read 4,096, sent 1,000 and read the rest again);
//! - header.revision says what the watch has sent: in `created` for a start revision, in the
//!   answer to a client's cancel, in a progress response during an initial state (deferred
//!   until initial_state_done) and in initial items (0: nothing to resume from yet);
//! - the history id: a create that names another history is refused, compacted;
//! - with persistence, a stream copies the events another stream's step made whole: a
//!   prev_kv watch never takes one made without its previous item.

mod common;
#[path = "common/watch.rs"]
mod watch;

use cairn_api::pb::{self, kv_client::KvClient};
use common::Server;
use tonic::transport::Channel;
use watch::{channel, Watch};

fn everything(start_revision: u64, prev_kv: bool) -> pb::WatchCreateRequest {
    pb::WatchCreateRequest {
        key: Vec::new().into(),
        prefix: true,
        start_revision,
        prev_kv,
        ..Default::default()
    }
}

async fn set(kv: &mut KvClient<Channel>, key: &str, value: Vec<u8>) -> u64 {
    let r = kv
        .set(pb::SetRequest {
            key: key.to_string().into(),
            value: value.into(),
            ..Default::default()
        })
        .await
        .expect("set")
        .into_inner();
    r.mod_revision
}

fn stat(server: &Server, name: &str) -> u64 {
    let mut c = server.connect();
    let out = String::from_utf8(c.exchange(b"stats grpc\r\n")).unwrap();
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("STAT {name} ")))
        .unwrap_or_else(|| panic!("no {name} in {out}"))
        .trim()
        .parse()
        .unwrap()
}

/// The case: persistence off, a 900 KB value, 860 values of 1 KB, the big value
/// overwritten; a prev_kv watch of everything from the first 1 KB write. Broken, the stream
/// fails with OUT_OF_RANGE (a 2.68 MB response, the limit 2 MiB), the `created` response lost
/// with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prev_kv_watch_over_a_large_overwrite_gets_every_event() {
    let server = Server::start(&["--persistence", "off", "-m", "256"]);
    let ch = channel(&server).await;
    // A watch starts the history (without one, nothing is kept).
    let mut first = Watch::open_raw(ch.clone(), everything(0, false)).await;
    assert!(first.response().await.unwrap().created);
    let mut kv = KvClient::new(ch.clone()).max_decoding_message_size(16 << 20);
    set(&mut kv, "big", vec![b'a'; 900_000]).await;
    let from = set(&mut kv, "s/0", vec![b's'; 1000]).await;
    for i in 1..860 {
        set(&mut kv, &format!("s/{i}"), vec![b's'; 1000]).await;
    }
    let last = set(&mut kv, "big", vec![b'b'; 900_000]).await;
    let mut w = Watch::open_raw(ch.clone(), everything(from, true)).await;
    let created = w.response().await.expect("the created response");
    assert!(created.created && !created.canceled, "{created:?}");
    let mut seen = Vec::new();
    while seen.last().is_none_or(|&r| r < last) {
        let r = w.response().await.expect("no stream error");
        assert!(!r.canceled, "{r:?}");
        for e in &r.events {
            seen.push(e.revision);
            if e.revision == last {
                let prev = e.prev_kv.as_ref().expect("prev_kv");
                assert_eq!(prev.value.len(), 900_000);
                assert_eq!(e.kv.as_ref().unwrap().value[0], b'b');
            }
        }
    }
    assert_eq!(seen, (from..=last).collect::<Vec<_>>());
}

/// 40,000 events behind a history of 1 MiB (persistence on): the watch gets each once, and
/// each is read from the command log once (broken: a step that drops what it read and reads
/// it again makes about four reads an event).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_behind_the_history_are_read_from_the_log_once() {
    let server = Server::start(&["--persistence", "sync", "--watch-history-mb", "1"]);
    let ch = channel(&server).await;
    // A watch first, so that the in-memory history runs and is passed (its first MiB).
    let mut idle = Watch::open_raw(
        ch.clone(),
        pb::WatchCreateRequest {
            key: b"nothing".to_vec().into(),
            ..Default::default()
        },
    )
    .await;
    assert!(idle.response().await.unwrap().created);
    let n = 40_000u64;
    let mut c = server.connect();
    let mut batch = Vec::new();
    for i in 0..n {
        batch.extend_from_slice(
            format!("set k{i} 0 0 50 noreply\r\n{}\r\n", "v".repeat(50)).as_bytes(),
        );
        if i % 2_000 == 1_999 {
            c.send(&batch);
            batch.clear();
        }
    }
    assert_eq!(c.exchange(b"mn\r\n"), b"MN\r\n");
    // Every set published, and the idle watch past them all (it may have read the log too,
    // had its stream been slow): the reads counted from here on are the new watch's.
    let last = n;
    loop {
        idle.send(pb::watch_request::RequestUnion::ProgressRequest(
            pb::WatchProgressRequest {},
        ))
        .await;
        let r = idle.response().await.unwrap();
        if r.header.map_or(0, |h| h.revision) >= last {
            break;
        }
    }
    let from_memory_first = stat(&server, "watch_history_first_revision");
    assert!(
        from_memory_first > 1_000,
        "the history moved past revision 1"
    );
    let from_log_before = stat(&server, "grpc_watch_events_from_log");
    let mut w = Watch::open_raw(ch, everything(1, false)).await;
    assert!(w.response().await.unwrap().created);
    let mut received = 0u64;
    let mut next = 1;
    while next <= last {
        let r = w.response().await.expect("no stream error");
        assert!(!r.canceled, "{r:?}");
        for e in &r.events {
            assert_eq!(e.revision, next, "in order, none missing or twice");
            next += 1;
            received += 1;
        }
    }
    let from_log = stat(&server, "grpc_watch_events_from_log") - from_log_before;
    assert_eq!(received, last);
    assert!(
        from_log >= from_memory_first - 1 && from_log <= received,
        "{from_log} events read from the log for {received} sent ({} behind the history)",
        from_memory_first - 1
    );
}

/// Sets k0..k{n} (values of `len` bytes) over memcached's protocol and waits for them.
fn load(server: &Server, n: usize, len: usize) {
    let mut c = server.connect();
    let mut batch = Vec::new();
    for i in 0..n {
        batch.extend_from_slice(
            format!("set k{i} 0 0 {len} noreply\r\n{}\r\n", "v".repeat(len)).as_bytes(),
        );
        if i % 5_000 == 4_999 {
            c.send(&batch);
            batch.clear();
        }
    }
    c.send(&batch);
    assert_eq!(c.exchange(b"mn\r\n"), b"MN\r\n");
}

/// `created` says what the watch has sent, nothing yet: for a start revision the one before
/// it (the newest would make a client resuming from there skip the events between, and
/// cairn's own replica take it as its position), for an initial state 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn created_says_nothing_was_sent_yet() {
    let server = Server::start(&["--persistence", "sync"]);
    let ch = channel(&server).await;
    load(&server, 2_000, 20);
    let mut w = Watch::open_raw(ch.clone(), everything(7, false)).await;
    let created = w.response().await.unwrap();
    assert!(created.created);
    assert_eq!(created.header.unwrap().revision, 6, "the one before 7");
    let mut w = Watch::open_raw(
        ch,
        pb::WatchCreateRequest {
            key: b"k1".to_vec().into(),
            initial_state: true,
            ..Default::default()
        },
    )
    .await;
    let created = w.response().await.unwrap();
    assert!(created.created);
    assert_eq!(
        created.header.unwrap().revision,
        0,
        "its initial state is to come"
    );
}

/// A client's cancel of a lagging watch is answered with the last revision the watch sent
/// (not the newest, which would skip what the watch never sent). 40 MB of events: flow control holds
/// the stream while the client reads one response.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_cancel_says_the_last_event_sent() {
    let server = Server::start(&["--persistence", "sync"]);
    let ch = channel(&server).await;
    load(&server, 20_000, 2_000);
    let mut w = Watch::open_raw(ch.clone(), everything(1, false)).await;
    let created = w.response().await.unwrap();
    assert!(created.created);
    // Take one response, then cancel: the answer says what was sent before it.
    let first = w.response().await.unwrap();
    let mut sent = first.events.last().unwrap().revision;
    w.send(pb::watch_request::RequestUnion::CancelRequest(
        pb::WatchCancelRequest {
            watch_id: created.watch_id,
        },
    ))
    .await;
    loop {
        let r = w.response().await.unwrap();
        if r.canceled {
            assert_eq!(r.header.unwrap().revision, sent, "the last event sent");
            assert!(sent < 20_000, "the watch was behind");
            break;
        }
        sent = r.events.last().map_or(sent, |e| e.revision);
    }
}

/// With an initial state under way, a progress request is answered after
/// initial_state_done (nothing of the watch can be resumed from before it), and the initial
/// items say 0 (a progress of R at once would claim what was not sent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_waits_for_the_initial_state() {
    let server = Server::start(&["--persistence", "off", "-m", "512"]);
    let ch = channel(&server).await;
    load(&server, 200_000, 20);
    let mut w = Watch::open_raw(
        ch,
        pb::WatchCreateRequest {
            key: Vec::new().into(),
            prefix: true,
            initial_state: true,
            ..Default::default()
        },
    )
    .await;
    w.send(pb::watch_request::RequestUnion::ProgressRequest(
        pb::WatchProgressRequest {},
    ))
    .await;
    let mut done = None;
    loop {
        let r = w.response().await.unwrap();
        let revision = r.header.as_ref().unwrap().revision;
        if r.created {
            continue;
        } else if !r.initial_items.is_empty() {
            assert_eq!(revision, 0, "initial items: nothing to resume from yet");
        } else if r.initial_state_done {
            done = Some(revision);
        } else if r.progress_notify {
            let done = done.expect("progress only after initial_state_done");
            assert_eq!(revision, done);
            break;
        }
    }
}

/// Every response names its history; a create naming another one (a restart without
/// persistence starts revisions again from 1) is canceled with compact_revision, rather than
/// go on in the new history and silently skip what the old one had past the revision. With persistence the history (the command log) outlives a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_into_another_history_is_refused() {
    let server = Server::start(&["--persistence", "off"]);
    let ch = channel(&server).await;
    let mut w = Watch::open_raw(ch.clone(), everything(0, false)).await;
    let created = w.response().await.unwrap();
    let history = created.header.unwrap().history_id;
    assert_ne!(history, 0);
    let mut kv = KvClient::new(ch.clone());
    let r = kv
        .set(pb::SetRequest {
            key: "a".into(),
            value: "1".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.header.unwrap().history_id, history);
    let e = w.response().await.unwrap();
    assert_eq!(e.header.unwrap().history_id, history, "events' headers too");
    let resume = |history_id| pb::WatchCreateRequest {
        history_id,
        ..everything(r.mod_revision, false)
    };
    let mut same = Watch::open_raw(ch.clone(), resume(history)).await;
    let ok = same.response().await.unwrap();
    assert!(ok.created && !ok.canceled, "{ok:?}");
    let mut other = Watch::open_raw(ch, resume(history ^ 2)).await;
    let refused = other.response().await.unwrap();
    assert!(refused.created && refused.canceled, "{refused:?}");
    assert!(refused.compact_revision > 0 && refused.cancel_reason.contains("history_id"));
    drop((w, same, other, kv));

    // With persistence: the same history after a restart.
    let dir = tempfile::tempdir().unwrap();
    let set_x = |server: Server| async move {
        let mut kv = KvClient::new(channel(&server).await);
        let r = kv
            .set(pb::SetRequest {
                key: "x".into(),
                value: "1".into(),
                ..Default::default()
            })
            .await
            .unwrap();
        server.kill9();
        r.into_inner().header.unwrap().history_id
    };
    let before = set_x(Server::start_in(dir.path(), &["--persistence", "sync"])).await;
    let after = set_x(Server::start_in(dir.path(), &["--persistence", "sync"])).await;
    assert_eq!(before, after);
}

/// With persistence a stream copies the events another stream's step made whole (instead of
/// making them whole again): a watch without prev_kv reads an overwrite first, then a prev_kv
/// watch from before it must get the previous value, not the copy made without it (taken, it
/// left the watch an event it cannot send: canceled, compacted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prev_kv_watch_never_takes_an_event_made_whole_without_its_previous_item() {
    let server = Server::start(&["--persistence", "sync"]);
    let ch = channel(&server).await;
    let mut plain = Watch::open_raw(ch.clone(), everything(0, false)).await;
    assert!(plain.response().await.unwrap().created);
    let mut kv = KvClient::new(ch.clone());
    let first = set(&mut kv, "k", b"old".to_vec()).await;
    let last = set(&mut kv, "k", b"new".to_vec()).await;
    // The plain watch's steps make both events whole, without previous items.
    let mut seen = 0;
    while seen < last {
        let r = plain.response().await.expect("no stream error");
        seen = r.events.last().map_or(seen, |e| e.revision);
    }
    let mut w = Watch::open_raw(ch.clone(), everything(first, true)).await;
    assert!(w.response().await.unwrap().created);
    let mut got = Vec::new();
    while got.len() < 2 {
        let r = w.response().await.expect("no stream error");
        assert!(!r.canceled, "{r:?}");
        got.extend(r.events.iter().map(|e| {
            let prev = e.prev_kv.as_ref().map(|p| p.value.to_vec());
            (e.revision, e.kv.as_ref().unwrap().value.to_vec(), prev)
        }));
    }
    assert_eq!(
        got,
        [
            (first, b"old".to_vec(), None),
            (last, b"new".to_vec(), Some(b"old".to_vec()))
        ]
    );
}
