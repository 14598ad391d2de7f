//! The io_uring connection engine (`--io-engine uring`): each connection thread runs one ring
//! and a small executor of its own instead of a tokio runtime, so that one `io_uring_enter`
//! per turn submits every receive and send of the thread's connections and waits for the
//! next completions (an epoll server makes one read and one write system call per request,
//! plus its epoll_wait). The request handling is `connection::serve`'s, unchanged: this file
//! only moves the bytes ([`Socket`] is its [`Transport`]).
//!
//! ```text
//!   server::run (accept, tokio) ── Pool::spawn, round robin ──> Inbox of thread i + eventfd
//!   thread i: loop {
//!     new connections ─> tasks (connection::serve over a Socket)
//!     poll the tasks woken since the last turn, once each ─> their recv/send SQEs
//!     if it answered any: submit, and yield the core while yields come back quickly
//!     io_uring_enter: submit them all; wait for one completion if no task is ready
//!     completions ─> the op's slot holds the result ─> wake its task
//!   }
//!   a wake from another thread (durability, shutdown, a timer) ─> Inbox + eventfd write,
//!   whose read is always pending in the ring
//!   requests waiting for the log's safe mark: kept by the thread (`SafeWaits`), one
//!   registration in the log's registry for them all; each turn and after each own log
//!   write, the covered ones join the ready list
//! ```
//!
//! A receive or send owns its buffer while the kernel may use it: `read_buf` and `send` move
//! the connection's Vec into the op's slot and get it back with the result. An op whose
//! future is dropped first (the connection ended) is cancelled, and its slot keeps the buffer
//! until the kernel reports it done, so the kernel never writes into freed memory.
//!
//! Flash reads (cairn-flash) awaited on the thread go through its ring too ([`FlashReads`]):
//! a get's device read enters the kernel with the socket ops of the same turn.
//!
//! The thread enters the main runtime's context, so what the request path awaits from tokio
//! (timers, `spawn_blocking` for admin checkpoints, tokio's channels) works unchanged; those
//! wake the task through the Inbox. Plain TCP only: under TLS (`-Z`), and where a ring cannot
//! be made (a kernel without io_uring, a sandbox that forbids it), server.rs serves the
//! connections with the tokio engine instead and logs why.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Instant;

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use parking_lot::Mutex;

use crate::conns::{Handle, Registry};
use crate::transport::Transport;

/// Submission queue entries per ring (the completion queue is twice as large; the kernel
/// keeps overflowing completions rather than dropping them).
const RING_ENTRIES: u32 = 1024;
/// `user_data` of the eventfd read and of cancellations (slot numbers are below these).
const EVENTFD: u64 = u64::MAX;
const CANCEL: u64 = u64::MAX - 1;
/// `user_data` of a fixed file slot's release (`FilesUpdate` to -1): this bit plus the slot.
const RELEASE: u64 = 1 << 62;

/// Registered file slots per ring at most (fewer under a lower `RLIMIT_NOFILE`, which bounds
/// the table): a socket beyond them is used by its descriptor.
const FIXED_FILES_MAX: u64 = 1 << 16;
/// What a slot is set to when its socket goes: the kernel reads it when the op is issued.
static NO_FILE: [i32; 1] = [-1];

/// Builds a connection's task on its thread (the future itself need not be `Send`).
pub type Job = Box<dyn FnOnce() -> Pin<Box<dyn Future<Output = ()>>> + Send>;

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

/// For tests: when set, making a connection thread's ring fails as in a sandbox that forbids
/// io_uring (EPERM), so that the fallback to the tokio engine can be tested anywhere.
pub const REFUSE_FOR_TESTS: &str = "CAIRN_TEST_REFUSE_IO_URING";

/// For tests and A/B runs: when set, each read is a single-shot receive into the connection's
/// own buffer (as on a kernel without provided buffer rings) instead of a multishot receive.
pub const SINGLE_SHOT_FOR_TESTS: &str = "CAIRN_TEST_SINGLE_SHOT_RECV";

/// For A/B runs: when set, sockets are used by descriptor, not through the ring's registered
/// file table.
pub const NO_FIXED_FILES_FOR_AB: &str = "CAIRN_AB_NO_FIXED_FILES";

/// For tests: a smaller registered file table per ring (this many slots), so that a test
/// can fill it and see the slots of ended connections reused.
pub const FIXED_FILES_FOR_TESTS: &str = "CAIRN_TEST_FIXED_FILES";

/// For A/B runs only: when set, no turn ends with a yield (see `run` and `YieldGate`).
pub const NO_TURN_YIELD_FOR_AB: &str = "CAIRN_AB_NO_TURN_YIELD";

