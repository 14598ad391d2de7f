//! The ring of a worker thread whose runtime is current-thread (the tokio engine's
//! connection workers): a connection submits its read and reaps the completion itself.
//!
//! ```text
//!   connection task ── Read SQE + io_uring_enter ──> the worker thread's own ring
//!        ^                                                │ completion signals an eventfd
//!        └── reaps the completion itself <── the runtime's reactor sees the eventfd readable
//! ```
//!
//! Non-goals: no other thread takes part; a full ring sends the read to the shared one.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::task::{Poll, Waker};

use io_uring::{opcode, types, IoUring};
use parking_lot::Mutex;

use crate::device::AlignedBuf;

/// Entries of a worker thread's own ring.
pub(crate) const LOCAL_RING_ENTRIES: u32 = 256;

thread_local! {
    /// The ring of this thread's current-thread runtime (by the runtime's id), made at the
    /// thread's first flash read.
    static LOCAL_RING: std::cell::RefCell<Option<(tokio::runtime::Id, Arc<LocalRing>)>> =
        const { std::cell::RefCell::new(None) };
}

/// A ring owned by one worker thread whose runtime is current-thread (tasks never move): a
/// connection submits its read to it and reaps completions itself, woken through an eventfd
/// the ring signals and the runtime's reactor watches. No other thread takes part.
///
/// The ring is made with DEFER_TASKRUN (kernel 6.1+, else a plain ring): a device completion
/// is queued as work for this thread and announced on the eventfd, and the next reap flushes
/// it with one io_uring_enter (GETEVENTS, when the kernel flags pending work). A plain ring
/// instead interrupts the thread to post each completion (its epoll_wait returns EINTR).
///
/// The reactor wakes only the task that last registered on the eventfd (`watcher`); when that
/// task leaves while other reads are in flight, it wakes one of them to register in its place
/// (else their completions would wait for the next read on this thread); so does any waiter
/// that leaves while nobody is registered.
///
/// The ring is the thread's (SINGLE_ISSUER): only that thread can run its completions. So a
/// current-thread runtime must be driven by one thread for life, as the server's workers
/// are; a read awaited when `block_on` moved the runtime to another thread would never end.
pub(super) struct LocalRing {
    /// The ring and the reads it holds.
    pub(super) state: Mutex<LocalState>,
    /// Signalled by the kernel on each completion (`IORING_REGISTER_EVENTFD`).
    efd: tokio::io::unix::AsyncFd<OwnedFd>,
}

/// Field order matters: the ring waits for reads still in flight (Drop) before the slots
/// holding their buffers go.
pub(super) struct LocalState {
    /// The ring (SINGLE_ISSUER and DEFER_TASKRUN where the kernel has them).
    ring: IoUring,
    /// Reads by id (their SQE's user_data), with their buffers.
    slots: Vec<Slot>,
    /// Ids of free slots.
    free: Vec<usize>,
    /// Reads submitted and not reaped yet.
    in_flight: usize,
    /// The slot whose waiter's task the eventfd's readiness wakes (the last one to register).
    pub(super) watcher: Option<usize>,
}

/// A read's place in the ring, by id.
enum Slot {
    Free,
    /// Read submitted; the buffer is the kernel's until its completion.
    InFlight(AlignedBuf, Option<Waker>),
    Done(AlignedBuf, i32),
    /// The reader went away (its future dropped) while the read was in flight.
    Abandoned(AlignedBuf),
}

impl Drop for LocalState {
    fn drop(&mut self) {
        // The buffers of reads in flight must outlive them.
        while self.in_flight > 0 {
            if self.ring.submit_and_wait(1).is_err() {
                // Leak rather than free memory the kernel may still write into.
                for s in self.slots.drain(..) {
                    if let Slot::InFlight(b, _) | Slot::Abandoned(b) = s {
                        std::mem::forget(b);
                    }
                }
                return;
            }
            self.reap();
        }
    }
}

impl LocalState {
    /// Moves every completion into its slot, waking its reader.
    fn reap(&mut self) {
        // Deferred completions reach the queue only through an enter with GETEVENTS, which
        // `submit` adds when the kernel flags pending work.
        if self.ring.submission().taskrun() {
            if let Err(e) = self.ring.submit() {
                tracing::warn!("flash io_uring getevents: {e}");
            }
        }
        let done: Vec<(u64, i32)> = self
            .ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        for (id, result) in done {
            let id = id as usize;
            self.in_flight -= 1;
            match std::mem::replace(&mut self.slots[id], Slot::Free) {
                Slot::InFlight(buf, waker) => {
                    self.slots[id] = Slot::Done(buf, result);
                    if let Some(w) = waker {
                        w.wake();
                    }
                }
                Slot::Abandoned(_) => self.free.push(id),
                other => self.slots[id] = other,
            }
        }
    }

    /// The waiter of slot `id` leaves: if it was the watcher, or nobody watches, another
    /// waiter still in flight is woken to register on the eventfd in its place.
    ///
    /// "Nobody watches" happens when the waiter handed the watch leaves before registering
    /// (its own read completed first): it must hand on in turn, else the rest sleep through
    /// every later signal.
    fn leave(&mut self, id: usize) {
        if self.watcher.is_some_and(|w| w != id) {
            return;
        }
        self.watcher = None;
        for slot in &mut self.slots {
            if let Slot::InFlight(_, waker @ Some(_)) = slot {
                if let Some(w) = waker.take() {
                    w.wake();
                }
                return;
            }
        }
    }
}

