//! The accept loop, the connection threads, connection limit, background reclaim and graceful
//! shutdown.
//!
//! ```text
//!   run(listener) ── accept ──> try_acquire(permit) ──ok──> Workers::spawn, round robin:
//!      (the caller's runtime)         │                     worker thread i (its own
//!                                     │                     single-threaded runtime):
//!                                     │                     access::handshake (TLS under -Z)
//!                                     │                     ─> connection::serve
//!                                     └─ none left: "SERVER_ERROR Too many open connections",
//!                                        close, count rejected_connections
//!   accept error (EMFILE, ENFILE, ENOBUFS ...): count accept_errors, sleep 5 ms doubling up
//!   to 1 s ([`AcceptBackoff`]); the pending connections wait in the backlog meanwhile
//!   shutdown (SIGINT/SIGTERM): stop accepting ─> connections finish the batch in hand ─>
//!   wait until every permit is back ─> stop the worker threads ─> return
//! ```
//!
//! Client connections run on `-t` worker threads, each a tokio current-thread runtime (as
//! memcached's worker threads each run their own event loop): a connection stays on the
//! thread it was given, its socket's readiness wakes that thread only, and no thread steals
//! another's tasks or wakes an idle one to do so. The accept loop, background tasks (reclaim,
//! checkpoints, the metrics endpoint, gRPC) run on the caller's runtime. Connections are dealt
//! round robin, as memcached's dispatcher does, so each thread gets the same number of them.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use crate::accept_backoff::AcceptBackoff;
use crate::stats::bump;
use crate::{connection, Ctx};

/// How often expired items are swept, and how many at most per sweep.
const RECLAIM_EVERY: Duration = Duration::from_millis(500);
const RECLAIM_BATCH: usize = 10_000;

/// Serves `listener` until `shutdown` turns true, then waits for open connections to finish.
pub async fn run(ctx: Arc<Ctx>, listener: TcpListener, mut shutdown: watch::Receiver<bool>) {
    let max = ctx.config.max_connections;
    let permits = Arc::new(Semaphore::new(max));
    ctx.conns.listening(&listener, ctx.now());
    let reclaim = tokio::spawn(reclaim_loop(Arc::clone(&ctx), shutdown.clone()));
    let checkpoints = tokio::spawn(checkpoint_loop(Arc::clone(&ctx), shutdown.clone()));
    if let Some(at) = ctx.store().scheduled_flush() {
        // A `flush_all <delay>` recovered from the log, still in the future.
        crate::cmd::flush::arm_timer(&ctx, at, ctx.now());
    }
    let workers = match Engine::start(&ctx) {
        Ok(w) => w,
        Err(e) => {
            tracing::error!("cannot start the connection threads: {e}");
            return;
        }
    };
    let mut backoff = AcceptBackoff::default();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.changed() => break,
        };
        let (mut stream, peer) = match accepted {
            Ok(a) => {
                backoff.reset();
                a
            }
            Err(e) => {
                // Out of file descriptors and the like: the listener stays readable, so an
                // immediate retry would spin. Keep serving the open connections meanwhile.
                tokio::select! {
                    _ = backoff.wait(&ctx, "memcached", &e) => {}
                    _ = shutdown.changed() => break,
                }
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            bump(&ctx.counters.rejected_connections);
            tracing::debug!(%peer, "refused: max_connections reached");
            tokio::spawn(async move {
                let _ = stream
                    .write_all(b"SERVER_ERROR Too many open connections\r\n")
                    .await;
            });
            continue;
        };
        bump(&ctx.counters.total_connections);
        ctx.curr_connections.fetch_add(1, Relaxed);
        // memcached -v logs connection events too.
        tracing::debug!(%peer, "connection opened");
        let ctx = Arc::clone(&ctx);
        let shutdown = shutdown.clone();
        let closed = move |ctx: &Ctx| {
            ctx.curr_connections.fetch_sub(1, Relaxed);
            tracing::debug!(%peer, "connection closed");
        };
        // The socket moves to the worker's runtime: deregistered here, registered there.
        let stream = match stream.into_std() {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(%peer, "cannot hand the connection over: {e}");
                closed(&ctx);
                continue;
            }
        };
        let workers = match &workers {
            Engine::Tokio(workers) => workers,
            Engine::Uring(pool) => {
                // The same connection::serve, over the thread's ring.
                pool.spawn(Box::new(move || {
                    Box::pin(async move {
                        match crate::uring::Socket::new(stream) {
                            Ok(s) => connection::serve(Arc::clone(&ctx), s, shutdown).await,
                            Err(e) => {
                                tracing::debug!(%peer, "cannot hand the connection over: {e}")
                            }
                        }
                        closed(&ctx);
                        drop(permit);
                    })
                }));
                continue;
            }
        };
        workers.spawn(async move {
            match tokio::net::TcpStream::from_std(stream) {
                Ok(stream) => {
                    if let Some(stream) =
                        crate::access::handshake(ctx.tls.as_ref(), &ctx.counters, stream).await
                    {
                        connection::serve(Arc::clone(&ctx), stream, shutdown).await;
                    }
                }
                Err(e) => tracing::debug!(%peer, "cannot register the connection: {e}"),
            }
            closed(&ctx);
            drop(permit);
        });
    }
    drop(listener);
    tracing::info!("shutting down: waiting for open connections to finish");
    let _ = permits.acquire_many(max as u32).await;
    workers.stop();
    let _ = reclaim.await;
    let _ = checkpoints.await;
}

