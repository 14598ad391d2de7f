//! The Prometheus endpoint on `--metrics-addr`: `GET /metrics` answers every figure of
//! `stats`, `stats persistence` and `stats grpc` (the readings `crate::stats` makes of each
//! layer's stats struct, the same `stats` shows), `stats replication` (typed:
//! `cairn_replication_*`), command latency histograms by command family, and the command
//! log's fdatasync latency and group-commit batch size histograms (its `LogStats`), in the
//! OpenMetrics text format. `GET /` is the status page and `GET /status.json` its data
//! (`status.rs`), from the same readings.
//!
//! ```text
//!   scrape ──hyper (HTTP/1.1)──> respond ──prometheus_client::encoding::text::encode──>
//!            CtxCollector::encode ── stats::general + persistence + grpc  (counters, gauges)
//!                                 ── ReplicationStats                      (replication_*)
//!                                 ── Latency (per command family)          (histograms)
//!                                 ── Persistence::log_stats()              (histograms)
//!   browser ──GET /, /status.json──> status::PAGE, status::json(readings, latency counts,
//!                                     log calls, ReplicationStats)
//! ```
//!
//! The format is prometheus-client's and the HTTP stack hyper's. Command latency is kept in
//! atomic bucket counters of our own (`crate::stats::Latency`): prometheus-client's
//! `Histogram` takes a lock on every observation, which every request would contend for.

use std::convert::Infallible;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, StatusCode};
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

use crate::stats::{Family, Kind, Reading, ReplicationStats, RoleStats, Value, LATENCY_BOUNDS_S};
use crate::Ctx;

mod status;

/// Every reading the endpoint exports: `stats`, `stats persistence`, `stats grpc`.
fn readings(ctx: &Ctx) -> Vec<Reading> {
    crate::stats::general(ctx)
        .into_iter()
        .chain(crate::stats::persistence(ctx))
        .chain(crate::stats::grpc(ctx))
        .collect()
}

/// `stats replication`, typed (None without persistence: no replication state).
fn replication(ctx: &Ctx) -> Option<ReplicationStats> {
    let r = ctx.replication.as_ref()?;
    Some(ReplicationStats::read(
        r,
        ctx.hub().map(|h| &**h),
        ctx.persist().map(|p| &**p),
    ))
}

/// The replication figures (`stats replication`) as `cairn_replication_*`: one line each,
/// from the typed [`ReplicationStats`], counters ending in `_total`.
fn encode_replication(
    enc: &mut DescriptorEncoder,
    r: &ReplicationStats,
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(
        "replication_role",
        "This node's replication role: 1 for the role it has now, 0 for the other.",
        None,
        MetricType::Gauge,
    )?;
    for role in ["primary", "replica"] {
        m.encode_family(&[("role", role)])?
            .encode_gauge(&i64::from(r.role_name() == role))?;
    }
    let (replicas, in_sync, connected, complete) = match &r.role {
        RoleStats::Primary(p) => (p.replicas, p.in_sync.len() as u64, false, true),
        RoleStats::Replica(f) => (0, 0, f.connected, f.complete),
    };
    let gauges: [(&str, &str, u64); 10] = [
        (
            "replication_sync",
            "1 under --replication sync (a write is acknowledged once the replicas hold it durable), 0 under async.",
            u64::from(r.mode == cairn_cluster::ReplicationMode::Sync),
        ),
        (
            "replication_group",
            "1 on a member of a replication group (--replication-group): the lease and the in-sync set apply.",
            u64::from(r.in_group),
        ),
        (
            "replication_replicas",
            "Primary: replicas connected now (0 on a replica).",
            replicas,
        ),
        (
            "replication_lag_revisions",
            "Primary: revisions its furthest replica does not hold durable yet; replica: revisions behind the primary's last reported one.",
            r.lag_revisions(),
        ),
        (
            "replication_lag_bytes",
            "Primary: keys and values of the revisions no replica holds yet (those still in the in-memory history); replica: bytes received, not yet durable here.",
            r.lag_bytes(),
        ),
        (
            "replication_lease_held",
            "1 while this group member's ZooKeeper lease holds (without it a primary refuses writes); 0 without one, and outside groups.",
            u64::from(r.lease_held),
        ),
        (
            "replication_connected",
            "Replica: 1 while connected to its primary's watch (0 on a primary).",
            u64::from(connected),
        ),
        (
            "replication_complete",
            "1 while this node holds a complete copy: 0 on a replica during a full copy (such a member is never elected).",
            u64::from(complete),
        ),
        (
            "replication_in_sync_members",
            "Group primary: members of the in-sync set, whom every sync write waits for (0 elsewhere).",
            in_sync,
        ),
        (
            "replication_term",
            "The primary term this node leads or follows (the zxid that created the primary lock; 0 outside groups).",
            r.term,
        ),
    ];
    for (name, help, v) in gauges {
        enc.encode_descriptor(name, help, None, MetricType::Gauge)?
            .encode_gauge(&(v as i64))?;
    }
    let counters: [(&str, &str, u64); 4] = [
        (
            "replication_sync_timeouts",
            "Sync-mode writes answered with an error because no replica held them durable in time.",
            r.sync_timeouts,
        ),
        (
            "replication_lease_refusals",
            "Writes refused, or not acknowledged, because the lease had ended.",
            r.lease_refusals,
        ),
        (
            "replication_full_syncs",
            "Full copies this node took from a primary.",
            r.full_syncs,
        ),
        (
            "replication_resumes",
            "Times this node resumed following a primary from a revision instead of a full copy.",
            r.resumes,
        ),
    ];
    for (name, help, v) in counters {
        enc.encode_descriptor(name, help, None, MetricType::Counter)?
            .encode_counter::<NoLabelSet, _, f64>(&v, None)?;
    }
    Ok(())
}

