//! Failover under load: a replication group of 3 cairn nodes (`--replication sync`, Debian's
//! ZooKeeper, 4 s sessions) while writers overwrite and delete a shared key space; in each
//! round the primary is killed (kill -9) or frozen (SIGSTOP for longer than its session, then
//! SIGCONT) with writes in flight.
//!
//! ```text
//!   writers (4 threads) ──set/delete──> the primary the test knows of
//!     each write recorded: key, value (unique: round, writer, number), when it was sent, and
//!     its outcome: acknowledged (STORED, DELETED) at a time, NOT_FOUND (no effect), refused
//!     (a replica's "writes refused": not applied), or unknown (timeout, connection lost, a
//!     replication or persistence error)
//!   a round, in two epochs:
//!     1. writes flow ─> fault on the primary ─> a survivor is elected ─> writers stop
//!        ─> check the new primary (before any write there can hide a lost one)
//!     2. writers on the new primary ─> [kill -9: the old primary restarts and rejoins under
//!        load | SIGSTOP: SIGCONT, it rejoins by itself, and a stale client writes to it at
//!        once] ─> writers stop ─> check the new primary ─> every node caught up ─> all three
//!        hold exactly the same items
//! ```
//!
//! The check, per key: the value must be the state of some write (or the initial "absent")
//! that no acknowledged write follows in real time (sent after it was acknowledged). So every
//! acknowledged write is there or superseded by a later write of the same key (acknowledged
//! or of unknown outcome), a deleted key stays deleted, and no value appears that was never
//! written. A write of unknown outcome may surface only until the check that ends its epoch:
//! after that it is either there or gone for good (each check builds on what the one before
//! saw). No node may hold a key outside the key space.
//!
//! The seed (printed; `CAIRN_TEST_SEED` replays it) picks the order of the faults, when they
//! come and the writers' keys.

mod common;
#[path = "common/zookeeper.rs"]
mod zookeeper;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cairn_testkit::Rng;
use common::{Conn, Server};
use zookeeper::{Inspector, ZooKeeper};

/// Group members.
const NODES: usize = 3;
/// Rounds, each with one fault (half of them kill -9, half SIGSTOP).
const ROUNDS: usize = 10;
/// How long a frozen primary stays stopped: past its session (4 s), with a margin.
const FROZEN: Duration = Duration::from_secs(5);
/// Writer threads.
const WRITERS: usize = 4;
/// Keys the writers share: `k0` .. `k39`.
const KEYS: u64 = 40;
/// The members' ZooKeeper session: long enough that a loaded 2-core machine does not lose
/// one by itself.
const SESSION_MS: &str = "4000";
/// How long a sync write waits for a replica before it is answered with an error.
const REPLICATION_TIMEOUT_MS: &str = "2000";
/// A writer's wait for a reply before it gives the write up as of unknown outcome: longer
/// than the replication timeout, so a write without a replica is answered, not timed out.
const REPLY_TIMEOUT: Duration = Duration::from_secs(3);
/// The longest wait for anything (an election, a restart, a replica catching up).
const LIMIT: Duration = Duration::from_secs(60);

