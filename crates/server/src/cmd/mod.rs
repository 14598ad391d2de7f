//! One file per command family: each takes a parsed request, applies it to the store and
//! encodes the reply into the connection's output buffer.
//!
//! ```text
//!   Request::Get ......... get.rs      (per key, so the connection can flush between keys)
//!   Request::Store ....... storage.rs  Request::Delete ... delete.rs   Request::Arith ... arith.rs
//!   Request::Touch ....... touch.rs    Request::FlushAll  flush.rs     Request::Stats ... stats.rs
//!   Request::Meta ........ meta.rs     version, verbosity, quit, admin  misc.rs
//!   Request::NotSupported  arcus.rs    (ARCUS's collections and attributes; the connection
//!                                       keeps its pipeline state)
//! ```

pub mod admin;
pub mod arcus;
pub mod arith;
pub mod crawler;
pub mod delete;
pub mod flush;
pub mod get;
pub mod meta;
pub mod misc;
pub mod stats;
pub mod storage;
pub mod touch;

use std::sync::Arc;

use cairn_proto::Request;

use crate::Ctx;

/// What the connection does after a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// `quit`: flush what is buffered and close.
    Close,
}

/// Answers one request (retrievals go through [`get`] key by key, see `connection`).
pub fn execute(ctx: &Arc<Ctx>, request: Request, out: &mut Vec<u8>) -> Flow {
    let now = ctx.now();
    match request {
        Request::Get {
            kind,
            exptime,
            keys,
        } => {
            for key in keys.iter() {
                get::one(ctx, kind, exptime, now, key, out);
            }
            get::end(out);
        }
        Request::Store {
            kind,
            key,
            flags,
            exptime,
            cas_unique,
            value,
            noreply,
        } => {
            let reply = storage::store(ctx, kind, &key, flags, exptime, cas_unique, &value, now);
            if !noreply {
                out.extend_from_slice(reply);
            }
        }
        Request::Delete { key, noreply } => {
            let reply = delete::delete(ctx, &key, now);
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
            arith::arith(ctx, incr, &key, delta, create, now, &mut reply);
            if !noreply {
                out.extend_from_slice(&reply);
            }
        }
        Request::Touch {
            key,
            exptime,
            noreply,
        } => {
            let reply = touch::touch(ctx, &key, exptime, now);
            if !noreply {
                out.extend_from_slice(reply);
            }
        }
        Request::FlushAll { delay, noreply } => {
            let reply = flush::flush_all(ctx, delay, now);
            if !noreply {
                out.extend_from_slice(reply);
            }
        }
        Request::Stats { args } => stats::stats(ctx, &args, out),
        Request::Version => misc::version(out),
        Request::Verbosity { level, noreply } => {
            let reply = admin::refusal(ctx).unwrap_or_else(|| {
                ctx.set_verbosity(level);
                b"OK\r\n"
            });
            if !noreply {
                out.extend_from_slice(reply);
            }
        }
        Request::Quit => return Flow::Close,
        Request::Meta(m) => meta::meta(ctx, m, now, out),
        Request::Shutdown { mode } => return misc::shutdown(ctx, mode, out),
        Request::CacheMemlimit { megabytes, noreply } => {
            let reply = misc::cache_memlimit(ctx, megabytes, now);
            if !noreply {
                out.extend_from_slice(reply);
            }
        }
        Request::LruCrawler(cairn_proto::Crawler::Metadump { dump }) => {
            // The connection streams a dump shard by shard; this is the empty one.
            if dump {
                for shard in 0..ctx.store.shard_count() {
                    crawler::metadump_shard(ctx, shard, now, out);
                }
            }
            out.extend_from_slice(b"END\r\n");
        }
        Request::LruCrawler(cairn_proto::Crawler::Crawl) => crawler::crawl(ctx, out),
        Request::LruCrawler(cairn_proto::Crawler::Tune) => out.extend_from_slice(b"OK\r\n"),
        Request::NotSupported { pipe, noreply, .. } => {
            // Outside a connection there is no pipeline to hold replies for (nor a data block
            // to skip): the command alone.
            arcus::Pipeline::default().answer(pipe, noreply, out);
        }
        Request::Admin { .. } => {
            // Admin lines may block (a checkpoint); the connection runs them via admin::run.
            out.extend_from_slice(b"SERVER_ERROR admin commands are handled by the connection\r\n");
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
            cairn_proto::MetaCmd::Set
            | cairn_proto::MetaCmd::Delete
            | cairn_proto::MetaCmd::Arith => true,
            cairn_proto::MetaCmd::Get => m.flags.new_ttl.is_some() || m.flags.vivify_ttl.is_some(),
            cairn_proto::MetaCmd::Noop | cairn_proto::MetaCmd::Debug => false,
        },
        Request::CacheMemlimit { .. } => true,
        Request::Stats { .. }
        | Request::Shutdown { .. }
        | Request::LruCrawler(_)
        | Request::Version
        | Request::Verbosity { .. }
        | Request::Quit
        | Request::NotSupported { .. }
        | Request::Admin { .. } => false,
    }
}
