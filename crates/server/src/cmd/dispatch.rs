//! The one dispatch of memcached requests: [`answer`] takes every parsed request to its
//! command file, through the one write path (cairn-engine) for a write.
//!
//! ```text
//!   connection ─ parsed request ─> answer(ctx, session, request)
//!     a write? (is_write) ─> Engine::admit: refused ─> SERVER_ERROR writes refused: ...
//!     get/gets/gat/gats ───> get.rs key by key (a long reply is flushed midway)
//!     mn, writes pending ──> flush, then the fence (Engine::durable), then MN
//!     admin lines ─────────> admin.rs (may wait: a checkpoint)
//!     ARCUS's commands ────> arcus.rs with the session's pipeline
//!     lru_crawler metadump > crawler.rs shard by shard (flushed as it grows)
//!     everything else ─────> Engine::resolve(key) (flash) ─> Engine::apply(|tx|
//!                            execute(..)) ─> the Ack joins what the session's output waits for
//! ```
//!
//! A [`Session`] is what answering needs of the connection: its output, its ARCUS pipeline,
//! what its replies wait for, and its flush and fence. The connection implements it.
//!
//! Non-goals: reading, parsing, authentication and latency (the connection's); what each
//! command means (its file).

use std::future::Future;
use std::sync::Arc;

use cairn_engine::{Ack, Tx};
use cairn_proto::{Crawler, MetaCmd, Request};

use super::flow::{Closed, Flow};
use super::{admin, arcus, arith, crawler, delete, flush, get, meta, misc, stats, storage, touch};
use super::{write_error, write_error::NOT_SAFE};
use crate::Ctx;

/// What answering a request needs of its connection.
pub trait Session {
    /// The replies so far (written at the end of the batch, or by [`Session::flush`]).
    fn output(&mut self) -> &mut Vec<u8>;
    /// The output with ARCUS's command pipelining state (arcus.rs), which answers into it.
    fn pipeline(&mut self) -> (&mut arcus::Pipeline, &mut Vec<u8>);
    /// Adds a request's writes to what the output waits for.
    fn note(&mut self, ack: Ack);
    /// Whether writes of this connection may not be durable yet (so `mn` must fence).
    fn writes_pending(&self) -> bool;
    /// Writes the output, once the writes it answers are safe; if they cannot be, says so
    /// and closes the connection.
    fn flush(&mut self, ctx: &Ctx) -> impl Future<Output = Result<(), Closed>>;
    /// Waits until every earlier write of this connection is durable, whatever the mode.
    fn fence(&mut self, ctx: &Ctx) -> impl Future<Output = bool>;
    /// False while the client must still authenticate (`-Y`): its requests then go to
    /// [`Session::authenticate`] instead of [`answer`].
    fn authenticated(&self) -> bool {
        true
    }
    /// Answers a request of a client that has not authenticated yet (`-Y`).
    fn authenticate(&mut self, _ctx: &Ctx, _request: Request) {}
}

/// Answers one request into the session's output.
pub async fn answer<C: Session>(
    ctx: &Arc<Ctx>,
    c: &mut C,
    request: Request<'_>,
) -> Result<Flow, Closed> {
    if is_write(&request) {
        if let Err(refused) = ctx.engine.admit().await {
            write_error::reply(c.output(), &refused);
            return Ok(Flow::Refused);
        }
    }
    match request {
        Request::Get {
            kind,
            exptime,
            keys,
        } => {
            let now = ctx.now();
            for key in keys.iter() {
                let ack = get::one_async(ctx, kind, exptime, now, key, c.output()).await;
                c.note(ack);
                if c.output().len() >= ctx.config.output_buffer_max {
                    c.flush(ctx).await?;
                }
            }
            get::end(c.output());
        }
        Request::Meta(m) if m.cmd == MetaCmd::Noop && c.writes_pending() => {
            // The durability fence: MN only once this connection's writes are on disk.
            c.flush(ctx).await?;
            if !c.fence(ctx).await {
                c.output().extend_from_slice(NOT_SAFE);
                return Ok(Flow::Close);
            }
            c.output().extend_from_slice(b"MN\r\n");
        }
        Request::Admin { words } => admin::run(ctx, &words, c.output()).await,
        Request::NotSupported { pipe, noreply, .. } => {
            let (pipeline, out) = c.pipeline();
            pipeline.answer(pipe, noreply, out);
        }
        Request::LruCrawler(Crawler::Metadump { dump: true }) => {
            // Streamed shard by shard, flushing as the reply grows.
            let now = ctx.now();
            for shard in 0..ctx.store().shard_count() {
                crawler::metadump_shard(ctx, shard, now, c.output());
                if c.output().len() >= ctx.config.output_buffer_max {
                    c.flush(ctx).await?;
                }
            }
            c.output().extend_from_slice(b"END\r\n");
        }
        request => {
            if let Some(key) = written_key(&request) {
                if let Err(e) = ctx.engine.resolve(key).await {
                    write_error::reply(c.output(), &e);
                    return Ok(Flow::Refused);
                }
            }
            let (flow, ack) = ctx.engine.apply(|tx| execute(ctx, tx, request, c.output()));
            c.note(ack);
            return Ok(flow);
        }
    }
    Ok(Flow::Continue)
}

