//! The load generator: `threads` OS threads, each a single-threaded tokio runtime driving
//! `clients` connections; each connection keeps `pipeline` requests in flight (closed loop,
//! memtier's default) or sends at fixed intended times (`--rate`, open loop: latency counts from
//! the intended send time, so a stalled server is not hidden by coordinated omission).
//!
//! ```text
//!   thread ─┬─ client 0: [send pipeline] ─> [read replies, record latency] ─> ...
//!           └─ client 1: ...
//!   per thread: HDR histograms (set, get, all) + a per-second timeline; merged at the end
//! ```
//!
//! Non-goals: clustering, TLS, authentication.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::keys::{KeyGen, Mix, Pattern, Rng};

/// Which wire protocol to speak.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    MemcacheText,
    Redis,
}

impl Protocol {
    pub fn parse(s: &str) -> Result<Protocol, String> {
        match s {
            "memcache_text" => Ok(Protocol::MemcacheText),
            "redis" => Ok(Protocol::Redis),
            _ => Err(format!("protocol {s:?}: use memcache_text or redis")),
        }
    }
}

/// Everything one run needs.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    pub server: String,
    pub port: u16,
    pub protocol: Protocol,
    pub threads: u64,
    pub clients: u64,
    pub data_size_min: usize,
    pub data_size_max: usize,
    pub key_prefix: String,
    pub set_pattern: Pattern,
    pub get_pattern: Pattern,
    pub key_min: u64,
    pub key_max: u64,
    pub ratio: (u32, u32),
    /// Requests per client (memtier's meaning), or run for `test_time`.
    pub requests: Option<u64>,
    pub test_time: Option<Duration>,
    pub pipeline: usize,
    pub seed: u64,
    pub distinct_client_seed: bool,
    /// Open loop: total requests per second over all clients.
    pub rate: Option<u64>,
    pub verify: bool,
    pub quiet: bool,
}

/// Latency histogram in microseconds, 1 us .. 100 s, 3 significant digits.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 100_000_000, 3).expect("valid bounds")
}

/// One second of the run.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Second {
    pub ops: u64,
    pub latency_us_sum: u64,
    pub latency_us_max: u64,
}

/// The highest share of error replies a run may have and still count (0.1%): past it, the
/// figures measure the errors, not the server.
pub const MAX_ERROR_RATE: f64 = 0.001;

/// What a run measured. `sets` and `gets` count successful replies only; an error reply
/// (`ERROR`, `CLIENT_ERROR`, `SERVER_ERROR`, Redis `-ERR`) counts in `set_errors` /
/// `get_errors` instead, and in no latency histogram.
pub struct LoadResult {
    pub secs: f64,
    pub sets: u64,
    pub gets: u64,
    pub hits: u64,
    pub misses: u64,
    pub set_errors: u64,
    pub get_errors: u64,
    pub verify_failures: u64,
    pub set_latency: Histogram<u64>,
    pub get_latency: Histogram<u64>,
    pub all_latency: Histogram<u64>,
    pub timeline: Vec<Second>,
    /// CPU seconds the load generator itself used (user + system).
    pub cpu_secs: f64,
}

impl LoadResult {
    /// Successful operations.
    pub fn ops(&self) -> u64 {
        self.sets + self.gets
    }

    /// Error replies.
    pub fn errors(&self) -> u64 {
        self.set_errors + self.get_errors
    }

    /// Error replies over all replies (0 when there were none).
    pub fn error_rate(&self) -> f64 {
        error_rate(self.errors(), self.ops())
    }

    /// Refuses a run whose error rate passes [`MAX_ERROR_RATE`].
    pub fn check_errors(&self) -> Result<(), String> {
        check_error_rate(self.errors(), self.ops())
    }

    pub fn ops_per_sec(&self) -> f64 {
        self.ops() as f64 / self.secs
    }
}

/// `errors` over all replies, `errors + ops` (0 when there were none).
pub fn error_rate(errors: u64, ops: u64) -> f64 {
    let replies = errors + ops;
    if replies == 0 {
        0.0
    } else {
        errors as f64 / replies as f64
    }
}

