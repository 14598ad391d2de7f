//! One client connection: read a batch, answer every complete request in it, write once.
//!
//! ```text
//!   socket ──read──> input ──parse──> request ──cmd::execute──> output ──write──> socket
//!                     ^  keeps a partial request        ^                ^
//!                     └─ until the rest arrives         │     the writes whose replies are in
//!                          a write first awaits room ───┘     `output` are safe first
//! ```
//!
//! Durability goes through the one path of cairn-persist (crates/persist/src/durability.rs):
//! before a write the connection awaits `room()` (the log's buffer is below its bound: when a
//! slow disk fills it, this connection is parked, with no error, and every other connection is
//! still served); each request's mutations leave a ticket (`take_ticket`); before the output
//! is written, `acknowledged(ticket)` waits until those writes are safe in the mode in force:
//! fdatasync'd in sync mode, handed to the kernel in async mode. So no reply byte leaves ahead
//! of the writes it answers, or ahead of an earlier `noreply` write; all connections waiting
//! meanwhile share the log's next write (group commit). `mn` is a fence in both modes: its
//! `MN` is sent only once every earlier write of the connection is durable. Waiting parks this
//! task only: no lock is held and no thread is blocked.
//!
//! Backpressure of replies: the connection reads again only after its output is written (on
//! the io_uring engine: once its previous output is written, one send being in flight while
//! the next batch is read), and flushes in the middle of a batch (between keys of a multi-get
//! too) once the output passes `output_buffer_max`. A client that does not read its replies
//! therefore stops being read from, and the server holds at most one batch of input plus
//! `output_buffer_max` for it (twice that on io_uring).

use std::sync::Arc;

use cairn_persist::{take_ticket, Ticket};
use cairn_proto::{parse, Crawler, MetaCmd, Request};
use tokio::sync::watch;

use crate::cmd::{self, Flow};
use crate::stats::{add, bump};
use crate::transport::Transport;
use crate::Ctx;

/// Input buffer size to start with; it grows up to one full request.
const READ_CHUNK: usize = 16 << 10;

/// A connection whose socket always has more input (a client streaming large writes) would
/// otherwise keep its worker thread for tokio's whole cooperative budget, about 128 reads:
/// megabytes of copying while the other connections on that thread wait. After this many
/// input bytes it lets them run first.
const YIELD_AFTER_BYTES: usize = 256 << 10;

/// Requests answered before the connection lets the others on its worker thread run (and the
/// thread polls for sockets that became readable): memcached's `reqs_per_event` (`-R`, 20).
/// A client pipelining hundreds of requests then delays another client on the same thread by
/// 20 requests' work, not by its whole batch.
const REQUESTS_PER_TURN: usize = 20;

/// Per-connection state carried across batches.
struct Conn<S> {
    /// TCP, or TLS under `-Z` (tokio engine); TCP over io_uring (uring engine).
    stream: S,
    /// False under `-Y` until the client's `set` carried a user and password of the file.
    authenticated: bool,
    input: Vec<u8>,
    output: Vec<u8>,
    /// Bytes of a refused data block still to be skipped.
    swallow: usize,
    /// ARCUS's command pipelining: the `NOT_SUPPORTED` replies held until the pipeline's
    /// last command (cmd/arcus.rs).
    pipeline: cmd::arcus::Pipeline,
    /// The writes whose replies are in `output` (or were `noreply`): safe before it is written.
    unacked: Ticket,
    /// Writes acknowledged and perhaps not durable yet (async mode): what `mn` fences.
    unfenced: Ticket,
}

/// Why a connection stops.
enum Stop {
    Closed,
}

