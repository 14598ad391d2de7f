//! Answers one request datagram's payload: every request in it, through the same step a TCP
//! connection takes (`cmd::answer_next`, so a write goes through the one write path,
//! cairn-engine), each command's answer kept as one reply message.
//!
//! ```text
//!   payload ─ first byte 0x80? ─ yes: memcached's binary protocol: loop cmd::binary::step
//!      └ text: loop cmd::answer_next(ctx, datagram, rest) ─> output, one message a command
//!        ─ a request cut off at the end ─> the messages so far, `incomplete`
//!        ─ a message over MESSAGE_MAX ───> Dropped::TooLarge
//!      ─> Engine::acknowledged(the writes answered) ─> Reply (failed: the error instead)
//! ```
//!
//! A datagram is a session of its own (as memcached's UDP "connection" holds nothing between
//! datagrams): no authentication (`-Y` refuses UDP at start), no ARCUS pipeline carried over,
//! and no reply leaves ahead of the writes it answers, as on TCP.
//!
//! Non-goals: the frame header and cutting messages into datagrams (frame.rs), the socket
//! (socket.rs).

use std::sync::Arc;
use std::time::Instant;

use cairn_engine::Ack;

use super::frame::MESSAGE_MAX;
use crate::cmd::{self, arcus, Closed, Flow, Session};
use crate::Ctx;

/// Why a datagram got no reply at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// A command's answer needs more than 65535 datagrams.
    TooLarge,
}

/// The answers to a datagram's requests.
#[derive(Debug, Default)]
pub struct Reply {
    /// Every command's answer, one after the other.
    output: Vec<u8>,
    /// Where each command's answer ends in `output` (a command that answered nothing, as with
    /// `noreply`, has none).
    ends: Vec<usize>,
    /// The payload ended inside a request, which was dropped (the ones before it answered).
    pub incomplete: bool,
}

impl Reply {
    /// Each command's answer: one reply message each.
    pub fn messages(&self) -> impl Iterator<Item = &[u8]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(self.ends.iter().copied())
            .map(|(start, end)| &self.output[start..end])
    }

    /// Closes the answer of the command just answered, if it wrote anything.
    fn end_message(&mut self) {
        if self.output.len() > self.ends.last().copied().unwrap_or(0) {
            self.ends.push(self.output.len());
        }
    }

    /// Bytes of the answer under way (since the last message).
    fn open_message_len(&self) -> usize {
        self.output.len() - self.ends.last().copied().unwrap_or(0)
    }

    /// Every answer replaced by `e`'s reply (in the datagram's protocol): the writes could
    /// not be acknowledged.
    fn failed(&mut self, binary: bool, e: &cairn_engine::WriteError) {
        self.output.clear();
        self.ends.clear();
        cmd::binary::wording::failure_in(binary, &mut self.output, e);
        self.end_message();
    }
}

/// What answering needs of a datagram (cmd::Session).
#[derive(Default)]
struct Datagram {
    reply: Reply,
    /// ARCUS's pipelining: a pipeline within the datagram.
    pipeline: arcus::Pipeline,
    /// The writes whose answers are in `reply`: safe before it is sent.
    unacked: Ack,
    /// Writes acknowledged and perhaps not durable yet: what `mn` fences.
    unfenced: Ack,
    /// A command's answer grew past [`MESSAGE_MAX`]: the datagram is dropped.
    too_large: bool,
    /// The payload is of the binary protocol.
    binary: bool,
}

impl Datagram {
    /// Waits until the writes answered so far are safe; if they cannot be, their answers are
    /// replaced by the error.
    async fn acknowledge(&mut self, ctx: &Ctx) -> Result<(), Closed> {
        if self.unacked.is_empty() {
            return Ok(());
        }
        if let Err(e) = ctx.engine.acknowledged(self.unacked).await {
            self.unacked = Ack::NONE;
            self.reply.failed(self.binary, &e);
            return Err(Closed);
        }
        self.unfenced = self.unfenced.merge(self.unacked);
        self.unacked = Ack::NONE;
        Ok(())
    }
}

impl Session for Datagram {
    fn output(&mut self) -> &mut Vec<u8> {
        &mut self.reply.output
    }

    fn pipeline(&mut self) -> (&mut arcus::Pipeline, &mut Vec<u8>) {
        (&mut self.pipeline, &mut self.reply.output)
    }

    fn note(&mut self, ack: Ack) {
        self.unacked = self.unacked.merge(ack);
    }

    fn writes_pending(&self) -> bool {
        !(self.unacked.is_empty() && self.unfenced.is_empty())
    }

