//! The load generator's engine: `threads` OS threads, each a single-threaded tokio runtime
//! driving `clients` connections; each connection keeps `pipeline` requests in flight (closed
//! loop, memtier's default) or sends at fixed intended times (`--rate`, open loop: latency
//! counts from the intended send time, so a stalled server is not hidden by coordinated
//! omission). A progress line once a second unless quiet.
//!
//! ```text
//!   run ─┬─ thread 0 ─┬─ client 0: [send pipeline] ─> [read replies, record latency] ─> ...
//!        │            └─ client 1: ...
//!        └─ thread 1 ...
//!   per thread: ThreadStats (counters, HDR histograms, per-second timeline) ─merge─> LoadResult
//! ```
//!
//! Non-goals: clustering, TLS, authentication.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::config::LoadConfig;
use super::result::{histogram, LoadResult, Second};
use super::wire::{encode_get, encode_set, parse_reply, value_for, Reply};
use crate::keys::{KeyGen, Mix, Rng};
use crate::procstat::self_cpu_secs;

/// One thread's successful replies, error replies and verify failures.
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

/// What one thread measured, merged into the [`LoadResult`] at the end.
struct ThreadStats {
    /// Its counts.
    c: Counters,
    /// Latency of its successful sets and gets, in microseconds.
    set: Histogram<u64>,
    get: Histogram<u64>,
    /// Its replies in each second from `started`.
    timeline: Vec<Second>,
    /// When the run started (the timeline's second 0).
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