/// Err naming the rate when it passes [`MAX_ERROR_RATE`].
pub fn check_error_rate(errors: u64, ops: u64) -> Result<(), String> {
    let rate = error_rate(errors, ops);
    if rate > MAX_ERROR_RATE {
        return Err(format!(
            "{errors} error replies out of {} ({:.3}%, above the {:.1}% allowed): the figures are not valid",
            errors + ops,
            rate * 100.0,
            MAX_ERROR_RATE * 100.0
        ));
    }
    Ok(())
}

#[derive(Default)]
struct Counters {
    sets: u64,
    gets: u64,
    hits: u64,
    misses: u64,
    set_errors: u64,
    get_errors: u64,
    verify_failures: u64,
}

struct ThreadStats {
    c: Counters,
    set: Histogram<u64>,
    get: Histogram<u64>,
    timeline: Vec<Second>,
    started: Instant,
}

impl ThreadStats {
    fn record(&mut self, is_set: bool, latency: Duration, at: Instant) {
        let us = (latency.as_micros() as u64).max(1);
        let _ = if is_set {
            self.set.record(us)
        } else {
            self.get.record(us)
        };
        let second = at.saturating_duration_since(self.started).as_secs() as usize;
        if self.timeline.len() <= second {
            self.timeline.resize(second + 1, Second::default());
        }
        let s = &mut self.timeline[second];
        s.ops += 1;
        s.latency_us_sum += us;
        s.latency_us_max = s.latency_us_max.max(us);
    }
}

/// CPU seconds (user + system) this process used so far.
pub fn self_cpu_secs() -> f64 {
    proc_cpu_secs("self").unwrap_or(0.0)
}

/// /proc's figures of a process (`self` or a PID), read by procfs.
pub fn proc_stat(pid: &str) -> Option<procfs::process::Stat> {
    let process = match pid {
        "self" => procfs::process::Process::myself(),
        pid => procfs::process::Process::new(pid.parse().ok()?),
    };
    process.and_then(|p| p.stat()).ok()
}

/// CPU seconds (user + system) of a process.
pub fn proc_cpu_secs(pid: &str) -> Option<f64> {
    let stat = proc_stat(pid)?;
    Some((stat.utime + stat.stime) as f64 / procfs::ticks_per_second() as f64)
}

/// The value a key gets, so `--verify` can check what comes back.
pub fn value_for(key: u64, len: usize) -> Vec<u8> {
    let unit = format!("{key:x}-");
    unit.bytes().cycle().take(len).collect()
}

