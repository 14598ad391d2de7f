//! The connection thread's ring lent to the flash tier (`cairn_flash::ThreadRing`): a get's
//! device read is an op like a receive's, so it enters the kernel with the socket ops of the
//! same turn (docs/decisions/0023-flash-reads-through-the-connection-threads-ring.md).
//!
//! ```text
//!   cairn_flash reader ── submit(buf, Read SQE) ──> Op (slot id) ── poll(id) ──> (res, buf)
//!                      └─ abandon(id): the op is dropped, hence cancelled
//! ```

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use io_uring::squeue;

use super::op::Op;

/// This thread's ring, lent to the flash tier for its device reads (an op like a receive's).
pub(super) struct FlashReads;

impl cairn_flash::ThreadRing for FlashReads {
    fn submit(&self, buf: Vec<u8>, entry: squeue::Entry) -> io::Result<usize> {
        let op = Op::submit(buf, entry)?;
        let id = op.id;
        std::mem::forget(op);
        Ok(id)
    }

    fn poll(&self, id: usize, cx: &mut Context<'_>) -> Poll<(i32, Vec<u8>)> {
        let mut op = Op::resume(id);
        let polled = Pin::new(&mut op).poll(cx);
        // Still in flight, or done and freed: either way not to be cancelled by this drop.
        op.done = true;
        polled
    }

    fn abandon(&self, id: usize) {
        drop(Op::resume(id));
    }
}
