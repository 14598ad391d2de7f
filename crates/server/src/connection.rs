//! One client connection: read a batch, answer every complete request in it, write once.
//!
//! ```text
//!   socket ──read──> input ──parse──> request ──cmd::answer──> output ──write──> socket
//!                     ^  keeps a partial request        ^                ^
//!                     └─ until the rest arrives         │     the writes whose replies are in
//!                          a write is first admitted ───┘     `output` are safe first
//! ```
//!
//! Durability goes through the one write path, cairn-engine's, which every front end takes:
//! before a write, `cmd::answer` awaits `Engine::admit` (refused once the log failed or on a
//! replica; and the log's buffer is below its bound: when a slow disk fills it, this
//! connection is parked, with no error, and every other connection is still served); each
//! request's changes, made inside `Engine::apply`, come back with an `Ack`, which this
//! connection merges for the batch; before the output is written,
//! `Engine::acknowledged(ack)` waits until those writes are safe in the mode in force:
//! fdatasync'd in sync mode, handed to the kernel in async mode (and held by a replica under
//! sync replication). So no reply byte leaves ahead of the writes it answers, or ahead of an
//! earlier `noreply` write; all connections waiting meanwhile share the log's next write
//! (group commit), and a pipelined batch waits once. `mn` is a fence in both modes: its `MN`
//! is sent only once every earlier write of the connection is durable (`Engine::durable`).
//! Waiting parks this task only: no lock is held and no thread is blocked.
//!
//! The protocol is the first byte's, as memcached's `-B auto` decides it: 0x80 starts
//! memcached's binary protocol (cmd/binary answers each packet), anything else the text and
//! meta protocols, for the connection's life.
//!
//! Backpressure of replies: the connection reads again only after its output is written (on
//! the io_uring engine: once its previous output is written, one send being in flight while
//! the next batch is read), and flushes in the middle of a batch (between keys of a multi-get
//! too) once the output passes `output_buffer_max`. A client that does not read its replies
//! therefore stops being read from, and the server holds at most one batch of input plus
//! `output_buffer_max` for it (twice that on io_uring).

use std::sync::Arc;

use cairn_engine::Ack;
use cairn_proto::Request;
use tokio::sync::watch;

use crate::cmd::{self, Closed, Flow, Session};
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
    unacked: Ack,
    /// Writes acknowledged and perhaps not durable yet (async mode): what `mn` fences.
    unfenced: Ack,
    /// The protocol, from the connection's first byte as memcached's `-B auto`: 0x80 is
    /// binary (cmd/binary), anything else text and meta. None until that byte arrives.
    binary: Option<bool>,
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
        unacked: Ack::NONE,
        unfenced: Ack::NONE,
        binary: None,
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
            Err(Closed) => return,
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

/// Writes the output, once the writes it answers are safe (see the module doc). If they
/// cannot be, the replies are replaced by an error and the connection ends: nothing is
/// acknowledged that is not safe.
async fn flush<S: Transport>(ctx: &Ctx, c: &mut Conn<S>) -> Result<(), Closed> {
    if !c.unacked.is_empty() {
        // On the io_uring engine, the thread's one wait for the log's safe mark first.
        let safe = ctx
            .engine
            .acknowledged_after(c.unacked, crate::uring::until_safe)
            .await;
        if let Err(e) = safe {
            c.output.clear();
            cmd::binary::wording::failure_in(c.binary == Some(true), &mut c.output, &e);
            let _ = c.stream.send(&mut c.output).await;
            return Err(Closed);
        }
        c.unfenced = c.unfenced.merge(c.unacked);
        c.unacked = Ack::NONE;
    }
    write(ctx, c).await
}

/// `mn`: every earlier write of this connection is durable, whatever the mode.
async fn fence<S>(ctx: &Ctx, c: &mut Conn<S>) -> bool {
    let durable = ctx.engine.durable(c.unfenced).await.is_ok();
    c.unfenced = Ack::NONE;
    durable
}

async fn write<S: Transport>(ctx: &Ctx, c: &mut Conn<S>) -> Result<(), Closed> {
    let n = c.output.len();
    c.stream.send(&mut c.output).await.map_err(|_| Closed)?;
    add(&ctx.counters.bytes_written, n as u64);
    Ok(())
}

/// What answering a request needs of this connection (cmd/dispatch.rs).
impl<S: Transport> Session for Conn<S> {
    fn output(&mut self) -> &mut Vec<u8> {
        &mut self.output
    }

    fn pipeline(&mut self) -> (&mut cmd::arcus::Pipeline, &mut Vec<u8>) {
        (&mut self.pipeline, &mut self.output)
    }

    fn note(&mut self, ack: Ack) {
        self.unacked = self.unacked.merge(ack);
    }

    fn writes_pending(&self) -> bool {
        !(self.unacked.is_empty() && self.unfenced.is_empty())
    }

    fn flush(&mut self, ctx: &Ctx) -> impl std::future::Future<Output = Result<(), Closed>> {
        flush(ctx, self)
    }

    fn fence(&mut self, ctx: &Ctx) -> impl std::future::Future<Output = bool> {
        fence(ctx, self)
    }

    fn authenticated(&self) -> bool {
        self.authenticated
    }

    fn authenticate(&mut self, ctx: &Ctx, request: Request) {
        authenticate(ctx, &mut self.authenticated, &mut self.output, request);
    }
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
async fn answer_batch<S: Transport>(ctx: &Arc<Ctx>, c: &mut Conn<S>) -> Result<Flow, Closed> {
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
    let flow = loop {
        if c.swallow > 0 {
            let n = c.swallow.min(input.len() - start);
            start += n;
            c.swallow -= n;
            if c.swallow > 0 {
                break Flow::Continue;
            }
        }
        if c.binary.is_none() && start < input.len() {
            c.binary = Some(input[start] == cairn_proto::binary::REQUEST_MAGIC);
        }
        if c.binary == Some(true) {
            let Some(step) = cmd::binary::step(ctx, c, &input[start..]).await? else {
                break Flow::Continue;
            };
            start += step.used;
            c.swallow = step.swallow;
            if step.flow == Flow::Close {
                break Flow::Close;
            }
            if let Some(family) = step.family {
                let done = std::time::Instant::now();
                ctx.latency
                    .observe(family, done.saturating_duration_since(mark));
                mark = done;
            }
        } else {
            let Some(step) = cmd::answer_next(ctx, c, &input[start..], &mut mark).await? else {
                break Flow::Continue;
            };
            start += step.used;
            c.swallow = step.swallow;
            match step.flow {
                Flow::Continue => {}
                Flow::Close => break Flow::Close,
                // Answered with the refusal (or an authentication line); not timed.
                Flow::Refused => continue,
            }
        }
        if c.output.len() >= ctx.config.output_buffer_max {
            flush(ctx, c).await?;
            mark = std::time::Instant::now();
        }
        // Every request's writes are in `unacked` by now.
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
