//! Durability end to end: restarts, kill -9 crash loops in sync and async mode, damaged files,
//! and the admin commands. Each crash loop prints its seed; set CAIRN_TEST_SEED to replay one.
//!
//! The crash loop's oracle: every value written is unique over the whole run (writer, round
//! and sequence number in it), so a value that was lost cannot be mistaken for an older one;
//! after every restart every item ever acknowledged is read back (the writers' keys, the bulk
//! items, the keys the async flush timer made durable), and the server must hold exactly as
//! many items as the test knows of (no key nobody wrote). The kill comes at a random point of
//! the round (seeded): after a random number of writes, at a random moment of a checkpoint
//! that is under way, or after a checkpoint finished; each kind in about a third of the rounds.

mod common;

use std::collections::HashMap;
use std::io::Write;
use std::net::SocketAddr;
use std::process::Command;

use cairn_testkit::Rng;
use common::{golden, persistence_number, persistence_stat, Conn, Server};

/// Each key's value (None: not there), read with multi-key `get`s of 100 keys.
fn get_many(c: &mut Conn, keys: &[String]) -> Vec<Option<String>> {
    let mut out = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(100) {
        let reply = c.exchange(format!("get {}\r\n", chunk.join(" ")).as_bytes());
        let reply = String::from_utf8(reply).unwrap();
        let mut found: HashMap<&str, &str> = HashMap::new();
        let mut lines = reply.split("\r\n");
        loop {
            let head = lines.next().expect("END");
            if head == "END" {
                break;
            }
            let key = head
                .strip_prefix("VALUE ")
                .and_then(|h| h.split(' ').next())
                .unwrap_or_else(|| panic!("{head:?} in {reply:?}"));
            let value = lines.next().expect("a value line");
            assert!(
                found.insert(key, value).is_none(),
                "{key} twice in {reply:?}"
            );
        }
        for key in chunk {
            out.push(found.remove(key.as_str()).map(str::to_string));
        }
        assert!(found.is_empty(), "keys not asked for: {found:?}");
    }
    out
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
/// until the connection breaks. Every `fence_every` writes it sends `mn`. Each value names the
/// writer, the round and the write's number: no value is written twice in a run.
fn writer(addr: SocketAddr, id: usize, round: usize, seed: u64, fence_every: usize) -> Writes {
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
        let state = (rng.below(5) != 0).then(|| format!("w{id}-r{round}-v{n}"));
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

/// Checks every key a writer touched (and every key known from earlier rounds: the bulk
/// items, the timer's keys, the writers' keys of every round before) after a restart, then
/// records what is there as the known state for the next round. The server must hold no
/// other item.
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
    let values = get_many(c, &keys);
    for (key, got) in keys.into_iter().zip(values) {
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
        assert!(
            allowed.contains(&got),
            "round {round}: {key} = {:?}, allowed {:?}",
            short(&got),
            allowed.iter().map(short).collect::<Vec<_>>()
        );
        known.insert(key, got);
    }
    let present = known.values().filter(|v| v.is_some()).count() as u64;
    let items = stat(c, "curr_items");
    assert_eq!(
        items, present,
        "round {round}: the server holds {items} items, the test knows of {present}"
    );
}

/// A state as a failure shows it: a bulk value's first 20 bytes (they name it).
fn short(state: &Option<String>) -> Option<&str> {
    state.as_deref().map(|v| &v[..v.len().min(20)])
}

/// A bound for a step that should take milliseconds; passing it fails the test. Not a wait.
fn give_up_at() -> std::time::Instant {
    std::time::Instant::now() + std::time::Duration::from_secs(30)
}

/// Bulk items loaded once, so that a checkpoint throttled to 1 MiB/s runs for about two
/// seconds: long enough to be killed in the middle of it.
const BULK_ITEMS: usize = 2000;

/// Bulk item `i`'s value: 1000 bytes that name the item, so that items mixed up show.
fn bulk_value(i: usize) -> String {
    let head = format!("bulk-{i}-");
    format!("{head}{}", "b".repeat(1000 - head.len()))
}

/// Loads the bulk items (acknowledged, each) and returns them as known state.
fn load_bulk(c: &mut Conn) -> Vec<(String, Option<String>)> {
    let mut requests = String::new();
    let mut items = Vec::new();
    for i in 0..BULK_ITEMS {
        let value = bulk_value(i);
        requests.push_str(&format!("set bulk-{i} 0 0 {}\r\n{value}\r\n", value.len()));
        items.push((format!("bulk-{i}"), Some(value)));
    }
    let replies = c.exchange(requests.as_bytes());
    assert_eq!(replies, b"STORED\r\n".repeat(BULK_ITEMS));
    items
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

/// A `stats` field that is a number.
fn stat(c: &mut Conn, name: &str) -> u64 {
    let stats = String::from_utf8(c.exchange(b"stats\r\n")).unwrap();
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&format!("STAT {name} ")))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no {name} in {stats}"))
}

