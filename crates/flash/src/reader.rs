//! Device reads for flash hits, awaited by connections without blocking a tokio worker.
//!
//! ```text
//!   on a thread whose connection engine lends its own ring ([`ThreadRing`]: the server's
//!   io_uring engine): the Read SQE joins the thread's socket ops in its next io_uring_enter,
//!   and the engine wakes the connection's task on the completion, as for a receive
//!
//!   on a current-thread runtime (the tokio engine's connection workers), no other thread:
//!   connection task ── Read SQE + io_uring_enter ──> the worker thread's own ring
//!        ^                                                │ completion signals an eventfd
//!        └── reaps the completion itself <── the runtime's reactor sees the eventfd readable
//!
//!   elsewhere (a multi-thread runtime, where a task may move between threads):
//!   connection task ──Req{offset, buf, oneshot}──> channel ──(eventfd wakes the ring)──┐
//!        ^                                                                            v
//!        └──────────── oneshot (buf, result) <── completion ── io_uring thread: one Read
//!                                                                SQE per request, O_DIRECT
//!   fallback (no io_uring, or a device without an fd): a few threads doing pread
//! ```
//!
//! The caller bounds the reads in flight (a semaphore in `Flash`), so neither path queues
//! without limit.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{channel, Receiver, Sender, TryRecvError};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::thread::JoinHandle;

use io_uring::{opcode, squeue, types, IoUring};
use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::device::{AlignedBuf, Device};

/// One read: fill `buf` from `offset`, answer on `done`.
struct Req {
    offset: u64,
    buf: AlignedBuf,
    done: oneshot::Sender<(AlignedBuf, io::Result<()>)>,
}

/// Which engine serves reads.
pub enum Reader {
    Uring(UringReader),
    Pool(PoolReader),
}

impl Reader {
    /// io_uring on `device`'s descriptor if `try_uring` and it works here, else a pread pool.
    /// Returns the reader and, when io_uring was wanted but is unavailable, why.
    pub fn start(device: Arc<dyn Device>, try_uring: bool) -> (Reader, Option<String>) {
        let mut why = None;
        if try_uring {
            match device.fd() {
                Some(fd) => match UringReader::start(fd) {
                    Ok(r) => return (Reader::Uring(r), None),
                    Err(e) => why = Some(format!("io_uring unavailable: {e}")),
                },
                None => why = Some("the device has no descriptor for io_uring".into()),
            }
        }
        (Reader::Pool(PoolReader::start(device, POOL_THREADS)), why)
    }

    /// "io_uring" or "pread".
    pub fn engine(&self) -> &'static str {
        match self {
            Reader::Uring(_) => "io_uring",
            Reader::Pool(_) => "pread",
        }
    }

    /// Reads `len` bytes (whole blocks) at `offset`; counts in `own_ring` the reads that went
    /// through the calling thread's own ring (lent by its engine, or its runtime's).
    pub async fn read(&self, offset: u64, len: usize, own_ring: &AtomicU64) -> io::Result<ReadBuf> {
        if let Reader::Uring(r) = self {
            if r.per_worker {
                if let Some(read) = LentRead::submit(r.fd, offset, len) {
                    own_ring.fetch_add(1, Relaxed);
                    return read?.await;
                }
            }
        }
        let mut buf = AlignedBuf::new(len);
        if let Reader::Uring(r) = self {
            if r.per_worker {
                if let Some(ring) = LocalRing::current() {
                    match ring.submit(r.fd, offset, buf) {
                        Ok(id) => {
                            own_ring.fetch_add(1, Relaxed);
                            let (buf, result) = ring.wait(id).await;
                            return completed(buf, result).map(ReadBuf::Aligned);
                        }
                        // The ring is full: the shared one takes it.
                        Err(b) => buf = b,
                    }
                }
            }
        }
        let (done, rx) = oneshot::channel();
        let req = Req { offset, buf, done };
        match self {
            Reader::Uring(r) => r.submit(req)?,
            Reader::Pool(p) => p.submit(req)?,
        }
        let (buf, result) = rx
            .await
            .map_err(|_| io::Error::other("flash reader stopped"))?;
        result.map(|()| ReadBuf::Aligned(buf))
    }
}

