//! The watch benchmarks of issue 14 (W4, W5) against a running cairn, over its gRPC port:
//!
//! ```text
//!   watch_bench load ADDR PREFIX COUNT VALUE_BYTES     COUNT keys PREFIX0.. set over gRPC
//!   watch_bench initial ADDR PREFIX ROUNDS             W4: watch with initial_state, time to
//!                                                      initial_state_done (ms per round)
//!   watch_bench resume ADDR PREFIX COUNT VALUE_BYTES ROUNDS
//!                                                      a watch that starts the history, COUNT
//!                                                      keys set, then ROUNDS watches of PREFIX
//!                                                      from the first of them: time to the
//!                                                      last event (ms per round)
//!   watch_bench fanout ADDR PREFIX WATCHERS RATE SECONDS [PID] [--streams S]
//!                [--connections C] [--decode lean|full]
//!                                                      W5: WATCHERS watches on PREFIX, writes
//!                                                      at RATE/s (open loop); delivery latency
//!                                                      (write due to event received); with PID, the
//!                                                      server's CPU per event, and its RSS with
//!                                                      one stream that never reads, before and
//!                                                      after
//! ```
//!
//! The fan-out's watches sit on S streams (default: one watch a stream), the streams on C
//! HTTP/2 connections (default S / 100 rounded up). etcd's clients put every watch of a
//! client on one stream; one watch a stream is the costliest layout for both sides. Every
//! event is received and counted, and each watch's revisions must increase; `lean` decoding
//! reads of each response only the watch id, flags and each event's revision and value
//! (protobuf's wire format read in place), `full` decodes each response with prost.
//!
//! Run it with `cargo run --release -p cairn-api --example watch_bench -- ...`; the commands
//! and current figures are in docs/PERFORMANCE.md ("gRPC and watch").

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cairn_api::pb::{self, kv_client::KvClient, watch_client::WatchClient};
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

/// Sets `key` and returns its revision.
async fn mark(kv: &mut KvClient<Channel>, key: String) -> Result<u64, Error> {
    let r = kv
        .set(pb::SetRequest {
            key: key.into(),
            value: "m".into(),
            ..Default::default()
        })
        .await?;
    Ok(r.into_inner().mod_revision)
}

/// A past revision's events, again and again: the resume of a watch that fell behind.
async fn resume(
    addr: &str,
    prefix: &str,
    count: u64,
    value_bytes: usize,
    rounds: usize,
) -> Result<(), Error> {
    let ch = channel(addr).await?;
    // The history is kept from the first watch on: this one starts it before the writes.
    let keeper = pb::WatchCreateRequest {
        key: format!("{prefix}~keeper").into(),
        ..Default::default()
    };
    let (_keeper_tx, mut keeper_rx) = watch(ch.clone(), keeper).await?;
    keeper_rx.message().await?.ok_or("no created response")?;
    let mut kv = KvClient::new(ch.clone());
    let first = mark(&mut kv, format!("{prefix}~start")).await?;
    load(addr, prefix, count, value_bytes).await?;
    let last = mark(&mut kv, format!("{prefix}~end")).await?;
    let mut times = Vec::new();
    for round in 0..rounds {
        let started = Instant::now();
        let create = pb::WatchCreateRequest {
            key: prefix.to_string().into(),
            prefix: true,
            start_revision: first,
            ..Default::default()
        };
        let (_tx, mut stream) = watch(ch.clone(), create).await?;
        let mut events = 0u64;
        'read: loop {
            let m = stream.message().await?.ok_or("the stream ended")?;
            if m.canceled {
                return Err(format!("canceled: {}", m.cancel_reason).into());
            }
            for e in &m.events {
                events += 1;
                if e.revision >= last {
                    break 'read;
                }
            }
        }
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        println!("round {round}: {events} events (revisions {first}..={last}) in {ms:.1} ms");
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

/// How the fan-out's watches sit on the wire.
struct Layout {
    /// Watch streams the watches are dealt over (round robin); each stream carries
    /// watchers / streams of them, as etcd's clients put many watches on one stream.
    streams: usize,
    /// HTTP/2 connections the streams are dealt over.
    connections: usize,
    /// Decode only what the check needs (`Lean`), or each response whole with prost.
    decode: Decode,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Decode {
    Lean,
    Full,
}

/// A watch response as the fan-out's client receives it.
enum Resp {
    /// The message's bytes, read field by field ([`Resp::visit`]).
    Raw(bytes::Bytes),
    Full(pb::WatchResponse),
}

/// What [`Resp::visit`] finds besides the events.
#[derive(Default, Debug)]
struct Head {
    watch_id: i64,
    created: bool,
    canceled: bool,
}

/// Protobuf's wire format, read just far enough: each field of `msg` as (number, varint value,
/// or bytes of a length-delimited field).
fn fields<'a>(mut msg: &'a [u8], mut f: impl FnMut(u32, u64, &'a [u8])) -> Result<(), Error> {
    fn varint(b: &mut &[u8]) -> Result<u64, Error> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = b.split_first().ok_or("truncated varint")?;
            *b = rest;
            v |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return Ok(v);
            }
        }
        Err("varint too long".into())
    }
    while !msg.is_empty() {
        let key = varint(&mut msg)?;
        let field = (key >> 3) as u32;
        match key & 7 {
            0 => f(field, varint(&mut msg)?, &[]),
            2 => {
                let len = varint(&mut msg)? as usize;
                if len > msg.len() {
                    return Err("truncated field".into());
                }
                let (body, rest) = msg.split_at(len);
                f(field, 0, body);
                msg = rest;
            }
            1 => msg = msg.get(8..).ok_or("truncated fixed64")?,
            5 => msg = msg.get(4..).ok_or("truncated fixed32")?,
            w => return Err(format!("wire type {w}").into()),
        }
    }
    Ok(())
}

