//! What a connection thread runs and how it is woken: its tasks (one per connection, not
//! `Send`), their wakers, the ready list of the tasks woken on the thread itself, and the
//! inbox through which other threads hand it connections and wakes. Not here: the loop that
//! polls the tasks (`run.rs`).
//!
//! ```text
//!   waker on its own thread ─> READY.ids (polled next turn, no lock)
//!   waker on another thread ─> Inbox.woken ─┐
//!   Pool::spawn ───────────> Inbox.jobs ────┴─> Shared::notify: eventfd write if the thread
//!                                               sleeps in io_uring_enter
//! ```

use std::cell::RefCell;
use std::future::Future;
use std::os::fd::{AsRawFd, OwnedFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Wake, Waker};

use parking_lot::Mutex;

/// Builds a connection's task on its thread (the future itself need not be `Send`).
pub type Job = Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = ()>>> + Send>;

/// What other threads hand a connection thread.
#[derive(Default)]
pub(super) struct Inbox {
    pub(super) jobs: Vec<Job>,
    /// Tasks woken from other threads.
    pub(super) woken: Vec<usize>,
    /// The log's safe mark moved for the thread's requests waiting on it ([`SafeWaits`]).
    pub(super) mark_moved: bool,
    pub(super) stop: bool,
}

/// One connection thread's side visible to others.
pub(super) struct Shared {
    pub(super) inbox: Mutex<Inbox>,
    /// The thread waits (or is about to) in `io_uring_enter`: a wake must write the eventfd.
    pub(super) sleeping: AtomicBool,
    pub(super) eventfd: OwnedFd,
}

impl Shared {
    /// After something was put in the inbox: wakes the thread if it sleeps.
    pub(super) fn notify(&self) {
        if self.sleeping.swap(false, SeqCst) {
            let one: u64 = 1;
            // SAFETY: writes 8 bytes from a live u64 to our eventfd.
            unsafe {
                libc::write(
                    self.eventfd.as_raw_fd(),
                    (&one as *const u64).cast(),
                    std::mem::size_of::<u64>(),
                )
            };
        }
    }
}

/// A task's waker: on its own thread it joins the local ready list, elsewhere the inbox.
pub(super) struct TaskWaker {
    pub(super) id: usize,
    pub(super) shared: Arc<Shared>,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let owner = Arc::as_ptr(&self.shared) as usize;
        let local = READY.with(|r| match r.try_borrow_mut() {
            Ok(mut r) if r.owner == owner => {
                r.ids.push(self.id);
                true
            }
            _ => false,
        });
        if !local {
            self.shared.inbox.lock().woken.push(self.id);
            self.shared.notify();
        }
    }
}

/// The tasks woken on this thread, polled in the next turn.
#[derive(Default)]
pub(super) struct Ready {
    /// The thread's `Shared`, by address (0 on threads that are not connection threads).
    pub(super) owner: usize,
    pub(super) ids: Vec<usize>,
}

thread_local! {
    pub(super) static READY: RefCell<Ready> = RefCell::new(Ready::default());
}

/// A connection's task on its thread.
pub(super) struct Task {
    pub(super) future: Pin<Box<dyn Future<Output = ()>>>,
    pub(super) waker: Waker,
    /// The last turn it was polled in (a task woken twice is polled once per turn).
    pub(super) turn: u64,
}
