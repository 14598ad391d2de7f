//! The watch benchmarks of issue 14 (W4, W5) against a running cairn, over its gRPC port:
//!
//! ```text
//!   watch_bench load ADDR PREFIX COUNT VALUE_BYTES     COUNT keys PREFIX0.. set over gRPC
//!   watch_bench initial ADDR PREFIX ROUNDS             W4: watch with initial_state, time to
//!                                                      initial_state_done (ms per round)
//!   watch_bench fanout ADDR PREFIX WATCHERS RATE SECONDS [PID]
//!                                                      W5: WATCHERS streams on PREFIX, writes
//!                                                      at RATE/s (open loop); delivery latency
//!                                                      (write due to event received); with PID, the
//!                                                      server's RSS with one stream that never
//!                                                      reads, before and after
//! ```
//!
//! Run it with `cargo run --release -p cairn-grpc --example watch_bench -- ...`; the commands
//! and figures are in docs/BENCHMARKS.md.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cairn_grpc::pb::{self, kv_client::KvClient, watch_client::WatchClient};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

type Error = Box<dyn std::error::Error + Send + Sync>;

async fn channel(addr: &str) -> Result<Channel, Error> {
    Ok(Channel::from_shared(format!("http://{addr}"))?
        .connect()
        .await?)
}

/// Opens a watch stream with one create request; returns the request sender (kept open) and
/// the response stream.
async fn watch(
    ch: Channel,
    create: pb::WatchCreateRequest,
) -> Result<
    (
        mpsc::Sender<pb::WatchRequest>,
        tonic::Streaming<pb::WatchResponse>,
    ),
    Error,
> {
    let (tx, rx) = mpsc::channel(4);
    tx.send(pb::WatchRequest {
        request_union: Some(pb::watch_request::RequestUnion::CreateRequest(create)),
    })
    .await?;
    let stream = WatchClient::new(ch)
        .max_decoding_message_size(64 << 20)
        .watch(ReceiverStream::new(rx))
        .await?
        .into_inner();
    Ok((tx, stream))
}

fn prefix_watch(prefix: &str, initial_state: bool) -> pb::WatchCreateRequest {
    pb::WatchCreateRequest {
        key: prefix.to_string().into(),
        prefix: true,
        initial_state,
        ..Default::default()
    }
}

