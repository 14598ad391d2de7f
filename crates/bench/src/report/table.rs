//! The markdown tables of an ARCUS run that list what was measured: the results table (a line
//! per scenario and target, medians over repeats) and the recovery table (a line per restart
//! after `kill -9`).
//!
//! Non-goals: derived figures (ratios, goals, the checkpoint dip are in their own files).

use crate::rows::{Recovery, Row};

/// The markdown table.
pub fn table(summary: &[(Row, f64, f64)], repeats: usize) -> String {
    let mut s = String::new();
    s.push_str("| scenario | target | ops/s | spread (min-max) | avg ms | p50 ms | p90 ms | p95 ms | p99 ms | p99.9 ms | server CPU s | server CPU us/op | load gen CPU s | RSS after insert MiB | bytes/item | errors | log sync p50 us | records per log sync |\n");
    s.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    let mut scenarios: Vec<&str> = Vec::new();
    for (r, _, _) in summary {
        if !scenarios.contains(&r.scenario.as_str()) {
            scenarios.push(&r.scenario);
        }
    }
    for sc in scenarios {
        for (r, min, max) in summary.iter().filter(|(r, _, _)| r.scenario == sc) {
            let spread = if repeats > 1 {
                format!("{min:.0}-{max:.0}")
            } else {
                "-".into()
            };
            let (sync_p50, per_sync) = match &r.log_sync {
                Some(l) if l.count > 0 => (
                    format!("{:.0}", l.p50_us),
                    format!("{:.1}", l.records as f64 / l.count as f64),
                ),
                _ => ("-".into(), "-".into()),
            };
            s.push_str(&format!(
                "| {} | {} | {:.0} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.1} | {:.2} | {:.1} | {:.0} | {:.0} | {} | {} | {} |\n",
                r.scenario, r.target, r.ops_per_sec, spread, r.avg_ms, r.p50_ms, r.p90_ms, r.p95_ms, r.p99_ms, r.p999_ms,
                r.server_cpu_secs, r.server_cpu_us_per_op, r.load_generator_cpu_secs, r.rss_after_insert_mib, r.bytes_per_item, r.errors,
                sync_p50, per_sync
            ));
        }
    }
    s
}

/// The "recovery after kill -9" markdown table. Empty when nothing was recovered.
pub fn recovery_table(recoveries: &[Recovery]) -> String {
    if recoveries.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "### recovery after kill -9\n\nThe server is killed with SIGKILL after the last phase \
         and started again on the same data directory. recovery ms is the server's own figure \
         (`stats persistence` recovery_ms: snapshot load and log replay); restart to ready ms \
         is from spawning the process to its `cairn listening` line.\n\n\
         | target | repeat | recovery ms | restart to ready ms | items recovered | log records replayed | items/s |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for r in recoveries {
        let per_sec = r
            .items_per_sec
            .map_or("- (under 1 ms)".into(), |v| format!("{v:.0}"));
        s.push_str(&format!(
            "| {} | {} | {} | {:.1} | {} | {} | {per_sec} |\n",
            r.target,
            r.repeat,
            r.recovery_ms,
            r.restart_to_ready_ms,
            r.recovered_items,
            r.recovered_log_records
        ));
    }
    s
}
