//! One client connection: read a batch, answer every complete request in it, write once.
//!
//! ```text
//!   socket ──read──> input ──parse──> request ──cmd::execute──> output ──write──> socket
//!                     ^  keeps a partial request          (flushed when over the limit,
//!                     └─ until the rest arrives             and before the next read)
//! ```
//!
//! Backpressure: the connection reads again only after its output is written, and flushes in
//! the middle of a batch (between keys of a multi-get too) once the output passes
//! `output_buffer_max`. A client that does not read its replies therefore stops being read
//! from, and the server holds at most one batch of input plus `output_buffer_max` for it.

use std::sync::Arc;

use cairn_proto::{parse, Request};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::cmd::{self, Flow};
use crate::stats::{add, bump};
use crate::Ctx;

/// Input buffer size to start with; it grows up to one full request.
const READ_CHUNK: usize = 16 << 10;

/// Serves one connection until the client closes, sends `quit`, or shutdown is signalled.
pub async fn serve(ctx: Arc<Ctx>, mut stream: TcpStream, mut shutdown: watch::Receiver<bool>) {
    let _ = stream.set_nodelay(true);
    let mut input: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    let mut output: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    // Bytes of a refused data block still to be skipped.
    let mut swallow = 0usize;
    loop {
        let flow = answer_batch(&ctx, &mut stream, &mut input, &mut output, &mut swallow).await;
        if !output.is_empty() && write(&ctx, &mut stream, &mut output).await.is_err() {
            return;
        }
        if flow != Some(Flow::Continue) {
            return;
        }
        if *shutdown.borrow() {
            return;
        }
        if input.capacity() - input.len() < READ_CHUNK / 4 {
            input.reserve(READ_CHUNK);
        }
        tokio::select! {
            read = stream.read_buf(&mut input) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => add(&ctx.counters.bytes_read, n as u64),
            },
            _ = shutdown.changed() => return,
        }
    }
}

async fn write(ctx: &Ctx, stream: &mut TcpStream, output: &mut Vec<u8>) -> std::io::Result<()> {
    stream.write_all(output).await?;
    add(&ctx.counters.bytes_written, output.len() as u64);
    output.clear();
    Ok(())
}

/// Answers every complete request in `input`. Returns `Some(Flow::Continue)` to keep going,
/// `Some(Flow::Close)` after `quit` or a fatal protocol error, `None` if the socket failed.
async fn answer_batch(
    ctx: &Arc<Ctx>,
    stream: &mut TcpStream,
    input: &mut Vec<u8>,
    output: &mut Vec<u8>,
    swallow: &mut usize,
) -> Option<Flow> {
    let mut start = 0;
    let flow = loop {
        if *swallow > 0 {
            let n = (*swallow).min(input.len() - start);
            start += n;
            *swallow -= n;
            if *swallow > 0 {
                break Flow::Continue;
            }
        }
        match parse(&input[start..], &ctx.limits) {
            Ok(None) => break Flow::Continue,
            Ok(Some((request, used))) => {
                start += used;
                if let Request::Get {
                    kind,
                    exptime,
                    keys,
                } = request
                {
                    let now = crate::now_unix();
                    for key in &keys {
                        cmd::get::one(ctx, kind, exptime, now, key, output);
                        if output.len() >= ctx.config.output_buffer_max {
                            write(ctx, stream, output).await.ok()?;
                        }
                    }
                    cmd::get::end(output);
                } else if cmd::execute(ctx, request, output) == Flow::Close {
                    break Flow::Close;
                }
            }
            Err(e) => {
                bump(&ctx.counters.protocol_errors);
                if !e.silent {
                    output.extend_from_slice(e.reply_line().as_bytes());
                    output.extend_from_slice(b"\r\n");
                }
                start += e.consumed;
                *swallow = e.swallow;
                if e.close {
                    break Flow::Close;
                }
            }
        }
        if output.len() >= ctx.config.output_buffer_max {
            write(ctx, stream, output).await.ok()?;
        }
    };
    input.drain(..start);
    Some(flow)
}
