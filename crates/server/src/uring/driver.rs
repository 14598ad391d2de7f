//! A connection thread's ring and its operation slots: the one place that queues entries and
//! turns completions into wakes. Every op names a slot by its `user_data`; the slot holds the
//! buffer the kernel reads or fills until the completion is reaped, so no buffer is freed
//! under the kernel. Not here: the futures that wait on a slot (`op.rs`, `socket.rs`) and the
//! loop that enters the ring (`run.rs`).
//!
//! ```text
//!   Op::submit / Socket ── push(entry, user_data = slot id) ──> submission queue
//!   run: io_uring_enter ──> completion queue ── complete(id, res, flags) ──> Slot::Done / Recv
//!                                                     └─> the task's waker (woken by run)
//! ```

use std::cell::RefCell;
use std::io;
use std::task::Waker;

use io_uring::{cqueue, opcode, squeue, IoUring};

use super::buffers::BufRing;

/// Submission queue entries per ring (the completion queue is twice as large; the kernel
/// keeps overflowing completions rather than dropping them).
pub(super) const RING_ENTRIES: u32 = 1024;
/// `user_data` of the eventfd read and of cancellations (slot numbers are below these).
pub(super) const EVENTFD: u64 = u64::MAX;
pub(super) const CANCEL: u64 = u64::MAX - 1;
/// `user_data` of a fixed file slot's release (`FilesUpdate` to -1): this bit plus the slot.
pub(super) const RELEASE: u64 = 1 << 62;

/// Registered file slots per ring at most (fewer under a lower `RLIMIT_NOFILE`, which bounds
/// the table): a socket beyond them is used by its descriptor.
pub(super) const FIXED_FILES_MAX: u64 = 1 << 16;
/// What a slot is set to when its socket goes: the kernel reads it when the op is issued.
static NO_FILE: [i32; 1] = [-1];

/// Whether this process may use io_uring: a ring is created and dropped, on a thread of its
/// own, because the kernel's teardown of a ring interrupts the creating thread's blocking
/// system calls (a socket read with a timeout then fails with EINTR).
pub fn available() -> io::Result<()> {
    std::thread::scope(|s| {
        s.spawn(|| IoUring::new(8).map(drop))
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("io_uring check panicked")))
    })
}

/// A connection thread's ring, made on that thread. Single issuer with deferred task work:
/// the kernel completes this ring's receives and sends only when the thread enters the ring
/// to wait or submit, instead of interrupting it (an IPI and a task-work run) whenever a
/// socket becomes ready; the task-run flag tells `submit` when completions are waiting to be
/// run. A kernel older than 6.1 refuses these flags: a plain ring then, and `false` (no
/// multishot receives either: they came in 6.0, provided buffer rings in 5.19).
pub(super) fn new_ring() -> io::Result<(IoUring, bool)> {
    // A test switch: fails as in a sandbox that forbids io_uring.
    #[cfg(feature = "test-hooks")]
    if crate::test_hooks::refuse_io_uring() {
        return Err(io::Error::from_raw_os_error(libc::EPERM));
    }
    IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_taskrun_flag()
        .build(RING_ENTRIES)
        .map(|ring| (ring, true))
        .or_else(|e| match e.raw_os_error() {
            Some(libc::EINVAL) => IoUring::new(RING_ENTRIES).map(|ring| (ring, false)),
            _ => Err(e),
        })
}

/// A ring operation's slot, by `user_data`.
pub(super) enum Slot {
    Free,
    /// Submitted; the buffer the kernel reads or fills lives here meanwhile.
    Waiting {
        waker: Option<Waker>,
        buf: Vec<u8>,
    },
    Done {
        result: i32,
        buf: Vec<u8>,
    },
    /// Its future was dropped: freed when the kernel reports the op done.
    Orphan {
        _buf: Vec<u8>,
    },
    /// A connection's multishot receive: what arrived and was not read yet (copied out of
    /// the thread's provided buffers as the completions are reaped).
    Recv(Box<Arrivals>),
}

/// What a multishot receive delivered since its socket last read.
#[derive(Default)]
pub(super) struct Arrivals {
    pub(super) waker: Option<Waker>,
    pub(super) bytes: Vec<u8>,
    /// The kernel ended the receive (no more completions will come): with `Ok(0)` at end of
    /// stream, an error, or `Ok(1)` when it only has to be submitted again (the provided
    /// buffers ran out, or it was cancelled because `bytes` reached [`ARRIVALS_MAX`]).
    pub(super) ended: Option<io::Result<usize>>,
    /// A cancellation was asked for (too much unread input).
    pub(super) cancelling: bool,
    /// The socket was dropped: the slot is freed when the receive ends.
    pub(super) orphan: bool,
}