/// A connection thread's ring, made on that thread. Single issuer with deferred task work:
/// the kernel completes this ring's receives and sends only when the thread enters the ring
/// to wait or submit, instead of interrupting it (an IPI and a task-work run) whenever a
/// socket becomes ready; the task-run flag tells `submit` when completions are waiting to be
/// run. A kernel older than 6.1 refuses these flags: a plain ring then, and `false` (no
/// multishot receives either: they came in 6.0, provided buffer rings in 5.19).
fn new_ring() -> io::Result<(IoUring, bool)> {
    if std::env::var_os(REFUSE_FOR_TESTS).is_some() {
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

/// The connection threads of the io_uring engine.
pub struct Pool {
    threads: Vec<Arc<Shared>>,
    next: AtomicUsize,
}

impl Pool {
    /// Starts `n` threads (at least one), each with its ring; an error if a ring cannot be
    /// made (io_uring unavailable). `runtime` is entered by every thread (see the module doc).
    /// With persistence, each thread writes the log's pending records itself once per turn in
    /// async mode (`Persistence::write_ready`, as tokio's engine does before it parks), so
    /// that its connections' writes do not wake the log's syncer thread.
    pub fn start(
        n: usize,
        runtime: tokio::runtime::Handle,
        persist: Option<Arc<cairn_persist::Persistence>>,
    ) -> io::Result<Pool> {
        let mut threads = Vec::new();
        for i in 0..n.max(1) {
            // SAFETY: eventfd returns a new descriptor or -1.
            let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            let shared = Arc::new(Shared {
                inbox: Mutex::new(Inbox::default()),
                sleeping: AtomicBool::new(false),
                // SAFETY: fd was just created and is owned by nothing else.
                eventfd: unsafe { OwnedFd::from_raw_fd(fd) },
            });
            let s = Arc::clone(&shared);
            let runtime = runtime.clone();
            let persist = persist.clone();
            // The ring is made on its thread: a single-issuer ring belongs to the thread that
            // creates it.
            let (made, ring_made) = std::sync::mpsc::sync_channel(1);
            std::thread::Builder::new()
                .name(format!("cairn-uring-{i}"))
                .spawn(move || {
                    let ring = match new_ring() {
                        Ok(ring) => {
                            let _ = made.send(Ok(()));
                            ring
                        }
                        Err(e) => {
                            let _ = made.send(Err(e));
                            return;
                        }
                    };
                    let _entered = runtime.enter();
                    if persist.is_some() {
                        cairn_persist::writes_before_sleeping();
                    }
                    let (ring, recent) = ring;
                    if let Err(e) = run(s, ring, recent, persist) {
                        tracing::error!("io_uring connection thread stopped: {e}");
                    }
                })?;
            let started = ring_made
                .recv()
                .unwrap_or_else(|_| Err(io::Error::other("io_uring thread ended at start")));
            if let Err(e) = started {
                Pool {
                    threads,
                    next: AtomicUsize::new(0),
                }
                .stop();
                return Err(e);
            }
            threads.push(shared);
        }
        Ok(Pool {
            threads,
            next: AtomicUsize::new(0),
        })
    }

    /// Runs a connection's task on the next thread (round robin).
    pub fn spawn(&self, job: Job) {
        let i = self.next.fetch_add(1, Relaxed) % self.threads.len();
        let shared = &self.threads[i];
        shared.inbox.lock().jobs.push(job);
        shared.notify();
    }

    /// Lets every thread end (call once no connection is left); tasks still there are dropped.
    pub fn stop(self) {
        for shared in &self.threads {
            shared.inbox.lock().stop = true;
            shared.notify();
        }
    }
}

/// What other threads hand a connection thread.
#[derive(Default)]
struct Inbox {
    jobs: Vec<Job>,
    /// Tasks woken from other threads.
    woken: Vec<usize>,
    /// The log's safe mark moved for the thread's requests waiting on it ([`SafeWaits`]).
    mark_moved: bool,
    stop: bool,
}

/// One connection thread's side visible to others.
struct Shared {
    inbox: Mutex<Inbox>,
    /// The thread waits (or is about to) in `io_uring_enter`: a wake must write the eventfd.
    sleeping: AtomicBool,
    eventfd: OwnedFd,
}

impl Shared {
    /// After something was put in the inbox: wakes the thread if it sleeps.
    fn notify(&self) {
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
struct TaskWaker {
    id: usize,
    shared: Arc<Shared>,
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

/// Wakes a connection thread whose requests wait for the log's safe mark ([`SafeWaits`]):
/// the one registration they share in the log's waiter registry holds it.
struct MarkWaker(Arc<Shared>);

impl Wake for MarkWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // On its own thread (async mode's `write_ready` moved the mark) the loop settles the
        // waits right after; from another thread (the log's syncer) it must wake the thread.
        let owner = Arc::as_ptr(&self.0) as usize;
        if READY.with(|r| r.try_borrow().is_ok_and(|r| r.owner == owner)) {
            MARK_WOKEN_HERE.with(|w| w.set(true));
            return;
        }
        self.0.inbox.lock().mark_moved = true;
        self.0.notify();
    }
}

/// The requests on a connection thread waiting for their writes to be safe ([`until_safe`]),
/// sorted by LSN, with their tasks' wakers. They share one registration in the log's waiter
/// registry, for the oldest of them (`settle_safe_waits`), so that a request's wait takes no
/// lock the other threads take too, and the log's syncer wakes the thread once an advance
/// instead of each request (each was a registry entry, locked three times, and an inbox
/// push: docs/decisions/0014-one-wait-a-thread.md).
#[derive(Default)]
struct SafeWaits {
    waiting: VecDeque<(cairn_wal::Lsn, Waker)>,
    /// The log stopped (the shared wait ended with its error): every wait ends, and each
    /// request finds the error in `Persistence::acknowledged`.
    stopped: bool,
}

/// Resolves once `lsn` is safe in the mode in force (or the log stopped). A connection awaits
/// it before `Persistence::acknowledged`, which then finds the mark reached without a wait of
/// its own. At once on a thread that is not one of this engine's (tokio's engine waits in
/// `acknowledged` alone).
pub(crate) fn until_safe(p: &cairn_persist::Persistence, lsn: cairn_wal::Lsn) -> UntilSafe<'_> {
    UntilSafe {
        p,
        lsn,
        registered: false,
    }
}

pub(crate) struct UntilSafe<'a> {
    p: &'a cairn_persist::Persistence,
    lsn: cairn_wal::Lsn,
    registered: bool,
}

impl Future for UntilSafe<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if this.p.safe_lsn() >= this.lsn {
            return Poll::Ready(());
        }
        SAFE_WAITS.with(|w| {
            let mut w = w.borrow_mut();
            let Some(w) = w.as_mut() else {
                return Poll::Ready(());
            };
            if w.stopped {
                return Poll::Ready(());
            }
            // Polled again before its LSN is safe (a stray wake): its entry is still there.
            if !this.registered {
                this.registered = true;
                // A thread's LSNs grow as its requests run, so this is the back, or near it.
                let at = match w.waiting.back() {
                    Some((last, _)) if *last > this.lsn => {
                        w.waiting.partition_point(|(l, _)| *l <= this.lsn)
                    }
                    _ => w.waiting.len(),
                };
                w.waiting.insert(at, (this.lsn, cx.waker().clone()));
            }
            Poll::Pending
        })
    }
}

