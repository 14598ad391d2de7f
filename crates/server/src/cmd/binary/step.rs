//! One step of a binary stream: the next packet parsed and answered, or its error answered,
//! and how the stream goes on. The connection loops over it (connection.rs), and so does a
//! UDP datagram's payload (crate::udp::answer).
//!
//! ```text
//!   input ─> parse ─> None ─────────────> Ok(None): read more
//!                 ├─> request ─> answer ─> Step { used: its packet, flow }
//!                 └─> BinError ─> its response; a set refused as too large forgets the key
//!                                 ─> Step { used, swallow (a refused value), flow: Close if
//!                                    the stream cannot be resynchronised }
//! ```
//!
//! Under `-Y` (the text protocol's authentication) a binary request is refused with an auth
//! error and the connection closed: cairn has no SASL, so a binary client cannot log in.

use std::sync::Arc;

use cairn_proto::binary::{parse, response, Command, Status};

use super::answer::answer;
use crate::cmd::dispatch::Session;
use crate::cmd::flow::{Closed, Flow};
use crate::cmd::storage;
use crate::stats::{bump, Family};
use crate::Ctx;

/// What answering one packet did.
#[derive(Debug)]
pub struct Step {
    /// Bytes of the input it took.
    pub used: usize,
    /// Further bytes to skip as they arrive (a value refused as too large).
    pub swallow: usize,
    pub flow: Flow,
    /// The latency family to time it in; None for an error (not timed).
    pub family: Option<Family>,
}

/// The text of the refusal under `-Y`.
const NO_SASL: &str =
    "Auth failure: this server authenticates with the text protocol (-Y); it has no SASL";

/// Answers the first packet of `input`; `Ok(None)` when it is not all there yet.
pub async fn step<C: Session>(
    ctx: &Arc<Ctx>,
    c: &mut C,
    input: &[u8],
) -> Result<Option<Step>, Closed> {
    match parse(input, &ctx.limits) {
        Ok(None) => Ok(None),
        Ok(Some((request, used))) => {
            if ctx.auth.is_some() {
                bump(&ctx.counters.auth_failures);
                let h = request.header;
                response::error(c.output(), h.opcode, h.opaque, Status::AuthError, NO_SASL);
                return Ok(Some(Step {
                    used,
                    swallow: 0,
                    flow: Flow::Close,
                    family: None,
                }));
            }
            let family = family(&request.command);
            let flow = answer(ctx, c, request).await?;
            let timed = flow != Flow::Refused;
            Ok(Some(Step {
                used,
                swallow: 0,
                flow,
                family: timed.then_some(family),
            }))
        }
        Err(e) => {
            bump(&ctx.counters.protocol_errors);
            if let Some(key) = e.forget {
                let ack = storage::forget(ctx, key);
                c.note(ack);
            }
            response::error(c.output(), e.opcode, e.opaque, e.status, e.text);
            Ok(Some(Step {
                used: e.consumed.min(input.len()),
                swallow: e.swallow,
                flow: if e.close { Flow::Close } else { Flow::Refused },
                family: None,
            }))
        }
    }
}

/// The latency family of a command (the text protocol's families).
fn family(command: &Command) -> Family {
    match command {
        Command::Get { .. } | Command::Gat { .. } => Family::Get,
        Command::Store { .. } => Family::Set,
        Command::Delete { .. } => Family::Delete,
        Command::Arith { .. } => Family::Arith,
        Command::Touch { .. } => Family::Touch,
        Command::Flush { .. } => Family::Flush,
        Command::Stat { .. } => Family::Stats,
        _ => Family::Other,
    }
}
