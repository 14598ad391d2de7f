//! Repeats folded into one figure: the rows of one target and scenario into their medians, with
//! the spread of their throughput (min, max).
//!
//! ```text
//!   rows (one per target, scenario, repeat) ─> summarize ─> (median row, min ops/s, max ops/s)
//! ```
//!
//! Non-goals: statistics beyond medians (the machine is noisy; see the report's doc).

use crate::rows::{LogSync, Row};

/// The median of `v` (the mean of the middle two for an even count; 0 when empty).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return 0.0;
    }
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// Rows with the same target and scenario folded into their median (and spread).
pub fn summarize(rows: &[Row]) -> Vec<(Row, f64, f64)> {
    let mut out: Vec<(Row, f64, f64)> = Vec::new();
    let mut keys: Vec<(String, String)> = Vec::new();
    for r in rows {
        let k = (r.target.clone(), r.scenario.clone());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    for (target, scenario) in keys {
        let group: Vec<&Row> = rows
            .iter()
            .filter(|r| r.target == target && r.scenario == scenario)
            .collect();
        let pick = |f: fn(&Row) -> f64| median(group.iter().map(|r| f(r)).collect());
        let ops: Vec<f64> = group.iter().map(|r| r.ops_per_sec).collect();
        let min = ops.iter().cloned().fold(f64::INFINITY, f64::min);
        let max = ops.iter().cloned().fold(0.0, f64::max);
        let mut row = group[0].clone();
        row.ops_per_sec = pick(|r| r.ops_per_sec);
        // Errors add up over repeats; the rate is the worst repeat's.
        row.errors = group.iter().map(|r| r.errors).sum();
        row.error_rate = group.iter().map(|r| r.error_rate).fold(0.0, f64::max);
        row.avg_ms = pick(|r| r.avg_ms);
        row.p50_ms = pick(|r| r.p50_ms);
        row.p90_ms = pick(|r| r.p90_ms);
        row.p95_ms = pick(|r| r.p95_ms);
        row.p99_ms = pick(|r| r.p99_ms);
        row.p999_ms = pick(|r| r.p999_ms);
        row.server_cpu_secs = pick(|r| r.server_cpu_secs);
        row.server_cpu_us_per_op = pick(|r| r.server_cpu_us_per_op);
        row.load_generator_cpu_secs = pick(|r| r.load_generator_cpu_secs);
        row.rss_after_insert_mib = pick(|r| r.rss_after_insert_mib);
        row.bytes_per_item = pick(|r| r.bytes_per_item);
        if row.log_sync.is_some() {
            let syncs: Vec<&LogSync> = group.iter().filter_map(|r| r.log_sync.as_ref()).collect();
            let of = |f: fn(&LogSync) -> f64| median(syncs.iter().map(|l| f(l)).collect());
            row.log_sync = Some(LogSync {
                p50_us: of(|l| l.p50_us),
                count: of(|l| l.count as f64) as u64,
                records: of(|l| l.records as f64) as u64,
            });
        }
        out.push((row, min, max));
    }
    out
}
