//! A client's TCP socket on a connection thread of the io_uring engine: the connection's
//! `Transport` (crate::transport). Reads are multishot receives into the thread's provided
//! buffers (single-shot receives into the connection's own buffer where the kernel has none);
//! a send is submitted and not waited for. Sockets name their slot in the ring's registered
//! file table when they have one.
//!
//! ```text
//!   read_buf ── multishot: RecvMulti once ──> Slot::Recv(Arrivals) ── swap/copy ──> input
//!            └─ single shot: Recv into the input's spare capacity (an Op)
//!   send ── settle the send in flight ──> Send (MSG_WAITALL) as an Op, not awaited
//!   finish / the next send ── settle: the send in flight done whole, its buffer the spare
//!   drop ── cancel the multishot receive; empty the fixed file slot behind the last ops
//! ```

use std::io;
use std::os::fd::AsRawFd;
use std::task::{Context, Poll};

use io_uring::{opcode, types};

use super::buffers::RECV_GROUP;
use super::driver::{with_driver, Slot, CANCEL, DRIVER};
use super::op::Op;
use crate::conns::{Handle, Registry};
use crate::transport::Transport;

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