impl Resp {
    /// The response's watch id and flags; `event` gets each event's revision and the value of
    /// its item.
    fn visit(&self, mut event: impl FnMut(u64, &[u8])) -> Result<Head, Error> {
        match self {
            Resp::Full(m) => {
                for e in &m.events {
                    event(
                        e.revision,
                        e.kv.as_ref().map_or(&[][..], |kv| &kv.value[..]),
                    );
                }
                Ok(Head {
                    watch_id: m.watch_id,
                    created: m.created,
                    canceled: m.canceled,
                })
            }
            Resp::Raw(b) => {
                let mut head = Head::default();
                let mut bad = None;
                fields(b, |field, v, body| match field {
                    2 => head.watch_id = v as i64,
                    3 => head.created = v != 0,
                    4 => head.canceled = v != 0,
                    11 => {
                        let (mut revision, mut value) = (0, &[][..]);
                        let r = fields(body, |field, v, body| match field {
                            5 => revision = v,
                            2 => {
                                let _ = fields(body, |field, _, body| {
                                    if field == 2 {
                                        value = body;
                                    }
                                });
                            }
                            _ => {}
                        });
                        if let Err(e) = r {
                            bad = Some(e);
                        }
                        event(revision, value);
                    }
                    _ => {}
                })?;
                match bad {
                    Some(e) => Err(e),
                    None => Ok(head),
                }
            }
        }
    }
}

/// The watch client's codec: requests encoded by prost, responses kept as bytes (lean) or
/// decoded by prost (full).
struct FanoutCodec(Decode);

struct FanoutDecoder(Decode);

impl tonic::codec::Decoder for FanoutDecoder {
    type Item = Resp;
    type Error = tonic::Status;

    fn decode(
        &mut self,
        buf: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Resp>, tonic::Status> {
        use bytes::Buf;
        Ok(Some(match self.0 {
            Decode::Lean => Resp::Raw(buf.copy_to_bytes(buf.remaining())),
            Decode::Full => Resp::Full(
                prost::Message::decode(buf).map_err(|e| tonic::Status::internal(e.to_string()))?,
            ),
        }))
    }
}

impl tonic::codec::Codec for FanoutCodec {
    type Encode = pb::WatchRequest;
    type Decode = Resp;
    type Encoder = tonic_prost::ProstEncoder<pb::WatchRequest>;
    type Decoder = FanoutDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        tonic_prost::ProstEncoder::default()
    }

    fn decoder(&mut self) -> FanoutDecoder {
        FanoutDecoder(self.0)
    }
}

/// Opens a watch stream with `watches` watches on `prefix` (ids 1..=watches, chosen here),
/// and waits until each is created.
async fn fanout_stream(
    ch: Channel,
    prefix: &str,
    watches: usize,
    decode: Decode,
) -> Result<(mpsc::Sender<pb::WatchRequest>, tonic::Streaming<Resp>), Error> {
    let (tx, rx) = mpsc::channel(watches.max(1));
    for id in 1..=watches {
        tx.send(pb::WatchRequest {
            request_union: Some(pb::watch_request::RequestUnion::CreateRequest(
                pb::WatchCreateRequest {
                    watch_id: id as i64,
                    ..prefix_watch(prefix, false)
                },
            )),
        })
        .await?;
    }
    let mut grpc = tonic::client::Grpc::new(ch);
    grpc.ready().await?;
    let mut stream = grpc
        .streaming(
            tonic::Request::new(ReceiverStream::new(rx)),
            http::uri::PathAndQuery::from_static("/cairn.v1.Watch/Watch"),
            FanoutCodec(decode),
        )
        .await?
        .into_inner();
    for _ in 0..watches {
        let m = stream.message().await?.ok_or("the stream ended")?;
        let head = m.visit(|_, _| {})?;
        if !head.created || head.canceled {
            return Err(format!("watch not created: {head:?}").into());
        }
    }
    Ok((tx, stream))
}

/// What one stream's watches received.
struct Received {
    /// Delivery latency of every event, ns.
    latencies: Vec<u64>,
    /// Watches that got fewer events than were written.
    short: usize,
    /// Events out of revision order (not above the watch's last), or for an unknown watch.
    misordered: u64,
}

