//! Recovery of every kind of write after `kill -9`, end to end against the real binary.
//!
//! Each test writes through the wire protocol in sync mode, kills the server with SIGKILL,
//! restarts it on the same data folder and checks what comes back:
//!
//! ```text
//!   writes ──> [checkpoint?] ──> more writes ──> kill -9 ──> restart ──> expected state
//! ```
//!
//! - every mutation kind (text storage, cas, incr/decr wrap and floor, touch, gat, delete,
//!   ms/md/ma/mg T, flush_all now and delayed), from the log alone and from snapshot + log;
//! - `noreply` and meta quiet writes, durable before the reply to the next request is sent;
//! - an item larger than the default 1 MiB limit (`-I 4m`), byte for byte;
//! - CAS uniques after recovery: never handed out twice.
//!
//! No test sleeps to wait for a server; the delayed flush polls the server's own clock.

mod common;

use std::io::{BufRead, BufReader, Read};

use common::{golden, Conn, Server};

/// kill -9, then start again on the same data folder.
fn crash_restart(server: Server, args: &[&str]) -> Server {
    let dir = server.dir.clone();
    server.kill9();
    Server::start_in(&dir, args)
}

/// The reply to `request` as text.
fn ask(c: &mut Conn, request: &str) -> String {
    String::from_utf8(c.exchange(request.as_bytes())).unwrap()
}

/// The CAS unique `gets` reports for `key`.
fn gets_cas(c: &mut Conn, key: &str) -> u64 {
    let reply = ask(c, &format!("gets {key}\r\n"));
    reply
        .lines()
        .next()
        .and_then(|l| l.split(' ').nth(4))
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no cas for {key} in {reply:?}"))
}

