//! The floor under any memcached-protocol server on this machine: a server that does nothing
//! but the socket work. It answers `get K` with a fixed 50-byte VALUE, `set` with STORED (the
//! data is skipped), `version`, and `stats` with its cmd_get / cmd_set counts, so
//! scripts/profile_request_path.py measures it like cairn and memcached (CPU per op, system
//! calls per op) and the difference is the servers' own work.
//!
//! ```text
//!   epoll (default): -t threads, each a mio poll; the accept loop deals connections round
//!                    robin; per readable event: one recv, the replies, one send
//!   --uring:         -t threads, each an io_uring; recv and send are submitted and reaped
//!                    in batches, one io_uring_enter per turn of the loop for every
//!                    connection of the thread (fewer kernel crossings, same TCP work)
//! ```
//!
//! `loopback_floor -p PORT [-t N] [--uring]` (other arguments, as the profile script passes
//! them to a cairn build, are ignored). Benchmark tool only: no limits, no error replies
//! beyond `ERROR`.

use std::io::{self, Read, Write};
use std::net::TcpListener;
use std::os::fd::{AsRawFd, IntoRawFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc;
use std::sync::Arc;

static GETS: AtomicU64 = AtomicU64::new(0);
static SETS: AtomicU64 = AtomicU64::new(0);
const VALUE: [u8; 50] = [b'x'; 50];
const BUF: usize = 16 << 10;

fn main() -> io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let port: u16 = arg("-p").and_then(|p| p.parse().ok()).unwrap_or(11211);
    let threads: usize = arg("-t").and_then(|t| t.parse().ok()).unwrap_or(2);
    let listener = TcpListener::bind(("127.0.0.1", port))?;
    if args.iter().any(|a| a == "--uring") {
        let listener = Arc::new(listener);
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let l = listener.clone();
                std::thread::spawn(move || uring::run(l.as_raw_fd()))
            })
            .collect();
        for w in workers {
            w.join().expect("worker")?;
        }
        return Ok(());
    }
    epoll::run(listener, threads)
}

/// Answers every complete request in `input[..]`, appending replies to `out`; returns the
/// bytes consumed.
fn answer(input: &[u8], out: &mut Vec<u8>) -> usize {
    let mut pos = 0;
    while let Some(eol) = input[pos..].windows(2).position(|w| w == b"\r\n") {
        let line = &input[pos..pos + eol];
        let mut next = pos + eol + 2;
        if let Some(key) = line.strip_prefix(b"get ") {
            out.extend_from_slice(b"VALUE ");
            out.extend_from_slice(key);
            out.extend_from_slice(b" 0 50\r\n");
            out.extend_from_slice(&VALUE);
            out.extend_from_slice(b"\r\nEND\r\n");
            GETS.fetch_add(1, Relaxed);
        } else if line.starts_with(b"set ") {
            let bytes: usize = line
                .rsplit(|&b| b == b' ')
                .find(|t| !t.is_empty() && *t != b"noreply")
                .and_then(|t| std::str::from_utf8(t).ok()?.parse().ok())
                .unwrap_or(0);
            if input.len() < next + bytes + 2 {
                return pos;
            }
            next += bytes + 2;
            if !line.ends_with(b"noreply") {
                out.extend_from_slice(b"STORED\r\n");
            }
            SETS.fetch_add(1, Relaxed);
        } else if line == b"version" {
            out.extend_from_slice(b"VERSION floor\r\n");
        } else if line == b"stats" {
            let s = format!(
                "STAT cmd_get {}\r\nSTAT cmd_set {}\r\nEND\r\n",
                GETS.load(Relaxed),
                SETS.load(Relaxed)
            );
            out.extend_from_slice(s.as_bytes());
        } else {
            out.extend_from_slice(b"ERROR\r\n");
        }
        pos = next;
    }
    pos
}

mod epoll {
    use super::*;
    use mio::net::TcpStream;
    use mio::{Events, Interest, Poll, Token, Waker};

    const WAKER: Token = Token(usize::MAX);

    struct Conn {
        stream: TcpStream,
        input: Vec<u8>,
        output: Vec<u8>,
    }

    pub fn run(listener: TcpListener, threads: usize) -> io::Result<()> {
        let mut senders = Vec::new();
        for _ in 0..threads {
            let poll = Poll::new()?;
            let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
            let (tx, rx) = mpsc::channel::<std::net::TcpStream>();
            senders.push((tx, waker));
            std::thread::spawn(move || worker(poll, rx));
        }
        for (i, stream) in listener.incoming().enumerate() {
            let stream = stream?;
            stream.set_nodelay(true)?;
            stream.set_nonblocking(true)?;
            let (tx, waker) = &senders[i % threads];
            if tx.send(stream).is_ok() {
                waker.wake()?;
            }
        }
        Ok(())
    }

    fn worker(mut poll: Poll, rx: mpsc::Receiver<std::net::TcpStream>) -> io::Result<()> {
        let mut events = Events::with_capacity(256);
        let mut conns: Vec<Option<Conn>> = Vec::new();
        loop {
            poll.poll(&mut events, None)?;
            for ev in events.iter() {
                if ev.token() == WAKER {
                    while let Ok(s) = rx.try_recv() {
                        let mut stream = TcpStream::from_std(s);
                        let token = Token(conns.len());
                        poll.registry().register(
                            &mut stream,
                            token,
                            Interest::READABLE | Interest::WRITABLE,
                        )?;
                        conns.push(Some(Conn {
                            stream,
                            input: Vec::with_capacity(BUF),
                            output: Vec::with_capacity(BUF),
                        }));
                    }
                    continue;
                }
                let slot = &mut conns[ev.token().0];
                if let Some(c) = slot {
                    if serve(c).is_err() {
                        let _ = poll.registry().deregister(&mut c.stream);
                        *slot = None;
                    }
                }
            }
        }
    }