fn encode_set(out: &mut Vec<u8>, proto: Protocol, key: &[u8], value: &[u8]) {
    use std::io::Write;
    match proto {
        Protocol::MemcacheText => {
            out.extend_from_slice(b"set ");
            out.extend_from_slice(key);
            let _ = write!(out, " 0 0 {}\r\n", value.len());
        }
        Protocol::Redis => {
            let _ = write!(out, "*3\r\n$3\r\nSET\r\n${}\r\n", key.len());
            out.extend_from_slice(key);
            let _ = write!(out, "\r\n${}\r\n", value.len());
        }
    }
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

fn encode_get(out: &mut Vec<u8>, proto: Protocol, key: &[u8]) {
    use std::io::Write;
    match proto {
        Protocol::MemcacheText => {
            out.extend_from_slice(b"get ");
            out.extend_from_slice(key);
            out.extend_from_slice(b"\r\n");
        }
        Protocol::Redis => {
            let _ = write!(out, "*2\r\n$3\r\nGET\r\n${}\r\n", key.len());
            out.extend_from_slice(key);
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// A parsed reply.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    Stored,
    Hit(std::ops::Range<usize>),
    Miss,
    Error,
}

fn line_end(b: &[u8]) -> Option<usize> {
    b.windows(2).position(|w| w == b"\r\n")
}

/// Parses one reply at the front of `b`: Some((reply, bytes used)) or None if incomplete.
pub fn parse_reply(b: &[u8], proto: Protocol, is_set: bool) -> Option<(Reply, usize)> {
    let end = line_end(b)?;
    let line = &b[..end];
    let after = end + 2;
    match proto {
        Protocol::MemcacheText => {
            if is_set {
                let r = if line == b"STORED" {
                    Reply::Stored
                } else {
                    Reply::Error
                };
                return Some((r, after));
            }
            if line == b"END" {
                return Some((Reply::Miss, after));
            }
            if !line.starts_with(b"VALUE ") {
                return Some((Reply::Error, after));
            }
            let len: usize = std::str::from_utf8(line)
                .ok()?
                .split(' ')
                .nth(3)?
                .parse()
                .ok()?;
            let total = after + len + 2 + 5;
            if b.len() < total {
                return None;
            }
            if &b[after + len..total] != b"\r\nEND\r\n" {
                return Some((Reply::Error, total));
            }
            Some((Reply::Hit(after..after + len), total))
        }
        Protocol::Redis => match line.first() {
            Some(b'+') => Some((Reply::Stored, after)),
            Some(b'$') if line == b"$-1" => Some((Reply::Miss, after)),
            Some(b'$') => {
                let len: usize = std::str::from_utf8(&line[1..]).ok()?.parse().ok()?;
                let total = after + len + 2;
                (b.len() >= total).then_some((Reply::Hit(after..after + len), total))
            }
            _ => Some((Reply::Error, after)),
        },
    }
}

/// Runs the load and returns the merged result.
pub fn run(cfg: &LoadConfig) -> Result<LoadResult, String> {
    let addr = format!("{}:{}", cfg.server, cfg.port);
    // Fail early with a clear message if the server is not there.
    std::net::TcpStream::connect(&addr).map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    let cpu_before = self_cpu_secs();
    let started = Instant::now();
    let deadline = cfg.test_time.map(|t| started + t);
    PROGRESS_TOTAL.store(0, std::sync::atomic::Ordering::Relaxed);
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reporter = (!cfg.quiet).then(|| {
        let done = std::sync::Arc::clone(&done);
        std::thread::spawn(move || {
            let mut last = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::park_timeout(Duration::from_secs(1));
                let now = PROGRESS_TOTAL.load(std::sync::atomic::Ordering::Relaxed);
                eprint!(
                    "\r[{:>5.1}s] {:>10} ops/s, {:>12} ops total",
                    started.elapsed().as_secs_f64(),
                    now - last,
                    now
                );
                last = now;
            }
            eprintln!();
        })
    });
    let handles: Vec<_> = (0..cfg.threads)
        .map(|t| {
            let cfg = cfg.clone();
            let addr = addr.clone();
            std::thread::spawn(move || thread_main(&cfg, t, &addr, started, deadline))
        })
        .collect();
    let mut out = LoadResult {
        secs: 0.0,
        sets: 0,
        gets: 0,
        hits: 0,
        misses: 0,
        set_errors: 0,
        get_errors: 0,
        verify_failures: 0,
        set_latency: histogram(),
        get_latency: histogram(),
        all_latency: histogram(),
        timeline: Vec::new(),
        cpu_secs: 0.0,
    };
    for h in handles {
        let st = h
            .join()
            .map_err(|_| "a load thread panicked".to_string())??;
        out.sets += st.c.sets;
        out.gets += st.c.gets;
        out.hits += st.c.hits;
        out.misses += st.c.misses;
        out.set_errors += st.c.set_errors;
        out.get_errors += st.c.get_errors;
        out.verify_failures += st.c.verify_failures;
        out.set_latency.add(&st.set).map_err(|e| e.to_string())?;
        out.get_latency.add(&st.get).map_err(|e| e.to_string())?;
        if out.timeline.len() < st.timeline.len() {
            out.timeline.resize(st.timeline.len(), Second::default());
        }
        for (o, s) in out.timeline.iter_mut().zip(&st.timeline) {
            o.ops += s.ops;
            o.latency_us_sum += s.latency_us_sum;
            o.latency_us_max = o.latency_us_max.max(s.latency_us_max);
        }
    }
    out.secs = started.elapsed().as_secs_f64();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    if let Some(r) = reporter {
        r.thread().unpark();
        let _ = r.join();
    }
    out.all_latency
        .add(&out.set_latency)
        .map_err(|e| e.to_string())?;
    out.all_latency
        .add(&out.get_latency)
        .map_err(|e| e.to_string())?;
    out.cpu_secs = self_cpu_secs() - cpu_before;
    Ok(out)
}

fn thread_main(
    cfg: &LoadConfig,
    thread: u64,
    addr: &str,
    started: Instant,
    deadline: Option<Instant>,
) -> Result<ThreadStats, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let stats = Rc::new(RefCell::new(ThreadStats {
        c: Counters::default(),
        set: histogram(),
        get: histogram(),
        timeline: Vec::new(),
        started,
    }));
    rt.block_on(async {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let mut tasks = Vec::new();
                for c in 0..cfg.clients {
                    let idx = thread * cfg.clients + c;
                    let cfg = cfg.clone();
                    let stats = Rc::clone(&stats);
                    let addr = addr.to_string();
                    tasks.push(tokio::task::spawn_local(async move {
                        client(&cfg, idx, &addr, stats, started, deadline).await
                    }));
                }
                for t in tasks {
                    t.await.map_err(|e| e.to_string())??;
                }
                Ok::<(), String>(())
            })
            .await
    })?;
    let st = Rc::try_unwrap(stats).map_err(|_| "stats still shared".to_string())?;
    Ok(st.into_inner())
}

