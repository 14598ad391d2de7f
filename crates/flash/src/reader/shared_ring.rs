//! The io_uring engine's shared ring: one thread owning a ring, serving the reads of tasks
//! that may move between threads (a multi-thread runtime) and of full per-thread rings. Its
//! start also probes io_uring, so that a kernel that refuses it is found at start.
//!
//! ```text
//!   connection task ──Req{offset, buf, oneshot}──> channel ──(eventfd wakes the ring)──┐
//!        ^                                                                            v
//!        └──────────── oneshot (buf, result) <── completion ── io_uring thread: one Read
//!                                                                SQE per request, O_DIRECT
//! ```
//!
//! Non-goals: no bound of its own on reads in flight (the tier bounds them).

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::mpsc::{channel, Receiver, Sender, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;

use io_uring::{opcode, types, IoUring};
use parking_lot::Mutex;

use super::read::{completed, Req};
use crate::device::AlignedBuf;

/// Submission queue entries of the ring.
const RING_ENTRIES: u32 = 256;
/// user_data of the eventfd read that wakes the ring thread for new requests.
const WAKE: u64 = u64::MAX;

/// The io_uring reader: rings of the worker threads, and one thread owning a shared ring
/// for callers on multi-thread runtimes.
pub struct UringReader {
    /// The device's descriptor.
    pub(super) fd: RawFd,
    /// Requests for the ring thread; None once it is stopping.
    tx: Mutex<Option<Sender<Req>>>,
    /// The eventfd that wakes the ring thread for new requests.
    wake: Arc<OwnedFd>,
    /// The ring thread, joined on drop.
    thread: Option<JoinHandle<()>>,
}

impl UringReader {
    pub(super) fn start(fd: RawFd) -> io::Result<UringReader> {
        let mut ring = IoUring::new(RING_ENTRIES)?;
        // A probe: read the first block through the ring, so that a kernel that creates rings
        // but refuses reads (or O_DIRECT through them) is found now, not at the first hit.
        let mut probe = AlignedBuf::new(crate::format::BLOCK);
        let sqe = opcode::Read::new(types::Fd(fd), probe.as_mut_ptr(), probe.len() as u32)
            .offset(0)
            .build()
            .user_data(1);
        // SAFETY: `probe` outlives the read: we wait for its completion below.
        unsafe { ring.submission().push(&sqe) }.map_err(|_| io::Error::other("ring full"))?;
        ring.submit_and_wait(1)?;
        let cqe = ring
            .completion()
            .next()
            .ok_or_else(|| io::Error::other("no completion"))?;
        if cqe.result() < 0 {
            return Err(io::Error::from_raw_os_error(-cqe.result()));
        }
        // SAFETY: eventfd returns a new descriptor or -1.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if efd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: efd is a fresh descriptor we own.
        let wake = Arc::new(unsafe { OwnedFd::from_raw_fd(efd) });
        let (tx, rx) = channel();
        let thread_wake = Arc::clone(&wake);
        let thread = std::thread::Builder::new()
            .name("flash-uring".into())
            .spawn(move || ring_loop(ring, fd, rx, thread_wake))?;
        Ok(UringReader {
            fd,
            tx: Mutex::new(Some(tx)),
            wake,
            thread: Some(thread),
        })
    }

    pub(super) fn submit(&self, req: Req) -> io::Result<()> {
        let tx = self.tx.lock();
        let tx = tx
            .as_ref()
            .ok_or_else(|| io::Error::other("flash reader stopped"))?;
        tx.send(req)
            .map_err(|_| io::Error::other("flash reader stopped"))?;
        self.kick();
        Ok(())
    }

    fn kick(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd.
        unsafe {
            libc::write(
                self.wake.as_raw_fd(),
                (&one as *const u64).cast(),
                std::mem::size_of::<u64>(),
            );
        }
    }
}

impl Drop for UringReader {
    fn drop(&mut self) {
        self.tx.lock().take();
        self.kick();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The ring thread: submits each request as one Read, answers each completion.
fn ring_loop(mut ring: IoUring, fd: RawFd, rx: Receiver<Req>, wake: Arc<OwnedFd>) {
    // Declared before the loop state so it outlives every read the ring may still hold.
    let mut wake_buf = [0u8; 8];
    let mut slots: Vec<Option<Req>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut pending: VecDeque<Req> = VecDeque::new();
    let mut in_flight = 0usize;
    let mut wake_armed = false;
    let mut closed = false;
    loop {
        loop {
            match rx.try_recv() {
                Ok(r) => pending.push_back(r),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    closed = true;
                    break;
                }
            }
        }
        if closed && in_flight == 0 && pending.is_empty() {
            return;
        }
        {
            let mut sq = ring.submission();
            if !wake_armed && !closed {
                let sqe = opcode::Read::new(
                    types::Fd(wake.as_raw_fd()),
                    wake_buf.as_mut_ptr(),
                    wake_buf.len() as u32,
                )
                .build()
                .user_data(WAKE);
                // SAFETY: wake_buf lives until this function returns, after the ring is done.
                if unsafe { sq.push(&sqe) }.is_ok() {
                    wake_armed = true;
                }
            }
            while !sq.is_full() {
                let Some(mut req) = pending.pop_front() else {
                    break;
                };
                let id = free.pop().unwrap_or_else(|| {
                    slots.push(None);
                    slots.len() - 1
                });
                let sqe =
                    opcode::Read::new(types::Fd(fd), req.buf.as_mut_ptr(), req.buf.len() as u32)
                        .offset(req.offset)
                        .build()
                        .user_data(id as u64);
                slots[id] = Some(req);
                // SAFETY: the buffer is owned by the request kept in `slots[id]` until its
                // completion is reaped.
                unsafe { sq.push(&sqe) }.expect("checked not full");
                in_flight += 1;
            }
        }
        if let Err(e) = ring.submit_and_wait(1) {
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            tracing::error!("flash io_uring submit failed: {e}");
        }
        let done: Vec<(u64, i32)> = ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        for (id, result) in done {
            if id == WAKE {
                wake_armed = false;
                continue;
            }
            let req = slots[id as usize].take().expect("a request per completion");
            free.push(id as usize);
            in_flight -= 1;
            let _ = req.done.send(match completed(req.buf, result) {
                Ok(buf) => (buf, Ok(())),
                Err(e) => (AlignedBuf::new(0), Err(e)),
            });
        }
    }
}
