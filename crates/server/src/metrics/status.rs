//! The status page on the metrics address: `GET /` is one self-contained HTML page (inline
//! CSS and JS, charts drawn as SVG by hand: nothing fetched from elsewhere, so it works on a
//! host without internet) that polls `GET /status.json` every second and charts it.
//!
//! ```text
//!   browser ──GET /──> status.html (this file's PAGE)
//!           ──GET /status.json every second──> json(Inputs) ──> {time_ms, figures, texts,
//!                                                                 commands, log, replication}
//!   Inputs: the same typed readings the Prometheus endpoint renders (stats::general,
//!           persistence, grpc), command counts by family (Latency), the log's calls
//!           (LogStats histograms: count and total time), ReplicationStats
//! ```
//!
//! The JSON holds counters as totals: the page keeps the last two minutes of samples and
//! turns them into rates itself (ops/s by command, hit ratio, mean log call time per second).
//! Each chart says how many points it has drawn (`data-points`), which the browser test reads.
//!
//! Non-goals: history on the server, authentication (the metrics address is for operators).

use serde_json::{json, Map, Value as Json};

use crate::stats::{Kind, Reading, ReplicationStats, RoleStats, Value};

/// The page (status.html beside this file).
pub const PAGE: &str = include_str!("status.html");

/// One kind of log call: how many, and their total time.
pub struct Calls {
    pub name: &'static str,
    pub count: u64,
    pub sum_seconds: f64,
}

/// What one `/status.json` is made of.
pub struct Inputs<'a> {
    /// `stats`, `stats persistence` and `stats grpc`, as the endpoint exports them.
    pub readings: &'a [Reading],
    /// Commands executed since start, by family (`get`, `set`, ...).
    pub commands: Vec<(&'static str, u64)>,
    /// The command log's calls (none without persistence).
    pub log: Vec<Calls>,
    pub replication: Option<&'a ReplicationStats>,
    /// Wall clock, milliseconds since the epoch.
    pub time_ms: u64,
}

/// The body of `/status.json`.
pub fn json(i: &Inputs<'_>) -> String {
    let mut figures = Map::new();
    let mut texts = Map::new();
    for r in i.readings {
        match (&r.export, &r.value) {
            (Some(v), _) => {
                let name = match r.kind {
                    Kind::Counter => format!("{}_total", r.metric),
                    Kind::Gauge => r.metric.to_string(),
                };
                let n = match v {
                    Value::Int(n) => json!(n),
                    Value::Float(f) if f.is_finite() => json!(f),
                    _ => Json::Null,
                };
                figures.insert(name, n);
            }
            (None, Value::Text(t)) => {
                texts.insert(r.name.to_string(), json!(t));
            }
            (None, _) => {}
        }
    }
    let commands: Map<String, Json> = i
        .commands
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    let log: Map<String, Json> = i
        .log
        .iter()
        .map(|c| {
            (
                c.name.to_string(),
                json!({"count": c.count, "sum_seconds": c.sum_seconds}),
            )
        })
        .collect();
    json!({
        "time_ms": i.time_ms,
        "figures": figures,
        "texts": texts,
        "commands": commands,
        "log": log,
        "replication": i.replication.map(replication),
    })
    .to_string()
}

fn replication(r: &ReplicationStats) -> Json {
    let mut j = json!({
        "role": r.role_name(),
        "mode": r.mode.name(),
        "in_group": r.in_group,
        "node_id": r.node_id,
        "term": r.term,
        "lease_held": r.lease_held,
        "lease_refusals": r.lease_refusals,
        "sync_timeouts": r.sync_timeouts,
        "full_syncs": r.full_syncs,
        "resumes": r.resumes,
        "lag_revisions": r.lag_revisions(),
        "lag_bytes": r.lag_bytes(),
    });
    let o = j.as_object_mut().expect("an object");
    match &r.role {
        RoleStats::Primary(p) => {
            o.insert("revision".into(), json!(p.revision));
            o.insert("replicas".into(), json!(p.replicas));
            o.insert("in_sync".into(), json!(p.in_sync));
            o.insert("committed_revision".into(), json!(p.committed_revision));
        }
        RoleStats::Replica(s) => {
            o.insert("primary".into(), json!(s.primary));
            o.insert("connected".into(), json!(s.connected));
            o.insert("complete".into(), json!(s.complete));
            o.insert("revision".into(), json!(s.applied_revision));
            o.insert("primary_revision".into(), json!(s.primary_revision));
        }
    }
    j
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Readings;

    #[test]
    fn counters_carry_total_and_text_stays_apart() {
        let mut r = Readings::default();
        r.counter("get_hits", "Hits.", 3);
        r.gauge("curr_items", "Items.", 7);
        r.text("version", "Version.", "1.6.21");
        let body = json(&Inputs {
            readings: &r.0,
            commands: vec![("get", 5)],
            log: vec![Calls {
                name: "fdatasync",
                count: 2,
                sum_seconds: 0.5,
            }],
            replication: None,
            time_ms: 1,
        });
        let v: Json = serde_json::from_str(&body).unwrap();
        assert_eq!(v["figures"]["get_hits_total"], 3);
        assert_eq!(v["figures"]["curr_items"], 7);
        assert_eq!(v["texts"]["version"], "1.6.21");
        assert_eq!(v["commands"]["get"], 5);
        assert_eq!(v["log"]["fdatasync"]["sum_seconds"], 0.5);
        assert!(v["replication"].is_null());
        assert!(PAGE.contains("/status.json"));
        assert!(
            !PAGE.contains("http://") && !PAGE.contains("https://"),
            "the page fetches nothing from elsewhere"
        );
    }
}