/// The thread's one registration in the log's waiter registry: the LSN it waits for (the
/// oldest waiting request's) and the wait.
type SafeWatch<'p> = Option<(cairn_wal::Lsn, Pin<Box<cairn_wal::Reach<'p>>>)>;

/// Wakes the thread's requests whose writes are safe now, and keeps the thread's one
/// registration for the oldest of the rest, polled with `waker` (a [`MarkWaker`]) when it is
/// made and when that waker was woken (`woken`): in between it stands as it is, and looking
/// at it would take the registry's lock.
fn settle_safe_waits<'p>(
    p: &'p cairn_persist::Persistence,
    watch: &mut SafeWatch<'p>,
    waker: &Waker,
    mut woken: bool,
) {
    woken |= MARK_WOKEN_HERE.with(|w| w.take());
    SAFE_WAITS.with(|w| {
        let mut w = w.borrow_mut();
        let Some(w) = w.as_mut() else { return };
        loop {
            let safe = p.safe_lsn();
            while w
                .waiting
                .front()
                .is_some_and(|(lsn, _)| *lsn <= safe || w.stopped)
            {
                if let Some((_, task)) = w.waiting.pop_front() {
                    // Its own thread's task: a push onto the ready list.
                    task.wake();
                }
            }
            let Some(oldest) = w.waiting.front().map(|(lsn, _)| *lsn) else {
                *watch = None;
                return;
            };
            if !matches!(watch, Some((l, _)) if *l == oldest) {
                *watch = Some((oldest, Box::pin(p.safe_reach(oldest))));
            } else if !std::mem::take(&mut woken) {
                return;
            }
            let Some((_, reach)) = watch.as_mut() else {
                return;
            };
            match reach.as_mut().poll(&mut Context::from_waker(waker)) {
                Poll::Pending => return,
                // The mark moved (or the log stopped) since it was read: settle again.
                Poll::Ready(r) => {
                    *watch = None;
                    if r.is_err() {
                        w.stopped = true;
                    }
                }
            }
        }
    })
}

/// The tasks woken on this thread, polled in the next turn.
#[derive(Default)]
struct Ready {
    /// The thread's `Shared`, by address (0 on threads that are not connection threads).
    owner: usize,
    ids: Vec<usize>,
}

/// A ring operation's slot, by `user_data`.
enum Slot {
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
struct Arrivals {
    waker: Option<Waker>,
    bytes: Vec<u8>,
    /// The kernel ended the receive (no more completions will come): with `Ok(0)` at end of
    /// stream, an error, or `Ok(1)` when it only has to be submitted again (the provided
    /// buffers ran out, or it was cancelled because `bytes` reached [`ARRIVALS_MAX`]).
    ended: Option<io::Result<usize>>,
    /// A cancellation was asked for (too much unread input).
    cancelling: bool,
    /// The socket was dropped: the slot is freed when the receive ends.
    orphan: bool,
}

/// Unread input a connection's multishot receive may hold before it is cancelled, so that a
/// client whose requests are not being read (its replies are not read either) is held back by
/// TCP, as with a single-shot receive, instead of filling the server's memory. Submitted again
/// once the connection has read what arrived.
const ARRIVALS_MAX: usize = 256 << 10;

/// Provided buffers per thread and their size: multishot receives copy each completion's
/// bytes out at once and give the buffer back, so a turn needs about one per connection that
/// received; when they run out, a receive ends with ENOBUFS and is submitted again.
const RECV_BUFS: u16 = 256;
const RECV_BUF_SIZE: usize = 2048;
/// The buffer group id of the thread's provided buffers.
const RECV_GROUP: u16 = 0;

/// A thread's ring of provided buffers (`IORING_REGISTER_PBUF_RING`) for multishot receives.
struct BufRing {
    /// The ring's entries, page-aligned as the kernel requires; never freed (see `run`).
    entries: *mut types::BufRingEntry,
    /// The buffers, `RECV_BUF_SIZE` each.
    memory: Box<[u8]>,
    tail: u16,
}

impl BufRing {
    /// Registers the ring with `ring`; an error where the kernel has no buffer rings (< 5.19).
    fn register(ring: &IoUring) -> io::Result<BufRing> {
        let layout = std::alloc::Layout::from_size_align(
            RECV_BUFS as usize * std::mem::size_of::<types::BufRingEntry>(),
            4096,
        )
        .map_err(io::Error::other)?;
        // SAFETY: the layout has a non-zero size.
        let entries = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<types::BufRingEntry>();
        if entries.is_null() {
            return Err(io::ErrorKind::OutOfMemory.into());
        }
        let mut bufs = BufRing {
            entries,
            memory: vec![0u8; RECV_BUFS as usize * RECV_BUF_SIZE].into_boxed_slice(),
            tail: 0,
        };
        // SAFETY: the entries and the buffers are leaked with the ring (never freed under it).
        unsafe {
            ring.submitter().register_buf_ring_with_flags(
                entries as u64,
                RECV_BUFS,
                RECV_GROUP,
                0,
            )?
        };
        for bid in 0..RECV_BUFS {
            bufs.give_back(bid);
        }
        Ok(bufs)
    }

    /// The bytes the kernel put in buffer `bid`.
    fn data(&self, bid: u16, len: usize) -> &[u8] {
        let start = bid as usize * RECV_BUF_SIZE;
        &self.memory[start..start + len.min(RECV_BUF_SIZE)]
    }