/// The connection threads of the engine in force (`io_engine`).
enum Engine {
    Tokio(Workers),
    Uring(crate::uring::Pool),
}

impl Engine {
    /// The configured engine, or tokio's when io_uring cannot serve (see [`choose_engine`]);
    /// the one in force is logged and shown by `stats settings` (`io_engine`).
    fn start(ctx: &Ctx) -> std::io::Result<Engine> {
        let n = ctx.config.worker_threads();
        let runtime = tokio::runtime::Handle::current();
        let engine = match choose_engine(&ctx.config, || {
            crate::uring::Pool::start(
                n,
                runtime,
                ctx.persist().cloned(),
                ctx.config.uring_turn_yield,
            )
        }) {
            (Some(pool), _) => Engine::Uring(pool),
            (None, why) => {
                if let Some(why) = why {
                    tracing::warn!(
                        "io_engine uring: {why}: connections are served by the tokio engine"
                    );
                }
                Engine::Tokio(Workers::start(n, ctx.persist().cloned())?)
            }
        };
        let name = match engine {
            Engine::Tokio(_) => "tokio",
            Engine::Uring(_) => "uring",
        };
        let _ = ctx.io_engine.set(name);
        tracing::info!(io_engine = name, threads = n, "connection threads started");
        Ok(engine)
    }

    fn stop(self) {
        match self {
            Engine::Tokio(w) => w.stop(),
            Engine::Uring(p) => p.stop(),
        }
    }
}

/// Whether the io_uring engine serves: `Some(pool)` when it is configured and `start_uring`
/// made its threads; else `None`, with the reason when uring was configured: TLS (rustls runs
/// on tokio's streams) or the ring refused (no io_uring in this kernel, or a sandbox that
/// forbids it). Either way the server starts, on tokio's engine.
fn choose_engine<P>(
    config: &crate::config::Config,
    start_uring: impl FnOnce() -> std::io::Result<P>,
) -> (Option<P>, Option<String>) {
    if config.io_engine != "uring" {
        return (None, None);
    }
    if config.enable_ssl {
        return (None, Some("TLS (-Z) runs on tokio's streams".to_string()));
    }
    match start_uring() {
        Ok(pool) => (Some(pool), None),
        Err(e) => (None, Some(format!("io_uring is not available here ({e})"))),
    }
}

/// The threads that serve client connections, each running a single-threaded tokio runtime
/// until [`Workers::stop`] (see the module doc).
struct Workers {
    /// Where to spawn each thread's connections.
    handles: Vec<tokio::runtime::Handle>,
    /// The thread the next connection goes to (round robin).
    next: AtomicUsize,
    /// Told once every connection is done; each thread then leaves its runtime.
    stop: watch::Sender<bool>,
}

