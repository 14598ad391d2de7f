//! Durability end to end: restarts, kill -9 crash loops in sync and async mode, damaged files,
//! and the admin commands. Each crash loop prints its seed; set CAIRN_TEST_SEED to replay one.

mod common;

use std::collections::HashMap;
use std::io::Write;
use std::net::SocketAddr;
use std::process::Command;

use cairn_testkit::Rng;
use common::{golden, persistence_number, persistence_stat, Conn, Server};

fn get(c: &mut Conn, key: &str) -> Option<String> {
    let reply = String::from_utf8(c.exchange(format!("get {key}\r\n").as_bytes())).unwrap();
    if reply == "END\r\n" {
        return None;
    }
    let mut lines = reply.split("\r\n");
    let head = lines.next().unwrap();
    assert!(head.starts_with(&format!("VALUE {key} ")), "{reply:?}");
    Some(lines.next().unwrap().to_string())
}

/// One write a writer sent: the key, the state it gives the key (None = deleted), and whether
/// the server acknowledged it before it died.
#[derive(Clone, Debug)]
struct Op {
    key: String,
    state: Option<String>,
    acked: bool,
}

/// What one writer did in a round: its writes in order.
struct Writes {
    ops: Vec<Op>,
}

/// One writer: sets and deletes on its own keys over one connection, one request at a time,
/// until the connection breaks. Every `fence_every` writes it sends `mn`.
fn writer(addr: SocketAddr, id: usize, seed: u64, fence_every: usize) -> Writes {
    let mut rng = Rng::new(seed ^ (id as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut w = Writes { ops: Vec::new() };
    let Ok(stream) = std::net::TcpStream::connect(addr) else {
        return w;
    };
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let mut c = Conn { stream };
    let read_line = |c: &mut Conn| -> Option<Vec<u8>> {
        let mut line = Vec::new();
        let mut byte = [0u8; 1];
        while !line.ends_with(b"\r\n") {
            match std::io::Read::read(&mut c.stream, &mut byte) {
                Ok(1) => line.push(byte[0]),
                _ => return None,
            }
        }
        Some(line)
    };
    loop {
        let n = w.ops.len() + 1;
        let key = format!("w{id}-k{}", rng.below(40));
        let state = (rng.below(5) != 0).then(|| format!("w{id}-v{n}"));
        let request = match &state {
            None => format!("delete {key}\r\n"),
            Some(v) => format!("set {key} 0 0 {}\r\n{v}\r\n", v.len()),
        };
        w.ops.push(Op {
            key,
            state,
            acked: false,
        });
        if c.stream.write_all(request.as_bytes()).is_err() {
            return w;
        }
        let Some(line) = read_line(&mut c) else {
            return w;
        };
        let ok = matches!(
            line.as_slice(),
            b"STORED\r\n" | b"DELETED\r\n" | b"NOT_FOUND\r\n"
        );
        assert!(ok, "unexpected reply {:?}", String::from_utf8_lossy(&line));
        w.ops.last_mut().unwrap().acked = true;
        if fence_every > 0 && n.is_multiple_of(fence_every) {
            if c.stream.write_all(b"mn\r\n").is_err() {
                return w;
            }
            match read_line(&mut c) {
                Some(l) if l == b"MN\r\n" => {}
                Some(l) => panic!("unexpected fence reply {:?}", String::from_utf8_lossy(&l)),
                None => return w,
            }
        }
    }
}

/// Checks every key a writer touched (and every key known from earlier rounds) after a
/// restart, then records what is there as the known state for the next round.
///
/// For each key the required write is its last acknowledged one, in both modes: sync mode
/// acknowledges once a write is fdatasync'd, async mode once it is handed to the kernel, and
/// kill -9 keeps the kernel's page cache. The key must hold that write's state or the state
/// of a later write of the same key; with no required write, its state from before the round
/// or any state written this round. So an acknowledged write is never lost, a deleted key
/// never comes back, and no value appears that nobody wrote.
fn check_round(
    c: &mut Conn,
    known: &mut HashMap<String, Option<String>>,
    writes: &[Writes],
    round: usize,
) {
    let mut keys: Vec<String> = known.keys().cloned().collect();
    for w in writes {
        keys.extend(w.ops.iter().map(|o| o.key.clone()));
    }
    keys.sort();
    keys.dedup();
    for key in keys {
        let mut allowed: Vec<Option<String>> = Vec::new();
        for w in writes {
            let ops: Vec<(usize, &Op)> = w
                .ops
                .iter()
                .enumerate()
                .filter(|(_, o)| o.key == key)
                .collect();
            if ops.is_empty() {
                continue;
            }
            let required = ops.iter().rposition(|(_, o)| o.acked);
            match required {
                Some(r) => allowed.extend(ops[r..].iter().map(|(_, o)| o.state.clone())),
                None => {
                    allowed.push(known.get(&key).cloned().flatten());
                    allowed.extend(ops.iter().map(|(_, o)| o.state.clone()));
                }
            }
        }
        if allowed.is_empty() {
            allowed.push(known.get(&key).cloned().flatten());
        }
        let got = get(c, &key);
        assert!(
            allowed.contains(&got),
            "round {round}: {key} = {got:?}, allowed {allowed:?}"
        );
        known.insert(key, got);
    }
}

/// A bound for a step that should take milliseconds; passing it fails the test. Not a wait.
fn give_up_at() -> std::time::Instant {
    std::time::Instant::now() + std::time::Duration::from_secs(30)
}

/// Bulk items loaded once, so that a checkpoint throttled to 1 MiB/s runs for about two
/// seconds: long enough to be killed in the middle of it.
const BULK_ITEMS: usize = 2000;

fn load_bulk(c: &mut Conn) {
    let value = "b".repeat(1000);
    let mut requests = String::new();
    for i in 0..BULK_ITEMS {
        requests.push_str(&format!("set bulk-{i} 0 0 {}\r\n{value}\r\n", value.len()));
    }
    let replies = c.exchange(requests.as_bytes());
    assert_eq!(replies, b"STORED\r\n".repeat(BULK_ITEMS));
}

/// Async mode: sets `n` keys with no fence, then polls `stats persistence` until the log says
/// they are durable. Only the flush timer can make them so (a partial buffer, no `mn`):
/// ARCUS's async mode never writes a partial buffer. Returns the (key, value) pairs.
fn write_until_the_timer_flushes(c: &mut Conn, round: usize, n: usize) -> Vec<(String, String)> {
    let pairs: Vec<(String, String)> = (0..n)
        .map(|i| (format!("timer-{round}-{i}"), format!("t{round}-{i}")))
        .collect();
    for (k, v) in &pairs {
        c.send(format!("set {k} 0 0 {}\r\n{v}\r\n", v.len()).as_bytes());
        assert_eq!(c.read_until(b"\r\n"), b"STORED\r\n");
    }
    let appended = persistence_number(c, "log_appended_lsn");
    let deadline = give_up_at();
    while persistence_number(c, "log_durable_lsn") < appended {
        assert!(
            std::time::Instant::now() < deadline,
            "round {round}: the flush timer never made a partial buffer durable"
        );
        std::thread::yield_now();
    }
    pairs
}

/// Writes the server has served since it started (sets and deletes).
fn writes_served(c: &mut Conn) -> u64 {
    let stats = String::from_utf8(c.exchange(b"stats\r\n")).unwrap();
    ["cmd_set", "delete_hits", "delete_misses"]
        .iter()
        .map(|name| {
            stats
                .lines()
                .find_map(|l| l.strip_prefix(&format!("STAT {name} ")))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap()
        })
        .sum()
}

fn crash_loop(mode: &str, rounds: usize) {
    let seed = Rng::seed();
    let mut rng = Rng::new(seed);
    let tmp = tempfile::tempdir().unwrap();
    let settings = tempfile::tempdir().unwrap();
    let config = settings.path().join("cairn.toml");
    std::fs::write(&config, "checkpoint_rate_mb_s = 1\n").unwrap();
    let config = config.to_str().unwrap();
    let sync = mode == "sync";
    let mut known: HashMap<String, Option<String>> = HashMap::new();
    for round in 0..rounds {
        let server = Server::start_in(
            tmp.path(),
            &["--persistence", mode, "-t", "2", "--config", config],
        );
        let addr = server.addr;
        if round == 0 {
            load_bulk(&mut server.connect());
        }
        let flushed_by_timer = if sync {
            Vec::new()
        } else {
            write_until_the_timer_flushes(&mut server.connect(), round, 10)
        };
        let kill_after = 50 + rng.below(400);
        let checkpoint_now = rng.below(3) == 0;
        let round_seed = rng.next_u64();
        let writers: Vec<_> = (0..if sync { 3 } else { 6 })
            .map(|id| {
                std::thread::spawn(move || writer(addr, id, round_seed, if sync { 0 } else { 20 }))
            })
            .collect();
        // Kill after a random number of writes, sometimes in the middle of a checkpoint.
        let mut c = server.connect();
        let before = writes_served(&mut c);
        while writes_served(&mut c) - before < kill_after {
            std::thread::yield_now();
        }
        if checkpoint_now {
            c.send(b"checkpoint\r\n");
            // Throttled to 1 MiB/s, it copies the bulk items for about two seconds.
            let mut watch = server.connect();
            let deadline = give_up_at();
            while persistence_stat(&mut watch, "last_chkpt_in_progress") != "true" {
                assert!(
                    std::time::Instant::now() < deadline,
                    "no checkpoint started"
                );
                std::thread::yield_now();
            }
        }
        server.kill9();
        let writes: Vec<Writes> = writers.into_iter().map(|w| w.join().unwrap()).collect();
        let server = Server::start_in(tmp.path(), &["--persistence", mode, "--config", config]);
        let mut c = server.connect();
        check_round(&mut c, &mut known, &writes, round);
        let bulk = format!(
            "VALUE bulk-{} 0 1000\r\n{}\r\nEND\r\n",
            BULK_ITEMS - 1,
            "b".repeat(1000)
        );
        assert_eq!(
            String::from_utf8(c.exchange(format!("get bulk-{}\r\n", BULK_ITEMS - 1).as_bytes()))
                .unwrap(),
            bulk,
            "round {round}: bulk items lost"
        );
        for (key, value) in flushed_by_timer {
            assert_eq!(
                get(&mut c, &key),
                Some(value),
                "round {round}: lost after the timer"
            );
        }
        server.kill9();
    }
}

#[test]
fn kill9_crash_loop_sync_loses_nothing_acknowledged() {
    crash_loop("sync", 20);
}

/// Async mode hands every batch to the kernel before the replies it covers go out, so a
/// kill -9 loses no acknowledged write (a power loss may: see the persistence layer's
/// power-cut loop).
#[test]
fn kill9_crash_loop_async_loses_nothing_acknowledged() {
    crash_loop("async", 20);
}

#[test]
fn graceful_restart_keeps_everything_and_checkpoints() {
    let tmp = tempfile::tempdir().unwrap();
    let mut server = Server::start_in(tmp.path(), &[]);
    let mut c = server.connect();
    golden(
        &mut c,
        &[
            ("set a 5 0 1\r\n1\r\n", "STORED\r\n"),
            ("set b 0 0 2\r\n22\r\n", "STORED\r\n"),
            ("incr b 3\r\n", "25\r\n"),
            ("append a 0 0 1\r\nx\r\n", "STORED\r\n"),
            ("set gone 0 0 1\r\nz\r\n", "STORED\r\n"),
            ("delete gone\r\n", "DELETED\r\n"),
            ("ms m 2 T0 F3\r\nhi\r\n", "HD\r\n"),
        ],
    );
    let pid = server.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    assert!(server.child.wait().unwrap().success());
    let server = Server::start_in(tmp.path(), &[]);
    let mut c = server.connect();
    golden(
        &mut c,
        &[(
            "get a b gone m\r\n",
            "VALUE a 5 2\r\n1x\r\nVALUE b 0 2\r\n25\r\nVALUE m 3 2\r\nhi\r\nEND\r\n",
        )],
    );
    let stats = String::from_utf8(c.exchange(b"stats persistence\r\n")).unwrap();
    for field in [
        "STAT mode sync",
        "STAT checkpoints_done 0",
        "STAT recovered_items 3",
        "STAT fdatasync_latency_us_p99 ",
    ] {
        assert!(stats.contains(field), "{field} in {stats}");
    }
    assert!(
        !stats.contains("STAT snapshot_lsn 0\r\n"),
        "the shutdown checkpoint was loaded: {stats}"
    );
}

#[test]
fn admin_commands_switch_mode_and_checkpoint() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    golden(
        &mut c,
        &[
            ("set a 0 0 1\r\n1\r\n", "STORED\r\n"),
            ("config async_logging on\r\n", "OK\r\n"),
            ("set b 0 0 1\r\n2\r\n", "STORED\r\n"),
            ("config async_logging off\r\n", "OK\r\n"),
            ("config chkpt_interval_pct_snapshot 50\r\n", "OK\r\n"),
            (
                "config chkpt_interval_min_logsize x\r\n",
                "CLIENT_ERROR bad value\r\n",
            ),
            ("checkpoint\r\n", "OK\r\n"),
        ],
    );
    let stats = String::from_utf8(c.exchange(b"stats persistence\r\n")).unwrap();
    assert!(stats.contains("STAT checkpoints_done 1\r\n"), "{stats}");
    assert!(
        stats.contains("STAT chkpt_interval_pct_snapshot 50\r\n"),
        "{stats}"
    );
    let off = Server::start(&["--persistence", "off"]);
    golden(
        &mut off.connect(),
        &[("checkpoint\r\n", "SERVER_ERROR persistence is off\r\n")],
    );
}

#[test]
fn a_damaged_log_refuses_to_start_naming_file_and_offset() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start_in(tmp.path(), &[]);
    let mut c = server.connect();
    for i in 0..200 {
        golden(
            &mut c,
            &[(&format!("set k{i} 0 0 5\r\nvalue\r\n"), "STORED\r\n")],
        );
    }
    server.kill9();
    let log_dir = tmp.path().join("log");
    // The first segment by name (the log directory may also hold a prepared spare file).
    let seg = log_dir.join("00000000000000000001.wal");
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[60] ^= 0x40;
    std::fs::write(&seg, bytes).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["-p", "0", "--data-dir"])
        .arg(tmp.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("00000000000000000001.wal") && err.contains("at offset 40"),
        "{err}"
    );
}
