//! Which engine serves reads, chosen once at start, and the route of each read through it.
//!
//! ```text
//!   Reader::read ─ io_uring engine ─> the thread's lent ring (lent_ring), if it has one
//!                                  └> else its current-thread runtime's ring (local_ring)
//!                                  └> else, or that ring full: the shared ring (shared_ring)
//!               ─ pread engine ────> the pread pool (pool)
//! ```
//!
//! Non-goals: no bound on reads in flight (the tier's semaphore bounds them).

use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use tokio::sync::oneshot;

use super::lent_ring::LentRead;
use super::local_ring::LocalRing;
use super::pool::{PoolReader, POOL_THREADS};
use super::read::{completed, ReadBuf, Req};
use super::shared_ring::UringReader;
use crate::device::{AlignedBuf, Device};

/// Which engine serves reads.
pub enum Reader {
    /// io_uring: the thread's lent ring, a worker's own ring, or the shared ring thread.
    Uring(UringReader),
    /// The pread thread pool.
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
            if let Some(read) = LentRead::submit(r.fd, offset, len) {
                own_ring.fetch_add(1, Relaxed);
                return read?.await;
            }
        }
        let mut buf = AlignedBuf::new(len);
        if let Reader::Uring(r) = self {
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