impl LocalRing {
    fn new() -> io::Result<LocalRing> {
        let ring = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_taskrun_flag()
            .build(LOCAL_RING_ENTRIES)
            .or_else(|_| IoUring::new(LOCAL_RING_ENTRIES))?;
        // SAFETY: eventfd returns a new descriptor or -1.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if efd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: efd is a fresh descriptor we own.
        let efd = unsafe { OwnedFd::from_raw_fd(efd) };
        ring.submitter().register_eventfd(efd.as_raw_fd())?;
        Ok(LocalRing {
            state: Mutex::new(LocalState {
                ring,
                slots: Vec::new(),
                free: Vec::new(),
                in_flight: 0,
                watcher: None,
            }),
            // SAFETY: the AsyncFd owns the descriptor, which stays open and the same until
            // it is dropped. (A current-thread runtime without I/O enabled would panic here;
            // every runtime that reads flash serves sockets.)
            efd: unsafe {
                tokio::io::unix::AsyncFd::register_with_interest(efd, tokio::io::Interest::READABLE)
            }
            .map_err(|e| e.into_parts().1)?,
        })
    }

    /// This thread's ring, if its runtime is current-thread (else tasks may move between
    /// threads, and reads go through the shared ring).
    pub(super) fn current() -> Option<Arc<LocalRing>> {
        let rt = tokio::runtime::Handle::try_current().ok()?;
        if rt.runtime_flavor() != tokio::runtime::RuntimeFlavor::CurrentThread {
            return None;
        }
        LOCAL_RING.with(|cell| {
            let mut cell = cell.borrow_mut();
            match &*cell {
                Some((id, ring)) if *id == rt.id() => Some(Arc::clone(ring)),
                _ => {
                    let ring = Arc::new(LocalRing::new().ok()?);
                    *cell = Some((rt.id(), Arc::clone(&ring)));
                    Some(ring)
                }
            }
        })
    }

    /// Submits the read of `buf` from `fd` at `offset`; None if the ring is full.
    pub(super) fn submit(
        &self,
        fd: RawFd,
        offset: u64,
        mut buf: AlignedBuf,
    ) -> Result<usize, AlignedBuf> {
        let mut st = self.state.lock();
        if st.in_flight >= LOCAL_RING_ENTRIES as usize {
            return Err(buf);
        }
        let id = st.free.pop().unwrap_or_else(|| {
            st.slots.push(Slot::Free);
            st.slots.len() - 1
        });
        let sqe = opcode::Read::new(types::Fd(fd), buf.as_mut_ptr(), buf.len() as u32)
            .offset(offset)
            .build()
            .user_data(id as u64);
        // SAFETY: the buffer moves into `slots[id]` and stays there until its completion is
        // reaped (or the ring is dropped, which waits for it).
        if unsafe { st.ring.submission().push(&sqe) }.is_err() {
            st.free.push(id);
            return Err(buf);
        }
        st.slots[id] = Slot::InFlight(buf, None);
        st.in_flight += 1;
        if let Err(e) = st.ring.submit() {
            // Not submitted: the entry stays queued and goes with the next submit.
            tracing::warn!("flash io_uring submit: {e}");
        }
        Ok(id)
    }

    /// Waits for slot `id`'s read.
    pub(super) async fn wait(&self, id: usize) -> (AlignedBuf, i32) {
        let mut guard = Abandon {
            ring: self,
            id: Some(id),
        };
        let out = std::future::poll_fn(|cx| loop {
            {
                let mut st = self.state.lock();
                st.reap();
                match std::mem::replace(&mut st.slots[id], Slot::Free) {
                    Slot::Done(buf, result) => {
                        st.free.push(id);
                        st.leave(id);
                        return Poll::Ready((buf, result));
                    }
                    Slot::InFlight(buf, _) => {
                        st.slots[id] = Slot::InFlight(buf, Some(cx.waker().clone()))
                    }
                    other => st.slots[id] = other,
                }
            }
            match self.efd.poll_read_ready(cx) {
                Poll::Ready(Ok(mut ready)) => {
                    // The eventfd's count is never read: epoll (edge-triggered) reports each
                    // signal anew, and the completions themselves are in the ring.
                    ready.clear_ready();
                }
                Poll::Ready(Err(_)) => {
                    // The reactor is gone (runtime shutting down): wait in the kernel.
                    let st = self.state.lock();
                    let _ = st.ring.submit_and_wait(1);
                }
                Poll::Pending => {
                    self.state.lock().watcher = Some(id);
                    return Poll::Pending;
                }
            }
        })
        .await;
        guard.id = None;
        out
    }
}

/// Marks a read abandoned if its waiter is dropped before the completion.
struct Abandon<'a> {
    ring: &'a LocalRing,
    id: Option<usize>,
}

impl Drop for Abandon<'_> {
    fn drop(&mut self) {
        let Some(id) = self.id else { return };
        let mut st = self.ring.state.lock();
        match std::mem::replace(&mut st.slots[id], Slot::Free) {
            Slot::InFlight(buf, _) => st.slots[id] = Slot::Abandoned(buf),
            Slot::Done(..) => st.free.push(id),
            other => st.slots[id] = other,
        }
        // After the slot stopped waiting: else the watch could be handed to this waiter,
        // which is going away.
        st.leave(id);
    }
}
