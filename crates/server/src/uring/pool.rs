//! The connection threads of the io_uring engine: each made with its ring (on the thread: a
//! single-issuer ring belongs to the thread that creates it), dealt connections round robin,
//! and stopped once no connection is left. Not here: what a thread does (`run.rs`).
//!
//! ```text
//!   server::run ── Pool::spawn(job) ──> threads[i % n].inbox.jobs + notify
//!   Pool::start(n) ──> n x thread "cairn-uring-i": new_ring ─> run(shared, ring, ...)
//!   Pool::stop ──> every inbox.stop + notify: each loop ends
//! ```

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use parking_lot::Mutex;

use super::driver::new_ring;
use super::executor::{Inbox, Job, Shared};
use super::run::run;

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
    /// that its connections' writes do not wake the log's syncer thread. `turn_yield`: a turn
    /// that answered connections may end with a yield of the core (`uring_turn_yield`).
    pub fn start(
        n: usize,
        runtime: tokio::runtime::Handle,
        persist: Option<Arc<cairn_persist::Persistence>>,
        turn_yield: bool,
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
                    if let Err(e) = run(s, ring, recent, persist, turn_yield) {
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