fn group_args(zk: &str) -> Vec<String> {
    [
        "--zookeeper",
        zk,
        "--service-code",
        "load",
        "--replication-group",
        "g0",
        "--replication",
        "sync",
        "--replication-timeout-ms",
        REPLICATION_TIMEOUT_MS,
        "--zookeeper-session-timeout-ms",
        SESSION_MS,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Polls `f` every 20 ms until it holds, for at most [`LIMIT`] (then fails naming `what`).
fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + LIMIT;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `stats <group>` as a map.
fn stats(addr: SocketAddr, group: &str) -> BTreeMap<String, String> {
    let mut c = Conn::new(addr);
    c.send(format!("stats {group}\r\n").as_bytes());
    let text = String::from_utf8(c.read_until(b"END\r\n")).unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("STAT "))
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn role(addr: SocketAddr) -> String {
    stats(addr, "replication")["role"].clone()
}

fn number(map: &BTreeMap<String, String>, name: &str) -> u64 {
    map.get(name)
        .unwrap_or_else(|| panic!("no stat {name} in {map:?}"))
        .parse()
        .unwrap()
}

/// Every key of the key space with its value on `addr` (None: absent), and its item count.
fn contents(addr: SocketAddr) -> (BTreeMap<String, Option<String>>, u64) {
    let keys: Vec<String> = (0..KEYS).map(|k| format!("k{k}")).collect();
    let mut c = Conn::new(addr);
    let reply =
        String::from_utf8(c.exchange(format!("get {}\r\n", keys.join(" ")).as_bytes())).unwrap();
    let mut out: BTreeMap<String, Option<String>> =
        keys.iter().map(|k| (k.clone(), None)).collect();
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
        let value = lines.next().expect("a value line").to_string();
        let slot = out
            .get_mut(key)
            .unwrap_or_else(|| panic!("{key} not asked for"));
        assert!(slot.replace(value).is_none(), "{key} twice in {reply:?}");
    }
    (out, number(&stats(addr, ""), "curr_items"))
}

/// What became of a write.
#[derive(Clone, Debug)]
enum Outcome {
    /// STORED or DELETED, received at this time.
    Acked(Instant),
    /// A delete answered NOT_FOUND at this time: it changed nothing.
    NotFound(Instant),
    /// Refused before it was applied (a replica's `writes refused`).
    Refused,
    /// No answer, or an error that does not say whether it was applied (what happened).
    Unknown(String),
}

/// One write a writer sent.
#[derive(Clone, Debug)]
struct Op {
    key: String,
    /// The value set, or None for a delete.
    state: Option<String>,
    sent: Instant,
    outcome: Outcome,
    /// The epoch it was sent in (two per round, see the module doc).
    epoch: usize,
    who: String,
}

/// A client connection with a line reader.
struct Client {
    stream: TcpStream,
    reader: BufReader<TcpStream>,
    addr: SocketAddr,
}

impl Client {
    fn connect(addr: SocketAddr) -> Option<Client> {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
        stream.set_read_timeout(Some(REPLY_TIMEOUT)).unwrap();
        stream.set_write_timeout(Some(REPLY_TIMEOUT)).unwrap();
        let reader = BufReader::new(stream.try_clone().unwrap());
        Some(Client {
            stream,
            reader,
            addr,
        })
    }

    /// Sends one write and classifies its reply, and whether the connection can be used
    /// again.
    fn write(&mut self, request: &str, is_delete: bool) -> (Outcome, bool) {
        if let Err(e) = self.stream.write_all(request.as_bytes()) {
            // Some of it may have gone out: the write may have been applied.
            return (Outcome::Unknown(format!("send: {e}")), false);
        }
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(n) if n > 0 && line.ends_with("\r\n") => {}
            Ok(_) => return (Outcome::Unknown(format!("closed after {line:?}")), false),
            Err(e) => return (Outcome::Unknown(format!("reply: {e}")), false),
        }
        let now = Instant::now();
        match line.as_str() {
            "STORED\r\n" if !is_delete => (Outcome::Acked(now), true),
            "DELETED\r\n" if is_delete => (Outcome::Acked(now), true),
            "NOT_FOUND\r\n" if is_delete => (Outcome::NotFound(now), true),
            l if l.starts_with("SERVER_ERROR writes refused: ") => (Outcome::Refused, true),
            // Applied here and logged, but not known to be on a replica (the server closes
            // the connection after it).
            l if l.starts_with("SERVER_ERROR replication: ")
                || l.starts_with("SERVER_ERROR persistence failure") =>
            {
                (Outcome::Unknown(l.trim_end().to_string()), false)
            }
            l => panic!("{request:?} to {}: unexpected reply {l:?}", self.addr),
        }
    }
}

/// Counters the test watches while the writers run.
#[derive(Default)]
struct Progress {
    acked: AtomicUsize,
}

