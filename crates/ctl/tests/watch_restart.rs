//! `cairnctl watch` follows a prefix through kill -9 and restarts of the server (same data
//! folder, same ports) with no gap and no repeat: its printed events are compared with the
//! writes the server acknowledged, with an uninterrupted watch over the same revisions
//! afterwards, and with a Scan of the final state.
//!
//! ```text
//!   writer (memcached, sync mode: STORED = durable) ──> cairn ──kill -9, restart (x4)──> cairn
//!   cairnctl -o json watch w/ --from-revision 1   ── lines A (resumes by itself)
//!   cairnctl -o json watch w/ --initial-state     ── lines B (state, then events)
//!   afterwards: cairnctl watch w/ --from-revision 1 ── lines C (never interrupted): A == C
//! ```
//!
//! Breaking it: resuming "from now" after a reconnect (start_revision 0 in
//! `Resume::create_request`) loses the writes made between the restart and the reconnect (A
//! lacks revisions C has); resuming from the last revision shown instead of the next one,
//! without the duplicate guard, shows it twice (A's revisions stop increasing).

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{ok, Server, Streaming};
use serde_json::Value;

/// One write the server answered.
#[derive(Clone, Debug, PartialEq)]
enum Acked {
    Set(String, String),
    Delete(String),
}

/// Sends one command and reads its one-line reply; None when the connection failed.
fn command(c: &mut TcpStream, request: &str) -> Option<String> {
    c.write_all(request.as_bytes()).ok()?;
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n") {
        match c.read(&mut byte) {
            Ok(1) => got.push(byte[0]),
            _ => return None,
        }
    }
    Some(String::from_utf8_lossy(&got).trim_end().to_string())
}

/// Writes to `w/*` (and to `x/*`, outside the prefix) until `stop`, reconnecting while the
/// server is down; records what was acknowledged, in order.
fn writer(
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<Acked>>>,
    count: Arc<AtomicU64>,
) {
    let mut conn: Option<TcpStream> = None;
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let c = match &mut conn {
            Some(c) => c,
            None => match TcpStream::connect(addr) {
                Ok(c) => {
                    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                    conn.insert(c)
                }
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
            },
        };
        i += 1;
        let key = format!("w/{}", i % 40);
        let (request, want, record) = if i.is_multiple_of(7) {
            (
                format!("delete {key}\r\n"),
                "DELETED",
                Some(Acked::Delete(key.clone())),
            )
        } else if i.is_multiple_of(11) {
            // Outside the prefix: never an event of the watch.
            (format!("set x/{i} 0 0 1\r\nx\r\n"), "STORED", None)
        } else {
            let value = format!("v{i}");
            (
                format!("set {key} 0 0 {}\r\n{value}\r\n", value.len()),
                "STORED",
                Some(Acked::Set(key.clone(), value)),
            )
        };
        match command(c, &request) {
            Some(reply) if reply == want => {
                acked.lock().unwrap().extend(record);
                count.fetch_add(1, Ordering::Relaxed);
            }
            // NOT_FOUND: a delete of a missing key changes nothing.
            Some(reply) if reply == "NOT_FOUND" => {}
            Some(reply) => panic!("{request:?}: {reply}"),
            // The server went away mid-request: that write may or may not have happened.
            None => conn = None,
        }
    }
}

/// The events of a watch's JSON lines: (revision, type, key, value).
type Ev = (u64, String, String, String);

fn event(line: &str) -> Option<Ev> {
    let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
    let kind = v["type"].as_str().unwrap().to_string();
    if kind == "RESYNC" || kind == "ITEM" {
        return None;
    }
    Some((
        v["revision"].as_u64().unwrap(),
        kind,
        v["key"].as_str().unwrap_or("").to_string(),
        v["value"].as_str().unwrap_or("").to_string(),
    ))
}

fn apply(state: &mut BTreeMap<String, String>, e: &Ev) {
    match e.1.as_str() {
        "PUT" => {
            state.insert(e.2.clone(), e.3.clone());
        }
        "DELETE" => {
            state.remove(&e.2);
        }
        "FLUSH" => state.clear(),
        other => panic!("event type {other}"),
    }
}

const END: &str = "w/end";