/// Serves one connection until the client closes, sends `quit`, or shutdown is signalled.
pub async fn serve<S: Transport>(ctx: Arc<Ctx>, stream: S, mut shutdown: watch::Receiver<bool>) {
    let registered = stream.register(&ctx.conns, ctx.now());
    let mut c = Conn {
        stream,
        authenticated: ctx.auth.is_none(),
        input: Vec::with_capacity(READ_CHUNK),
        output: Vec::with_capacity(READ_CHUNK),
        swallow: 0,
        pipeline: cmd::arcus::Pipeline::default(),
        unacked: Ticket::NONE,
        unfenced: Ticket::NONE,
    };
    answer_until_closed(&ctx, &mut c, registered.as_ref(), &mut shutdown).await;
    // A send still in flight (io_uring engine) leaves whole before the socket is closed.
    let _ = c.stream.finish().await;
}

/// The connection's life: batches read and answered until it ends.
async fn answer_until_closed<S: Transport>(
    ctx: &Arc<Ctx>,
    c: &mut Conn<S>,
    registered: Option<&crate::conns::Handle<'_>>,
    shutdown: &mut watch::Receiver<bool>,
) {
    // Input bytes read since this task last let others run on its worker thread.
    let mut read_since_yield = 0usize;
    // Shutdown, while the connection waits for its client: one future for the connection's
    // life (a fresh one per read would register and unregister a waiter on the watch each
    // time), polled only while the read is not ready (`biased`).
    let mut signal = shutdown.clone();
    let stopping = signal.changed();
    tokio::pin!(stopping);
    // `stopping` registers the task's waker with the watch when it is first polled; after
    // that it is polled again only once the watch moved (`has_changed`, an atomic load).
    // Polling it at every wait for the client took the watch's lock each time, one lock for
    // all connections (0.6% of a persistence-off set's server CPU,
    // docs/decisions/0008-the-shutdown-watch-polled-once.md). A task's waker is the same for
    // its whole life on both engines, so the first registration stands.
    let mut stopping_polled = false;
    loop {
        let flow = match answer_batch(ctx, c).await {
            Ok(flow) => flow,
            Err(Stop::Closed) => return,
        };
        // Waiting for the client from the moment the last reply can reach it.
        if let Some(r) = registered {
            r.waiting();
        }
        if !c.output.is_empty() && flush(ctx, c).await.is_err() {
            return;
        }
        if flow != Flow::Continue || *shutdown.borrow() {
            return;
        }
        if read_since_yield >= YIELD_AFTER_BYTES {
            read_since_yield = 0;
            tokio::task::yield_now().await;
        }
        if c.input.capacity() - c.input.len() < READ_CHUNK / 4 {
            c.input.reserve(READ_CHUNK);
        }
        tokio::select! {
            biased;
            read = c.stream.read_buf(&mut c.input) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    add(&ctx.counters.bytes_read, n as u64);
                    if let Some(r) = registered {
                        r.command(ctx.now());
                    }
                    read_since_yield += n;
                }
            },
            _ = std::future::poll_fn(|cx| {
                if stopping_polled && !shutdown.has_changed().unwrap_or(true) {
                    return std::task::Poll::Pending;
                }
                stopping_polled = true;
                std::future::Future::poll(stopping.as_mut(), cx)
            }) => return,
        }
    }
}

/// The reply when writes cannot be made safe; the connection is closed after it.
const NOT_SAFE: &[u8] =
    b"SERVER_ERROR persistence failure: the write could not be made durable\r\n";

/// Writes the output, once the writes it answers are safe (see the module doc). If they
/// cannot be, the replies are replaced by an error and the connection ends: nothing is
/// acknowledged that is not safe.
async fn flush<S: Transport>(ctx: &Ctx, c: &mut Conn<S>) -> Result<(), Stop> {
    if !c.unacked.is_empty() {
        let safe = match &ctx.persist {
            Some(p) => {
                if let Some(lsn) = c.unacked.lsn() {
                    crate::uring::until_safe(p, lsn).await;
                }
                p.acknowledged(c.unacked).await
            }
            None => Ok(()),
        };
        if let Err(e) = safe {
            c.output.clear();
            match e {
                // Safe here, but sync replication found no replica holding it in time.
                cairn_persist::PersistError::Replication(why) => {
                    server_error(&mut c.output, "replication: ", &why);
                }
                _ => c.output.extend_from_slice(NOT_SAFE),
            }
            let _ = c.stream.send(&mut c.output).await;
            return Err(Stop::Closed);
        }
        c.unfenced = c.unfenced.merge(c.unacked);
        c.unacked = Ticket::NONE;
    }
    write(ctx, c).await
}