    /// Returns buffer `bid` to the kernel.
    fn give_back(&mut self, bid: u16) {
        let mask = RECV_BUFS - 1;
        // SAFETY: the index is within the ring; the kernel reads entries only up to the tail,
        // which is published after the entry is written.
        unsafe {
            let entry = &mut *self.entries.add((self.tail & mask) as usize);
            entry.set_addr(self.memory.as_ptr().add(bid as usize * RECV_BUF_SIZE) as u64);
            entry.set_len(RECV_BUF_SIZE as u32);
            entry.set_bid(bid);
            self.tail = self.tail.wrapping_add(1);
            let tail = types::BufRingEntry::tail(self.entries).cast_mut();
            std::sync::atomic::AtomicU16::from_ptr(tail).store(self.tail, Ordering::Release);
        }
    }
}

/// This thread's ring and op slots.
struct Driver {
    ring: IoUring,
    slots: Vec<Slot>,
    free: Vec<usize>,
    /// Provided buffers for multishot receives; `None` where the kernel has none (a
    /// single-shot receive per read then).
    bufs: Option<BufRing>,
    /// Free slots of the ring's registered file table (`None`: no table, sockets are used
    /// by descriptor).
    fixed: Option<Vec<u32>>,
}

thread_local! {
    static READY: RefCell<Ready> = RefCell::new(Ready::default());
    static DRIVER: RefCell<Option<Driver>> = const { RefCell::new(None) };
    /// Set on connection threads with persistence.
    static SAFE_WAITS: RefCell<Option<SafeWaits>> = const { RefCell::new(None) };
    /// The thread's [`MarkWaker`] was woken on the thread itself.
    static MARK_WOKEN_HERE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// When the thread's current turn began polling its tasks (see [`turn_started`]).
    static TURN_STARTED: std::cell::Cell<Option<Instant>> = const { std::cell::Cell::new(None) };
}

/// On a connection thread of this engine, when its current turn began polling the tasks that
/// the turn's completions woke, so after their input had arrived: a connection starts its
/// requests' latencies from it instead of reading the clock once more for each batch (one
/// clock read a turn, not one a connection;
/// docs/decisions/0007-no-allocation-and-one-clock-read-a-request.md). `None` on other threads.
pub(crate) fn turn_started() -> Option<Instant> {
    TURN_STARTED.with(std::cell::Cell::get)
}

impl Driver {
    /// Queues an entry, submitting the queue first if it is full.
    fn push(&mut self, entry: &squeue::Entry) -> io::Result<()> {
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
    fn register_fixed(&mut self, fd: i32) -> Option<u32> {
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
    fn release_fixed(&mut self, slot: u32) {
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
    fn slot(&mut self) -> usize {
        self.free.pop().unwrap_or_else(|| {
            self.slots.push(Slot::Free);
            self.slots.len() - 1
        })
    }

    /// Handles one completion; returns the waker of the task it is for, if any.
    fn complete(&mut self, id: usize, res: i32, flags: u32) -> Option<Waker> {
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

/// One submitted operation; resolves to the kernel's result and the buffer back.
struct Op {
    id: usize,
    done: bool,
    /// Tied to the thread whose ring holds it.
    _local: std::marker::PhantomData<*const ()>,
}

impl Op {
    /// Submits `entry` (which points into `buf`'s heap memory) with `buf` kept in its slot.
    fn submit(buf: Vec<u8>, entry: squeue::Entry) -> io::Result<Op> {
        DRIVER.with(|d| {
            let mut d = d.borrow_mut();
            let d = d
                .as_mut()
                .ok_or_else(|| io::Error::other("not an io_uring connection thread"))?;
            let id = d.slot();
            d.slots[id] = Slot::Waiting { waker: None, buf };
            if let Err(e) = d.push(&entry.user_data(id as u64)) {
                d.slots[id] = Slot::Free;
                d.free.push(id);
                return Err(e);
            }
            Ok(Op {
                id,
                done: false,
                _local: std::marker::PhantomData,
            })
        })
    }
}

impl Op {
    /// The op `id` of this thread's ring, submitted earlier and not yet polled to the end.
    fn resume(id: usize) -> Op {
        Op {
            id,
            done: false,
            _local: std::marker::PhantomData,
        }
    }
}

/// This thread's ring, lent to the flash tier for its device reads (an op like a receive's).
struct FlashReads;

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

impl Future for Op {
    type Output = (i32, Vec<u8>);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let id = self.id;
        let out = DRIVER.with(|d| {
            let mut d = d.borrow_mut();
            let d = d.as_mut().expect("io_uring op polled off its thread");
            match std::mem::replace(&mut d.slots[id], Slot::Free) {
                Slot::Done { result, buf } => {
                    d.free.push(id);
                    Some((result, buf))
                }
                Slot::Waiting { buf, .. } => {
                    d.slots[id] = Slot::Waiting {
                        waker: Some(cx.waker().clone()),
                        buf,
                    };
                    None
                }
                other => {
                    d.slots[id] = other;
                    None
                }
            }
        });
        match out {
            Some(out) => {
                self.done = true;
                Poll::Ready(out)
            }
            None => Poll::Pending,
        }
    }
}

impl Drop for Op {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let id = self.id;
        DRIVER.with(|d| {
            let Ok(mut d) = d.try_borrow_mut() else {
                return;
            };
            let Some(d) = d.as_mut() else {
                return;
            };
            match std::mem::replace(&mut d.slots[id], Slot::Free) {
                Slot::Waiting { buf, .. } => {
                    d.slots[id] = Slot::Orphan { _buf: buf };
                    let cancel = opcode::AsyncCancel::new(id as u64)
                        .build()
                        .user_data(CANCEL);
                    let _ = d.push(&cancel);
                }
                Slot::Done { .. } => d.free.push(id),
                other => d.slots[id] = other,
            }
        });
    }
}

/// A client's TCP socket on a connection thread of the io_uring engine.
///
/// A send is submitted and not waited for: the connection goes on to its next receive, so
/// that both enter the ring in the same turn and a request costs one turn, not two (one to
/// send, one more to see the send done and submit the receive). The next send, or the end of
/// the connection ([`Transport::finish`]), waits for the one in flight first, so replies
/// leave in order and whole.
pub struct Socket {
    tcp: std::net::TcpStream,
    /// The last send and its length, until it is seen done.
    in_flight: Option<(Op, usize)>,
    /// The connection's next output buffer while the last one is being sent.
    spare: Vec<u8>,
    /// The slot of its multishot receive, from the first read until the receive ends.
    recv: Option<usize>,
    /// Its slot in the ring's registered file table, if it has one.
    fixed: Option<u32>,
}

/// Builds an op on a socket: by its fixed file slot if it has one, else by descriptor.
macro_rules! on_socket {
    ($socket:expr, |$target:ident| $build:expr) => {
        match $socket.fixed {
            Some(slot) => {
                let $target = types::Fixed(slot);
                $build
            }
            None => {
                let $target = types::Fd($socket.fd);
                $build
            }
        }
    };
}

/// What names a socket in an op: its fixed file slot, or its descriptor.
#[derive(Clone, Copy)]
struct Target {
    fixed: Option<u32>,
    fd: i32,
}

impl Socket {
    /// Takes an accepted socket (made blocking: the ring never blocks the thread on it, and
    /// the kernel then waits for readiness itself instead of answering EAGAIN).
    pub fn new(tcp: std::net::TcpStream) -> io::Result<Socket> {
        tcp.set_nonblocking(false)?;
        tcp.set_nodelay(true)?;
        let fd = tcp.as_raw_fd();
        let fixed = DRIVER.with(|d| {
            d.try_borrow_mut()
                .ok()?
                .as_mut()
                .and_then(|d| d.register_fixed(fd))
        });
        Ok(Socket {
            tcp,
            in_flight: None,
            spare: Vec::new(),
            recv: None,
            fixed,
        })
    }

    fn target(&self) -> Target {
        Target {
            fixed: self.fixed,
            fd: self.tcp.as_raw_fd(),
        }
    }

    /// Submits a send of `buf[sent..]`. MSG_WAITALL: the kernel itself sends the rest of a
    /// short write before it completes the op.
    fn submit_send(&self, buf: Vec<u8>, sent: usize) -> io::Result<Op> {
        let rest = &buf[sent..];
        let entry = on_socket!(self.target(), |target| opcode::Send::new(
            target,
            rest.as_ptr(),
            rest.len() as u32
        )
        .flags(libc::MSG_NOSIGNAL | libc::MSG_WAITALL)
        .build());
        Op::submit(buf, entry)
    }

    /// Waits for the send in flight, if any, to be done whole; its buffer becomes the spare.
    async fn settle(&mut self) -> io::Result<()> {
        let Some((mut op, len)) = self.in_flight.take() else {
            return Ok(());
        };
        let mut sent = 0;
        loop {
            let (res, buf) = op.await;
            match result(res) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => sent += n,
                Err(e) => return Err(e),
            }
            if sent >= len {
                self.spare = buf;
                self.spare.clear();
                return Ok(());
            }
            op = self.submit_send(buf, sent)?;
        }
    }
}

impl Socket {
    /// The multishot read: moves what arrived into `buf`, or submits the receive (the first
    /// time, or after the kernel ended it), or waits.
    fn poll_arrivals(
        &mut self,
        buf: &mut Vec<u8>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<usize>> {
        let socket = self.target();
        with_driver(|d| loop {
            let Some(id) = self.recv else {
                let id = d.slot();
                d.slots[id] = Slot::Recv(Box::default());
                let entry = on_socket!(socket, |target| opcode::RecvMulti::new(target, RECV_GROUP)
                    .build());
                if let Err(e) = d.push(&entry.user_data(id as u64)) {
                    d.slots[id] = Slot::Free;
                    d.free.push(id);
                    return Poll::Ready(Err(e));
                }
                self.recv = Some(id);
                continue;
            };
            let Slot::Recv(a) = &mut d.slots[id] else {
                return Poll::Ready(Err(io::Error::other("io_uring receive slot lost")));
            };
            if !a.bytes.is_empty() {
                let n = a.bytes.len();
                if buf.is_empty() {
                    // The usual case, nothing left over from the last batch: what arrived
                    // becomes the input, and the input's empty buffer takes its place, with
                    // no copy (both settle at the connection's input size).
                    std::mem::swap(buf, &mut a.bytes);
                } else {
                    buf.extend_from_slice(&a.bytes);
                    a.bytes.clear();
                }
                return Poll::Ready(Ok(n));
            }
            match a.ended.take() {
                None => {
                    if !a.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                        a.waker = Some(cx.waker().clone());
                    }
                    return Poll::Pending;
                }
                Some(ended) => {
                    d.slots[id] = Slot::Free;
                    d.free.push(id);
                    self.recv = None;
                    match ended {
                        Ok(1) => continue,
                        other => return Poll::Ready(other),
                    }
                }
            }
        })
    }
}

impl Drop for Socket {
    /// A multishot receive still submitted is cancelled; its slot goes when the kernel ends it.
    /// The socket's fixed file slot is emptied after that (the socket closes then).
    fn drop(&mut self) {
        DRIVER.with(|d| {
            let Ok(mut d) = d.try_borrow_mut() else {
                return;
            };
            let Some(d) = d.as_mut() else {
                return;
            };
            if let Some(id) = self.recv {
                let ended = match &mut d.slots[id] {
                    Slot::Recv(a) => {
                        a.orphan = true;
                        a.waker = None;
                        Some(a.ended.is_some())
                    }
                    _ => None,
                };
                match ended {
                    Some(true) => {
                        d.slots[id] = Slot::Free;
                        d.free.push(id);
                    }
                    Some(false) => {
                        let cancel = opcode::AsyncCancel::new(id as u64)
                            .build()
                            .user_data(CANCEL);
                        let _ = d.push(&cancel);
                    }
                    None => {}
                }
            }
            if let Some(slot) = self.fixed {
                d.release_fixed(slot);
            }
        });
    }
}

/// A completion's result as io::Result.
fn result(res: i32) -> io::Result<usize> {
    if res < 0 {
        Err(io::Error::from_raw_os_error(-res))
    } else {
        Ok(res as usize)
    }
}

impl Transport for Socket {
    fn register<'r>(&self, conns: &'r Registry, now: u32) -> Option<Handle<'r>> {
        conns.open_std(&self.tcp, now)
    }