    /// Nothing is sent before the datagram is answered (every datagram of a message carries
    /// the message's total): this bounds the answer under way, and makes the writes safe.
    async fn flush(&mut self, ctx: &Ctx) -> Result<(), Closed> {
        if self.reply.open_message_len() > MESSAGE_MAX {
            self.too_large = true;
            return Err(Closed);
        }
        self.acknowledge(ctx).await
    }

    async fn fence(&mut self, ctx: &Ctx) -> bool {
        let durable = ctx.engine.durable(self.unfenced).await.is_ok();
        self.unfenced = Ack::NONE;
        durable
    }
}

/// Which protocol a payload speaks: its first byte says, as in memcached.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Protocol {
    Text,
    Binary,
}

/// Answers every request of `payload` (not empty).
pub async fn answer(ctx: &Arc<Ctx>, payload: &[u8]) -> Result<Reply, Dropped> {
    // Binary when the payload starts with the request magic, else text, as memcached decides
    // per datagram.
    let protocol = match payload.first() {
        Some(&cairn_proto::binary::REQUEST_MAGIC) => Protocol::Binary,
        _ => Protocol::Text,
    };
    let mut d = Datagram {
        binary: protocol == Protocol::Binary,
        ..Datagram::default()
    };
    let mut start = 0;
    let mut mark = Instant::now();
    while start < payload.len() {
        let rest = &payload[start..];
        let step = match protocol {
            Protocol::Text => cmd::answer_next(ctx, &mut d, rest, &mut mark).await,
            // memcached's binary protocol: one packet at a time, as a binary TCP stream.
            Protocol::Binary => cmd::binary::step(ctx, &mut d, rest).await.map(|step| {
                step.map(|s| cmd::Answered {
                    used: s.used,
                    swallow: s.swallow,
                    flow: s.flow,
                })
            }),
        };
        let step = match step {
            Ok(Some(step)) => step,
            Ok(None) => {
                d.reply.incomplete = true;
                break;
            }
            // Its answers replaced by the reason, or dropped below.
            Err(Closed) => break,
        };
        // The parser always takes a byte; never loop in place on client input.
        if step.used + step.swallow == 0 {
            debug_assert!(false, "a step that took nothing");
            break;
        }
        // A refused data block that goes past the end is skipped with it.
        start = (start + step.used + step.swallow).min(payload.len());
        if d.reply.open_message_len() > MESSAGE_MAX {
            d.too_large = true;
        }
        if d.too_large {
            return Err(Dropped::TooLarge);
        }
        d.reply.end_message();
        if step.flow == Flow::Close {
            break;
        }
    }
    if d.too_large {
        return Err(Dropped::TooLarge);
    }
    let _ = d.acknowledge(ctx).await;
    Ok(d.reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> (tempfile::TempDir, Arc<Ctx>) {
        let dir = tempfile::tempdir().unwrap();
        let config = crate::Config {
            data_dir: dir.path().to_path_buf(),
            persistence: "off".into(),
            ..crate::Config::default()
        };
        (dir, crate::Ctx::open(config).unwrap())
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f)
    }

    fn messages(r: &Reply) -> Vec<String> {
        r.messages()
            .map(|m| String::from_utf8_lossy(m).into_owned())
            .collect()
    }

    /// One message per command that answered; `noreply` answers nothing; an incomplete
    /// request at the end is reported, the ones before it answered.
    #[test]
    fn each_command_answers_one_message() {
        let (_dir, ctx) = ctx();
        let r = block_on(answer(
            &ctx,
            b"set a 0 0 1\r\nx\r\nset b 0 0 1 noreply\r\ny\r\nget a b\r\nbogus\r\nget a",
        ))
        .unwrap();
        assert_eq!(
            messages(&r),
            [
                "STORED\r\n",
                "VALUE a 0 1\r\nx\r\nVALUE b 0 1\r\ny\r\nEND\r\n",
                "ERROR\r\n"
            ]
        );
        assert!(r.incomplete);
        let r = block_on(answer(&ctx, b"version\r\nquit\r\nget a\r\n")).unwrap();
        assert_eq!(messages(&r).len(), 1, "nothing after quit");
        assert!(!r.incomplete);
    }

    /// A binary payload is answered in the binary protocol, a message a packet.
    #[test]
    fn a_binary_payload_is_answered_in_binary() {
        let (_dir, ctx) = ctx();
        let get = [
            0x80, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, b'a',
        ];
        let r = block_on(answer(&ctx, &get)).unwrap();
        let messages: Vec<&[u8]> = r.messages().collect();
        assert_eq!(messages.len(), 1);
        // A response (0x81) to Get, status 0x0001: not found.
        assert_eq!(messages[0][0], 0x81);
        assert_eq!(messages[0][1], 0x00);
        assert_eq!(&messages[0][6..8], &[0, 1]);
    }
}