/// (upper bound, count in that bucket alone) pairs ending with +Inf, as prometheus-client's
/// `encode_histogram` takes them (it adds them up), from the count at or below each bound.
fn histogram_buckets(
    bounds: &[f64],
    count_up_to: impl Fn(usize) -> u64,
    total: u64,
) -> Vec<(f64, u64)> {
    let mut below = 0;
    let mut out = Vec::with_capacity(bounds.len() + 1);
    for (i, &bound) in bounds.iter().enumerate() {
        let upto = count_up_to(i).max(below);
        out.push((bound, upto - below));
        below = upto;
    }
    // prometheus-client writes f64::MAX as +Inf.
    out.push((f64::MAX, total.saturating_sub(below)));
    out
}

/// Reads the server's figures at each scrape.
struct CtxCollector(Arc<Ctx>);

impl std::fmt::Debug for CtxCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CtxCollector")
    }
}

impl prometheus_client::collector::Collector for CtxCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let ctx = &self.0;
        for r in readings(ctx) {
            let Some(v) = r.export else { continue };
            let kind = match r.kind {
                Kind::Counter => MetricType::Counter,
                Kind::Gauge => MetricType::Gauge,
            };
            let mut m = enc.encode_descriptor(r.metric, r.help, None, kind)?;
            match (r.kind, v) {
                (Kind::Counter, Value::Int(v)) => {
                    m.encode_counter::<NoLabelSet, _, f64>(&v, None)?
                }
                (Kind::Counter, Value::Float(v)) => {
                    m.encode_counter::<NoLabelSet, _, f64>(&v, None)?
                }
                (Kind::Gauge, Value::Int(v)) => m.encode_gauge(&(v as i64))?,
                (Kind::Gauge, Value::Float(v)) => m.encode_gauge(&v)?,
                (_, Value::Text(_)) => unreachable!("text is never exported"),
            }
        }

        if let Some(r) = replication(ctx) {
            encode_replication(&mut enc, &r)?;
        }

        let mut m = enc.encode_descriptor(
            "command_duration_seconds",
            "Time to execute a command, from parsed request to reply buffered, by family.",
            None,
            MetricType::Histogram,
        )?;
        for family in Family::ALL {
            let (counts, sum_ns) = ctx.latency.read(family);
            let total = counts.iter().sum();
            let buckets: Vec<(f64, u64)> = LATENCY_BOUNDS_S
                .iter()
                .copied()
                .chain([f64::MAX])
                .zip(counts.iter().copied())
                .collect();
            let sum = sum_ns as f64 / 1e9;
            let labels = [("command", family.label())];
            m.encode_family(&labels)?
                .encode_histogram::<NoLabelSet>(sum, total, &buckets, None)?;
        }

        if let Some(p) = ctx.persist() {
            let log = p.log_stats();
            let bounds_us = [
                50.0, 100.0, 200.0, 500.0, 1e3, 2e3, 5e3, 10e3, 20e3, 50e3, 100e3, 200e3, 500e3,
                1e6, 2e6, 5e6,
            ];
            let bounds_s = bounds_us.map(|us| us / 1e6);
            // Each call of the log timed alone (see `stats persistence`).
            for (h, name, help) in [
                (
                    &log.histograms.fdatasync_us,
                    "fdatasync_seconds",
                    "Each fdatasync of the command log, the call alone.",
                ),
                (
                    &log.histograms.dsync_write_us,
                    "log_dsync_write_seconds",
                    "Each pwritev2(RWF_DSYNC) of a command log batch (sync mode with O_DIRECT): \
                     the write and the disk's cache flush in one call.",
                ),
                (
                    &log.histograms.write_us,
                    "log_write_seconds",
                    "Each plain write of a command log batch, the call alone.",
                ),
            ] {
                let buckets = histogram_buckets(
                    &bounds_s,
                    |i| h.count_between(0, bounds_us[i] as u64),
                    h.len(),
                );
                let mut m = enc.encode_descriptor(name, help, None, MetricType::Histogram)?;
                let sum = h.mean() * h.len() as f64 / 1e6;
                m.encode_histogram::<NoLabelSet>(sum, h.len(), &buckets, None)?;
            }

            let h = &log.histograms.batch_bytes;
            let bounds = [
                512.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0, 16777216.0,
            ];
            let buckets =
                histogram_buckets(&bounds, |i| h.count_between(0, bounds[i] as u64), h.len());
            let mut m = enc.encode_descriptor(
                "log_batch_bytes",
                "Bytes of each command log batch (group commit).",
                None,
                MetricType::Histogram,
            )?;
            let sum = h.mean() * h.len() as f64;
            m.encode_histogram::<NoLabelSet>(sum, h.len(), &buckets, None)?;
        }
        Ok(())
    }
}

