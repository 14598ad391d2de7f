//! The `cairn` binary: parse settings, start the runtime, serve until SIGINT/SIGTERM.

use std::process::ExitCode;
use std::sync::Arc;

use cairn_server::config::{Config, ConfigError};
use cairn_server::{cluster, metrics, server, Ctx};
use tracing_subscriber::prelude::*;
use tracing_subscriber::{reload, EnvFilter};

fn main() -> ExitCode {
    one_malloc_arena();
    let config = match Config::from_args(std::env::args_os()) {
        Ok(c) => c,
        // --help, --version, or a flag clap refused: clap prints it and picks the exit code.
        Err(ConfigError::Flags(e)) => e.exit(),
        Err(e) => {
            eprintln!("cairn: refusing to start: {e}");
            return ExitCode::from(2);
        }
    };
    // The filter sits behind a reload handle so that the `verbosity` command can change it.
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(cairn_server::log_filter(config.verbosity)));
    let (filter, log_level) = reload::Layer::new(filter);
    tracing_subscriber::registry()
        .with(filter)
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.worker_threads())
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cairn: refusing to start: cannot build the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let ctx = match Ctx::open(config) {
        Ok(ctx) => ctx,
        Err(e) => {
            eprintln!("cairn: {e}");
            return ExitCode::from(1);
        }
    };
    ctx.set_log_level_hook(Box::new(move |v| {
        let _ = log_level.reload(EnvFilter::new(cairn_server::log_filter(v)));
    }));
    match runtime.block_on(run(ctx)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cairn: {e}");
            ExitCode::from(1)
        }
    }
}

/// Puts every thread's allocations in glibc malloc's one main arena. By default glibc gives
/// threads that contend for memory arenas of their own, and the memory that one arena's
/// short-lived allocations (watch events, log buffers) leave free stays resident beside the
/// store's segments: at 10M items of the seed's shape, 1-10 B per item more
/// (docs/decisions/0002-one-malloc-arena.md). `MALLOC_ARENA_MAX` in the environment wins.
fn one_malloc_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt sets a tunable of the allocator; no other thread runs yet.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) };
    }
}

async fn run(ctx: Arc<Ctx>) -> Result<(), String> {
    let config = &ctx.config;
    let addr = format!("{}:{}", config.listen, config.port);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|e| format!("refusing to start: cannot listen on {addr}: {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    let metrics_listener = match config.metrics_addr {
        Some(a) => Some(tokio::net::TcpListener::bind(a).await.map_err(|e| {
            format!("refusing to start: cannot listen on metrics address {a}: {e}")
        })?),
        None => None,
    };
    let grpc = match config.grpc_addr() {
        Some(a) => {
            let l = tokio::net::TcpListener::bind(a).await.map_err(|e| {
                format!("refusing to start: cannot listen on gRPC address {a}: {e}")
            })?;
            let local = l.local_addr().map_err(|e| e.to_string())?;
            let prepared = cairn_server::grpc::prepare(&ctx, local)
                .await
                .map_err(|e| format!("refusing to start: {e}"))?;
            Some((l, local, prepared))
        }
        None => None,
    };
    let c = &ctx.config;
    tracing::info!(
        addr = %local,
        threads = c.worker_threads(),
        io_engine = %c.io_engine,
        memory_limit_mb = c.memory_limit_mb,
        item_size_max = c.item_size_max,
        max_connections = c.max_connections,
        evictions = !c.disable_evictions,
        persistence = ctx.mode().name(),
        "cairn {} serving",
        cairn_server::VERSION
    );
    if let Some(l) = metrics_listener {
        let addr = l.local_addr().map_err(|e| e.to_string())?;
        tracing::info!(%addr, "metrics endpoint");
        // Before the "listening" line, so that a test that waits for that line has both.
        println!("cairn metrics on {addr}");
        tokio::spawn(metrics::serve(Arc::clone(&ctx), l));
    }
    let (tx, rx) = tokio::sync::watch::channel(false);
    let mut grpc_task = None;
    let grpc_local = grpc.as_ref().map(|g| g.1);
    if let Some((listener, addr, prepared)) = grpc {
        let mut stop = rx.clone();
        let shutdown = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        grpc_task = Some(tokio::spawn(async move {
            if let Err(e) = prepared.serve(listener, shutdown).await {
                tracing::error!("{e}");
            }
        }));
        tracing::info!(addr = %addr, threads = ctx.config.grpc_thread_count(), "gRPC API");
        // Tests wait for this line (printed before the one below) to know where gRPC is.
        println!("cairn grpc listening on {addr}");
    }
    // Recovery is done and the socket bound: now the node may be listed in ZooKeeper. A
    // failure to register refuses the start.
    let membership = match cluster::membership_config(&ctx.config, local) {
        Some(m) => Some(
            cairn_cluster::Membership::join(m)
                .await
                .map_err(|e| format!("refusing to start: {e}"))?,
        ),
        None => None,
    };
    // A replication group member serves once it is the primary or holds a complete copy.
    let group = cluster::join_group(&ctx, local, grpc_local)
        .await
        .map_err(|e| format!("refusing to start: {e}"))?;
    // Tests and scripts wait for this line to know the server is ready and where.
    // The handlers are in place before the ready line: a SIGTERM right after it is graceful.
    let signal = server::shutdown_signal(Arc::clone(&ctx));
    println!("cairn listening on {local}");
    cluster::start_follower(&ctx, local, rx.clone());
    tokio::spawn(async move {
        signal.await;
        tracing::info!("stopping");
        // Unlisted first, so that clients move away before connections are drained.
        if let Some(m) = membership {
            m.leave().await;
        }
        if let Some(g) = group {
            g.leave().await;
        }
        let _ = tx.send(true);
    });
    server::run(Arc::clone(&ctx), listener, rx).await;
    if let Some(t) = grpc_task {
        // Streams end when the server stops (watch streams have no natural end).
        t.abort();
        let _ = t.await;
    }
    if let Some(p) = ctx.persist().cloned() {
        // A checkpoint on the way out makes the next start a snapshot load, not a long replay.
        tracing::info!("shutdown checkpoint");
        let done = tokio::task::spawn_blocking(move || {
            let r = p.checkpoint();
            (r, p.close())
        })
        .await;
        match done {
            Ok((Ok(_), Ok(()))) => {}
            Ok((r, c)) => {
                return Err(format!(
                    "shutdown checkpoint: {:?} / log close: {:?}",
                    r.err(),
                    c.err()
                ));
            }
            Err(e) => return Err(format!("shutdown checkpoint: {e}")),
        }
    }
    tracing::info!("stopped");
    Ok(())
}
