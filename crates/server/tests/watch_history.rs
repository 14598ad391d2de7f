//! The watch history's memory, against the real binary: part of `-m` (`limit_maxbytes` and
//! `stats settings`' maxbytes are `-m`, `watch_history_limit_bytes` a sixteenth of it), shown
//! in `stats`, empty until the first watch, and, with persistence, without the values (an
//! event names its record in the command log), while without persistence it holds them.

mod common;

use std::time::Duration;

use cairn_api::pb::{self, watch_client::WatchClient};
use common::Server;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

fn stats(server: &Server, which: &str) -> String {
    String::from_utf8(
        server
            .connect()
            .exchange(format!("stats{which}\r\n").as_bytes()),
    )
    .unwrap()
}

fn number(stats: &str, name: &str) -> u64 {
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&format!("STAT {name} ")))
        .unwrap_or_else(|| panic!("no {name} in {stats}"))
        .trim()
        .parse()
        .unwrap()
}

/// Sets `n` keys of 1,000-byte values over memcached's protocol and waits for them.
fn load(server: &Server, n: usize) {
    let mut c = server.connect();
    let value = "v".repeat(1000);
    let mut batch = String::new();
    for i in 0..n {
        batch.push_str(&format!("set h{i} 0 0 1000 noreply\r\n{value}\r\n"));
    }
    c.send(batch.as_bytes());
    assert_eq!(c.exchange(b"mn\r\n"), b"MN\r\n");
}

/// Opens a watch of everything from now on and waits for its `created`; the stream stays
/// open while the returned sender lives.
async fn watch(server: &Server) -> mpsc::Sender<pb::WatchRequest> {
    let addr = server.grpc_addr.expect("gRPC is on");
    let mut client = WatchClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let (tx, rx) = mpsc::channel(4);
    tx.send(pb::WatchRequest {
        request_union: Some(pb::watch_request::RequestUnion::CreateRequest(
            pb::WatchCreateRequest {
                prefix: true,
                ..Default::default()
            },
        )),
    })
    .await
    .unwrap();
    let mut responses = client
        .watch(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let created = tokio::time::timeout(Duration::from_secs(60), responses.message())
        .await
        .expect("created within 60 s (a safety net, not a wait)")
        .unwrap()
        .unwrap();
    assert!(created.created);
    // Read on, so that flow control never holds the stream.
    tokio::spawn(async move { while let Ok(Some(_)) = responses.message().await {} });
    tx
}

/// Waits until the history holds `n` events (they are published once safe).
async fn until_events(server: &Server, n: u64) -> String {
    for _ in 0..600 {
        let s = stats(server, "");
        if number(&s, "watch_history_events") >= n {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the history never held {n} events: {}", stats(server, ""));
}

/// Returns the history's bytes per event after 2,000 sets of 1 KB values under a watch, having
/// checked what `stats` says before and after.
async fn bytes_per_event(mode: &str) -> u64 {
    let server = Server::start(&["-m", "128", "--persistence", mode]);
    let s = stats(&server, "");
    assert_eq!(number(&s, "limit_maxbytes"), 128 << 20, "-m is the whole");
    assert_eq!(
        number(&s, "watch_history_limit_bytes"),
        8 << 20,
        "a sixteenth"
    );
    let settings = stats(&server, " settings");
    assert_eq!(number(&settings, "maxbytes"), 128 << 20);
    load(&server, 500);
    let s = stats(&server, "");
    assert_eq!(
        (
            number(&s, "watch_history_bytes"),
            number(&s, "watch_history_events"),
            number(&s, "watch_history_first_revision"),
        ),
        (0, 0, 0),
        "nothing is kept before the first watch"
    );
    let _watch = watch(&server).await;
    load(&server, 2000);
    let s = until_events(&server, 2000).await;
    assert!(number(&s, "watch_history_first_revision") > 500, "{s}");
    let (bytes, events) = (
        number(&s, "watch_history_bytes"),
        number(&s, "watch_history_events"),
    );
    assert!(bytes <= 8 << 20, "within its part of -m: {bytes}");
    bytes / events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_persistence_an_event_holds_no_value() {
    let per_event = bytes_per_event("sync").await;
    assert!(
        per_event < 300,
        "{per_event} bytes an event of a 1 KB value"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_persistence_an_event_holds_its_value() {
    let per_event = bytes_per_event("off").await;
    assert!(
        per_event > 1000,
        "{per_event} bytes an event of a 1 KB value"
    );
}
