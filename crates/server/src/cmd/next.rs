//! The step every memcached text front end repeats over its input: answer the first request
//! of some bytes. A TCP connection (crate::connection) runs it over its stream's buffer, a
//! UDP datagram (crate::udp) over the datagram's payload; both answer through [`answer`], so
//! both take the one write path (cairn-engine).
//!
//! ```text
//!   input ─ cairn_proto::parse ─> incomplete ─────────────> None (wait for more bytes)
//!                               ├> request ─ not authenticated (-Y) ─> Session::authenticate
//!                               │          └ answer(ctx, session, request), timed by family
//!                               └> protocol error ─ the parser's reply line (unless silent),
//!                                                   `forget` a refused set's key, skip bytes
//! ```
//!
//! Non-goals: reading and writing bytes, flushing between requests, yielding (the front
//! end's loop); what a request means (dispatch.rs and the command files).

use std::sync::Arc;
use std::time::Instant;

use cairn_proto::{parse, Request};

use super::dispatch::{answer, Session};
use super::flow::{Closed, Flow};
use crate::stats::bump;
use crate::Ctx;

/// What answering the first request of the input did.
#[derive(Debug, PartialEq, Eq)]
pub struct Answered {
    /// Bytes of the input the request (or the malformed line) took.
    pub used: usize,
    /// Bytes after those that must be skipped as they arrive: a refused data block, or an
    /// ARCUS command's (its reply does not depend on it).
    pub swallow: usize,
    /// What the front end does next. [`Flow::Refused`]: answered and not timed (a refusal
    /// of the engine, or an authentication line).
    pub flow: Flow,
}

/// Answers the first request of `input` into the session's output, if it is complete
/// (`None`: more bytes are needed). `mark` is when the request's latency started (the end of
/// the one before it); a timed request moves it to its own end.
pub async fn answer_next<C: Session>(
    ctx: &Arc<Ctx>,
    c: &mut C,
    input: &[u8],
    mark: &mut Instant,
) -> Result<Option<Answered>, Closed> {
    let (request, used) = match parse(input, &ctx.limits) {
        Ok(None) => return Ok(None),
        Ok(Some(parsed)) => parsed,
        Err(e) => {
            bump(&ctx.counters.protocol_errors);
            if let Some(key) = &e.forget {
                let ack = super::storage::forget(ctx, key);
                c.note(ack);
            }
            if !e.silent {
                c.output().extend_from_slice(e.reply_line().as_bytes());
                c.output().extend_from_slice(b"\r\n");
            }
            let flow = if e.close { Flow::Close } else { Flow::Continue };
            return Ok(Some(Answered {
                used: e.consumed,
                swallow: e.swallow,
                flow,
            }));
        }
    };
    // An ARCUS command's data block: skipped as it arrives, whatever the command is answered.
    let swallow = match request {
        Request::NotSupported { skip, .. } => skip,
        _ => 0,
    };
    let answered = |flow| {
        Ok(Some(Answered {
            used,
            swallow,
            flow,
        }))
    };
    if !c.authenticated() {
        c.authenticate(ctx, request);
        return answered(Flow::Refused);
    }
    let family = crate::stats::Family::of(&request);
    let flow = answer(ctx, c, request).await?;
    if flow == Flow::Continue {
        let done = Instant::now();
        ctx.latency
            .observe(family, done.saturating_duration_since(*mark));
        *mark = done;
    }
    answered(flow)
}
