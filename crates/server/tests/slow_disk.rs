//! A slow log disk never stalls reads: the real binary, its log on the real disk with every
//! fdatasync taking 2 s longer (the test switch `CAIRN_TEST_LOG_SYNC_DELAY_MS`), writers that
//! fill the log's pending buffer (made 2 MiB by `CAIRN_TEST_LOG_PENDING_KIB`), and 100 readers
//! of other keys whose 99th percentile latency must stay under 50 ms meanwhile, and whose
//! slowest read must stay well under one slow fdatasync, in sync and async mode, and while a
//! `flush_all` waits.
//!
//! What made them stall before: an append waited for room in the log's buffer under the
//! store's shard lock, on a tokio worker thread, and `flush_all` held every shard lock across
//! that wait. Now a writer's connection is parked before it writes (no lock, no thread), and
//! an append never waits.
//!
//! The premise is checked, not assumed: the control batch (one write and its fence) takes at
//! least the injected delay, every measuring window holds a whole slow batch (it lasts at
//! least the delay), the writers did wait for room, and the server's own sync latency figure
//! is at least the delay. Without that a fast disk (the switch not read, or renamed) would
//! pass the test without testing anything.
//!
//! A measuring window is bounded by events on the server (the buffer is full; the log made
//! two more batches durable, so one whole batch ran inside the window; `flush_all`
//! answered), never by a fixed sleep. The 50 ms bound is the issue's: far above a read's
//! cost, far below a 2 s fdatasync. The server and the test run at nice -10 (as root), so that
//! builds sharing the machine disturb the measure less. On the shared development machine,
//! with a dozen compilers running, the same 100 readers see a p99 of 20-80 ms with no writer
//! at all (loopback packets wait for the kernel's softirq threads), so the bound is 50 ms or
//! twice the p99 of a control window (the same readers, the same server, no writers yet, as
//! long as one slow batch), whichever is more, and never more than [`P99_CAP`], a fifth of
//! the delay: a machine so loaded that its control p99 passes that cannot tell a stalled read
//! from a slow one, and fails. On a quiet machine (CI) the bound is 50 ms. Every window must
//! meet the bounds, and no read in any window may take [`MAX_BOUND`] (half the delay): a
//! read that waits for the disk waits up to a whole fdatasync.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{persistence_number, Conn, Server};

/// One test at a time: 100 readers of each on 2 cores would measure each other.
static SERIAL: Mutex<()> = Mutex::new(());

const READERS: usize = 100;
/// Measuring windows, each holding at least one whole slow batch with the buffer full. Every
/// one must meet the bounds (the build before the fix missed them in every window: p99 1.8 s
/// to 4.1 s).
const WINDOWS: usize = 3;
/// The window number of the control window.
const CONTROL: usize = usize::MAX;
/// How much longer every fdatasync of the log takes (`CAIRN_TEST_LOG_SYNC_DELAY_MS`).
const DELAY: Duration = Duration::from_millis(2000);
/// The bound on the readers' 99th percentile.
const BOUND: Duration = Duration::from_millis(50);
/// The most the p99 bound may be raised to on a loaded machine (twice the control p99): a
/// fifth of the delay, so a read that waits for the disk can never pass it.
const P99_CAP: Duration = Duration::from_millis(400);
/// No read in a window may take this long: half the delay. A read held up by the disk waits
/// for the rest of an fdatasync, up to all of it.
const MAX_BOUND: Duration = Duration::from_millis(1000);
const WRITERS: usize = 8;
const VALUE_BYTES: usize = 100 << 10;
/// The log's pending buffer bound, set small (`CAIRN_TEST_LOG_PENDING_KIB`) so that the burst
/// of writes each time the disk takes a batch stays small on a 2-core machine.
const PENDING_MAX_KIB: u64 = 2048;

fn give_up_at() -> Instant {
    Instant::now() + Duration::from_secs(120)
}