async fn client(
    cfg: &LoadConfig,
    idx: u64,
    addr: &str,
    stats: Rc<RefCell<ThreadStats>>,
    started: Instant,
    deadline: Option<Instant>,
) -> Result<(), String> {
    let mut stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let _ = stream.set_nodelay(true);
    let clients = cfg.threads * cfg.clients;
    let seed = if cfg.distinct_client_seed {
        cfg.seed ^ (idx + 1).wrapping_mul(0x9e37)
    } else {
        cfg.seed
    };
    let mut rng = Rng::new(seed);
    let mut set_keys = KeyGen::new(cfg.set_pattern, cfg.key_min, cfg.key_max, idx, clients);
    let mut get_keys = KeyGen::new(cfg.get_pattern, cfg.key_min, cfg.key_max, idx, clients);
    let mut mix = Mix::new(cfg.ratio);
    let pipeline = if cfg.rate.is_some() {
        1
    } else {
        cfg.pipeline.max(1)
    };
    let interval = cfg
        .rate
        .map(|r| Duration::from_secs_f64(clients as f64 / r.max(1) as f64));
    let mut sent = 0u64;
    let mut wbuf = Vec::with_capacity(4096);
    let mut rbuf: Vec<u8> = Vec::with_capacity(16384);
    let mut inflight: Vec<(bool, u64, usize, Instant)> = Vec::with_capacity(pipeline);
    let mut key = Vec::with_capacity(64);
    loop {
        let more = match (cfg.requests, deadline) {
            (Some(n), _) => sent < n,
            (None, Some(d)) => Instant::now() < d,
            (None, None) => false,
        };
        if !more {
            break;
        }
        wbuf.clear();
        inflight.clear();
        for _ in 0..pipeline {
            if cfg.requests.is_some_and(|n| sent >= n) {
                break;
            }
            let intended = match interval {
                Some(iv) => {
                    let t =
                        started + iv.mul_f64(sent as f64) + iv.mul_f64(idx as f64 / clients as f64);
                    tokio::time::sleep_until(t.into()).await;
                    t
                }
                None => Instant::now(),
            };
            let is_set = mix.next_is_set();
            let k = if is_set {
                set_keys.next(&mut rng)
            } else {
                get_keys.next(&mut rng)
            };
            key.clear();
            key.extend_from_slice(cfg.key_prefix.as_bytes());
            key.extend_from_slice(k.to_string().as_bytes());
            let size = if cfg.data_size_max > cfg.data_size_min {
                cfg.data_size_min
                    + (rng.next_u64() as usize) % (cfg.data_size_max - cfg.data_size_min + 1)
            } else {
                cfg.data_size_min
            };
            if is_set {
                encode_set(&mut wbuf, cfg.protocol, &key, &value_for(k, size));
            } else {
                encode_get(&mut wbuf, cfg.protocol, &key);
            }
            inflight.push((is_set, k, size, intended));
            sent += 1;
        }
        if inflight.is_empty() {
            break;
        }
        stream
            .write_all(&wbuf)
            .await
            .map_err(|e| format!("write: {e}"))?;
        let mut next = 0;
        let mut used = 0;
        while next < inflight.len() {
            match parse_reply(&rbuf[used..], cfg.protocol, inflight[next].0) {
                Some((reply, n)) => {
                    let now = Instant::now();
                    let (is_set, k, _, intended) = inflight[next];
                    let mut st = stats.borrow_mut();
                    if !matches!(reply, Reply::Error) {
                        st.record(is_set, now - intended, now);
                    }
                    match reply {
                        Reply::Stored => st.c.sets += 1,
                        Reply::Hit(r) => {
                            st.c.gets += 1;
                            st.c.hits += 1;
                            if cfg.verify {
                                let got = &rbuf[used + r.start..used + r.end];
                                let want = value_for(k, got.len());
                                if got != want.as_slice() {
                                    st.c.verify_failures += 1;
                                }
                            }
                        }
                        Reply::Miss => {
                            st.c.gets += 1;
                            st.c.misses += 1;
                        }
                        Reply::Error if is_set => st.c.set_errors += 1,
                        Reply::Error => st.c.get_errors += 1,
                    }
                    used += n;
                    next += 1;
                }
                None => {
                    rbuf.drain(..used);
                    used = 0;
                    let n = stream
                        .read_buf(&mut rbuf)
                        .await
                        .map_err(|e| format!("read: {e}"))?;
                    if n == 0 {
                        return Err("server closed the connection".into());
                    }
                }
            }
        }
        rbuf.drain(..used);
        PROGRESS_TOTAL.fetch_add(inflight.len() as u64, std::sync::atomic::Ordering::Relaxed);
    }
    Ok(())
}

