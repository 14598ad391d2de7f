//! cairn-server: the listener, one task per connection, one file per command family.
//!
//! ```text
//!   TcpListener ──accept──> (semaphore: max_connections) ──spawn──> connection::serve
//!                                                                       │ read batch
//!                                                                       v
//!                                    cairn_proto::parse ──> cmd::execute(ctx, tx, request, out)
//!                                                                       │ reads: Store::get;
//!                                                                       │ writes: Engine::admit,
//!                                                                       │ resolve, apply (tx),
//!                                                                       │ acknowledged per batch
//!                                                                       v
//!                                                            out buffer ──write──> socket
//! ```
//!
//! Shared state is one [`Ctx`] (ctx.rs, built by [`Ctx::open`] in open.rs): the engine, the
//! one write path every front end takes (cairn-engine, with the store, the log, the flash
//! tier, the watch hub and the clock), and the front end's settings, counters and access
//! control. memcached's UDP protocol (`-U`) is `udp/`, answering each datagram through the
//! same code as a connection (`cmd::answer_next`, `cmd::binary::step`). Shutdown: a watch
//! channel tells the accept loop and every connection to stop after the requests in hand.

pub mod accept_backoff;
pub mod access;
pub mod cluster;
pub mod cmd;
pub mod config;
pub mod connection;
pub mod conns;
pub mod ctx;
pub mod flash;
pub mod grpc;
pub mod meters;
pub mod metrics;
pub mod open;
pub mod server;
pub mod stats;
#[cfg(feature = "test-hooks")]
pub mod test_hooks;
pub mod transport;
pub mod udp;
pub mod uring;
pub mod user;
pub mod version;

pub use cairn_engine::{now_unix, start_clock, ticked_now_unix};
pub use config::Config;
pub use ctx::{log_filter, Ctx, LogLevelHook};
pub use version::VERSION;
