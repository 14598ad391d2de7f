//! gRPC counters and latencies, for `stats grpc` and the Prometheus endpoint.
//!
//! One [`MethodStats`] per RPC (requests, errors, a latency histogram in microseconds) and
//! the watch figures (the watch streams' counters and the hub's, kept by cairn-watch).
//! [`GrpcStats::figures`] lists every figure with its kind and a one-line description, so
//! both outputs come from one list.
//!
//! ```text
//!   KV calls ── record(method, started, ok) ──> MethodStats ─┐
//!   WatchStream (cairn-watch) ──> WatchStats ────────────────┼─> figures() ──> stats grpc,
//!   Hub::stats() (cairn-watch) ──> HubStats ─────────────────┘                Prometheus
//! ```

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

use cairn_watch::{Hub, WatchStats};
use hdrhistogram::Histogram;
use parking_lot::Mutex;

/// The RPCs counted, in output order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Get,
    BatchGet,
    Set,
    Delete,
    Touch,
    Scan,
    /// One request message of a StreamGet stream.
    StreamGet,
}

/// The figure names of each method, in [`METHODS`] order: requests, errors, p50, p99.
const METHOD_FIGURES: [[&str; 4]; 7] = [
    [
        "grpc_get_requests",
        "grpc_get_errors",
        "grpc_get_latency_us_p50",
        "grpc_get_latency_us_p99",
    ],
    [
        "grpc_batch_get_requests",
        "grpc_batch_get_errors",
        "grpc_batch_get_latency_us_p50",
        "grpc_batch_get_latency_us_p99",
    ],
    [
        "grpc_set_requests",
        "grpc_set_errors",
        "grpc_set_latency_us_p50",
        "grpc_set_latency_us_p99",
    ],
    [
        "grpc_delete_requests",
        "grpc_delete_errors",
        "grpc_delete_latency_us_p50",
        "grpc_delete_latency_us_p99",
    ],
    [
        "grpc_touch_requests",
        "grpc_touch_errors",
        "grpc_touch_latency_us_p50",
        "grpc_touch_latency_us_p99",
    ],
    [
        "grpc_scan_requests",
        "grpc_scan_errors",
        "grpc_scan_latency_us_p50",
        "grpc_scan_latency_us_p99",
    ],
    [
        "grpc_stream_get_requests",
        "grpc_stream_get_errors",
        "grpc_stream_get_latency_us_p50",
        "grpc_stream_get_latency_us_p99",
    ],
];

/// One figure: its name (in `stats grpc`, and in Prometheus with `cairn_`), whether it only
/// grows, a one-line description and its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Figure {
    pub name: &'static str,
    pub counter: bool,
    pub help: &'static str,
    pub value: u64,
}

impl Figure {
    fn counter(name: &'static str, help: &'static str, value: u64) -> Figure {
        Figure {
            name,
            counter: true,
            help,
            value,
        }
    }

    fn gauge(name: &'static str, help: &'static str, value: u64) -> Figure {
        Figure {
            name,
            counter: false,
            help,
            value,
        }
    }
}

const METHODS: [(Method, &str); 7] = [
    (Method::Get, "get"),
    (Method::BatchGet, "batch_get"),
    (Method::Set, "set"),
    (Method::Delete, "delete"),
    (Method::Touch, "touch"),
    (Method::Scan, "scan"),
    (Method::StreamGet, "stream_get"),
];

/// Figures of one RPC.
pub struct MethodStats {
    /// Requests answered.
    requests: AtomicU64,
    /// Requests answered with a status other than OK (NOT_FOUND included).
    errors: AtomicU64,
    /// Time from request decoded to response built, in microseconds.
    latency_us: Mutex<Histogram<u64>>,
}

impl Default for MethodStats {
    fn default() -> Self {
        MethodStats {
            requests: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            latency_us: Mutex::new(
                Histogram::new_with_bounds(1, 60_000_000, 2).expect("valid histogram bounds"),
            ),
        }
    }
}

/// Every gRPC figure. Shared by the services; read by `stats grpc` and Prometheus.
#[derive(Default)]
pub struct GrpcStats {
    methods: [MethodStats; 7],
    /// The watch streams' counters, which the streams (cairn-watch) keep.
    pub watch: Arc<WatchStats>,
}