/// Polls `stats persistence` until `done` holds for `name`, 10 ms apart: `stats` is a read
/// like the others, and back-to-back polls would load the server more than the readers do.
fn poll_until(c: &mut Conn, name: &str, what: &str, done: impl Fn(u64) -> bool) {
    let deadline = give_up_at();
    while !done(persistence_number(c, name)) {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Puts every thread of this test process at nice -10, as `Server::start_favoured` does for
/// the server: the readers measure the server, not the builds sharing the machine. Root only;
/// elsewhere nothing changes.
fn favour_this_process() {
    let tids: Vec<String> = std::fs::read_dir("/proc/self/task")
        .map(|d| {
            d.filter_map(|t| Some(t.ok()?.file_name().to_str()?.to_string()))
                .collect()
        })
        .unwrap_or_default();
    let _ = std::process::Command::new("renice")
        .args(["-n", "-10", "-p"])
        .args(&tids)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
}

/// A reader: `get r<id>` in a loop, some ms apart, recording each read's latency with the
/// measuring window it started in (`window`: 0 between windows, then 1, 2, ...).
fn reader(
    addr: SocketAddr,
    id: usize,
    stop: Arc<AtomicBool>,
    window: Arc<AtomicUsize>,
) -> Vec<(usize, Duration)> {
    let mut c = Conn::new(addr);
    let request = format!("get r{id}\r\n");
    let want = format!("VALUE r{id} 0 5\r\nvalue\r\nEND\r\n");
    let mut seen = Vec::new();
    while !stop.load(Ordering::Acquire) {
        let w = window.load(Ordering::Acquire);
        let started = Instant::now();
        c.send(request.as_bytes());
        let reply = c.read_until(b"END\r\n");
        let took = started.elapsed();
        // After a flush_all the key is gone: END alone is a read too.
        assert!(
            reply == want.as_bytes() || reply == b"END\r\n",
            "{:?}",
            String::from_utf8_lossy(&reply)
        );
        if w > 0 {
            seen.push((w, took));
        }
        // Pace the load: 100 readers at full speed would measure the 2 cores, not stalls.
        std::thread::sleep(Duration::from_millis(20));
    }
    seen
}

/// A writer: 100 KiB `noreply` sets as fast as the server takes them. Its socket blocks
/// once the server stops reading it (parked for room); `shutdown` ends it.
fn writer(stream: TcpStream, id: usize) {
    let mut stream = stream;
    let value = vec![b'w'; VALUE_BYTES];
    for n in 0.. {
        let head = format!("set w{id}-{} 0 0 {VALUE_BYTES} noreply\r\n", n % 64);
        if stream.write_all(head.as_bytes()).is_err()
            || stream.write_all(&value).is_err()
            || stream.write_all(b"\r\n").is_err()
        {
            return;
        }
    }
}

/// Runs the scenario in `mode`; with `flush_all`, a `flush_all` is sent when the buffer is
/// full and the window lasts until it is answered.
fn reads_stay_fast_while_the_log_disk_is_slow(mode: &str, flush_all: bool) {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server = Server::start_favoured(
        &[
            (
                cairn_server::test_hooks::LOG_SYNC_DELAY_MS,
                &DELAY.as_millis().to_string(),
            ),
            (
                cairn_server::test_hooks::LOG_PENDING_KIB,
                &PENDING_MAX_KIB.to_string(),
            ),
        ],
        &[
            "--persistence",
            mode,
            "-t",
            "2",
            "-m",
            "512",
            "--log-segment-mb",
            "64",
        ],
    );
    let addr = server.addr;
    // The readers' keys, in one batch (one slow fdatasync in sync mode).
    let mut c = server.connect();
    let mut load = String::new();
    for i in 0..READERS {
        load.push_str(&format!("set r{i} 0 0 5 noreply\r\nvalue\r\n"));
    }
    load.push_str("get r0\r\n");
    c.send(load.as_bytes());
    c.read_until(b"END\r\n");

    let stop = Arc::new(AtomicBool::new(false));
    let window = Arc::new(AtomicUsize::new(0));
    let readers: Vec<_> = (0..READERS)
        .map(|id| {
            let (stop, window) = (Arc::clone(&stop), Arc::clone(&window));
            std::thread::spawn(move || reader(addr, id, stop, window))
        })
        .collect();
    let writer_sockets: Vec<TcpStream> = (0..WRITERS)
        .map(|_| TcpStream::connect(addr).unwrap())
        .collect();

    favour_this_process();
    let mut stats = server.connect();
    // The control window: readers only, for as long as one slow batch takes.
    window.store(CONTROL, Ordering::Release);
    let control_started = Instant::now();
    let mut c = server.connect();
    // A write and the fence after it: one slow fdatasync, in either mode.
    c.send(b"set control 0 0 1 noreply\r\nc\r\nmn\r\n");
    c.read_until(b"MN\r\n");
    let batch_time = control_started.elapsed();
    window.store(0, Ordering::Release);
    assert!(
        batch_time >= DELAY,
        "{mode}: a write and its fence took {batch_time:?}, less than the fdatasync delay \
         {DELAY:?}: the slow disk ({}) was not in force, and nothing below would be tested",
        cairn_server::test_hooks::LOG_SYNC_DELAY_MS
    );
    let writers: Vec<_> = writer_sockets
        .iter()
        .enumerate()
        .map(|(id, s)| {
            let s = s.try_clone().unwrap();
            std::thread::spawn(move || writer(s, id))
        })
        .collect();
    let mut window_lengths = Vec::new();
    for w in 1..=WINDOWS {
        // The writers fill the pending buffer: from here on they wait for the disk.
        poll_until(
            &mut stats,
            "log_pending_bytes",
            "the writers never filled the log",
            |pending| pending >= PENDING_MAX_KIB << 10,
        );
        window.store(w, Ordering::Release);
        let window_started = Instant::now();
        let durable_at_start = persistence_number(&mut stats, "log_durable_lsn");
        let flusher = flush_all.then(|| {
            let mut f = server.connect();
            f.send(b"flush_all\r\n");
            f
        });
        // At least one whole slow batch goes by with the buffer full (and the flush answered):
        // the first advance ends the batch that was under way when the window opened, the
        // second one a batch that began inside the window.
        poll_until(
            &mut stats,
            "log_durable_lsn",
            "the log never made progress",
            |durable| durable > durable_at_start,
        );
        let durable_once = persistence_number(&mut stats, "log_durable_lsn");
        poll_until(
            &mut stats,
            "log_durable_lsn",
            "the log never made progress",
            |durable| durable > durable_once,
        );
        if let Some(mut f) = flusher {
            let mut reply = [0u8; 4];
            f.stream.read_exact(&mut reply).unwrap();
            assert_eq!(&reply, b"OK\r\n");
        }
        window.store(0, Ordering::Release);
        window_lengths.push(window_started.elapsed());
    }
    // The writers did wait for the disk: the buffer was full, not just filling.
    let waits = persistence_number(&mut stats, "log_backpressure_waits");
    assert!(
        waits > 0,
        "{mode}: no write ever waited for room in the log: the disk was not the bottleneck"
    );
    // And the server timed its own syncs at the delay or more (sync mode with O_DIRECT makes
    // a batch durable by a pwritev2(RWF_DSYNC), async mode by an fdatasync).
    let mut sync_p50_us = 0;
    for name in ["log_dsync_write", "fdatasync"] {
        if persistence_number(&mut stats, &format!("{name}_count")) > 0 {
            let p50 = persistence_number(&mut stats, &format!("{name}_latency_us_p50"));
            sync_p50_us = sync_p50_us.max(p50);
        }
    }
    assert!(
        sync_p50_us >= DELAY.as_micros() as u64 * 9 / 10,
        "{mode}: the log's median sync took {sync_p50_us} us, not the {DELAY:?} delay"
    );

    stop.store(true, Ordering::Release);
    for s in &writer_sockets {
        let _ = s.shutdown(Shutdown::Both);
    }
    for w in writers {
        w.join().unwrap();
    }
    let seen: Vec<(usize, Duration)> = readers
        .into_iter()
        .flat_map(|r| r.join().unwrap())
        .collect();
    let p99_of = |w: usize| {
        let mut reads: Vec<Duration> = seen
            .iter()
            .filter(|(at, _)| *at == w)
            .map(|(_, took)| *took)
            .collect();
        reads.sort();
        assert!(
            reads.len() >= READERS,
            "{mode}: only {} reads in window {w}",
            reads.len()
        );
        let p99 = reads[reads.len() * 99 / 100];
        let max = *reads.last().unwrap();
        eprintln!(
            "{mode} (flush_all: {flush_all}) {}: {} reads, p50 {:?}, p99 {p99:?}, max {:?}",
            if w == CONTROL {
                format!("control ({batch_time:?}, no writers)")
            } else {
                format!("window {w}")
            },
            reads.len(),
            reads[reads.len() / 2],
            max
        );
        (p99, max)
    };
    eprintln!(
        "{mode} (flush_all: {flush_all}): windows {window_lengths:?} long, {waits} writes \
         waited for room, median log sync {sync_p50_us} us"
    );
    let control = p99_of(CONTROL).0;
    let bound = BOUND.max(2 * control).min(P99_CAP);
    let windows: Vec<(Duration, Duration)> = (1..=WINDOWS).map(p99_of).collect();
    for (w, (&(p99, max), length)) in windows.iter().zip(&window_lengths).enumerate() {
        let w = w + 1;
        assert!(
            *length >= DELAY,
            "{mode} (flush_all: {flush_all}): window {w} lasted {length:?}, less than one slow \
             batch ({DELAY:?}): the delay was not in force"
        );
        assert!(
            p99 < bound,
            "{mode} (flush_all: {flush_all}): read p99 {p99:?} in window {w} of {WINDOWS} while \
             the log disk was slow, over {bound:?} (control p99 {control:?}; every window: \
             {windows:?} as (p99, max))"
        );
        assert!(
            max < MAX_BOUND,
            "{mode} (flush_all: {flush_all}): a read took {max:?} in window {w} of {WINDOWS} \
             while the log disk was slow, over {MAX_BOUND:?}: it waited for the disk (every \
             window: {windows:?} as (p99, max))"
        );
    }
}

#[test]
fn sync_mode_reads_stay_fast_while_writers_wait_for_a_slow_disk() {
    reads_stay_fast_while_the_log_disk_is_slow("sync", false);
}

#[test]
fn async_mode_reads_stay_fast_with_a_full_pending_buffer() {
    reads_stay_fast_while_the_log_disk_is_slow("async", false);
}

#[test]
fn flush_all_waiting_for_a_slow_disk_blocks_no_reads() {
    reads_stay_fast_while_the_log_disk_is_slow("sync", true);
}