    async fn read_buf(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        if with_driver(|d| d.bufs.is_some()) {
            return std::future::poll_fn(|cx| self.poll_arrivals(buf, cx)).await;
        }
        let mut owned = std::mem::take(buf);
        if owned.capacity() == owned.len() {
            owned.reserve(4096);
        }
        let spare = owned.spare_capacity_mut();
        let entry = on_socket!(self.target(), |target| opcode::Recv::new(
            target,
            spare.as_mut_ptr().cast(),
            spare.len() as u32
        )
        .build());
        let (res, mut owned) = Op::submit(owned, entry)?.await;
        let n = result(res);
        if let Ok(n) = n {
            // SAFETY: the kernel wrote n bytes into the spare capacity.
            unsafe { owned.set_len(owned.len() + n) };
        }
        *buf = owned;
        n
    }

    async fn send(&mut self, buf: &mut Vec<u8>) -> io::Result<()> {
        self.settle().await?;
        if buf.is_empty() {
            return Ok(());
        }
        let owned = std::mem::replace(buf, std::mem::take(&mut self.spare));
        let len = owned.len();
        self.in_flight = Some((self.submit_send(owned, 0)?, len));
        Ok(())
    }

    async fn finish(&mut self) -> io::Result<()> {
        self.settle().await
    }
}

/// A connection's task on its thread.
struct Task {
    future: Pin<Box<dyn Future<Output = ()>>>,
    waker: Waker,
    /// The last turn it was polled in (a task woken twice is polled once per turn).
    turn: u64,
}

/// Whether a turn may end with a yield (see `run`): only while yields come back quickly. A
/// yield that took over a millisecond handed the core to something that ran a whole time
/// slice (a busy neighbour, not a client that answers and blocks within microseconds); when
/// more than [`YieldGate::SLOW_MAX`] of a window of [`YieldGate::WINDOW`] yields did, yielding
/// stops for a while: 100 ms, doubling up to 6.4 s while the window after each pause is slow
/// again. The pause shrinks back only after [`YieldGate::FAST_TO_FORGET`] fast windows in a
/// row: right after a pause the yields were cheap for a while even beside busy neighbours (as
/// we read it, the scheduler's penalty for yielding had been paid back by then), so one fast
/// window is no evidence that the neighbours have gone: a first gate that forgot its pause
/// after one still lost a fifth of the requests beside rpc-perf. The kernel's scheduler (EEVDF) moves a yielding
/// thread's deadline back a time slice per yield, so beside busy processes a thread that
/// yields every turn loses its share of the core; beside clients that block, the yield costs
/// nothing and lets them run at once. Time is passed in, so the logic is tested without a
/// clock.
#[derive(Default)]
struct YieldGate {
    /// Yields in the current window, and how many of them were slow.
    yields: u32,
    slow: u32,
    /// While set: no yield before this instant.
    closed_until: Option<std::time::Instant>,
    /// The last pause's length (0: none since the last run of fast windows).
    backoff_ms: u64,
    /// Fast windows in a row since the last slow one.
    fast_windows: u32,
}

impl YieldGate {
    const WINDOW: u32 = 16;
    /// Beside cairn-bench at 2x200 slow yields are few and come in clusters (121 over 1 ms
    /// in one 8 s run); a bound of 2 paused the yield for 7-23% of the threads' time there,
    /// a bound of 4 cost 0.94x the CPU a request. Beside rpc-perf 44% were slow: a window
    /// passes 4 about 10% of the time (docs/decisions/0006-a-gated-yield-after-each-turn.md).
    const SLOW_MAX: u32 = 4;
    const SLOW: std::time::Duration = std::time::Duration::from_millis(1);
    const FIRST_PAUSE_MS: u64 = 100;
    const LONGEST_PAUSE_MS: u64 = 6_400;
    const FAST_TO_FORGET: u32 = 8;