#[test]
fn watch_follows_a_prefix_through_kill_9_and_restarts_with_no_gap_or_repeat() {
    let started = Instant::now();
    let mut server = Server::start(&[]);
    ok(&server, &["set", "w/before", "b"]);
    let log = tempfile::NamedTempFile::new().unwrap();
    let watch = |extra: &[&str], server: &Server| {
        let mut a = server.endpoints().to_vec();
        a.extend(["-o", "json", "watch", "w/"].map(String::from));
        a.extend(extra.iter().map(|x| x.to_string()));
        a
    };
    let mut a = Streaming::start_logging(&watch(&["--from-revision", "1"], &server), log.path());
    let mut b = Streaming::start(&watch(&["--initial-state"], &server));
    a.until(Duration::from_secs(20), |l| l.contains("w/before"));
    b.until(Duration::from_secs(20), |l| l.contains("\"RESYNC\""));

    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(Vec::new()));
    let count = Arc::new(AtomicU64::new(0));
    let w = {
        let (addr, stop, acked, count) = (server.addr, stop.clone(), acked.clone(), count.clone());
        std::thread::spawn(move || writer(addr, stop, acked, count))
    };
    const ROUNDS: u64 = 4;
    for round in 1..=ROUNDS {
        // Some writes acknowledged by this server, then kill -9 in the middle of the stream.
        let until = count.load(Ordering::Relaxed) + 150;
        let deadline = Instant::now() + Duration::from_secs(120);
        while count.load(Ordering::Relaxed) < until {
            assert!(Instant::now() < deadline, "round {round}: writes stalled");
            std::thread::sleep(Duration::from_millis(5));
        }
        server = server.kill9_and_restart();
    }
    // Writes on the last server too, then the end marker.
    let until = count.load(Ordering::Relaxed) + 150;
    while count.load(Ordering::Relaxed) < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::Relaxed);
    w.join().unwrap();
    ok(&server, &["set", END, "done"]);
    let is_end = |l: &str| l.contains(&format!("\"key\":\"{END}\""));
    a.until(Duration::from_secs(60), is_end);
    b.until(Duration::from_secs(60), is_end);
    let acked = acked.lock().unwrap().clone();

    // A: each revision once, in order.
    let a_events: Vec<Ev> = a.seen.iter().filter_map(|l| event(l)).collect();
    let revisions: Vec<u64> = a_events.iter().map(|e| e.0).collect();
    assert!(
        revisions.windows(2).all(|p| p[0] < p[1]),
        "revisions repeat or go back: {:?}",
        revisions.windows(2).find(|p| p[0] >= p[1])
    );

    // A equals a watch that was never interrupted, over the same revisions: no gap.
    let mut c = Streaming::start(&watch(&["--from-revision", "1"], &server));
    c.until(Duration::from_secs(60), is_end);
    let c_events: Vec<Ev> = c.seen.iter().filter_map(|l| event(l)).collect();
    if a_events != c_events {
        let a_revs: std::collections::BTreeSet<u64> = revisions.iter().copied().collect();
        let missing: Vec<&Ev> = c_events
            .iter()
            .filter(|e| !a_revs.contains(&e.0))
            .take(5)
            .collect();
        panic!(
            "the watch through the restarts ({} events) differs from an uninterrupted one ({}); \
             missing from it, first: {missing:?}",
            a_events.len(),
            c_events.len()
        );
    }

    // Every acknowledged write is among the events, in the order acknowledged.
    let mut next = 0;
    for ack in &acked {
        let found = a_events[next..].iter().position(|e| match ack {
            Acked::Set(k, v) => e.1 == "PUT" && &e.2 == k && &e.3 == v,
            Acked::Delete(k) => e.1 == "DELETE" && &e.2 == k,
        });
        match found {
            Some(i) => next += i + 1,
            None => panic!("acknowledged {ack:?} is not among the watch's events (in order)"),
        }
    }

    // The events applied make the state a Scan shows now.
    let scan: BTreeMap<String, String> = ok(&server, &["-o", "json", "scan", "w/"])
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (
                v["key"].as_str().unwrap().to_string(),
                v["value"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let mut state = BTreeMap::new();
    for e in &a_events {
        apply(&mut state, e);
    }
    assert_eq!(state, scan, "watch A's state");

    // B: its initial state, then its events (the same as A's after the state's revision).
    let mut b_state = BTreeMap::new();
    let mut b_revision = 0;
    let mut b_events = Vec::new();
    for l in &b.seen {
        let v: Value = serde_json::from_str(l).unwrap();
        match v["type"].as_str().unwrap() {
            "RESYNC" => {
                b_state.clear();
                b_revision = v["revision"].as_u64().unwrap();
            }
            "ITEM" => {
                b_state.insert(
                    v["key"].as_str().unwrap().to_string(),
                    v["value"].as_str().unwrap().to_string(),
                );
            }
            _ => b_events.push(event(l).unwrap()),
        }
    }
    for e in &b_events {
        apply(&mut b_state, e);
    }
    assert_eq!(b_state, scan, "watch B's state");
    let a_after: Vec<&Ev> = a_events.iter().filter(|e| e.0 > b_revision).collect();
    assert_eq!(
        b_events.iter().collect::<Vec<_>>(),
        a_after,
        "watch B's events"
    );

    // It did go through the restarts.
    drop(a);
    let notes = std::fs::read_to_string(log.path()).unwrap();
    let lost = notes.matches("watch stream lost").count();
    assert!(lost as u64 >= ROUNDS, "{lost} reconnect notes:\n{notes}");
    eprintln!(
        "{} acknowledged writes, {} events through {ROUNDS} kill -9 restarts, {lost} reconnects, \
         {:.1} s",
        acked.len(),
        a_events.len(),
        started.elapsed().as_secs_f64()
    );
}
