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
//!
//! The engines, one module each:
//!
//! ```text
//!   engine        Reader: picks the engine at start, routes each read
//!   lent_ring     ThreadRing: the ring a connection engine lends its thread
//!   local_ring    LocalRing: a current-thread runtime's own ring
//!   shared_ring   UringReader: the shared ring thread (and the probe that decides io_uring)
//!   pool          PoolReader: the pread fallback
//!   read          one read's request, its bytes, and its errors
//! ```

mod engine;
mod lent_ring;
mod local_ring;
mod pool;
mod read;
mod shared_ring;

pub use engine::Reader;
pub use lent_ring::{lend_thread_ring, ThreadRing};
#[cfg(test)]
pub(crate) use local_ring::LOCAL_RING_ENTRIES;
pub use read::{is_device_error, ReadBuf};

#[cfg(test)]
mod tests;
