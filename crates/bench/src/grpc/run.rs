//! A run of `cairn-bench grpc`: `--connections` HTTP/2 channels, `--concurrency` workers
//! (tokio tasks on `--threads` runtime threads) dealt over them, each with one call in flight,
//! closed loop or at fixed intended send times (`--rate`); the optional preload of every key;
//! the server's CPU over the run read from /proc.
//!
//! ```text
//!   channels ─> (preload) ─> worker i on channel i mod connections ─> call ─> outcome, latency
//!     ─> per-worker (ok, misses, errors, histogram) ─merge─> GrpcResult
//! ```
//!
//! Non-goals: streaming calls and watches (crates/grpc's watch_bench example).

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tonic::transport::{Channel, Endpoint};

use super::api::{GetRequest, HealthCheckRequest, HealthClient, KvClient, SetRequest};
use super::args::GrpcArgs;
use crate::keys::Rng;
use crate::load::{histogram, value_for};
use crate::procstat::{proc_cpu_secs, self_cpu_secs};

/// The call every worker makes (`--call`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Call {
    Get,
    Set,
    Health,
}

/// What one run measured.
#[derive(Debug)]
pub struct GrpcResult {
    /// Wall-clock seconds of the measured run (the preload left out).
    pub secs: f64,
    /// Calls answered OK (for get: found).
    pub ok: u64,
    /// Gets answered NOT_FOUND.
    pub misses: u64,
    /// Any other status, or a transport error.
    pub errors: u64,
    /// Latency of OK and NOT_FOUND answers, in microseconds.
    pub latency: Histogram<u64>,
    /// CPU seconds this load generator used over the run.
    pub bench_cpu_secs: f64,
    /// The server's CPU seconds over the run (`--server-pid`), or None.
    pub server_cpu_secs: Option<f64>,
}

impl GrpcResult {
    /// Calls answered OK or NOT_FOUND.
    pub(super) fn answered(&self) -> u64 {
        self.ok + self.misses
    }

    /// Answered calls per second.
    pub fn ops_per_sec(&self) -> f64 {
        self.answered() as f64 / self.secs.max(1e-9)
    }

    /// The server's CPU microseconds per answered call.
    pub fn server_us_per_op(&self) -> Option<f64> {
        self.server_cpu_secs
            .map(|s| s * 1e6 / self.answered().max(1) as f64)
    }
}

/// One of `--concurrency` workers: one call in flight at a time.
struct Worker {
    /// What it calls.
    call: Call,
    /// Its clients, both on the channel it was dealt.
    kv: KvClient<Channel>,
    health: HealthClient<Channel>,
    /// Its own key sequence.
    rng: Rng,
    /// The run's flags (keys, sizes, requests, rate).
    args: GrpcArgs,
}

/// The outcome of one call.
enum Outcome {
    Ok,
    Miss,
    Error,
}

impl Worker {
    fn key(&mut self) -> (u64, Vec<u8>) {
        let k = self.rng.next_u64() % self.args.keys.max(1);
        (k, format!("{}{k}", self.args.key_prefix).into_bytes())
    }

    async fn one(&mut self) -> Outcome {
        let status = match self.call {
            Call::Get => {
                let (_, key) = self.key();
                self.kv
                    .get(GetRequest { key: key.into() })
                    .await
                    .map(|_| ())
            }
            Call::Set => {
                let (k, key) = self.key();
                self.kv
                    .set(set_request(k, key, self.args.data_size))
                    .await
                    .map(|_| ())
            }
            Call::Health => {
                let req = HealthCheckRequest {
                    service: String::new(),
                };
                self.health.check(req).await.map(|_| ())
            }
        };
        match status {
            Ok(()) => Outcome::Ok,
            Err(s) if s.code() == tonic::Code::NotFound => Outcome::Miss,
            Err(_) => Outcome::Error,
        }
    }
}

/// A set of `key` (number `k`) to its checkable value of `size` bytes.
fn set_request(k: u64, key: Vec<u8>, size: usize) -> SetRequest {
    SetRequest {
        key: key.into(),
        value: value_for(k, size).into(),
        ..Default::default()
    }
}

/// Per worker: answered OK, misses, errors, latency.
type WorkerStats = (u64, u64, u64, Histogram<u64>);

/// One worker's calls until its `--requests` are sent or the deadline passed.
async fn worker(
    mut w: Worker,
    idx: u64,
    started: Instant,
    deadline: Option<Instant>,
) -> WorkerStats {
    let (mut ok, mut misses, mut errors) = (0, 0, 0);
    let mut hist = histogram();
    let per_worker = w.args.requests;
    let interval = w
        .args
        .rate
        .map(|r| Duration::from_secs_f64(w.args.concurrency as f64 / r.max(1) as f64));
    let offset = w
        .args
        .rate
        .map(|r| Duration::from_secs_f64(idx as f64 / r.max(1) as f64));
    let mut sent = 0u64;
    loop {
        let more = match (per_worker, deadline) {
            (Some(n), _) => sent < n,
            (None, Some(d)) => Instant::now() < d,
            (None, None) => false,
        };
        if !more {
            break;
        }
        let intended = match (interval, offset) {
            (Some(iv), Some(off)) => send_time(started + off + iv.mul_f64(sent as f64)).await,
            _ => Instant::now(),
        };
        sent += 1;
        let outcome = w.one().await;
        let us = (intended.elapsed().as_micros() as u64).max(1);
        match outcome {
            Outcome::Ok => ok += 1,
            Outcome::Miss => misses += 1,
            Outcome::Error => {
                errors += 1;
                continue;
            }
        }
        let _ = hist.record(us);
    }
    (ok, misses, errors, hist)
}