/// A writer: until `stop`, writes to whatever `primary` holds (reconnecting when it moves or
/// when a connection fails), 4 sets to 1 delete, and records every write it sent.
fn writer(
    id: usize,
    epoch: usize,
    seed: u64,
    primary: Arc<Mutex<SocketAddr>>,
    stop: Arc<AtomicBool>,
    progress: Arc<Progress>,
) -> Vec<Op> {
    let mut rng = Rng::new(seed);
    let mut ops = Vec::new();
    let mut client: Option<Client> = None;
    let mut n = 0;
    while !stop.load(Ordering::Acquire) {
        let target = *primary.lock().unwrap();
        if client.as_ref().is_some_and(|c| c.addr != target) {
            client = None;
        }
        let Some(c) = client.as_mut() else {
            client = Client::connect(target);
            if client.is_none() {
                std::thread::sleep(Duration::from_millis(20));
            }
            continue;
        };
        n += 1;
        let key = format!("k{}", rng.below(KEYS));
        let state = (rng.below(5) != 0).then(|| format!("r{}.{}.w{id}.{n}", epoch / 2, epoch % 2));
        let request = match &state {
            Some(v) => format!("set {key} 0 0 {}\r\n{v}\r\n", v.len()),
            None => format!("delete {key}\r\n"),
        };
        let sent = Instant::now();
        let (outcome, keep) = c.write(&request, state.is_none());
        let refused = matches!(outcome, Outcome::Refused);
        if matches!(outcome, Outcome::Acked(_)) {
            progress.acked.fetch_add(1, Ordering::AcqRel);
        }
        ops.push(Op {
            key,
            state,
            sent,
            outcome,
            epoch,
            who: format!("w{id}"),
        });
        if !keep {
            client = None;
        } else if refused {
            // Not the primary (any more): wait for the test to name the new one.
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    ops
}

/// A client that still takes the frozen primary for the primary: once it runs again, it
/// writes to it (a fresh connection each time) until the node refuses writes, for at most
/// 8 s. What it was acknowledged must survive like any other acknowledged write.
fn stale_client(addr: SocketAddr, epoch: usize) -> Vec<Op> {
    let mut ops = Vec::new();
    let until = Instant::now() + Duration::from_secs(8);
    let mut n = 0;
    while Instant::now() < until {
        let Some(mut c) = Client::connect(addr) else {
            break;
        };
        n += 1;
        let key = format!("k{}", n % KEYS);
        let value = format!("r{}.stale.{n}", epoch / 2);
        let sent = Instant::now();
        let request = format!("set {key} 0 0 {}\r\n{value}\r\n", value.len());
        let (outcome, _) = c.write(&request, false);
        let refused = matches!(outcome, Outcome::Refused);
        ops.push(Op {
            key,
            state: Some(value),
            sent,
            outcome,
            epoch,
            who: "stale".into(),
        });
        if refused {
            break;
        }
    }
    ops
}

/// The states a key may hold at a check: `before`, what the check before this one saw
/// (at the first, the initial absence), unless a write acknowledged since was sent after
/// it; and the state of every write of this epoch (`ops`: acknowledged, NOT_FOUND or of
/// unknown outcome) that no acknowledged write of this epoch was sent after. A write's end
/// is when it was acknowledged (or answered NOT_FOUND); one of unknown outcome has none yet.
/// Writes of earlier epochs are not candidates: each check that ended one saw them there,
/// superseded, or gone for good.
fn allowed(before: &Option<String>, ops: &[&Op]) -> Vec<Option<String>> {
    let acked_sends: Vec<Instant> = ops
        .iter()
        .filter(|o| matches!(o.outcome, Outcome::Acked(_)))
        .map(|o| o.sent)
        .collect();
    let mut out = Vec::new();
    if acked_sends.is_empty() {
        out.push(before.clone());
    }
    for o in ops {
        let end = match o.outcome {
            Outcome::Acked(at) | Outcome::NotFound(at) => Some(at),
            Outcome::Unknown(_) => None,
            Outcome::Refused => continue,
        };
        let superseded = end.is_some_and(|end| acked_sends.iter().any(|&sent| sent > end));
        if !superseded && !out.contains(&o.state) {
            out.push(o.state.clone());
        }
    }
    out
}

/// Checks what `addr` holds after `epoch`: every key allowed given what the check before saw
/// (`before`) and the epoch's writes (see [`allowed`]), and no other item. Returns what it
/// saw, for the next check.
fn check(
    addr: SocketAddr,
    before: &BTreeMap<String, Option<String>>,
    history: &[Op],
    epoch: usize,
    started: Instant,
    seed: u64,
) -> BTreeMap<String, Option<String>> {
    let (got, items) = contents(addr);
    let at = |t: Instant| t.duration_since(started).as_millis();
    for (key, value) in &got {
        let mut ops: Vec<&Op> = history
            .iter()
            .filter(|o| o.epoch == epoch && &o.key == key)
            .collect();
        let allowed = allowed(&before[key], &ops);
        if allowed.contains(value) {
            continue;
        }
        let written = value.is_none() || history.iter().any(|o| &o.state == value);
        ops.sort_by_key(|o| std::cmp::Reverse(o.sent));
        let story: Vec<String> = ops
            .iter()
            .take(12)
            .map(|o| {
                let outcome = match &o.outcome {
                    Outcome::Acked(t) => format!("acked at {} ms", at(*t)),
                    Outcome::NotFound(t) => format!("NOT_FOUND at {} ms", at(*t)),
                    Outcome::Refused => "refused".into(),
                    Outcome::Unknown(why) => format!("unknown ({why})"),
                };
                format!(
                    "{} {:?} sent at {} ms, {outcome}",
                    o.who,
                    o.state,
                    at(o.sent)
                )
            })
            .collect();
        panic!(
            "seed {seed}, round {} epoch {}: {key} = {value:?} on {addr}{}; allowed {allowed:?} \
             (the check before saw {:?}); its writes in this epoch, newest first:\n  {}",
            epoch / 2,
            epoch % 2 + 1,
            if written {
                ""
            } else {
                ", a value never written"
            },
            before[key],
            story.join("\n  ")
        );
    }
    let present = got.values().filter(|v| v.is_some()).count() as u64;
    assert_eq!(
        items,
        present,
        "seed {seed}, round {} epoch {}: {addr} holds {items} items, {present} of the key space",
        epoch / 2,
        epoch % 2 + 1
    );
    got
}

fn signal(pid: u32, sig: &str) {
    let status = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {sig} {pid}");
}

/// The primary among `addrs` (polling until exactly one says so).
fn elected(addrs: &[SocketAddr]) -> SocketAddr {
    let mut found = None;
    wait_until("the election", || {
        let primaries: Vec<SocketAddr> = addrs
            .iter()
            .copied()
            .filter(|&a| role(a) == "primary")
            .collect();
        found = (primaries.len() == 1).then(|| primaries[0]);
        found.is_some()
    });
    found.unwrap()
}

/// Waits until every replica in `replicas` follows `primary` and has applied all it published
/// (the writers have stopped, so that is a fixed point).
fn caught_up(primary: SocketAddr, replicas: &[SocketAddr]) {
    wait_until("the replicas to catch up", || {
        let p = stats(primary, "replication");
        if p["role"] != "primary" || number(&p, "replicas") < replicas.len() as u64 {
            return false;
        }
        let revision = number(&p, "revision");
        replicas.iter().all(|&r| {
            let s = stats(r, "replication");
            s["role"] == "replica"
                && s["connected"] == "yes"
                && number(&s, "applied_revision") >= revision
        })
    });
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    Kill,
    Freeze,
}

#[test]
fn failover_under_load_loses_no_acknowledged_write_and_the_group_converges() {
    if !zookeeper::installed() {
        return;
    }
    let seed = Rng::seed();
    let mut rng = Rng::new(seed);
    let zk = ZooKeeper::start();
    let address = zk.address();
    let args = group_args(&address);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let lock = "/arcus_repl/group_list/load/g0/primary";

    let dirs: Vec<tempfile::TempDir> = (0..NODES).map(|_| tempfile::tempdir().unwrap()).collect();
    // The first member alone is the primary; the others take a full copy before they serve.
    let mut nodes: Vec<Option<Server>> = dirs
        .iter()
        .map(|d| Some(Server::start_in(d.path(), &args)))
        .collect();
    let addr = |nodes: &[Option<Server>], i: usize| nodes[i].as_ref().unwrap().addr;
    let mut primary = 0;
    assert_eq!(role(addr(&nodes, 0)), "primary");

    let mut faults: Vec<Fault> = (0..ROUNDS)
        .map(|r| {
            if r % 2 == 0 {
                Fault::Kill
            } else {
                Fault::Freeze
            }
        })
        .collect();
    for i in (1..faults.len()).rev() {
        faults.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let started = Instant::now();
    let mut history: Vec<Op> = Vec::new();
    // What the last check saw: at first every key absent.
    let mut seen: BTreeMap<String, Option<String>> =
        (0..KEYS).map(|k| (format!("k{k}"), None)).collect();
    for (round, &fault) in faults.iter().enumerate() {
        let round_started = Instant::now();
        let others: Vec<usize> = (0..NODES).filter(|&i| i != primary).collect();
        caught_up(
            addr(&nodes, primary),
            &others.iter().map(|&i| addr(&nodes, i)).collect::<Vec<_>>(),
        );

        // Epoch 1: the fault comes in the middle of the writes, after a random number of them.
        let target = Arc::new(Mutex::new(addr(&nodes, primary)));
        let writers = run_writers(&target, 2 * round, &mut rng);
        let fault_after = 50 + rng.below(200) as usize;
        wait_until("writes before the fault", || {
            writers.progress.acked.load(Ordering::Acquire) >= fault_after
        });
        let old = nodes[primary].as_ref().unwrap();
        let (old_addr, old_pid) = (old.addr, old.child.id());
        match fault {
            Fault::Kill => nodes[primary].take().unwrap().kill9(),
            Fault::Freeze => signal(old_pid, "-STOP"),
        }
        let faulted = Instant::now();
        let new_addr = elected(&others.iter().map(|&i| addr(&nodes, i)).collect::<Vec<_>>());
        let new = *others
            .iter()
            .find(|&&i| addr(&nodes, i) == new_addr)
            .unwrap();
        let election = faulted.elapsed();
        // A client of its own each time: an idle one (nothing drives its runtime between
        // calls) misses its pings and times out.
        let (lock_data, _) = Inspector::connect(&address)
            .data(lock)
            .expect("the primary's lock");
        assert!(
            String::from_utf8_lossy(&lock_data).starts_with(&new_addr.to_string()),
            "round {round}: the lock names {:?}, the primary is {new_addr}",
            String::from_utf8_lossy(&lock_data)
        );
        history.extend(writers.stop());
        report(
            &history,
            2 * round,
            &format!("{fault:?}, elected in {election:?}"),
        );
        // The new primary holds every acknowledged write (or a later one), before any write
        // on it could overwrite a lost one.
        seen = check(new_addr, &seen, &history, 2 * round, started, seed);

        // Epoch 2: writes on the new primary while the old one comes back as a replica
        // (restarted after kill -9; after SIGCONT it rejoins by itself).
        *target.lock().unwrap() = new_addr;
        let writers = run_writers(&target, 2 * round + 1, &mut rng);
        let stale = match fault {
            Fault::Kill => {
                nodes[primary] = Some(Server::start_in(dirs[primary].path(), &args));
                None
            }
            Fault::Freeze => {
                // Frozen past its session (the election proved that it ended): it runs again,
                // and a client that still takes it for the primary writes to it at once.
                std::thread::sleep(FROZEN.saturating_sub(faulted.elapsed()));
                signal(old_pid, "-CONT");
                let epoch = 2 * round + 1;
                Some(std::thread::spawn(move || stale_client(old_addr, epoch)))
            }
        };
        let before = writers.progress.acked.load(Ordering::Acquire);
        wait_until("writes on the new primary", || {
            writers.progress.acked.load(Ordering::Acquire) >= before + 50
        });
        history.extend(writers.stop());
        if let Some(s) = stale {
            history.extend(s.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        }
        report(&history, 2 * round + 1, "writes on the new primary");
        seen = check(new_addr, &seen, &history, 2 * round + 1, started, seed);
        let want = &seen;
        // The group converges: every node holds what the primary holds, nothing more.
        let replicas: Vec<SocketAddr> = (0..NODES)
            .filter(|&i| i != new)
            .map(|i| addr(&nodes, i))
            .collect();
        caught_up(new_addr, &replicas);
        for &r in &replicas {
            let (got, items) = contents(r);
            let differ: Vec<String> = want
                .iter()
                .filter(|&(k, v)| got.get(k) != Some(v))
                .map(|(k, v)| format!("{k}: {:?} there, {v:?} on the primary", got[k]))
                .collect();
            assert!(
                differ.is_empty(),
                "seed {seed}, round {round}: replica {r} differs from the primary {new_addr}: {}",
                differ.join("; ")
            );
            assert_eq!(
                items,
                want.values().filter(|v| v.is_some()).count() as u64,
                "seed {seed}, round {round}: replica {r} holds other items"
            );
        }
        eprintln!(
            "round {round}: checked twice and converged, {:?} in all",
            round_started.elapsed()
        );
        primary = new;
    }
}

/// Starts the writers of `epoch` on whatever `target` holds.
fn run_writers(target: &Arc<Mutex<SocketAddr>>, epoch: usize, rng: &mut Rng) -> Writers {
    let stop = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(Progress::default());
    let threads: Vec<_> = (0..WRITERS)
        .map(|id| {
            let (target, stop, progress) =
                (Arc::clone(target), Arc::clone(&stop), Arc::clone(&progress));
            let seed = rng.next_u64();
            std::thread::spawn(move || writer(id, epoch, seed, target, stop, progress))
        })
        .collect();
    Writers {
        stop,
        progress,
        threads,
    }
}

/// Writer threads of one epoch.
struct Writers {
    stop: Arc<AtomicBool>,
    progress: Arc<Progress>,
    threads: Vec<std::thread::JoinHandle<Vec<Op>>>,
}

impl Writers {
    /// Stops them and returns their writes (a writer's panic goes on here).
    fn stop(self) -> Vec<Op> {
        self.stop.store(true, Ordering::Release);
        self.threads
            .into_iter()
            .flat_map(|t| t.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    }
}

/// Prints what became of an epoch's writes.
fn report(history: &[Op], epoch: usize, what: &str) {
    let ops: Vec<&Op> = history.iter().filter(|o| o.epoch == epoch).collect();
    let count = |f: fn(&Op) -> bool| ops.iter().filter(|o| f(o)).count();
    eprintln!(
        "round {} epoch {} ({what}): {} writes: {} acknowledged, {} NOT_FOUND, {} unknown, {} \
         refused; {} acknowledged by the old primary after SIGCONT",
        epoch / 2,
        epoch % 2 + 1,
        ops.len(),
        count(|o| matches!(o.outcome, Outcome::Acked(_))),
        count(|o| matches!(o.outcome, Outcome::NotFound(_))),
        count(|o| matches!(o.outcome, Outcome::Unknown(_))),
        count(|o| matches!(o.outcome, Outcome::Refused)),
        count(|o| o.who == "stale" && matches!(o.outcome, Outcome::Acked(_))),
    );
    for o in &ops {
        if let Outcome::Unknown(why) = &o.outcome {
            eprintln!("  unknown: {} {} {:?}: {why}", o.who, o.key, o.state);
        }
    }
}