/// Requests completed so far, for the progress line.
pub static PROGRESS_TOTAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_parse_exactly() {
        let p = Protocol::MemcacheText;
        assert_eq!(
            parse_reply(b"STORED\r\nEND", p, true),
            Some((Reply::Stored, 8))
        );
        assert_eq!(parse_reply(b"END\r\n", p, false), Some((Reply::Miss, 5)));
        assert_eq!(parse_reply(b"VALUE k 0 3\r\nabc\r\nEN", p, false), None);
        assert_eq!(
            parse_reply(b"VALUE k 0 3\r\nabc\r\nEND\r\n", p, false),
            Some((Reply::Hit(13..16), 23))
        );
        assert_eq!(
            parse_reply(b"SERVER_ERROR x\r\n", p, true),
            Some((Reply::Error, 16))
        );
        let r = Protocol::Redis;
        assert_eq!(parse_reply(b"+OK\r\n", r, true), Some((Reply::Stored, 5)));
        assert_eq!(parse_reply(b"$-1\r\n", r, false), Some((Reply::Miss, 5)));
        assert_eq!(
            parse_reply(b"$3\r\nabc\r\n", r, false),
            Some((Reply::Hit(4..7), 9))
        );
        assert_eq!(parse_reply(b"$3\r\nab", r, false), None);
    }

    #[test]
    fn values_are_checkable() {
        assert_eq!(value_for(255, 7), b"ff-ff-f");
        let mut out = Vec::new();
        encode_set(&mut out, Protocol::Redis, b"k", b"vv");
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nvv\r\n");
    }

    #[test]
    fn percentiles_from_the_histogram() {
        let mut h = histogram();
        for us in 1..=1000u64 {
            h.record(us).unwrap();
        }
        assert_eq!(h.value_at_quantile(0.5), 500);
        assert!((990..=991).contains(&h.value_at_quantile(0.99)));
        assert_eq!(h.max(), 1000);
    }
}