/// Waits for the intended send time `t` and returns the time latency counts from: `t` when
/// the worker is behind it (its previous call ran late, so the wait is the server's queue),
/// else the moment the timer woke it (tokio's timer has millisecond ticks; counting from `t`
/// would add up to a tick of this tool's own sleep to every call).
async fn send_time(t: Instant) -> Instant {
    if Instant::now() >= t {
        return t;
    }
    tokio::time::sleep_until(t.into()).await;
    Instant::now()
}

/// `--connections` HTTP/2 channels to `--addr`.
async fn channels(args: &GrpcArgs) -> Result<Vec<Channel>, String> {
    let uri = format!("http://{}", args.addr);
    let mut out = Vec::new();
    for _ in 0..args.connections.max(1) {
        let ch = Endpoint::from_shared(uri.clone())
            .map_err(|e| format!("--addr {}: {e}", args.addr))?
            .tcp_nodelay(true)
            .connect()
            .await
            .map_err(|e| format!("connect {uri}: {e}"))?;
        out.push(ch);
    }
    Ok(out)
}

/// Runs the load described by `args`.
pub(super) fn run(args: &GrpcArgs) -> Result<GrpcResult, String> {
    let call = match args.call.as_str() {
        "get" => Call::Get,
        "set" => Call::Set,
        "health" => Call::Health,
        other => return Err(format!("--call {other:?}: expected get, set or health")),
    };
    if args.concurrency == 0 || args.threads == 0 {
        return Err("--concurrency and --threads must be at least 1".into());
    }
    if args.rate == Some(0) {
        return Err("--rate must be at least 1".into());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads)
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    rt.block_on(async {
        let chans = channels(args).await?;
        if args.preload {
            preload(args, &chans).await?;
        }
        let server_pid = args.server_pid.map(|p| p.to_string());
        let server_before = server_pid.as_deref().and_then(proc_cpu_secs);
        let cpu_before = self_cpu_secs();
        let started = Instant::now();
        let deadline = match (args.requests, args.test_time) {
            (None, Some(s)) => Some(started + Duration::from_secs(s)),
            (None, None) => return Err("give --requests or --test-time".into()),
            _ => None,
        };
        let mut tasks = Vec::new();
        for i in 0..args.concurrency {
            let ch = chans[(i % chans.len() as u64) as usize].clone();
            let w = Worker {
                call,
                kv: KvClient::new(ch.clone()),
                health: HealthClient::new(ch),
                rng: Rng::new(args.seed ^ (i + 1).wrapping_mul(0x9e37)),
                args: args.clone(),
            };
            tasks.push(tokio::spawn(worker(w, i, started, deadline)));
        }
        let mut result = GrpcResult {
            secs: 0.0,
            ok: 0,
            misses: 0,
            errors: 0,
            latency: histogram(),
            bench_cpu_secs: 0.0,
            server_cpu_secs: None,
        };
        for t in tasks {
            let (ok, misses, errors, hist) = t.await.map_err(|e| format!("worker: {e}"))?;
            result.ok += ok;
            result.misses += misses;
            result.errors += errors;
            result
                .latency
                .add(&hist)
                .map_err(|e| format!("histogram: {e}"))?;
        }
        result.secs = started.elapsed().as_secs_f64();
        result.bench_cpu_secs = self_cpu_secs() - cpu_before;
        result.server_cpu_secs = server_before
            .zip(server_pid.as_deref().and_then(proc_cpu_secs))
            .map(|(a, b)| b - a);
        Ok(result)
    })
}

/// Sets every key once, `concurrency` calls in flight.
async fn preload(args: &GrpcArgs, chans: &[Channel]) -> Result<(), String> {
    let mut tasks = Vec::new();
    let workers = args.concurrency.min(args.keys.max(1));
    for i in 0..workers {
        let mut kv = KvClient::new(chans[(i % chans.len() as u64) as usize].clone());
        let a = args.clone();
        tasks.push(tokio::spawn(async move {
            let mut k = i;
            while k < a.keys {
                let key = format!("{}{k}", a.key_prefix).into_bytes();
                kv.set(set_request(k, key, a.data_size))
                    .await
                    .map_err(|s| format!("preload set: {s}"))?;
                k += workers;
            }
            Ok::<(), String>(())
        }));
    }
    for t in tasks {
        t.await.map_err(|e| format!("preload: {e}"))??;
    }
    Ok(())
}