/// `mn`: every earlier write of this connection is durable, whatever the mode.
async fn fence<S>(ctx: &Ctx, c: &mut Conn<S>) -> bool {
    let durable = match &ctx.persist {
        Some(p) => p.durable(c.unfenced).await.is_ok(),
        None => true,
    };
    c.unfenced = Ticket::NONE;
    durable
}

/// Before a write: parks while the log's buffer is full (backpressure); other connections
/// are served meanwhile.
async fn room_for_a_write(ctx: &Ctx) {
    if let Some(p) = &ctx.persist {
        if !p.has_room() {
            p.room().await;
        }
    }
}

async fn write<S: Transport>(ctx: &Ctx, c: &mut Conn<S>) -> Result<(), Stop> {
    let n = c.output.len();
    c.stream
        .send(&mut c.output)
        .await
        .map_err(|_| Stop::Closed)?;
    add(&ctx.counters.bytes_written, n as u64);
    Ok(())
}

/// Appends `SERVER_ERROR <head><why>`, `why` kept to one line.
fn server_error(out: &mut Vec<u8>, head: &str, why: &str) {
    out.extend_from_slice(b"SERVER_ERROR ");
    out.extend_from_slice(head.as_bytes());
    out.extend_from_slice(why.replace(['\r', '\n'], " ").as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Adds the writes of the request just executed to what the output waits for.
fn note_writes<S>(c: &mut Conn<S>) {
    c.unacked = c.unacked.merge(take_ticket());
}

/// memcached's ASCII authentication (`-Y`): the first command must be a `set` whose data is
/// `user pass`; it answers `STORED` and lets the rest through, or `CLIENT_ERROR authentication
/// failure`. Anything else before it gets `CLIENT_ERROR unauthenticated`.
fn authenticate(ctx: &Ctx, authenticated: &mut bool, output: &mut Vec<u8>, request: Request) {
    let Some(auth) = &ctx.auth else {
        *authenticated = true;
        return;
    };
    let reply: &[u8] = match request {
        Request::Store {
            kind: cairn_proto::StoreKind::Set,
            value,
            ..
        } => {
            if auth.check(&value) {
                *authenticated = true;
                b"STORED\r\n"
            } else {
                bump(&ctx.counters.auth_failures);
                b"CLIENT_ERROR authentication failure\r\n"
            }
        }
        _ => b"CLIENT_ERROR unauthenticated\r\n",
    };
    output.extend_from_slice(reply);
}

/// Answers every complete request in the input.
async fn answer_batch<S: Transport>(ctx: &Arc<Ctx>, c: &mut Conn<S>) -> Result<Flow, Stop> {
    // The input leaves the connection for the batch: a request borrows its keys and value
    // from it, and lives across flushes of the connection's output (a long multi-get).
    let mut input = std::mem::take(&mut c.input);
    let mut start = 0;
    let mut this_turn = 0;
    // A request's latency runs from the end of the one before it, or for the first from
    // here (on the io_uring engine from the start of the thread's turn, which it read
    // already): one clock read per request instead of a pair. Waits between requests (a
    // yield, a flush) move the mark.
    let mut mark = crate::uring::turn_started().unwrap_or_else(std::time::Instant::now);
    // Clear whatever an earlier task on this thread left behind.
    take_ticket();
    let flow = loop {
        if c.swallow > 0 {
            let n = c.swallow.min(input.len() - start);
            start += n;
            c.swallow -= n;
            if c.swallow > 0 {
                break Flow::Continue;
            }
        }
        match parse(&input[start..], &ctx.limits) {
            Ok(None) => break Flow::Continue,
            Ok(Some((request, used))) => {
                start += used;
                if let Request::NotSupported { skip, .. } = request {
                    // An ARCUS command's data block: skipped as it arrives, whatever the
                    // command is answered.
                    c.swallow = skip;
                }
                if !c.authenticated {
                    authenticate(ctx, &mut c.authenticated, &mut c.output, request);
                    continue;
                }
                if cmd::is_write(&request) {
                    room_for_a_write(ctx).await;
                    if let Some(why) = ctx.write_refusal() {
                        server_error(&mut c.output, "writes refused: ", &why.to_string());
                        continue;
                    }
                }
                let family = crate::stats::Family::of(&request);
                match request {
                    Request::Get {
                        kind,
                        exptime,
                        keys,
                    } => {
                        let now = ctx.now();
                        for key in keys.iter() {
                            cmd::get::one_async(ctx, kind, exptime, now, key, &mut c.output).await;
                            note_writes(c);
                            if c.output.len() >= ctx.config.output_buffer_max {
                                flush(ctx, c).await?;
                            }
                        }
                        cmd::get::end(&mut c.output);
                    }
                    Request::Meta(m)
                        if m.cmd == MetaCmd::Noop
                            && !(c.unacked.is_empty() && c.unfenced.is_empty()) =>
                    {
                        // The durability fence: MN only once this connection's writes are on disk.
                        flush(ctx, c).await?;
                        if !fence(ctx, c).await {
                            c.output.extend_from_slice(NOT_SAFE);
                            break Flow::Close;
                        }
                        c.output.extend_from_slice(b"MN\r\n");
                    }
                    Request::Admin { words } => cmd::admin::run(ctx, &words, &mut c.output).await,
                    Request::NotSupported { pipe, noreply, .. } => {
                        c.pipeline.answer(pipe, noreply, &mut c.output)
                    }
                    Request::LruCrawler(Crawler::Metadump { dump: true }) => {
                        // Streamed shard by shard, flushing as the reply grows.
                        let now = ctx.now();
                        for shard in 0..ctx.store.shard_count() {
                            cmd::crawler::metadump_shard(ctx, shard, now, &mut c.output);
                            if c.output.len() >= ctx.config.output_buffer_max {
                                flush(ctx, c).await?;
                            }
                        }
                        c.output.extend_from_slice(b"END\r\n");
                    }
                    request => {
                        if let Err(e) = crate::flash::resolve(ctx, &request).await {
                            // The item may still be on flash: the command must not run as
                            // if its key were absent. Nothing changed; the client may retry.
                            let why = e.to_string();
                            server_error(&mut c.output, "flash read not done: ", &why);
                            continue;
                        }
                        let flow = cmd::execute(ctx, request, &mut c.output);
                        note_writes(c);
                        if flow == Flow::Close {
                            break Flow::Close;
                        }
                    }
                }
                let done = std::time::Instant::now();
                ctx.latency
                    .observe(family, done.saturating_duration_since(mark));
                mark = done;
            }
            Err(e) => {
                bump(&ctx.counters.protocol_errors);
                if let Some(key) = &e.forget {
                    cmd::storage::forget(ctx, key);
                    note_writes(c);
                }
                if !e.silent {
                    c.output.extend_from_slice(e.reply_line().as_bytes());
                    c.output.extend_from_slice(b"\r\n");
                }
                start += e.consumed;
                c.swallow = e.swallow;
                if e.close {
                    break Flow::Close;
                }
            }
        }
        if c.output.len() >= ctx.config.output_buffer_max {
            flush(ctx, c).await?;
            mark = std::time::Instant::now();
        }
        // Every request's writes are in `unacked` by now (no ticket is left on the thread).
        this_turn += 1;
        if this_turn == REQUESTS_PER_TURN {
            this_turn = 0;
            tokio::task::yield_now().await;
            mark = std::time::Instant::now();
        }
    };
    input.drain(..start);
    c.input = input;
    Ok(flow)
}