/// Answers one request that needs nothing of the connection but its output, its changes
/// made through `tx`. (Retrievals, `mn` with writes pending, admin lines, ARCUS's commands
/// and a metadump are [`answer`]'s own.)
fn execute(ctx: &Arc<Ctx>, tx: &Tx<'_>, request: Request, out: &mut Vec<u8>) -> Flow {
    let now = ctx.now();
    match request {
        Request::Store {
            kind,
            key,
            flags,
            exptime,
            cas_unique,
            value,
            noreply,
        } => {
            let reply =
                storage::store(ctx, tx, kind, &key, flags, exptime, cas_unique, &value, now);
            if !noreply {
                out.extend_from_slice(reply);
            }
        }
        Request::Delete { key, noreply } => {
            let reply = delete::delete(ctx, tx, &key, now);
            if !noreply {
                out.extend_from_slice(reply);
            }
        }
        Request::Arith {
            incr,
            key,
            delta,
            create,
            noreply,
        } => {
            let mut reply = Vec::new();
            arith::arith(ctx, tx, incr, &key, delta, create, now, &mut reply);
            if !noreply {
                out.extend_from_slice(&reply);
            }
        }
        Request::Touch {
            key,
            exptime,
            noreply,
        } => {
            let reply = touch::touch(ctx, tx, &key, exptime, now);
            if !noreply {
                out.extend_from_slice(reply);
            }
        }
        Request::FlushAll { delay, noreply } => {
            let reply = flush::reply(flush::flush_all(ctx, tx, delay, now));
            if !noreply {
                out.extend_from_slice(reply);
            }
        }
        Request::Stats { args } => stats::stats(ctx, &args, out),
        Request::Version => misc::version(out),
        Request::Verbosity { level, noreply } => {
            // Open to every client, as in memcached: it changes only what the log shows.
            ctx.set_verbosity(level);
            if !noreply {
                out.extend_from_slice(b"OK\r\n");
            }
        }
        Request::Quit => return Flow::Close,
        Request::Meta(m) => meta::meta(ctx, tx, m, now, out),
        Request::Shutdown { mode } => return misc::shutdown(ctx, mode, out),
        Request::CacheMemlimit { megabytes, noreply } => {
            let reply = misc::cache_memlimit(ctx, megabytes, now);
            if !noreply {
                out.extend_from_slice(reply);
            }
        }
        // `lru_crawler metadump` without `all` lists nothing (a dump is [`answer`]'s).
        Request::LruCrawler(Crawler::Metadump { .. }) => out.extend_from_slice(b"END\r\n"),
        Request::LruCrawler(Crawler::Crawl) => crawler::crawl(ctx, out),
        Request::LruCrawler(Crawler::Tune) => out.extend_from_slice(b"OK\r\n"),
        Request::Slabs { cmd, noreply } => {
            let reply = misc::slabs(cmd);
            if !noreply {
                out.extend_from_slice(reply);
            }
        }
        Request::DebugTime { secs } => misc::debugtime(ctx, secs, out),
        Request::Get { .. } | Request::Admin { .. } | Request::NotSupported { .. } => {
            unreachable!("answered by `answer` itself")
        }
    }
    Flow::Continue
}

/// Whether a request may change the store (and so is refused once the log has failed).
pub fn is_write(request: &Request) -> bool {
    match request {
        Request::Store { .. }
        | Request::Delete { .. }
        | Request::Arith { .. }
        | Request::Touch { .. }
        | Request::FlushAll { .. } => true,
        Request::Get { exptime, .. } => exptime.is_some(),
        Request::Meta(m) => match m.cmd {
            MetaCmd::Set | MetaCmd::Delete | MetaCmd::Arith => true,
            MetaCmd::Get => m.flags.new_ttl.is_some() || m.flags.vivify_ttl.is_some(),
            MetaCmd::Noop | MetaCmd::Debug => false,
        },
        Request::CacheMemlimit { .. } => true,
        Request::Stats { .. }
        | Request::Shutdown { .. }
        | Request::LruCrawler(_)
        | Request::Slabs { .. }
        | Request::DebugTime { .. }
        | Request::Version
        | Request::Verbosity { .. }
        | Request::Quit
        | Request::NotSupported { .. }
        | Request::Admin { .. } => false,
    }
}

/// The key a command reads and changes, if its item may be on flash (plain retrievals read
/// flash themselves, see get.rs): it is brought back to RAM before the command runs.
fn written_key<'r>(request: &'r Request<'_>) -> Option<&'r [u8]> {
    match request {
        Request::Store { key, .. }
        | Request::Delete { key, .. }
        | Request::Arith { key, .. }
        | Request::Touch { key, .. } => Some(key),
        Request::Meta(m) if m.cmd != MetaCmd::Noop => Some(&m.key),
        _ => None,
    }
}
