//! The io_uring connection engine (`--io-engine uring`): each connection thread runs one ring
//! and a small executor of its own instead of a tokio runtime, so that one `io_uring_enter`
//! per turn submits every receive and send of the thread's connections and waits for the
//! next completions (an epoll server makes one read and one write system call per request,
//! plus its epoll_wait). The request handling is `connection::serve`'s, unchanged: this file
//! only moves the bytes ([`Socket`] is its [`Transport`](crate::transport::Transport)).
//!
//! ```text
//!   server::run (accept, tokio) ── Pool::spawn, round robin ──> Inbox of thread i + eventfd
//!   thread i: loop {
//!     new connections ─> tasks (connection::serve over a Socket)
//!     poll the tasks woken since the last turn, once each ─> their recv/send SQEs
//!     if it answered any: submit, and yield the core while yields come back quickly
//!     io_uring_enter: submit them all; wait for one completion if no task is ready
//!     completions ─> the op's slot holds the result ─> wake its task
//!   }
//!   a wake from another thread (durability, shutdown, a timer) ─> Inbox + eventfd write,
//!   whose read is always pending in the ring
//!   requests waiting for the log's safe mark: kept by the thread (`SafeWaits`), one
//!   registration in the log's registry for them all; each turn and after each own log
//!   write, the covered ones join the ready list
//! ```
//!
//! A receive or send owns its buffer while the kernel may use it: `read_buf` and `send` move
//! the connection's Vec into the op's slot and get it back with the result. An op whose
//! future is dropped first (the connection ended) is cancelled, and its slot keeps the buffer
//! until the kernel reports it done, so the kernel never writes into freed memory.
//!
//! Flash reads (cairn-flash) awaited on the thread go through its ring too (`flash_reads.rs`):
//! a get's device read enters the kernel with the socket ops of the same turn.
//!
//! The thread enters the main runtime's context, so what the request path awaits from tokio
//! (timers, `spawn_blocking` for admin checkpoints, tokio's channels) works unchanged; those
//! wake the task through the Inbox. Plain TCP only: under TLS (`-Z`), and where a ring cannot
//! be made (a kernel without io_uring, a sandbox that forbids it), server.rs serves the
//! connections with the tokio engine instead and logs why.
//!
//! One concern a file:
//!
//! ```text
//!   pool.rs         the threads: start (a ring each), deal connections round robin, stop
//!   executor.rs     what other threads hand a thread (Inbox, Shared), its tasks and wakers
//!   run.rs          one thread's loop, turn by turn
//!   driver.rs       the thread's ring and op slots: queue entries, completions -> wakers
//!   op.rs           one submitted operation, a future of the kernel's result and its buffer
//!   buffers.rs      the provided buffer ring that multishot receives fill
//!   socket.rs       a client's socket over the ring: the connection's Transport
//!   waits.rs        requests waiting for the log's safe mark, one registration a thread
//!   flash_reads.rs  the ring lent to the flash tier for its device reads
//!   yield_gate.rs   whether a turn may end with a yield
//! ```

mod buffers;
mod driver;
mod executor;
mod flash_reads;
mod op;
mod pool;
mod run;
mod socket;
mod waits;
mod yield_gate;

pub use driver::available;
pub use executor::Job;
pub use pool::Pool;
pub(crate) use run::turn_started;
pub use socket::Socket;
pub(crate) use waits::until_safe;