/// Unread input a connection's multishot receive may hold before it is cancelled, so that a
/// client whose requests are not being read (its replies are not read either) is held back by
/// TCP, as with a single-shot receive, instead of filling the server's memory. Submitted again
/// once the connection has read what arrived.
const ARRIVALS_MAX: usize = 256 << 10;

/// This thread's ring and op slots.
pub(super) struct Driver {
    pub(super) ring: IoUring,
    pub(super) slots: Vec<Slot>,
    pub(super) free: Vec<usize>,
    /// Provided buffers for multishot receives; `None` where the kernel has none (a
    /// single-shot receive per read then).
    pub(super) bufs: Option<BufRing>,
    /// Free slots of the ring's registered file table (`None`: no table, sockets are used
    /// by descriptor).
    pub(super) fixed: Option<Vec<u32>>,
}

thread_local! {
    pub(super) static DRIVER: RefCell<Option<Driver>> = const { RefCell::new(None) };
}

pub(super) fn with_driver<R>(f: impl FnOnce(&mut Driver) -> R) -> R {
    DRIVER.with(|d| f(d.borrow_mut().as_mut().expect("connection thread's ring")))
}

impl Driver {
    /// Queues an entry, submitting the queue first if it is full.
    pub(super) fn push(&mut self, entry: &squeue::Entry) -> io::Result<()> {
        // SAFETY: every entry points into a buffer held by its slot (or by the thread, for
        // the eventfd read, or by the provided buffer ring) until its completion is reaped.
        while unsafe { self.ring.submission().push(entry) }.is_err() {
            self.ring.submit()?;
        }
        Ok(())
    }

    /// Registers `fd` in a free slot of the ring's file table, so that its ops name the
    /// slot (`IOSQE_FIXED_FILE`) and the kernel skips looking the descriptor up and taking
    /// a reference to its file for each one; `None` if there is no table or no free slot.
    pub(super) fn register_fixed(&mut self, fd: i32) -> Option<u32> {
        let slot = self.fixed.as_mut()?.pop()?;
        match self.ring.submitter().register_files_update(slot, &[fd]) {
            Ok(_) => Some(slot),
            Err(_) => {
                if let Some(free) = self.fixed.as_mut() {
                    free.push(slot);
                }
                None
            }
        }
    }

    /// Empties a socket's file slot after the ops already queued for it: the update goes
    /// through the ring, so it is issued after them (a receive queued in this same turn
    /// still finds its file), and the slot is free again once its completion is reaped.
    /// The table's reference is what keeps the socket open after its descriptor is closed.
    pub(super) fn release_fixed(&mut self, slot: u32) {
        let entry = opcode::FilesUpdate::new(NO_FILE.as_ptr(), 1)
            .offset(slot as i32)
            .build()
            .user_data(RELEASE | u64::from(slot));
        if self.push(&entry).is_err() {
            // Not queued: emptied at once instead, and the slot is not used again (an op of
            // the old socket might still be queued behind it).
            let _ = self.ring.submitter().register_files_update(slot, &NO_FILE);
        }
    }

    /// A free slot's id.
    pub(super) fn slot(&mut self) -> usize {
        self.free.pop().unwrap_or_else(|| {
            self.slots.push(Slot::Free);
            self.slots.len() - 1
        })
    }

    /// Handles one completion; returns the waker of the task it is for, if any.
    pub(super) fn complete(&mut self, id: usize, res: i32, flags: u32) -> Option<Waker> {
        let more = cqueue::more(flags);
        let bid = cqueue::buffer_select(flags);
        match std::mem::replace(&mut self.slots[id], Slot::Free) {
            Slot::Waiting { waker, buf } => {
                self.slots[id] = Slot::Done { result: res, buf };
                waker
            }
            Slot::Orphan { .. } => {
                self.free.push(id);
                None
            }
            Slot::Recv(mut a) => {
                if let (Some(bid), Some(bufs)) = (bid, self.bufs.as_mut()) {
                    if res > 0 {
                        a.bytes.extend_from_slice(bufs.data(bid, res as usize));
                    }
                    bufs.give_back(bid);
                }
                if !more {
                    a.ended = Some(match res {
                        0 => Ok(0),
                        r if r > 0 => Ok(1),
                        r if r == -libc::ENOBUFS || (r == -libc::ECANCELED && a.cancelling) => {
                            Ok(1)
                        }
                        r => Err(io::Error::from_raw_os_error(-r)),
                    });
                    if a.orphan {
                        self.free.push(id);
                        return None;
                    }
                } else if a.bytes.len() >= ARRIVALS_MAX && !a.cancelling && !a.orphan {
                    a.cancelling = true;
                    let cancel = opcode::AsyncCancel::new(id as u64)
                        .build()
                        .user_data(CANCEL);
                    let _ = self.push(&cancel);
                }
                let waker = a.waker.take();
                self.slots[id] = Slot::Recv(a);
                waker
            }
            other => {
                self.slots[id] = other;
                None
            }
        }
    }
}
