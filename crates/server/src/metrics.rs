//! A Prometheus text endpoint on `--metrics-addr`: every request, whatever its path, gets the
//! current counters in the text exposition format, each with its one-line description.
//!
//! Deliberately tiny (read the request head, write one response, close): it serves scrapers,
//! not browsers, and keeps an HTTP stack out of the cache server.

use std::fmt::Write as _;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::stats::COUNTERS;
use crate::Ctx;

/// Renders every metric in the Prometheus text format.
pub fn render(ctx: &Ctx) -> String {
    let mut s = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, value: u64| {
        let _ = write!(
            s,
            "# HELP cairn_{name} {help}\n# TYPE cairn_{name} {kind}\ncairn_{name} {value}\n"
        );
    };
    for (name, help, read) in COUNTERS {
        metric(name, "counter", help, read(&ctx.counters));
    }
    let st = ctx.store.stats();
    metric(
        "curr_connections",
        "gauge",
        "Open client connections.",
        ctx.curr_connections.load(Relaxed),
    );
    metric("curr_items", "gauge", "Live items.", st.curr_items);
    metric(
        "total_items",
        "counter",
        "Items ever stored.",
        st.total_items,
    );
    metric("bytes", "gauge", "Bytes used by items.", st.bytes);
    metric(
        "memory_used_bytes",
        "gauge",
        "Bytes of memory the store holds.",
        st.memory_used_bytes,
    );
    metric(
        "limit_maxbytes",
        "gauge",
        "The memory limit in bytes.",
        st.limit_maxbytes,
    );
    metric(
        "evictions",
        "counter",
        "Live items removed to make room.",
        st.evictions,
    );
    metric(
        "reclaimed",
        "counter",
        "Expired items whose memory was reclaimed.",
        st.reclaimed,
    );
    metric(
        "uptime_seconds",
        "gauge",
        "Seconds since the server started.",
        ctx.started.elapsed().as_secs(),
    );
    s
}

/// Serves the endpoint until the task is dropped.
pub async fn serve(ctx: Arc<Ctx>, listener: TcpListener) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let ctx = Arc::clone(&ctx);
        tokio::spawn(async move {
            let mut head = [0u8; 4096];
            // The request itself does not matter; read what arrived so the client sees a reply.
            let _ = stream.read(&mut head).await;
            let body = render(&ctx);
            let reply = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(reply.as_bytes()).await;
        });
    }
}