/// The registry every scrape encodes: all names start with `cairn_`.
pub fn registry(ctx: Arc<Ctx>) -> Registry {
    let mut registry = Registry::with_prefix("cairn");
    registry.register_collector(Box::new(CtxCollector(ctx)));
    registry
}

/// Renders every metric in the OpenMetrics text format.
pub fn render(registry: &Registry) -> String {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry)
        .expect("writing to a String cannot fail");
    text
}

/// `/status.json`: the status page's data, from the same readings as the metrics.
fn status_json(ctx: &Ctx) -> String {
    let readings = readings(ctx);
    let replication = replication(ctx);
    let commands = Family::ALL
        .iter()
        .map(|&f| (f.label(), ctx.latency.read(f).0.iter().sum()))
        .collect();
    let log = match ctx.persist() {
        Some(p) => {
            let h = p.log_stats().histograms;
            [
                ("write", &h.write_us),
                ("fdatasync", &h.fdatasync_us),
                ("dsync_write", &h.dsync_write_us),
            ]
            .into_iter()
            .map(|(name, h)| status::Calls {
                name,
                count: h.len(),
                sum_seconds: h.mean() * h.len() as f64 / 1e6,
            })
            .collect()
        }
        None => Vec::new(),
    };
    let time_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    status::json(&status::Inputs {
        readings: &readings,
        commands,
        log,
        replication: replication.as_ref(),
        time_ms,
    })
}

/// `GET /metrics`: the metrics; `GET /`: the status page; `GET /status.json`: its data;
/// anything else: 404 or 405.
fn respond(
    ctx: &Ctx,
    registry: &Registry,
    req: &hyper::Request<Incoming>,
) -> hyper::Response<Full<Bytes>> {
    let reply = |status, content_type: &'static str, body: String| {
        hyper::Response::builder()
            .status(status)
            .header(hyper::header::CONTENT_TYPE, content_type)
            .header(hyper::header::CACHE_CONTROL, "no-store")
            .body(Full::new(Bytes::from(body)))
            .expect("a valid response")
    };
    const METRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    if req.method() != Method::GET {
        return reply(StatusCode::METHOD_NOT_ALLOWED, METRICS, String::new());
    }
    match req.uri().path() {
        "/metrics" => reply(StatusCode::OK, METRICS, render(registry)),
        "/" | "/index.html" => reply(
            StatusCode::OK,
            "text/html; charset=utf-8",
            status::PAGE.to_string(),
        ),
        "/status.json" => reply(StatusCode::OK, "application/json", status_json(ctx)),
        _ => reply(StatusCode::NOT_FOUND, METRICS, String::new()),
    }
}

/// Serves the endpoint until the task is dropped.
pub async fn serve(ctx: Arc<Ctx>, listener: TcpListener) {
    let registry = Arc::new(registry(Arc::clone(&ctx)));
    let mut backoff = crate::accept_backoff::AcceptBackoff::default();
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => {
                backoff.reset();
                stream
            }
            Err(e) => {
                backoff.wait(&ctx, "metrics", &e).await;
                continue;
            }
        };
        let registry = Arc::clone(&registry);
        let ctx = Arc::clone(&ctx);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let response = respond(&ctx, &registry, &req);
                async move { Ok::<_, Infallible>(response) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
}
