//! What a connection reads from and writes to: the socket work under `connection::serve`,
//! so that the same request handling runs over either I/O engine (`io_engine`).
//!
//! ```text
//!   connection::serve<T: Transport> ── read_buf / send ──> Stream (tokio: epoll, TCP or TLS)
//!                                                      └─> uring::Socket (io_uring, plain TCP)
//! ```

use std::io;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::access::Stream;
use crate::conns::{Handle, Registry};

/// A client connection's byte stream.
// The futures are used by concrete types only (a tokio task needs them Send, the io_uring
// engine's executor does not), so no bound is named here.
#[allow(async_fn_in_trait)]
pub trait Transport {
    /// Lists the connection in `stats conns` until the handle is dropped.
    fn register<'r>(&self, conns: &'r Registry, now: u32) -> Option<Handle<'r>>;

    /// Reads what has arrived into the spare capacity of `buf` (at least one byte is
    /// reserved by the caller); `Ok(0)` when the client has closed.
    async fn read_buf(&mut self, buf: &mut Vec<u8>) -> io::Result<usize>;

    /// Hands all of `buf` to the socket in order after what was sent before (flushed, under
    /// TLS) and leaves it empty. The io_uring engine returns once the send is submitted; the
    /// next `send` or `finish` waits for it.
    async fn send(&mut self, buf: &mut Vec<u8>) -> io::Result<()>;

    /// Before the connection closes: waits until everything sent has left (io_uring).
    async fn finish(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Transport for Stream {
    fn register<'r>(&self, conns: &'r Registry, now: u32) -> Option<Handle<'r>> {
        conns.open(crate::access::tcp(self), now)
    }

    async fn read_buf(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        AsyncReadExt::read_buf(self, buf).await
    }

    async fn send(&mut self, buf: &mut Vec<u8>) -> io::Result<()> {
        self.write_all(buf).await?;
        // A TLS stream may hold written bytes until flushed (a no-op on TCP).
        self.flush().await?;
        buf.clear();
        Ok(())
    }
}
