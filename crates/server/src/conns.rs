//! The open connections and listening sockets, for `stats conns`.
//!
//! ```text
//!   server::run ── listening(listener) ──┐
//!   connection::serve ── open(stream) ───┼──> Registry { fd -> Entry }  <── stats conns
//!        each batch: Handle::waiting / Handle::command(now)                  (a snapshot)
//!   dropping the Handle removes the entry
//! ```
//!
//! Each connection updates two relaxed atomics per read batch; the map's lock is taken only when
//! a connection opens or closes and when `stats conns` lists them.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering::Relaxed};
use std::sync::Arc;

use parking_lot::Mutex;

/// What a connection is doing, by memcached's state names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum State {
    /// A listening socket.
    Listening = 0,
    /// Waiting for the client's next bytes.
    Waiting = 1,
    /// Parsing and answering requests.
    ParseCmd = 2,
}

impl State {
    fn name(self) -> &'static str {
        match self {
            State::Listening => "conn_listening",
            State::Waiting => "conn_waiting",
            State::ParseCmd => "conn_parse_cmd",
        }
    }

    fn from_u8(v: u8) -> State {
        match v {
            0 => State::Listening,
            1 => State::Waiting,
            _ => State::ParseCmd,
        }
    }
}

/// One socket's line in `stats conns`.
pub struct Entry {
    /// The client's address (a listener's own address).
    addr: SocketAddr,
    /// The listening address a client came in on (none for a listener).
    listen_addr: Option<SocketAddr>,
    /// Unix seconds of the last batch of requests read.
    last_cmd: AtomicU32,
    /// A [`State`].
    state: AtomicU8,
}

/// Every open socket by file descriptor, as memcached numbers them.
#[derive(Default)]
pub struct Registry {
    entries: Mutex<BTreeMap<i32, Arc<Entry>>>,
}

/// A connection's entry, removed when dropped.
pub struct Handle<'r> {
    registry: &'r Registry,
    fd: i32,
    entry: Arc<Entry>,
}

impl Registry {
    /// Registers a listening socket (it stays for the life of the process).
    pub fn listening(&self, listener: &tokio::net::TcpListener, now: u32) {
        if let Ok(addr) = listener.local_addr() {
            self.insert(listener.as_raw_fd(), addr, None, State::Listening, now);
        }
    }

    /// Registers a client connection until the handle is dropped.
    pub fn open(&self, stream: &tokio::net::TcpStream, now: u32) -> Option<Handle<'_>> {
        let addr = stream.peer_addr().ok()?;
        self.open_fd(stream.as_raw_fd(), addr, stream.local_addr().ok(), now)
    }

    /// [`Registry::open`] for a socket outside tokio (the io_uring engine's).
    pub fn open_std(&self, stream: &std::net::TcpStream, now: u32) -> Option<Handle<'_>> {
        let addr = stream.peer_addr().ok()?;
        self.open_fd(stream.as_raw_fd(), addr, stream.local_addr().ok(), now)
    }

    fn open_fd(
        &self,
        fd: i32,
        addr: SocketAddr,
        listen_addr: Option<SocketAddr>,
        now: u32,
    ) -> Option<Handle<'_>> {
        let entry = self.insert(fd, addr, listen_addr, State::Waiting, now);
        Some(Handle {
            registry: self,
            fd,
            entry,
        })
    }

    fn insert(
        &self,
        fd: i32,
        addr: SocketAddr,
        listen_addr: Option<SocketAddr>,
        state: State,
        now: u32,
    ) -> Arc<Entry> {
        let entry = Arc::new(Entry {
            addr,
            listen_addr,
            last_cmd: AtomicU32::new(now),
            state: AtomicU8::new(state as u8),
        });
        self.entries.lock().insert(fd, Arc::clone(&entry));
        entry
    }

    /// `stats conns`: `STAT <fd>:addr tcp:<ip>:<port>`, `<fd>:listen_addr`, `<fd>:state`,
    /// `<fd>:secs_since_last_cmd`, in descriptor order.
    pub fn write_stats(&self, now: u32, out: &mut Vec<u8>) {
        use cairn_proto::encode::stat;
        let entries: Vec<(i32, Arc<Entry>)> = self
            .entries
            .lock()
            .iter()
            .map(|(fd, e)| (*fd, Arc::clone(e)))
            .collect();
        for (fd, e) in entries {
            stat(out, &format!("{fd}:addr"), format!("tcp:{}", e.addr));
            if let Some(l) = e.listen_addr {
                stat(out, &format!("{fd}:listen_addr"), format!("tcp:{l}"));
            }
            let state = State::from_u8(e.state.load(Relaxed));
            stat(out, &format!("{fd}:state"), state.name());
            let idle = now.saturating_sub(e.last_cmd.load(Relaxed));
            stat(out, &format!("{fd}:secs_since_last_cmd"), idle);
        }
    }
}

impl Handle<'_> {
    /// The connection waits for the client.
    pub fn waiting(&self) {
        self.entry.state.store(State::Waiting as u8, Relaxed);
    }

    /// The connection read a batch of requests at `now` and answers it.
    pub fn command(&self, now: u32) {
        self.entry.last_cmd.store(now, Relaxed);
        self.entry.state.store(State::ParseCmd as u8, Relaxed);
    }
}

impl Drop for Handle<'_> {
    fn drop(&mut self) {
        let mut entries = self.registry.entries.lock();
        // The descriptor may already name a newer connection if the OS reused it.
        if entries
            .get(&self.fd)
            .is_some_and(|e| Arc::ptr_eq(e, &self.entry))
        {
            entries.remove(&self.fd);
        }
    }
}
