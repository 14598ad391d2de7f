//! The pread fallback: a few threads doing blocking reads, for kernels without io_uring (or
//! refusing it) and devices without a descriptor (the fault-injecting one in tests).
//!
//! ```text
//!   connection task ──Req──> channel ──> flash-pread-N thread: Device::read_at
//!        ^                                                        │
//!        └──────────────── oneshot (buf, result) <────────────────┘
//! ```
//!
//! Non-goals: no queue bound of its own (the tier bounds the reads in flight).

use std::io;
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::Mutex;

use super::read::Req;
use crate::device::Device;

/// Threads of the pread fallback.
pub(super) const POOL_THREADS: usize = 4;

/// The fallback: a few threads doing blocking preads.
pub struct PoolReader {
    /// Requests for the threads; None once they are stopping.
    tx: Mutex<Option<Sender<Req>>>,
    /// The threads, joined on drop.
    threads: Vec<JoinHandle<()>>,
}

impl PoolReader {
    pub(super) fn start(device: Arc<dyn Device>, threads: usize) -> PoolReader {
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

    pub(super) fn submit(&self, req: Req) -> io::Result<()> {
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
