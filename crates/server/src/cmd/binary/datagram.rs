//! A whole payload of binary requests answered at once (a UDP datagram's, without its frame
//! header): request bytes in, response bytes appended.
//!
//! ```text
//!   payload ─> step, step, ... (each packet) ─> out
//!              a packet cut short at the end ─> 0x0004 incomplete request
//!   the writes answered ─> Engine::acknowledged ─> out stays, or is replaced by the failure
//! ```
//!
//! Non-goals: the datagram's own header and sending (the UDP listener's).

use std::sync::Arc;

use cairn_engine::Ack;
use cairn_proto::binary::{response, Status};

use super::step::step;
use super::wording;
use crate::cmd::arcus::Pipeline;
use crate::cmd::dispatch::Session;
use crate::cmd::flow::{Closed, Flow};
use crate::Ctx;

/// What answering needs of a datagram: its output and what that waits for.
struct Datagram<'o> {
    out: &'o mut Vec<u8>,
    /// The writes whose replies are in `out`.
    ack: Ack,
    /// Unused by the binary protocol; the session trait asks for one.
    pipeline: Pipeline,
}

impl Session for Datagram<'_> {
    fn output(&mut self) -> &mut Vec<u8> {
        self.out
    }

    fn pipeline(&mut self) -> (&mut Pipeline, &mut Vec<u8>) {
        (&mut self.pipeline, self.out)
    }

    fn note(&mut self, ack: Ack) {
        self.ack = self.ack.merge(ack);
    }

    fn writes_pending(&self) -> bool {
        !self.ack.is_empty()
    }

    /// A datagram's reply leaves whole, at the end: nothing is written midway.
    fn flush(&mut self, _ctx: &Ctx) -> impl std::future::Future<Output = Result<(), Closed>> {
        std::future::ready(Ok(()))
    }

    fn fence(&mut self, ctx: &Ctx) -> impl std::future::Future<Output = bool> {
        let ack = self.ack;
        async move { ctx.engine.durable(ack).await.is_ok() }
    }
}

/// Answers every request of `payload`, appending the responses to `out`, and returns once
/// the writes they answer are safe in the mode in force (if they cannot be, `out` holds only
/// the failure). A quit, or an error that would close a connection, ends the payload there.
pub async fn answer_datagram(ctx: &Arc<Ctx>, payload: &[u8], out: &mut Vec<u8>) {
    let mut d = Datagram {
        out,
        ack: Ack::NONE,
        pipeline: Pipeline::default(),
    };
    let mut start = 0;
    while start < payload.len() {
        match step(ctx, &mut d, &payload[start..]).await {
            Err(Closed) => break,
            Ok(None) => {
                let status = Status::InvalidArguments;
                let opcode = payload.get(start + 1).copied().unwrap_or(0);
                response::error(
                    d.out,
                    opcode,
                    0,
                    status,
                    "Invalid arguments: incomplete request",
                );
                break;
            }
            Ok(Some(s)) => {
                start += s.used;
                if s.swallow > 0 || s.flow == Flow::Close {
                    break;
                }
            }
        }
    }
    if !d.ack.is_empty() {
        if let Err(e) = ctx.engine.acknowledged(d.ack).await {
            d.out.clear();
            wording::failure(d.out, &e);
        }
    }
}