impl GrpcStats {
    fn method(&self, m: Method) -> &MethodStats {
        let i = METHODS
            .iter()
            .position(|(x, _)| *x == m)
            .expect("every method is listed");
        &self.methods[i]
    }

    /// Counts one request of `m` that started at `started` and ended `ok` or not.
    pub fn record(&self, m: Method, started: Instant, ok: bool) {
        let s = self.method(m);
        s.requests.fetch_add(1, Relaxed);
        if !ok {
            s.errors.fetch_add(1, Relaxed);
        }
        let us = started.elapsed().as_micros().max(1) as u64;
        let _ = s.latency_us.lock().record(us.min(60_000_000));
    }

    /// Every figure, in `stats grpc` order.
    pub fn figures(&self, hub: Option<&Hub>) -> Vec<Figure> {
        let mut out = Vec::new();
        for (i, names) in METHOD_FIGURES.iter().enumerate() {
            let s = &self.methods[i];
            let h = s.latency_us.lock();
            let q = |q: f64| {
                if h.is_empty() {
                    0
                } else {
                    h.value_at_quantile(q)
                }
            };
            out.push(Figure::counter(
                names[0],
                "gRPC requests answered, by method.",
                s.requests.load(Relaxed),
            ));
            out.push(Figure::counter(
                names[1],
                "gRPC requests answered with a status other than OK, by method.",
                s.errors.load(Relaxed),
            ));
            out.push(Figure::gauge(
                names[2],
                "Median gRPC service time in microseconds, by method.",
                q(0.5),
            ));
            out.push(Figure::gauge(
                names[3],
                "99th percentile gRPC service time in microseconds, by method.",
                q(0.99),
            ));
        }
        let load = |c: &AtomicU64| c.load(Relaxed);
        let w = &*self.watch;
        out.push(Figure::gauge(
            "grpc_watch_streams",
            "Watch streams open.",
            load(&w.watch_streams),
        ));
        out.push(Figure::gauge(
            "grpc_watches",
            "Watches open.",
            load(&w.watches),
        ));
        out.push(Figure::counter(
            "grpc_watch_events_sent",
            "Events sent to watchers.",
            load(&w.watch_events_sent),
        ));
        out.push(Figure::counter(
            "grpc_watch_initial_items_sent",
            "Initial-state items sent to watchers.",
            load(&w.watch_initial_items_sent),
        ));
        out.push(Figure::counter(
            "grpc_watch_responses_sent",
            "Watch responses sent.",
            load(&w.watch_responses_sent),
        ));
        out.push(Figure::counter(
            "grpc_watch_compacted",
            "Watches canceled because history no longer held their revision.",
            load(&w.watch_compacted),
        ));
        out.push(Figure::counter(
            "grpc_watch_events_from_log",
            "Events read back from the command log for watchers behind the in-memory history.",
            load(&w.watch_events_from_log),
        ));
        out.push(Figure::counter(
            "grpc_watch_values_from_log",
            "Records read from the command log to complete events of the in-memory history \
             (values of items changed since, previous items).",
            load(&w.watch_values_from_log),
        ));
        if let Some(hub) = hub {
            let h = hub.stats();
            out.push(Figure::gauge(
                "watch_published_revision",
                "The newest revision published to watchers.",
                h.published_revision,
            ));
            out.push(Figure::gauge(
                "watch_history_active",
                "1 once the watch history is kept (from the first watch on), else 0.",
                h.history_active.into(),
            ));
            out.push(Figure::gauge(
                "watch_history_first_revision",
                "The oldest revision the in-memory watch history answers for (0 before it starts).",
                h.history_first_revision,
            ));
            out.push(Figure::gauge(
                "watch_history_events",
                "Events in the in-memory watch history.",
                h.history_events,
            ));
            out.push(Figure::gauge(
                "watch_history_bytes",
                "Bytes of the in-memory watch history.",
                h.history_bytes,
            ));
            out.push(Figure::gauge(
                "watch_history_limit_bytes",
                "The bound of the in-memory watch history (watch_history_mb).",
                h.history_limit_bytes,
            ));
            out.push(Figure::gauge(
                "watch_pending_revisions",
                "Revisions handed to the watch hub and not yet safe to publish.",
                h.pending_revisions,
            ));
        }
        out
    }
}