/// The bytes of one read.
pub enum ReadBuf {
    Aligned(AlignedBuf),
    /// Read through a lent ring, into `len` bytes at `start` of `vec` (a block boundary).
    InVec {
        vec: Vec<u8>,
        start: usize,
        len: usize,
    },
}

impl std::ops::Deref for ReadBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            ReadBuf::Aligned(b) => b,
            ReadBuf::InVec { vec, start, len } => &vec[*start..*start + *len],
        }
    }
}

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
struct LentRead {
    id: usize,
    token: u64,
    start: usize,
    len: usize,
    done: bool,
}

impl LentRead {
    /// Submits a read of `len` bytes of `fd` at `offset` to the thread's lent ring; None if
    /// the thread has none.
    fn submit(fd: RawFd, offset: u64, len: usize) -> Option<io::Result<LentRead>> {
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

/// Threads of the pread fallback.
const POOL_THREADS: usize = 4;
/// Submission queue entries of the ring.
const RING_ENTRIES: u32 = 256;
/// user_data of the eventfd read that wakes the ring thread for new requests.
const WAKE: u64 = u64::MAX;

/// Set to 1, reads go through the one shared ring thread even from current-thread runtimes
/// (the design before rings per worker; kept for A/B benchmarks).
pub const SHARED_RING_ENV: &str = "CAIRN_FLASH_SHARED_RING";

/// A read's result from its completion's `res`.
fn completed(buf: AlignedBuf, result: i32) -> io::Result<AlignedBuf> {
    if result < 0 {
        Err(io::Error::from_raw_os_error(-result))
    } else if result as usize != buf.len() {
        Err(short_read(result, buf.len()))
    } else {
        Ok(buf)
    }
}

/// Whether a read's error is the device's verdict on its blocks (EIO and the like, or a
/// short read), for which the segment is dropped. The others say the read was not done: the
/// reader stopped, a ring was full or busy, the read was cancelled or interrupted, memory ran
/// out. Those leave the data as it was, and the caller answers for this once only.
pub fn is_device_error(e: &io::Error) -> bool {
    match e.raw_os_error() {
        Some(code) => !matches!(
            code,
            libc::ECANCELED
                | libc::EINTR
                | libc::EAGAIN
                | libc::EBUSY
                | libc::ENOMEM
                | libc::EEXIST
        ),
        None => e.kind() == io::ErrorKind::UnexpectedEof,
    }
}

fn short_read(result: i32, len: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("short flash read: {result} of {len} bytes"),
    )
}

/// The io_uring reader: rings of the worker threads, and one thread owning a shared ring
/// for callers on multi-thread runtimes.
pub struct UringReader {
    fd: RawFd,
    /// Whether current-thread runtimes use a ring of their own.
    per_worker: bool,
    tx: Mutex<Option<Sender<Req>>>,
    wake: Arc<OwnedFd>,
    thread: Option<JoinHandle<()>>,
}

impl UringReader {
    fn start(fd: RawFd) -> io::Result<UringReader> {
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
            per_worker: std::env::var(SHARED_RING_ENV).as_deref() != Ok("1"),
            tx: Mutex::new(Some(tx)),
            wake,
            thread: Some(thread),
        })
    }

    fn submit(&self, req: Req) -> io::Result<()> {
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

/// The fallback: a few threads doing blocking preads.
pub struct PoolReader {
    tx: Mutex<Option<Sender<Req>>>,
    threads: Vec<JoinHandle<()>>,
}

impl PoolReader {
    fn start(device: Arc<dyn Device>, threads: usize) -> PoolReader {
        let (tx, rx) = channel::<Req>();
        let rx = Arc::new(Mutex::new(rx));
        let threads = (0..threads)
            .map(|i| {
                let rx = Arc::clone(&rx);
                let device = Arc::clone(&device);
                std::thread::Builder::new()
                    .name(format!("flash-pread-{i}"))
                    .spawn(move || loop {
                        let req = match rx.lock().recv() {
                            Ok(r) => r,
                            Err(_) => return,
                        };
                        let mut buf = req.buf;
                        let r = device.read_at(req.offset, &mut buf);
                        let _ = req.done.send((buf, r));
                    })
                    .expect("spawn a flash read thread")
            })
            .collect();
        PoolReader {
            tx: Mutex::new(Some(tx)),
            threads,
        }
    }

    fn submit(&self, req: Req) -> io::Result<()> {
        let tx = self.tx.lock();
        tx.as_ref()
            .ok_or_else(|| io::Error::other("flash reader stopped"))?
            .send(req)
            .map_err(|_| io::Error::other("flash reader stopped"))
    }
}

impl Drop for PoolReader {
    fn drop(&mut self) {
        self.tx.lock().take();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

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
struct LocalRing {
    state: Mutex<LocalState>,
    /// Signalled by the kernel on each completion (`IORING_REGISTER_EVENTFD`).
    efd: tokio::io::unix::AsyncFd<OwnedFd>,
}

/// Field order matters: the ring waits for reads still in flight (Drop) before the slots
/// holding their buffers go.
struct LocalState {
    ring: IoUring,
    slots: Vec<Slot>,
    free: Vec<usize>,
    in_flight: usize,
    /// The slot whose waiter's task the eventfd's readiness wakes (the last one to register).
    watcher: Option<usize>,
}

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
    fn current() -> Option<Arc<LocalRing>> {
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
    fn submit(&self, fd: RawFd, offset: u64, mut buf: AlignedBuf) -> Result<usize, AlignedBuf> {
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
    async fn wait(&self, id: usize) -> (AlignedBuf, i32) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;

    fn pipe() -> (OwnedFd, OwnedFd) {
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills two fresh descriptors on success.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: both are fresh descriptors we own.
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
    }

    fn write_byte(fd: &OwnedFd) {
        // SAFETY: writes one byte from a live buffer.
        assert_eq!(
            unsafe { libc::write(fd.as_raw_fd(), b"x".as_ptr().cast(), 1) },
            1
        );
    }

    /// A ring lent the way the server's io_uring engine lends its own: ops by id, each
    /// buffer held until the kernel is done with it (busy-polled: a test's executor).
    #[derive(Default)]
    struct TestRing {
        ring: std::cell::RefCell<Option<IoUring>>,
        ops: std::cell::RefCell<Vec<TestOp>>,
        abandoned: Arc<AtomicU64>,
    }

    enum TestOp {
        Waiting(Vec<u8>),
        Done(i32, Vec<u8>),
        Abandoned { _buf: Vec<u8> },
        Free,
    }

    impl TestRing {
        fn reap(&self) {
            let mut ring = self.ring.borrow_mut();
            let ring = ring.get_or_insert_with(|| IoUring::new(8).unwrap());
            let mut ops = self.ops.borrow_mut();
            for c in ring.completion() {
                let op = &mut ops[c.user_data() as usize];
                *op = match std::mem::replace(op, TestOp::Free) {
                    TestOp::Waiting(buf) => TestOp::Done(c.result(), buf),
                    _ => TestOp::Free,
                };
            }
        }
    }

    impl ThreadRing for TestRing {
        fn submit(&self, buf: Vec<u8>, entry: squeue::Entry) -> io::Result<usize> {
            self.reap();
            let mut ops = self.ops.borrow_mut();
            let id = ops.len();
            let mut ring = self.ring.borrow_mut();
            let ring = ring.as_mut().unwrap();
            // SAFETY: `buf` is kept in `ops[id]` until the completion is reaped.
            unsafe { ring.submission().push(&entry.user_data(id as u64)) }.unwrap();
            ops.push(TestOp::Waiting(buf));
            ring.submit()?;
            Ok(id)
        }

        fn poll(&self, id: usize, cx: &mut Context<'_>) -> Poll<(i32, Vec<u8>)> {
            self.reap();
            let mut ops = self.ops.borrow_mut();
            match std::mem::replace(&mut ops[id], TestOp::Free) {
                TestOp::Done(res, buf) => Poll::Ready((res, buf)),
                other => {
                    ops[id] = other;
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
            }
        }

        fn abandon(&self, id: usize) {
            let mut ops = self.ops.borrow_mut();
            if let TestOp::Waiting(buf) = std::mem::replace(&mut ops[id], TestOp::Free) {
                ops[id] = TestOp::Abandoned { _buf: buf };
            }
            self.abandoned.fetch_add(1, Relaxed);
        }
    }

    /// With a ring lent to the thread, a read goes through it (counted as the thread's own)
    /// and yields the bytes at its offset; a read dropped in flight is left to the ring; a
    /// read moved to another thread is refused there, not served by that thread's ring.
    #[test]
    fn reads_go_through_the_ring_the_thread_lent() {
        let block = crate::format::BLOCK;
        let mut file = tempfile::tempfile().unwrap();
        let mut bytes = vec![0xAAu8; block];
        bytes.extend(vec![0xBBu8; block]);
        std::io::Write::write_all(&mut file, &bytes).unwrap();
        let reader = Reader::Uring(UringReader::start(file.as_raw_fd()).unwrap());
        let ring = TestRing::default();
        let abandoned = Arc::clone(&ring.abandoned);
        lend_thread_ring(Box::new(ring));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let own = AtomicU64::new(0);
        let got = rt.block_on(reader.read(block as u64, block, &own)).unwrap();
        assert_eq!(&got[..], &bytes[block..]);
        assert_eq!(own.load(Relaxed), 1, "the read went through the lent ring");
        assert!(matches!(got, ReadBuf::InVec { .. }));

        let (rd, wr) = pipe();
        let mut waiting = Box::pin(LentRead::submit(rd.as_raw_fd(), 0, block).unwrap().unwrap());
        let mut cx = Context::from_waker(Waker::noop());
        assert!(waiting.as_mut().poll(&mut cx).is_pending());
        drop(waiting);
        assert_eq!(
            abandoned.load(Relaxed),
            1,
            "a dropped read is left to the ring"
        );

        let moved = LentRead::submit(rd.as_raw_fd(), 0, block).unwrap().unwrap();
        let polled_elsewhere = std::thread::spawn(move || {
            let mut moved = Box::pin(moved);
            let _ = moved.as_mut().poll(&mut Context::from_waker(Waker::noop()));
        })
        .join();
        assert!(polled_elsewhere.is_err(), "polled off its thread: a panic");
        assert_eq!(
            abandoned.load(Relaxed),
            1,
            "not abandoned to another thread's ring"
        );
        write_byte(&wr);
        write_byte(&wr);
    }

    /// Device errors drop a segment; errors that say the read was not done do not.
    #[test]
    fn only_the_devices_own_errors_count_against_a_segment() {
        for code in [libc::EIO, libc::ENODATA, libc::EBADMSG, libc::ENXIO] {
            assert!(
                is_device_error(&io::Error::from_raw_os_error(code)),
                "{code}"
            );
        }
        assert!(is_device_error(&short_read(512, 4096)));
        for code in [
            libc::ECANCELED,
            libc::EINTR,
            libc::EAGAIN,
            libc::EBUSY,
            libc::ENOMEM,
        ] {
            assert!(
                !is_device_error(&io::Error::from_raw_os_error(code)),
                "{code}"
            );
        }
        assert!(!is_device_error(&io::Error::other("flash reader stopped")));
    }

    /// Runs `test` on a current-thread runtime (a server worker's kind), given the ring of
    /// its thread.
    fn on_own_ring<F: Future<Output = ()>>(test: impl FnOnce(Arc<LocalRing>) -> F) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            test(LocalRing::current().expect("a current-thread runtime has its own ring")).await
        });
    }

    /// Submits a one-block read of each of `fds` (pipes: the test decides when each read
    /// completes); their slots, in order.
    fn submit_reads(ring: &LocalRing, fds: &[&OwnedFd]) -> Vec<usize> {
        let block = || AlignedBuf::new(crate::format::BLOCK);
        fds.iter()
            .map(|fd| ring.submit(fd.as_raw_fd(), 0, block()).ok().unwrap())
            .collect()
    }

    /// Spawns the waiter of slot `id` and lets it run until it watches the eventfd.
    async fn spawn_watcher(ring: &Arc<LocalRing>, id: usize) -> tokio::task::JoinHandle<i32> {
        spawn_watcher_then(ring, id, || {}).await
    }

    /// [`spawn_watcher`], whose waiter runs `then` once its read is done.
    async fn spawn_watcher_then(
        ring: &Arc<LocalRing>,
        id: usize,
        then: impl FnOnce() + Send + 'static,
    ) -> tokio::task::JoinHandle<i32> {
        let r = Arc::clone(ring);
        let waiter = tokio::spawn(async move {
            let n = r.wait(id).await.1;
            then();
            n
        });
        while ring.state.lock().watcher != Some(id) {
            tokio::task::yield_now().await;
        }
        waiter
    }

    /// `waiter`'s read result, failing if it is not woken within a generous bound.
    async fn woken(waiter: tokio::task::JoinHandle<i32>, what: &str) -> i32 {
        let done = tokio::time::timeout(std::time::Duration::from_secs(20), waiter).await;
        done.unwrap_or_else(|_| panic!("{what} was never woken"))
            .unwrap()
    }

    /// Two reads in flight on one thread's ring, the second waiter registered last on the
    /// eventfd: its read completes and it leaves first; the first read's completion must
    /// still wake its waiter (reads of pipes, so the test decides when each completes).
    #[test]
    fn a_waiter_is_woken_after_the_watching_one_left_first() {
        on_own_ring(|ring| async move {
            let ((a_rd, a_wr), (b_rd, b_wr)) = (pipe(), pipe());
            let ids = submit_reads(&ring, &[&a_rd, &b_rd]);
            let a = spawn_watcher(&ring, ids[0]).await;
            let b = spawn_watcher(&ring, ids[1]).await;
            write_byte(&b_wr);
            assert_eq!(b.await.unwrap(), 1);
            write_byte(&a_wr);
            assert_eq!(woken(a, "the first read's waiter").await, 1);
        });
    }

    /// The watcher leaves and hands the eventfd to a waiter, whose read then completes before
    /// it runs: it leaves too, having never registered. The next waiter must still be woken
    /// by its read's completion. Before, a waiter leaving while nobody watched handed on to
    /// no one, and the rest slept for good (the flash test that reads in waves hung so, one
    /// run in about fifteen).
    #[test]
    fn a_waiter_is_woken_after_the_one_handed_the_watch_left_without_watching() {
        on_own_ring(|ring| async move {
            let ((a_rd, a_wr), (b_rd, b_wr), (z_rd, z_wr)) = (pipe(), pipe(), pipe());
            let ids = submit_reads(&ring, &[&a_rd, &b_rd, &z_rd]);
            let a = spawn_watcher(&ring, ids[0]).await;
            let b = spawn_watcher(&ring, ids[1]).await;
            // The watcher, z, leaves first: it hands the watch to a (the first waiter in
            // slot order), then completes a's read before a runs.
            let z = spawn_watcher_then(&ring, ids[2], move || write_byte(&a_wr)).await;
            write_byte(&z_wr);
            assert_eq!(z.await.unwrap(), 1);
            assert_eq!(a.await.unwrap(), 1);
            write_byte(&b_wr);
            assert_eq!(woken(b, "b's waiter").await, 1);
        });
    }

    /// The watcher's read is given up (its future dropped) while another waiter, in a later
    /// slot, sleeps: the watch goes to that waiter, whose read's completion must wake it.
    /// Before, the dropped waiter's own slot, still waiting, was first in slot order, so the
    /// watch went to the task that was dropping it.
    #[test]
    fn a_waiter_is_woken_after_the_watching_read_was_given_up() {
        on_own_ring(|ring| async move {
            let ((x_rd, x_wr), (y_rd, y_wr)) = (pipe(), pipe());
            let ids = submit_reads(&ring, &[&x_rd, &y_rd]);
            let y = spawn_watcher(&ring, ids[1]).await;
            // x's waiter polled once (it takes the watch), then given up.
            let mut x = Box::pin(ring.wait(ids[0]));
            let pending =
                std::future::poll_fn(|cx| Poll::Ready(x.as_mut().poll(cx).is_pending())).await;
            assert!(pending);
            assert_eq!(ring.state.lock().watcher, Some(ids[0]));
            drop(x);
            write_byte(&y_wr);
            let y = tokio::time::timeout(std::time::Duration::from_secs(20), y).await;
            // x's read completes too before any assert, so that the ring's drop need not
            // wait on it forever.
            write_byte(&x_wr);
            assert_eq!(y.expect("y's waiter was never woken").unwrap(), 1);
        });
    }
}
