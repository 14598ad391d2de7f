//! The UDP socket's loops: receive a datagram, check its frame, answer its payload, send each
//! reply message as numbered datagrams to the sender, count what was dropped.
//!
//! ```text
//!   recv_from (buffer of REQUEST_MAX + 1) ─ longer than REQUEST_MAX? ─> udp_too_large
//!     ─ frame::request: too short, multi-datagram ─────────────────────> udp_malformed
//!     ─ answer::answer(payload): too large ─> udp_too_large
//!                                a request cut off at the end ────────> udp_malformed (the
//!                                                                       answers before it go)
//!     ─ each message: frame::Message ─> send_to(sender) datagram by datagram (udp_sent)
//! ```
//!
//! As memcached serves its UDP socket from every worker thread, one loop per worker thread
//! (`-t`) reads the socket, each answering one datagram at a time: a flood of datagrams holds
//! that many in memory at most, and the rest wait in the kernel's buffer (or are dropped
//! there). The loops run on the main runtime, beside the accept loop, and stop at shutdown
//! after the datagram in hand; one that panicked (a bug) is logged and replaced.
//!
//! Non-goals: what a payload means (answer.rs), the frame's bytes (frame.rs).

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::UdpSocket;
use tokio::sync::watch;

use super::answer::{self, Dropped};
use super::frame::{self, Message, DATAGRAM_MAX};
use crate::stats::{add, bump};
use crate::Ctx;

/// Serves `socket` until `shutdown` turns true.
pub async fn serve(ctx: Arc<Ctx>, socket: UdpSocket, shutdown: watch::Receiver<bool>) {
    let socket = Arc::new(socket);
    let mut loops = tokio::task::JoinSet::new();
    for _ in 0..ctx.config.worker_threads().max(1) {
        loops.spawn(serve_loop(
            Arc::clone(&ctx),
            Arc::clone(&socket),
            shutdown.clone(),
        ));
    }
    while let Some(ended) = loops.join_next().await {
        // A panic is a bug; it must not leave the port unanswered for the server's life.
        if let Err(e) = ended {
            if e.is_panic() && !*shutdown.borrow() {
                tracing::error!("udp: a loop panicked ({e}); starting another");
                loops.spawn(serve_loop(
                    Arc::clone(&ctx),
                    Arc::clone(&socket),
                    shutdown.clone(),
                ));
            }
        }
    }
}

/// One loop: a datagram at a time.
async fn serve_loop(ctx: Arc<Ctx>, socket: Arc<UdpSocket>, mut shutdown: watch::Receiver<bool>) {
    let max = frame::request_max();
    // One byte more than the largest request, so that a longer one shows (it is cut to fit).
    let mut buf = vec![0u8; max + 1];
    let mut out = Vec::with_capacity(DATAGRAM_MAX);
    loop {
        if *shutdown.borrow() {
            return;
        }
        let (n, peer) = tokio::select! {
            r = socket.recv_from(&mut buf) => match r {
                Ok(r) => r,
                Err(e) => {
                    // An ICMP error of an earlier send and the like: nothing to answer.
                    tracing::debug!("udp receive: {e}");
                    tokio::task::yield_now().await;
                    continue;
                }
            },
            _ = shutdown.changed() => return,
        };
        bump(&ctx.counters.udp_received);
        add(&ctx.counters.bytes_read, n as u64);
        if n > max {
            bump(&ctx.counters.udp_too_large);
            tracing::debug!(%peer, "udp: datagram over {max} bytes dropped");
            continue;
        }
        let (header, payload) = match frame::request(&buf[..n]) {
            Ok(r) => r,
            Err(why) => {
                bump(&ctx.counters.udp_malformed);
                tracing::debug!(%peer, ?why, "udp: datagram dropped");
                continue;
            }
        };
        let reply = match answer::answer(&ctx, payload).await {
            Ok(reply) => reply,
            Err(why) => {
                bump(match why {
                    Dropped::TooLarge => &ctx.counters.udp_too_large,
                });
                tracing::debug!(%peer, ?why, "udp: datagram dropped");
                continue;
            }
        };
        if reply.incomplete {
            bump(&ctx.counters.udp_malformed);
            tracing::debug!(%peer, "udp: a request cut off at the datagram's end dropped");
        }
        for message in reply.messages() {
            // answer() bounds every message (MESSAGE_MAX).
            let Some(message) = Message::new(header.request_id, message) else {
                bump(&ctx.counters.udp_too_large);
                continue;
            };
            if send(&ctx, &socket, peer, &message, &mut out).await.is_err() {
                break;
            }
        }
    }
}

/// Sends every datagram of `message` to `peer`, in order.
async fn send(
    ctx: &Ctx,
    socket: &UdpSocket,
    peer: SocketAddr,
    message: &Message<'_>,
    out: &mut Vec<u8>,
) -> std::io::Result<()> {
    for sequence in 0..message.total() {
        message.datagram(sequence, out);
        match socket.send_to(out, peer).await {
            Ok(n) => {
                bump(&ctx.counters.udp_sent);
                add(&ctx.counters.bytes_written, n as u64);
            }
            Err(e) => {
                tracing::debug!(%peer, "udp send: {e}");
                return Err(e);
            }
        }
    }
    Ok(())
}