/// The remaining TTL `mg <key> t` reports (-1 = never expires).
fn ttl(c: &mut Conn, key: &str) -> i64 {
    let reply = ask(c, &format!("mg {key} t\r\n"));
    reply
        .strip_prefix("HD t")
        .and_then(|r| r.strip_suffix("\r\n"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no ttl for {key} in {reply:?}"))
}

/// One `STAT <name> <value>` of `stats <group>` (an empty group is the general block).
fn stat(c: &mut Conn, group: &str, name: &str) -> String {
    let stats = ask(c, &format!("stats {group}\r\n"));
    let prefix = format!("STAT {name} ");
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {name} in {stats}"))
        .to_string()
}

/// The server's clock (unix seconds), the one its expiry and flush_all rules use.
fn server_time(c: &mut Conn) -> u64 {
    stat(c, "", "time").parse().unwrap()
}

// ---- 1. every mutation kind ------------------------------------------------------------------

/// Keys written before the flush_all, which must stay gone.
const DOOMED: &[(&str, &str)] = &[
    ("set gone1 0 0 1\r\nx\r\n", "STORED\r\n"),
    ("ms gone2 1\r\ny\r\n", "HD\r\n"),
];

const FLUSH: &[(&str, &str)] = &[
    ("flush_all\r\n", "OK\r\n"),
    ("get gone1 gone2\r\n", "END\r\n"),
];

/// Every kind of write once. Explicit CAS values (`ms E`) make `cas` lines deterministic.
const PHASE_A: &[(&str, &str)] = &[
    ("set s 1 0 3\r\nabc\r\n", "STORED\r\n"),
    ("add s 0 0 1\r\nz\r\n", "NOT_STORED\r\n"),
    ("add a 2 0 1\r\nz\r\n", "STORED\r\n"),
    ("replace r 0 0 1\r\nz\r\n", "NOT_STORED\r\n"),
    ("set r 0 0 2\r\nr0\r\n", "STORED\r\n"),
    ("replace r 3 0 2\r\nr1\r\n", "STORED\r\n"),
    ("set ap 0 0 3\r\nmid\r\n", "STORED\r\n"),
    ("append ap 0 0 4\r\n_end\r\n", "STORED\r\n"),
    ("prepend ap 0 0 6\r\nstart_\r\n", "STORED\r\n"),
    ("ms c 1 E500\r\nx\r\n", "HD\r\n"),
    ("cas c 4 0 1 500\r\ny\r\n", "STORED\r\n"),
    ("cas c 0 0 1 500\r\nz\r\n", "EXISTS\r\n"),
    ("cas nocas 0 0 1 1\r\nz\r\n", "NOT_FOUND\r\n"),
    // incr wraps at 2^64, decr stops at 0 (memcached).
    ("set n 0 0 20\r\n18446744073709551615\r\n", "STORED\r\n"),
    ("incr n 2\r\n", "1\r\n"),
    ("set d 0 0 1\r\n5\r\n", "STORED\r\n"),
    ("decr d 10\r\n", "0\r\n"),
    // Short TTLs lengthened by touch, gat and mg T: only the new ones may come back.
    ("set t 0 1000 1\r\nt\r\n", "STORED\r\n"),
    ("touch t 5000\r\n", "TOUCHED\r\n"),
    ("set g 0 1000 1\r\ng\r\n", "STORED\r\n"),
    ("gat 7000 g\r\n", "VALUE g 0 1\r\ng\r\nEND\r\n"),
    ("set mt 0 1000 1\r\nm\r\n", "STORED\r\n"),
    ("mg mt T8000\r\n", "HD\r\n"),
    ("set del 0 0 1\r\nx\r\n", "STORED\r\n"),
    ("delete del\r\n", "DELETED\r\n"),
    ("ms m 2 F9 T0\r\nhi\r\n", "HD\r\n"),
    ("ms m2 1 E700\r\nq\r\n", "HD\r\n"),
    ("md m2\r\n", "HD\r\n"),
    ("ma ctr N0 J10 v\r\n", "VA 2\r\n10\r\n"),
    ("ma ctr D5 v\r\n", "VA 2\r\n15\r\n"),
    ("ma ctr MD D20 v\r\n", "VA 1\r\n0\r\n"),
    ("ms inv 1\r\nx\r\n", "HD\r\n"),
    ("md inv I\r\n", "HD\r\n"),
];

/// Writes over keys of phase A (over the snapshot when a checkpoint came between).
const PHASE_B: &[(&str, &str)] = &[
    ("append s 0 0 1\r\n!\r\n", "STORED\r\n"),
    ("incr ctr 7\r\n", "7\r\n"),
    ("delete a\r\n", "DELETED\r\n"),
    ("set del 0 0 3\r\nnew\r\n", "STORED\r\n"),
    ("md m q\r\n", ""),
    ("set late 0 0 1\r\nL\r\n", "STORED\r\n"),
    ("ms e 2 E800\r\ne1\r\n", "HD\r\n"),
    ("ms e 2 C800 E801\r\ne2\r\n", "HD\r\n"),
    ("ms e 2 C800\r\ne3\r\n", "EX\r\n"),
];

/// What the four steps leave behind.
const RECOVERED: &[(&str, &str)] = &[
    (
        "get gone1 gone2 s a r ap c nocas n d t g mt del m m2 ctr inv late e\r\n",
        "VALUE s 1 4\r\nabc!\r\n\
         VALUE r 3 2\r\nr1\r\n\
         VALUE ap 0 13\r\nstart_mid_end\r\n\
         VALUE c 4 1\r\ny\r\n\
         VALUE n 0 1\r\n1\r\n\
         VALUE d 0 1\r\n0\r\n\
         VALUE t 0 1\r\nt\r\n\
         VALUE g 0 1\r\ng\r\n\
         VALUE mt 0 1\r\nm\r\n\
         VALUE del 0 3\r\nnew\r\n\
         VALUE ctr 0 1\r\n7\r\n\
         VALUE inv 0 1\r\nx\r\n\
         VALUE late 0 1\r\nL\r\n\
         VALUE e 0 2\r\ne2\r\n\
         END\r\n",
    ),
    ("mg e c\r\n", "HD c801\r\n"),
    ("mg inv v\r\n", "VA 1 X W\r\nx\r\n"),
];

/// Runs DOOMED, FLUSH, PHASE_A and PHASE_B, with a checkpoint after step `checkpoint_after`
/// if given, then kills, restarts and checks the state.
fn every_mutation_kind(checkpoint_after: Option<usize>) {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start_in(tmp.path(), &["--persistence", "sync"]);
    let mut c = server.connect();
    for (i, step) in [DOOMED, FLUSH, PHASE_A, PHASE_B].iter().enumerate() {
        golden(&mut c, step);
        if checkpoint_after == Some(i) {
            golden(&mut c, &[("checkpoint\r\n", "OK\r\n")]);
        }
    }
    // A CAS the server assigned (not an explicit one): a client holding it before the crash
    // must be able to use it after.
    let cas_c = gets_cas(&mut c, "c");
    let server = crash_restart(server, &["--persistence", "sync"]);
    let mut c = server.connect();
    let snapshot_lsn = stat(&mut c, "persistence", "snapshot_lsn");
    assert_eq!(
        snapshot_lsn == "0",
        checkpoint_after.is_none(),
        "recovered from the wrong place: snapshot_lsn {snapshot_lsn}"
    );
    golden(&mut c, RECOVERED);
    for (key, low, high) in [("t", 4000, 5000), ("g", 6000, 7000), ("mt", 7000, 8000)] {
        let left = ttl(&mut c, key);
        assert!(
            low < left && left <= high,
            "{key}: ttl {left} not in ({low}, {high}]"
        );
    }
    assert_eq!(gets_cas(&mut c, "c"), cas_c, "the CAS of c changed");
    golden(
        &mut c,
        &[(&format!("cas c 0 0 1 {cas_c}\r\nw\r\n"), "STORED\r\n")],
    );
}

#[test]
fn every_mutation_kind_replays_from_the_log() {
    every_mutation_kind(None);
}

#[test]
fn every_mutation_kind_replays_over_a_checkpoint_taken_before_the_flush() {
    every_mutation_kind(Some(0));
}

#[test]
fn every_mutation_kind_replays_over_a_checkpoint_taken_midway() {
    every_mutation_kind(Some(2));
}

/// A delayed flush_all is logged: one still pending at restart neither runs early nor is
/// forgotten, and once it ran it does not run again over newer writes. memcached's rule: at
/// the flush time every item stored before it goes, including items stored after the command.
fn delayed_flush(checkpoint: bool) {
    const DELAY_S: u64 = 3;
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start_in(tmp.path(), &[]);
    golden(
        &mut server.connect(),
        &[
            ("set a 0 0 1\r\na\r\n", "STORED\r\n"),
            ("flush_all 3600\r\n", "OK\r\n"),
        ],
    );
    let server = crash_restart(server, &[]);
    let mut c = server.connect();
    golden(&mut c, &[("get a\r\n", "VALUE a 0 1\r\na\r\nEND\r\n")]);
    // Replace the hour-long schedule by a short one; it is due between `due_low`, `due_high`.
    let due_low = server_time(&mut c) + DELAY_S;
    golden(&mut c, &[(&format!("flush_all {DELAY_S}\r\n"), "OK\r\n")]);
    let due_high = server_time(&mut c) + DELAY_S;
    golden(&mut c, &[("set b 0 0 1\r\nb\r\n", "STORED\r\n")]);
    if checkpoint {
        golden(&mut c, &[("checkpoint\r\n", "OK\r\n")]);
    }
    let server = crash_restart(server, &[]);
    let mut c = server.connect();
    let first = ask(&mut c, "get a b\r\n");
    if server_time(&mut c) < due_low {
        assert_eq!(
            first, "VALUE a 0 1\r\na\r\nVALUE b 0 1\r\nb\r\nEND\r\n",
            "the delayed flush ran before its time"
        );
    }
    // Poll until the flush ran; the bound is the server's clock, generous for a slow machine.
    while ask(&mut c, "get a b\r\n") != "END\r\n" {
        assert!(
            server_time(&mut c) <= due_high + 30,
            "the flush_all {DELAY_S} was lost by the restart (due by {due_high})"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    golden(&mut c, &[("set later 0 0 1\r\nl\r\n", "STORED\r\n")]);
    let server = crash_restart(server, &[]);
    golden(
        &mut server.connect(),
        &[("get a b later\r\n", "VALUE later 0 1\r\nl\r\nEND\r\n")],
    );
}

#[test]
fn delayed_flush_all_survives_a_restart_from_the_log() {
    delayed_flush(false);
}

#[test]
fn delayed_flush_all_survives_a_restart_from_a_checkpoint() {
    delayed_flush(true);
}

// ---- 2. noreply and quiet writes ---------------------------------------------------------------

/// A write without a reply, then a request with one, on the same connection: the write must be
/// durable before that reply leaves. Kills after every round, so each round's last write (the
/// one most likely to be still in flight) rotates through the four forms.
#[test]
fn noreply_and_quiet_writes_are_durable_before_the_next_reply() {
    const ROUNDS: usize = 12;
    const PER_ROUND: usize = 25;
    let tmp = tempfile::tempdir().unwrap();
    let mut server = Server::start_in(tmp.path(), &["--persistence", "sync"]);
    let mut expected = String::new();
    let mut keys = String::new();
    for round in 0..ROUNDS {
        let mut c = server.connect();
        for i in round * PER_ROUND..(round + 1) * PER_ROUND {
            let (key, value) = (format!("nr{i}"), format!("v{i}"));
            let len = value.len();
            let (write, next, reply) = match i % 4 {
                0 => (
                    format!("set {key} 0 0 {len} noreply\r\n{value}\r\n"),
                    "get other\r\n",
                    "END\r\n",
                ),
                1 => (
                    format!("set {key} 0 0 {len} noreply\r\n{value}\r\n"),
                    "mn\r\n",
                    "MN\r\n",
                ),
                2 => (
                    format!("ms {key} {len} q\r\n{value}\r\n"),
                    "mg other v\r\n",
                    "EN\r\n",
                ),
                _ => (
                    format!("ms {key} {len} q\r\n{value}\r\n"),
                    "mn\r\n",
                    "MN\r\n",
                ),
            };
            // Odd rounds send the pair in one packet, even ones in two writes.
            if round % 2 == 1 {
                c.send(format!("{write}{next}").as_bytes());
            } else {
                c.send(write.as_bytes());
                c.send(next.as_bytes());
            }
            let got = c.read_until(reply.as_bytes());
            assert_eq!(String::from_utf8_lossy(&got), reply, "after write {i}");
            keys.push_str(&format!(" {key}"));
            expected.push_str(&format!("VALUE {key} 0 {len}\r\n{value}\r\n"));
        }
        server = crash_restart(server, &["--persistence", "sync"]);
        let got = ask(&mut server.connect(), &format!("get{keys}\r\n"));
        assert_eq!(got, format!("{expected}END\r\n"), "after round {round}");
    }
}

// ---- 3. an item over 2 MB ----------------------------------------------------------------------

/// Items up to 4 MiB, in log segments that hold two of them.
const BIG: &[&str] = &["-I", "4m", "--log-segment-mb", "16"];

/// `len` bytes of every value 0..=255 (CR and LF included), from a xorshift generator.
fn big_value(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn set_big(c: &mut Conn, key: &str, value: &[u8]) {
    let mut request = format!("set {key} 7 0 {}\r\n", value.len()).into_bytes();
    request.extend_from_slice(value);
    request.extend_from_slice(b"\r\n");
    c.send(&request);
    assert_eq!(c.read_until(b"\r\n"), b"STORED\r\n");
}

/// Reads a large value by its announced length (its bytes may hold any line ending).
fn get_big(c: &mut Conn, key: &str) -> Vec<u8> {
    c.send(format!("get {key}\r\n").as_bytes());
    let mut r = BufReader::new(&c.stream);
    let mut head = String::new();
    r.read_line(&mut head).unwrap();
    let len: usize = head
        .strip_prefix(&format!("VALUE {key} 7 "))
        .and_then(|l| l.trim_end().parse().ok())
        .unwrap_or_else(|| panic!("bad header {head:?}"));
    let mut value = vec![0u8; len + 2];
    r.read_exact(&mut value).unwrap();
    assert_eq!(&value[len..], b"\r\n");
    value.truncate(len);
    let mut end = [0u8; 5];
    r.read_exact(&mut end).unwrap();
    assert_eq!(&end, b"END\r\n");
    value
}

#[test]
fn an_item_over_2_mb_survives_kill9_in_the_snapshot_and_the_log() {
    let tmp = tempfile::tempdir().unwrap();
    let one = big_value(1, 3 << 20);
    let two = big_value(2, (3 << 20) - 1);
    let server = Server::start_in(tmp.path(), BIG);
    let mut c = server.connect();
    set_big(&mut c, "big1", &one);
    golden(&mut c, &[("checkpoint\r\n", "OK\r\n")]);
    set_big(&mut c, "big2", &two);
    let server = crash_restart(server, BIG);
    let mut c = server.connect();
    assert!(get_big(&mut c, "big1") == one, "big1 differs");
    assert!(get_big(&mut c, "big2") == two, "big2 differs");
}

// ---- 4. CAS uniques after recovery ---------------------------------------------------------------

/// A CAS handed out before the crash, for a key deleted since, must never be handed out again:
/// a client holding it would otherwise overwrite a newer value.
fn cas_not_reused(checkpoint: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start_in(tmp.path(), &[]);
    let mut c = server.connect();
    golden(
        &mut c,
        &[
            ("set a 0 0 1\r\na\r\n", "STORED\r\n"),
            ("set b 0 0 1\r\nb\r\n", "STORED\r\n"),
        ],
    );
    let old = gets_cas(&mut c, "b");
    golden(&mut c, &[("delete b\r\n", "DELETED\r\n")]);
    if checkpoint {
        golden(&mut c, &[("checkpoint\r\n", "OK\r\n")]);
    }
    let server = crash_restart(server, &[]);
    let mut c = server.connect();
    golden(&mut c, &[("set b 0 0 2\r\nb2\r\n", "STORED\r\n")]);
    let new = gets_cas(&mut c, "b");
    assert!(
        new > old,
        "CAS {new} of the new b is not above {old}, handed out before the crash"
    );
}

#[test]
fn cas_is_not_reused_after_recovery_from_the_log() {
    cas_not_reused(false);
}

/// Fails when the snapshot's trailer does not keep the store's CAS counter: the snapshot does
/// not hold the deleted b, so recovery handed out b's old CAS again ("CAS 2 of the new b is not
/// above 2").
#[test]
fn cas_is_not_reused_after_recovery_from_a_checkpoint() {
    cas_not_reused(true);
}