/// Reads a stream until each of its watches has `writes` events (or nothing arrives for 30 s),
/// checking that every watch's revisions increase.
async fn receive(
    mut stream: tonic::Streaming<Resp>,
    watches: usize,
    writes: u64,
) -> Result<Received, Error> {
    let mut count = vec![0u64; watches];
    let mut last = vec![0u64; watches];
    let mut latencies = Vec::with_capacity(watches * writes as usize);
    let mut misordered = 0u64;
    let mut done = 0;
    let mut events = Vec::new();
    while done < watches {
        // A message already received is taken without arming a timer (one a message would
        // cost more than reading it).
        let m = match futures_util::FutureExt::now_or_never(stream.message()) {
            Some(m) => m,
            None => tokio::time::timeout(Duration::from_secs(30), stream.message())
                .await
                .unwrap_or(Ok(None)),
        };
        let Ok(Some(m)) = m else { break };
        let now = now_nanos();
        events.clear();
        let head = m.visit(|revision, value| {
            let sent = std::str::from_utf8(value)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(now);
            events.push((revision, now.saturating_sub(sent)));
        })?;
        let Some(w) = usize::try_from(head.watch_id - 1)
            .ok()
            .filter(|&w| w < watches)
        else {
            misordered += events.len() as u64;
            continue;
        };
        let before = count[w];
        for &(revision, latency) in &events {
            if revision <= last[w] {
                misordered += 1;
            }
            last[w] = revision;
            count[w] += 1;
            latencies.push(latency);
        }
        if before < writes && count[w] >= writes {
            done += 1;
        }
    }
    let short = count.iter().filter(|&&c| c < writes).count();
    Ok(Received {
        latencies,
        short,
        misordered,
    })
}

async fn fanout(
    addr: &str,
    prefix: &str,
    watchers: usize,
    rate: u64,
    seconds: u64,
    pid: Option<u32>,
    layout: Layout,
) -> Result<(), Error> {
    let streams = layout.streams.clamp(1, watchers);
    let mut channels = Vec::new();
    for _ in 0..layout.connections.clamp(1, streams) {
        channels.push(channel(addr).await?);
    }
    let writes = rate * seconds;
    let mut receivers = tokio::task::JoinSet::new();
    let mut keep_open = Vec::new();
    for s in 0..streams {
        // Watches dealt round robin: stream s gets those with index = s mod streams.
        let watches = watchers / streams + usize::from(s < watchers % streams);
        let ch = channels[s % channels.len()].clone();
        let (tx, stream) = fanout_stream(ch, prefix, watches, layout.decode).await?;
        keep_open.push(tx);
        receivers.spawn(receive(stream, watches, writes));
    }
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
    let (mut all, mut short, mut misordered) = (Vec::new(), 0, 0);
    while let Some(r) = receivers.join_next().await {
        let r = r??;
        short += r.short;
        misordered += r.misordered;
        all.extend(r.latencies);
    }
    let rss_after = pid.and_then(rss_kib);
    let cpu_after = pid.and_then(cpu_secs);
    let own_cpu_after = cpu_secs(std::process::id());
    drop(stalled);
    drop(keep_open);
    if all.is_empty() {
        return Err("no event arrived".into());
    }
    all.sort_unstable();
    let pct = |p: f64| all[((all.len() - 1) as f64 * p) as usize] as f64 / 1e6;
    println!(
        "{watchers} watchers on {streams} streams over {} connections ({} decoding), {writes} \
         writes in {wrote_for:.1} s ({:.0}/s): {} events delivered ({} expected, {short} \
         watchers short, {misordered} out of order); delivery ms p50 {:.2} p90 {:.2} p99 {:.2} \
         p99.9 {:.2} max {:.2}",
        channels.len(),
        if layout.decode == Decode::Lean {
            "lean"
        } else {
            "full"
        },
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
        "resume" => resume(a(1), a(2), n(3)?, n(4)? as usize, n(5)? as usize).await,
        "fanout" => {
            // Positional: ADDR PREFIX WATCHERS RATE SECONDS [PID]; then the layout's flags.
            let (mut pid, mut streams, mut connections, mut decode) =
                (None, None, None, Decode::Lean);
            let mut rest = args[6.min(args.len())..].iter();
            while let Some(arg) = rest.next() {
                let mut value = || rest.next().ok_or(format!("{arg} needs a value"));
                match arg.as_str() {
                    "--streams" => streams = Some(value()?.parse()?),
                    "--connections" => connections = Some(value()?.parse()?),
                    "--decode" => {
                        decode = match value()?.as_str() {
                            "lean" => Decode::Lean,
                            "full" => Decode::Full,
                            d => return Err(format!("--decode lean|full, not {d}").into()),
                        }
                    }
                    p => pid = Some(p.parse()?),
                }
            }
            let watchers = n(3)? as usize;
            let streams: usize = streams.unwrap_or(watchers);
            let layout = Layout {
                streams,
                connections: connections.unwrap_or(streams.div_ceil(100)),
                decode,
            };
            fanout(a(1), a(2), watchers, n(4)?, n(5)?, pid, layout).await
        }
        _ => Err(
            "usage: watch_bench load|initial|resume|fanout ADDR PREFIX ... (see the source)".into(),
        ),
    }
}
