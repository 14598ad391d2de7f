//! The read engines: a lent ring, a worker's own ring, and which errors count against a segment.

use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use io_uring::{squeue, IoUring};

use super::engine::Reader;
use super::lent_ring::{lend_thread_ring, LentRead, ThreadRing};
use super::local_ring::LocalRing;
use super::read::{is_device_error, short_read, ReadBuf};
use super::shared_ring::UringReader;
use crate::device::AlignedBuf;

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