async fn load(addr: &str, prefix: &str, count: u64, value_bytes: usize) -> Result<(), Error> {
    let ch = channel(addr).await?;
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let (mut kv, next, prefix) = (
            KvClient::new(ch.clone()),
            Arc::clone(&next),
            prefix.to_string(),
        );
        tasks.push(tokio::spawn(async move {
            let value = bytes::Bytes::from(vec![b'v'; value_bytes]);
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    return Ok::<(), tonic::Status>(());
                }
                kv.set(pb::SetRequest {
                    key: format!("{prefix}{i}").into(),
                    value: value.clone(),
                    ..Default::default()
                })
                .await?;
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    println!(
        "loaded {count} keys of {value_bytes} B in {:.2} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

async fn initial(addr: &str, prefix: &str, rounds: usize) -> Result<(), Error> {
    let ch = channel(addr).await?;
    let mut times = Vec::new();
    for round in 0..rounds {
        let started = Instant::now();
        let (_tx, mut stream) = watch(ch.clone(), prefix_watch(prefix, true)).await?;
        let (mut items, mut bytes) = (0u64, 0u64);
        loop {
            let m = stream.message().await?.ok_or("the stream ended")?;
            if m.canceled {
                return Err(format!("canceled: {}", m.cancel_reason).into());
            }
            for kv in &m.initial_items {
                bytes += (kv.key.len() + kv.value.len()) as u64;
            }
            items += m.initial_items.len() as u64;
            if m.initial_state_done {
                break;
            }
        }
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        println!(
            "round {round}: {items} items, {:.1} MB of keys and values, initial_state_done after {ms:.1} ms",
            bytes as f64 / 1e6
        );
        times.push(ms);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "median {:.1} ms over {rounds} rounds",
        times[times.len() / 2]
    );
    Ok(())
}

fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// CPU seconds (user + system) a process has used, from /proc (clock ticks of 10 ms).
fn cpu_secs(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

async fn fanout(
    addr: &str,
    prefix: &str,
    watchers: usize,
    rate: u64,
    seconds: u64,
    pid: Option<u32>,
) -> Result<(), Error> {
    // 100 streams per HTTP/2 connection (gRPC clients multiplex streams the same way).
    let mut channels = Vec::new();
    for _ in 0..watchers.div_ceil(100) {
        channels.push(channel(addr).await?);
    }
    let writes = rate * seconds;
    let (lat_tx, mut lat_rx) = mpsc::unbounded_channel::<Vec<u64>>();
    let mut ready = Vec::new();
    for i in 0..watchers {
        let (tx, mut stream) = watch(
            channels[i % channels.len()].clone(),
            prefix_watch(prefix, false),
        )
        .await?;
        let first = stream.message().await?.ok_or("the stream ended")?;
        if !first.created || first.canceled {
            return Err(format!("watch not created: {first:?}").into());
        }
        let lat_tx = lat_tx.clone();
        ready.push(tokio::spawn(async move {
            let _keep_open = tx;
            let mut latencies = Vec::with_capacity(writes as usize);
            while (latencies.len() as u64) < writes {
                let Ok(Some(m)) = stream.message().await else {
                    break;
                };
                let now = now_nanos();
                for e in &m.events {
                    let sent: u64 =
                        e.kv.as_ref()
                            .and_then(|kv| std::str::from_utf8(&kv.value).ok()?.parse().ok())
                            .unwrap_or(now);
                    latencies.push(now.saturating_sub(sent));
                }
            }
            let _ = lat_tx.send(latencies);
        }));
    }
    drop(lat_tx);
    // One more stream that never reads after `created`, on a connection of its own.
    let stalled = watch(channel(addr).await?, prefix_watch(prefix, false)).await?;
    let rss_before = pid.and_then(rss_kib);
    let cpu_before = pid.and_then(cpu_secs);
    let own_cpu_before = cpu_secs(std::process::id());
    // Open loop: write i is due at start + i / rate whether or not the ones before it were
    // answered, and its value is that due time, so a late send counts as delivery latency
    // (no coordinated omission).
    let kv = KvClient::new(channel(addr).await?);
    let started = Instant::now();
    let start_nanos = now_nanos();
    let interval = Duration::from_nanos(1_000_000_000 / rate);
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut sets = tokio::task::JoinSet::new();
    for i in 0..writes {
        ticker.tick().await;
        let due = start_nanos + i * interval.as_nanos() as u64;
        let (mut kv, key) = (kv.clone(), format!("{prefix}{}", i % 1000));
        sets.spawn(async move {
            kv.set(pb::SetRequest {
                key: key.into(),
                value: due.to_string().into(),
                ..Default::default()
            })
            .await
        });
    }
    while let Some(r) = sets.join_next().await {
        r??;
    }
    let wrote_for = started.elapsed().as_secs_f64();
    let mut all = Vec::new();
    let mut short = 0;
    while let Some(l) = lat_rx.recv().await {
        if (l.len() as u64) < writes {
            short += 1;
        }
        all.extend(l);
    }
    let rss_after = pid.and_then(rss_kib);
    let cpu_after = pid.and_then(cpu_secs);
    let own_cpu_after = cpu_secs(std::process::id());
    drop(stalled);
    all.sort_unstable();
    let pct = |p: f64| all[((all.len() - 1) as f64 * p) as usize] as f64 / 1e6;
    println!(
        "{watchers} watchers, {writes} writes in {wrote_for:.1} s ({:.0}/s): {} events delivered \
         ({} expected, {short} watchers short); delivery ms p50 {:.2} p90 {:.2} p99 {:.2} \
         p99.9 {:.2} max {:.2}",
        writes as f64 / wrote_for,
        all.len(),
        writes * watchers as u64,
        pct(0.5),
        pct(0.9),
        pct(0.99),
        pct(0.999),
        pct(1.0)
    );
    if let (Some(a), Some(b)) = (cpu_before, cpu_after) {
        println!(
            "server CPU from the first write to the last event delivered: {:.2} s, {:.2} us per \
             event",
            b - a,
            (b - a) * 1e6 / all.len().max(1) as f64
        );
    }
    if let (Some(a), Some(b)) = (own_cpu_before, own_cpu_after) {
        println!(
            "this client's CPU over the same span: {:.2} s, {:.2} us per event",
            b - a,
            (b - a) * 1e6 / all.len().max(1) as f64
        );
    }
    if let (Some(a), Some(b)) = (rss_before, rss_after) {
        println!(
            "server RSS with a stream that never reads: {a} KiB before the writes, {b} KiB after ({:+} KiB)",
            b as i64 - a as i64
        );
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let a = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
    let n = |i: usize| -> Result<u64, Error> { Ok(a(i).parse()?) };
    match a(0) {
        "load" => load(a(1), a(2), n(3)?, n(4)? as usize).await,
        "initial" => initial(a(1), a(2), n(3)? as usize).await,
        "fanout" => {
            let pid = args.get(6).map(|p| p.parse()).transpose()?;
            fanout(a(1), a(2), n(3)? as usize, n(4)?, n(5)?, pid).await
        }
        _ => Err("usage: watch_bench load|initial|fanout ADDR PREFIX ... (see the source)".into()),
    }
}