/// Writes the server has served since it started (sets and deletes).
fn writes_served(c: &mut Conn) -> u64 {
    ["cmd_set", "delete_hits", "delete_misses"]
        .iter()
        .map(|name| stat(c, name))
        .sum()
}

/// Where in a round the server is killed.
#[derive(Clone, Copy, Debug, PartialEq)]
enum KillPoint {
    /// After a random number of writes.
    Writes,
    /// At a random moment of a checkpoint under way (throttled, it lasts about two seconds).
    InCheckpoint,
    /// After a checkpoint finished, and a random number of writes after it: recovery from
    /// the new snapshot and the log after it.
    AfterCheckpoint,
}

/// Waits until `last_chkpt_in_progress` reads `want`.
fn until_checkpoint_in_progress(c: &mut Conn, want: bool, round: usize) {
    let deadline = give_up_at();
    while persistence_stat(c, "last_chkpt_in_progress") != want.to_string() {
        assert!(
            std::time::Instant::now() < deadline,
            "round {round}: last_chkpt_in_progress never became {want}"
        );
        std::thread::yield_now();
    }
}

/// Waits until the server has served `n` more writes than `before`.
fn until_writes(c: &mut Conn, before: u64, n: u64, round: usize) {
    let deadline = give_up_at();
    while writes_served(c) - before < n {
        assert!(
            std::time::Instant::now() < deadline,
            "round {round}: the writers stopped before {n} writes"
        );
        std::thread::yield_now();
    }
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
    // Each kind of kill point in a third of the rounds, in a seeded order.
    let kinds = [
        KillPoint::Writes,
        KillPoint::InCheckpoint,
        KillPoint::AfterCheckpoint,
    ];
    let mut plan: Vec<KillPoint> = (0..rounds).map(|r| kinds[r % kinds.len()]).collect();
    for i in (1..plan.len()).rev() {
        plan.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let mut killed_in_checkpoint = 0;
    for (round, &kill_point) in plan.iter().enumerate() {
        let server = Server::start_in(
            tmp.path(),
            &["--persistence", mode, "-t", "2", "--config", config],
        );
        let addr = server.addr;
        if round == 0 {
            known.extend(load_bulk(&mut server.connect()));
        }
        if !sync {
            // Durable by the timer's flush: known from here on, checked after every restart.
            let pairs = write_until_the_timer_flushes(&mut server.connect(), round, 10);
            known.extend(pairs.into_iter().map(|(k, v)| (k, Some(v))));
        }
        let kill_after = rng.below(600);
        let pause_us = rng.below(20_000);
        let round_seed = rng.next_u64();
        let writers: Vec<_> = (0..if sync { 3 } else { 6 })
            .map(|id| {
                std::thread::spawn(move || {
                    writer(addr, id, round, round_seed, if sync { 0 } else { 20 })
                })
            })
            .collect();
        let mut c = server.connect();
        let mut watch = server.connect();
        let before = writes_served(&mut c);
        match kill_point {
            KillPoint::Writes => until_writes(&mut c, before, kill_after, round),
            KillPoint::InCheckpoint => {
                until_writes(&mut c, before, kill_after / 4, round);
                c.send(b"checkpoint\r\n");
                until_checkpoint_in_progress(&mut watch, true, round);
                // Throttled to 1 MiB/s, it copies the 2 MB of bulk items for about two
                // seconds: kill somewhere in its first 1.5 s.
                std::thread::sleep(std::time::Duration::from_micros(75 * pause_us));
            }
            KillPoint::AfterCheckpoint => {
                c.send(b"checkpoint\r\n");
                until_checkpoint_in_progress(&mut watch, true, round);
                until_checkpoint_in_progress(&mut watch, false, round);
                let after = writes_served(&mut watch);
                until_writes(&mut watch, after, kill_after / 4, round);
            }
        }
        std::thread::sleep(std::time::Duration::from_micros(pause_us % 2_000));
        let in_checkpoint = persistence_stat(&mut watch, "last_chkpt_in_progress") == "true";
        killed_in_checkpoint += usize::from(in_checkpoint);
        server.kill9();
        let writes: Vec<Writes> = writers.into_iter().map(|w| w.join().unwrap()).collect();
        eprintln!(
            "round {round}: killed at {kill_point:?} (checkpoint under way: {in_checkpoint}) \
             after {} writes, {} acknowledged",
            writes.iter().map(|w| w.ops.len()).sum::<usize>(),
            writes
                .iter()
                .map(|w| w.ops.iter().filter(|o| o.acked).count())
                .sum::<usize>()
        );
        let server = Server::start_in(tmp.path(), &["--persistence", mode, "--config", config]);
        let mut c = server.connect();
        check_round(&mut c, &mut known, &writes, round);
        server.kill9();
    }
    assert!(
        killed_in_checkpoint > 0,
        "seed {seed}: no kill came while a checkpoint was under way"
    );
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
