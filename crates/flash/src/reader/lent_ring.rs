//! Reads through a ring the connection engine lends its thread (the server's io_uring
//! engine): the Read SQE joins the thread's socket operations in its next io_uring_enter,
//! and the engine wakes the reading task on the completion, as for a receive.
//!
//! ```text
//!   connection task ──LentRead::submit──> ThreadRing::submit (the engine's ring, op by id)
//!        ^                                         │ one io_uring_enter with the socket ops
//!        └──── ThreadRing::poll: (res, buf) <──────┘ the engine wakes the task
//! ```
//!
//! Non-goals: no ring of its own (the engine owns it); a read's future never moves off its
//! thread (it panics if polled elsewhere).

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::task::{Context, Poll};

use io_uring::{opcode, squeue, types};

use super::read::{short_read, ReadBuf};

/// A ring of the calling thread's own, lent by the connection engine that runs the thread
/// (the server's io_uring engine): a flash read submitted to it enters the kernel with the
/// thread's socket operations, and its completion wakes the reading task the way a receive's
/// does. Installed per thread with [`lend_thread_ring`]; the ops are the engine's own, by id.
pub trait ThreadRing {
    /// Queues `entry`, which points into `buf`'s heap memory; the ring holds `buf` until the
    /// kernel is done with it. Returns the op's id.
    fn submit(&self, buf: Vec<u8>, entry: squeue::Entry) -> io::Result<usize>;
    /// The op's result (a completion's `res`) and its buffer once done; else registers
    /// `cx`'s waker for the completion.
    fn poll(&self, id: usize, cx: &mut Context<'_>) -> Poll<(i32, Vec<u8>)>;
    /// The op's waiter went away first: the ring cancels it and frees it (and its buffer)
    /// once the kernel reports it done.
    fn abandon(&self, id: usize);
}

thread_local! {
    /// The ring this thread's engine lent ([`lend_thread_ring`]), with a token that tells it
    /// from any other thread's (a read's future checks it was not moved off its thread).
    static LENT_RING: std::cell::RefCell<Option<(u64, Box<dyn ThreadRing>)>> =
        const { std::cell::RefCell::new(None) };
}

/// Makes `ring` this thread's: every flash read awaited on this thread from then on goes
/// through it. For an engine whose tasks never leave their thread (a read's future panics
/// if polled on another thread).
pub fn lend_thread_ring(ring: Box<dyn ThreadRing>) {
    static TOKENS: AtomicU64 = AtomicU64::new(1);
    let token = TOKENS.fetch_add(1, Relaxed);
    LENT_RING.with(|cell| *cell.borrow_mut() = Some((token, ring)));
}

/// A read submitted to the thread's lent ring; resolves to its bytes.
pub(super) struct LentRead {
    /// The op's id in the lent ring.
    id: usize,
    /// The token of the ring it was submitted to (the thread's).
    token: u64,
    /// Where the block-aligned bytes start in the op's buffer.
    start: usize,
    /// Bytes read.
    len: usize,
    /// The completion was taken: nothing to abandon on drop.
    done: bool,
}

impl LentRead {
    /// Submits a read of `len` bytes of `fd` at `offset` to the thread's lent ring; None if
    /// the thread has none.
    pub(super) fn submit(fd: RawFd, offset: u64, len: usize) -> Option<io::Result<LentRead>> {
        LENT_RING.with(|cell| {
            let cell = cell.borrow();
            let (token, ring) = cell.as_ref()?;
            // O_DIRECT wants a block-aligned buffer: a block more than needed, read into at
            // its first block boundary.
            let mut vec = vec![0u8; len + crate::format::BLOCK];
            let start = vec.as_ptr().align_offset(crate::format::BLOCK);
            let entry = opcode::Read::new(types::Fd(fd), vec[start..].as_mut_ptr(), len as u32)
                .offset(offset)
                .build();
            Some(ring.submit(vec, entry).map(|id| LentRead {
                id,
                token: *token,
                start,
                len,
                done: false,
            }))
        })
    }
}

impl std::future::Future for LentRead {
    type Output = io::Result<ReadBuf>;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let polled = LENT_RING.with(|cell| match &*cell.borrow() {
            Some((token, ring)) if *token == self.token => ring.poll(self.id, cx),
            _ => panic!("a flash read on a lent ring was polled off its thread"),
        });
        let Poll::Ready((result, vec)) = polled else {
            return Poll::Pending;
        };
        self.done = true;
        let (start, len) = (self.start, self.len);
        Poll::Ready(if result < 0 {
            Err(io::Error::from_raw_os_error(-result))
        } else if result as usize != len {
            Err(short_read(result, len))
        } else {
            Ok(ReadBuf::InVec { vec, start, len })
        })
    }
}

impl Drop for LentRead {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        // Off its thread (never, by the contract) the op is left to its ring, which keeps the
        // buffer: a leak rather than memory the kernel may write into.
        let _ = LENT_RING.try_with(|cell| {
            if let Ok(cell) = cell.try_borrow() {
                if let Some((token, ring)) = &*cell {
                    if *token == self.token {
                        ring.abandon(self.id);
                    }
                }
            }
        });
    }
}