impl Workers {
    /// Starts `n` threads (at least one), each with its own runtime. With persistence, each
    /// thread writes the log's pending records itself before it sleeps, in async mode (see
    /// `Persistence::write_ready`): the writes its connections wait for go out once per
    /// round of its event loop, without waking the log's syncer thread.
    fn start(
        n: usize,
        persist: Option<Arc<cairn_persist::Persistence>>,
    ) -> std::io::Result<Workers> {
        let (stop, stopped) = watch::channel(false);
        let mut handles = Vec::new();
        for i in 0..n.max(1) {
            let mut builder = tokio::runtime::Builder::new_current_thread();
            builder.enable_all();
            if let Some(p) = &persist {
                let p = Arc::clone(p);
                builder.on_thread_park(move || p.write_ready());
            }
            let runtime = builder.build()?;
            handles.push(runtime.handle().clone());
            let mut stopped = stopped.clone();
            let writes_log = persist.is_some();
            std::thread::Builder::new()
                .name(format!("cairn-worker-{i}"))
                .spawn(move || {
                    if writes_log {
                        cairn_persist::writes_before_sleeping();
                    }
                    runtime.block_on(async move {
                        // Ends when told to, or when the sender is dropped (run returned).
                        let _ = stopped.wait_for(|stop| *stop).await;
                    });
                })?;
        }
        Ok(Workers {
            handles,
            next: AtomicUsize::new(0),
            stop,
        })
    }

    /// Runs a connection's task on the next thread.
    fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        let i = self.next.fetch_add(1, Relaxed) % self.handles.len();
        self.handles[i].spawn(task);
    }

    /// Lets every thread leave its runtime (call once no connection is left); tasks still
    /// there (a pending `flush_all <delay>` timer) are dropped with it.
    fn stop(self) {
        let _ = self.stop.send(true);
    }
}

/// Takes a checkpoint whenever the ARCUS rule says one is due (checked every second).
async fn checkpoint_loop(ctx: Arc<Ctx>, mut shutdown: watch::Receiver<bool>) {
    let Some(p) = ctx.persist().cloned() else {
        return;
    };
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        if p.checkpoint_due() {
            let p = Arc::clone(&p);
            let _ = tokio::task::spawn_blocking(move || p.checkpoint()).await;
        }
    }
}

async fn reclaim_loop(ctx: Arc<Ctx>, mut shutdown: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(RECLAIM_EVERY);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        let ctx = Arc::clone(&ctx);
        let _ = tokio::task::spawn_blocking(move || {
            ctx.store().reclaim_expired(ctx.now(), RECLAIM_BATCH)
        })
        .await;
    }
}

/// Installs the SIGINT, SIGTERM and SIGUSR1 (memcached's graceful stop) handlers now (call it
/// inside the runtime), and returns a future that resolves when one arrives or a client sends
/// `shutdown` (allowed by `-A`).
pub fn shutdown_signal(ctx: Arc<Ctx>) -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("install SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("install SIGINT handler");
    let mut usr1 = signal(SignalKind::user_defined1()).expect("install SIGUSR1 handler");
    async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
            _ = usr1.recv() => {}
            _ = ctx.shutdown_requested() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::choose_engine;
    use crate::config::Config;

    fn config(engine: &str, tls: bool) -> Config {
        Config {
            io_engine: engine.to_string(),
            enable_ssl: tls,
            ..Config::default()
        }
    }

    /// uring serves when it is asked for and its threads start; tokio otherwise, with the
    /// reason logged when uring was asked for.
    #[test]
    fn uring_falls_back_to_tokio_under_tls_and_when_the_ring_is_refused() {
        let started = |_: &str| Ok::<_, std::io::Error>(7);
        assert_eq!(
            choose_engine(&config("uring", false), || started("")),
            (Some(7), None)
        );
        let (pool, why) = choose_engine(&config("uring", true), || started(""));
        assert_eq!(pool, None);
        assert!(why.unwrap().contains("TLS"));
        let refused = || Err::<u8, _>(std::io::Error::from_raw_os_error(libc::EPERM));
        let (pool, why) = choose_engine(&config("uring", false), refused);
        assert_eq!(pool, None);
        assert!(why.unwrap().contains("io_uring is not available here"));
        assert_eq!(
            choose_engine(&config("tokio", false), || started("")),
            (None, None)
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_default_engine_is_uring_on_linux() {
        assert_eq!(Config::default().io_engine, "uring");
    }
}