    /// Reads what the socket has (a read shorter than the room means it is drained: the next
    /// edge comes with new data), answers it, writes once.
    fn serve(c: &mut Conn) -> io::Result<()> {
        loop {
            if !c.output.is_empty() {
                match c.stream.write(&c.output) {
                    Ok(n) => drop(c.output.drain(..n)),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                    Err(e) => return Err(e),
                }
                if !c.output.is_empty() {
                    return Ok(());
                }
            }
            let len = c.input.len();
            let room = BUF.max(len * 2) - len;
            c.input.resize(len + room, 0);
            let read = c.stream.read(&mut c.input[len..]);
            let n = match read {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    c.input.truncate(len);
                    return Ok(());
                }
                Err(e) => {
                    c.input.truncate(len);
                    return Err(e);
                }
            };
            c.input.truncate(len + n);
            let used = answer(&c.input, &mut c.output);
            c.input.drain(..used);
            if !c.output.is_empty() {
                match c.stream.write(&c.output) {
                    Ok(w) => drop(c.output.drain(..w)),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
            if n < room || !c.output.is_empty() {
                return Ok(());
            }
        }
    }
}

mod uring {
    use super::*;
    use io_uring::{opcode, types, IoUring};

    const ACCEPT: u64 = u64::MAX;
    const SEND_BIT: u64 = 1 << 62;

    struct Conn {
        fd: i32,
        input: Vec<u8>,
        used: usize,
        output: Vec<u8>,
        sent: usize,
    }

    /// One thread's loop: every recv and send of its connections goes through one ring;
    /// `submit_and_wait` hands the kernel all of the turn's new operations at once.
    pub fn run(listen_fd: i32) -> io::Result<()> {
        let mut ring = IoUring::new(1024)?;
        let mut conns: Vec<Option<Box<Conn>>> = Vec::new();
        let accept = opcode::Accept::new(
            types::Fd(listen_fd),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
        .build()
        .user_data(ACCEPT);
        push(&mut ring, &accept)?;
        loop {
            ring.submit_and_wait(1)?;
            let done: Vec<(u64, i32)> = ring
                .completion()
                .map(|c| (c.user_data(), c.result()))
                .collect();
            for (data, res) in done {
                if data == ACCEPT {
                    push(&mut ring, &accept)?;
                    if res < 0 {
                        continue;
                    }
                    let stream = unsafe {
                        <std::net::TcpStream as std::os::fd::FromRawFd>::from_raw_fd(res)
                    };
                    stream.set_nodelay(true)?;
                    let idx = conns
                        .iter()
                        .position(Option::is_none)
                        .unwrap_or(conns.len());
                    if idx == conns.len() {
                        conns.push(None);
                    }
                    let mut c = Box::new(Conn {
                        fd: stream.into_raw_fd(),
                        input: vec![0; BUF],
                        used: 0,
                        output: Vec::with_capacity(BUF),
                        sent: 0,
                    });
                    recv(&mut ring, idx, &mut c)?;
                    conns[idx] = Some(c);
                    continue;
                }
                let idx = (data & !SEND_BIT) as usize;
                let Some(c) = conns[idx].as_mut() else {
                    continue;
                };
                if res <= 0 {
                    unsafe { libc::close(c.fd) };
                    conns[idx] = None;
                    continue;
                }
                if data & SEND_BIT != 0 {
                    c.sent += res as usize;
                    if c.sent < c.output.len() {
                        send(&mut ring, idx, c)?;
                    } else {
                        c.output.clear();
                        c.sent = 0;
                        recv(&mut ring, idx, c)?;
                    }
                    continue;
                }
                c.used += res as usize;
                let consumed = answer(&c.input[..c.used], &mut c.output);
                c.input.copy_within(consumed..c.used, 0);
                c.used -= consumed;
                if c.used == c.input.len() {
                    c.input.resize(c.input.len() * 2, 0);
                }
                if c.output.is_empty() {
                    recv(&mut ring, idx, c)?;
                } else {
                    send(&mut ring, idx, c)?;
                }
            }
        }
    }

    fn recv(ring: &mut IoUring, idx: usize, c: &mut Conn) -> io::Result<()> {
        let room = &mut c.input[c.used..];
        let e = opcode::Recv::new(types::Fd(c.fd), room.as_mut_ptr(), room.len() as u32)
            .build()
            .user_data(idx as u64);
        push(ring, &e)
    }

    fn send(ring: &mut IoUring, idx: usize, c: &mut Conn) -> io::Result<()> {
        let rest = &c.output[c.sent..];
        let e = opcode::Send::new(types::Fd(c.fd), rest.as_ptr(), rest.len() as u32)
            .build()
            .user_data(idx as u64 | SEND_BIT);
        push(ring, &e)
    }

    fn push(ring: &mut IoUring, e: &io_uring::squeue::Entry) -> io::Result<()> {
        // The buffers an entry points into live in a boxed Conn that stays put until the
        // operation completes.
        while unsafe { ring.submission().push(e) }.is_err() {
            ring.submit()?;
        }
        Ok(())
    }
}