    /// May this turn yield? `now` is called only while yielding is paused.
    fn open(&mut self, now: impl FnOnce() -> std::time::Instant) -> bool {
        match self.closed_until {
            None => true,
            Some(t) if now() < t => false,
            Some(_) => {
                self.closed_until = None;
                true
            }
        }
    }

    /// Records a yield that took `took`; at the end of a window, pauses yielding from `now`
    /// if too many of its yields were slow.
    fn yielded(&mut self, took: std::time::Duration, now: std::time::Instant) {
        self.yields += 1;
        if took > Self::SLOW {
            self.slow += 1;
        }
        if self.yields < Self::WINDOW {
            return;
        }
        if self.slow > Self::SLOW_MAX {
            self.backoff_ms =
                (self.backoff_ms * 2).clamp(Self::FIRST_PAUSE_MS, Self::LONGEST_PAUSE_MS);
            self.closed_until = Some(now + std::time::Duration::from_millis(self.backoff_ms));
            self.fast_windows = 0;
        } else {
            self.fast_windows += 1;
            if self.fast_windows >= Self::FAST_TO_FORGET {
                self.backoff_ms = 0;
            }
        }
        self.yields = 0;
        self.slow = 0;
    }
}

/// One connection thread's loop (see the module doc).
fn run(
    shared: Arc<Shared>,
    ring: IoUring,
    multishot: bool,
    persist: Option<Arc<cairn_persist::Persistence>>,
) -> io::Result<()> {
    READY.with(|r| r.borrow_mut().owner = Arc::as_ptr(&shared) as usize);
    // Multishot receives on a kernel that has them (see `new_ring`) and lets the buffer
    // ring be registered; single-shot receives otherwise.
    let bufs = if !multishot || std::env::var_os(SINGLE_SHOT_FOR_TESTS).is_some() {
        None
    } else {
        BufRing::register(&ring).ok()
    };
    // A sparse table of registered files for the thread's sockets (kernels from 5.19), as
    // large as the descriptor limit allows.
    let fixed_files = fixed_file_slots();
    let fixed = (fixed_files > 0 && ring.submitter().register_files_sparse(fixed_files).is_ok())
        .then(|| (0..fixed_files).rev().collect());
    DRIVER.with(|d| {
        *d.borrow_mut() = Some(Driver {
            ring,
            slots: Vec::new(),
            free: Vec::new(),
            bufs,
            fixed,
        })
    });
    // The eventfd read, always pending: another thread's wake completes it. Its 8 bytes
    // are leaked: the kernel may still write them while the ring is torn down.
    let counter: &'static mut u64 = Box::leak(Box::new(0u64));
    let eventfd_read = opcode::Read::new(
        types::Fd(shared.eventfd.as_raw_fd()),
        (counter as *mut u64).cast(),
        8,
    )
    .build()
    .user_data(EVENTFD);
    with_driver(|d| d.push(&eventfd_read))?;
    cairn_flash::lend_thread_ring(Box::new(FlashReads));
    // The requests' waits for the log's safe mark, and the one registration they share.
    if persist.is_some() {
        SAFE_WAITS.with(|w| *w.borrow_mut() = Some(SafeWaits::default()));
    }
    let mark_waker = Waker::from(Arc::new(MarkWaker(Arc::clone(&shared))));
    let mut watch: SafeWatch<'_> = None;
    let mut tasks: Vec<Option<Task>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut this_turn: Vec<usize> = Vec::new();
    let mut completions: Vec<(u64, i32, u32)> = Vec::new();
    // The tasks a turn's completions wake; kept with its room (one allocation a turn
    // otherwise: about 1% of a SYNC set's server CPU, docs/decisions/0013-the-waiter-registry.md).
    let mut wakers: Vec<Waker> = Vec::new();
    let mut turn = 0u64;
    let mut gate = std::env::var_os(NO_TURN_YIELD_FOR_AB)
        .is_none()
        .then(YieldGate::default);
    let result = loop {
        turn += 1;
        TURN_STARTED.with(|t| t.set(Some(Instant::now())));
        let (jobs, mark_moved, stop) = {
            let mut inbox = shared.inbox.lock();
            this_turn.append(&mut inbox.woken);
            let moved = std::mem::take(&mut inbox.mark_moved);
            (std::mem::take(&mut inbox.jobs), moved, inbox.stop)
        };
        if stop {
            break Ok(());
        }
        if let Some(p) = &persist {
            settle_safe_waits(p, &mut watch, &mark_waker, mark_moved);
        }
        for job in jobs {
            let id = free.pop().unwrap_or_else(|| {
                tasks.push(None);
                tasks.len() - 1
            });
            let waker = Waker::from(Arc::new(TaskWaker {
                id,
                shared: Arc::clone(&shared),
            }));
            tasks[id] = Some(Task {
                future: job(),
                waker,
                turn: 0,
            });
            this_turn.push(id);
        }
        READY.with(|r| this_turn.append(&mut r.borrow_mut().ids));
        // Two passes at most: the woken tasks, then (async mode) the ones this turn's log
        // write acknowledged, so that their replies enter the ring in this same turn instead
        // of costing another `io_uring_enter`.
        let mut polled = 0usize;
        for pass in 0..2 {
            for id in this_turn.drain(..) {
                let Some(Some(task)) = tasks.get_mut(id) else {
                    continue;
                };
                if task.turn == turn {
                    continue;
                }
                task.turn = turn;
                polled += 1;
                let mut cx = Context::from_waker(&task.waker);
                if task.future.as_mut().poll(&mut cx).is_ready() {
                    // Dropped here, outside any borrow of the driver: its ops are cancelled.
                    tasks[id] = None;
                    free.push(id);
                }
            }
            // The log records the requests appended go to the kernel now (async mode; a
            // no-op otherwise); the requests waiting for them are woken locally. After the
            // last pass too: a thread never sleeps on records it appended.
            let Some(p) = &persist else { break };
            p.write_ready();
            settle_safe_waits(p, &mut watch, &mark_waker, false);
            if pass == 1 {
                break;
            }
            READY.with(|r| this_turn.append(&mut r.borrow_mut().ids));
            if this_turn.is_empty() {
                break;
            }
            turn += 1;
        }
        // A turn that answered connections sends its replies now and yields the core once
        // before it reaps the next completions, so that the clients its replies woke run and
        // the next turn finds more requests: beside the suite's load generator that took
        // p99 (and mostly CPU per op) down. But the kernel's scheduler (EEVDF) moves a
        // yielding thread's deadline back by a time slice at each yield, so beside processes
        // that are often runnable (rpc-perf's threads) a yield every turn lost the server
        // most of its share of the core (19K instead of 49K of 60K requests/s offered). So
        // the yield is gated: only while yields come back quickly (`YieldGate`;
        // docs/decisions/0006-a-gated-yield-after-each-turn.md).
        let yield_now = polled > 0
            && gate
                .as_mut()
                .is_some_and(|g| g.open(std::time::Instant::now));
        if yield_now {
            let queued = with_driver(|d| !d.ring.submission().is_empty());
            if queued {
                match with_driver(|d| d.ring.submit()) {
                    Ok(_) => {}
                    Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                    Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {}
                    Err(e) => break Err(e),
                }
            }
            let t0 = std::time::Instant::now();
            // SAFETY: takes no arguments and touches no memory of ours.
            unsafe { libc::sched_yield() };
            if let Some(g) = gate.as_mut() {
                let t1 = std::time::Instant::now();
                g.yielded(t1 - t0, t1);
            }
        }
        let more = READY.with(|r| !r.borrow().ids.is_empty());
        let entered = if more {
            with_driver(|d| d.ring.submit())
        } else {
            shared.sleeping.store(true, SeqCst);
            let pending = {
                let inbox = shared.inbox.lock();
                !inbox.woken.is_empty() || !inbox.jobs.is_empty() || inbox.mark_moved || inbox.stop
            };
            let r = if pending {
                with_driver(|d| d.ring.submit())
            } else {
                with_driver(|d| d.ring.submit_and_wait(1))
            };
            shared.sleeping.store(false, SeqCst);
            r
        };
        match entered {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {}
            Err(e) => break Err(e),
        }
        // Reap, then wake outside the driver's borrow.
        let rearm = with_driver(|d| {
            completions.extend(
                d.ring
                    .completion()
                    .map(|c| (c.user_data(), c.result(), c.flags())),
            );
            let mut rearm = false;
            for (data, res, flags) in completions.drain(..) {
                match data {
                    EVENTFD => rearm = true,
                    CANCEL => {}
                    r if r & RELEASE != 0 => {
                        // Emptied (or already empty): the slot can take another socket.
                        if let Some(free) = d.fixed.as_mut() {
                            free.push((r & !RELEASE) as u32);
                        }
                    }
                    id => wakers.extend(d.complete(id as usize, res, flags)),
                }
            }
            rearm
        });
        for w in wakers.drain(..) {
            w.wake();
        }
        if rearm {
            with_driver(|d| d.push(&eventfd_read))?;
        }
    };
    // Tasks left (none after a graceful stop) are dropped with their ops cancelled; the ring
    // goes with the thread, and the kernel cancels whatever is still in flight. Buffers of
    // ops not reported done yet are leaked rather than freed under the kernel.
    drop(tasks);
    if let Some(d) = DRIVER.with(|d| d.borrow_mut().take()) {
        drop(d.ring);
        std::mem::forget(d.slots);
        std::mem::forget(d.bufs);
    }
    result
}

/// How many registered file slots a ring gets: the descriptor limit bounds the table.
fn fixed_file_slots() -> u32 {
    if std::env::var_os(NO_FIXED_FILES_FOR_AB).is_some() {
        return 0;
    }
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into a live struct of ours.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 0;
    }
    let cap = std::env::var(FIXED_FILES_FOR_TESTS)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(FIXED_FILES_MAX);
    limit.rlim_cur.min(FIXED_FILES_MAX).min(cap) as u32
}

fn with_driver<R>(f: impl FnOnce(&mut Driver) -> R) -> R {
    DRIVER.with(|d| f(d.borrow_mut().as_mut().expect("connection thread's ring")))
}

#[cfg(test)]
mod tests {
    use super::YieldGate;
    use std::time::{Duration, Instant};

    const FAST: Duration = Duration::from_micros(20);
    const SLOW: Duration = Duration::from_millis(3);

    /// Records a window of yields, `slow` of them slow, ending at `at`.
    fn window(g: &mut YieldGate, slow: u32, at: Instant) {
        for i in 0..YieldGate::WINDOW {
            g.yielded(if i < slow { SLOW } else { FAST }, at);
        }
    }

    fn never() -> Instant {
        panic!("the clock is read only while yielding is paused")
    }

    #[test]
    fn yield_gate_pauses_after_slow_windows_and_backs_off() {
        let t = Instant::now();
        let ms = Duration::from_millis;
        let mut g = YieldGate::default();
        assert!(g.open(never));
        // Four slow yields of a window are tolerated, and a window not yet full decides
        // nothing.
        window(&mut g, 4, t);
        assert!(g.open(never));
        for _ in 0..YieldGate::WINDOW - 1 {
            g.yielded(SLOW, t);
        }
        assert!(g.open(never));
        g.yielded(SLOW, t);
        // Five or more: paused for 100 ms from the window's end.
        assert!(!g.open(|| t + ms(99)));
        assert!(g.open(|| t + ms(100)));
        assert!(g.open(never), "reopened: the clock is not read again");
        // Slow again after each pause: 200, 400, ... up to 6.4 s.
        let mut at = t + ms(100);
        for pause in [200, 400, 800, 1600, 3200, 6400, 6400] {
            window(&mut g, 5, at);
            assert!(!g.open(|| at + ms(pause - 1)), "pause {pause} ms");
            assert!(g.open(|| at + ms(pause)), "pause {pause} ms");
            at += ms(pause);
        }
        // One fast window is not enough to forget the back-off (right after a pause, yields
        // are cheap even beside busy neighbours): the next slow window pauses 6.4 s again.
        window(&mut g, 0, at);
        assert!(g.open(never));
        window(&mut g, YieldGate::WINDOW, at);
        assert!(!g.open(|| at + ms(6399)));
        assert!(g.open(|| at + ms(6400)));
        at += ms(6400);
        // Eight fast windows in a row are: the next slow one pauses 100 ms.
        for _ in 0..YieldGate::FAST_TO_FORGET {
            window(&mut g, 0, at);
            assert!(g.open(never));
        }
        window(&mut g, YieldGate::WINDOW, at);
        assert!(!g.open(|| at + ms(99)));
        assert!(g.open(|| at + ms(100)));
    }
}
