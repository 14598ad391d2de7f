//! Throughput compared: every target's ops/s over cairn off's and cairn sync's over Redis
//! `always` ([`ratios`] and their table), the cairn targets against memcached (issue 17's
//! bars), and the durability issue's goals, from one run's medians.
//!
//! ```text
//!   summary (medians) ─> ratios ─> ratio_table, JSON "ratios"
//!                     ─> against_memcached_table
//!                     ─> durability_goals
//! ```
//!
//! Non-goals: confidence intervals (ratios from one side-by-side run on a noisy machine).

use crate::rows::Row;

/// The target every other one is divided by: cairn with no persistence.
pub const BASELINE: &str = "cairn off";
/// cairn's durable mode and the Redis mode with the same promise (fsync before the reply).
const SYNC: &str = "cairn sync";
const REDIS_ALWAYS: &str = "redis always";
const ASYNC: &str = "cairn async";

/// One throughput ratio in one scenario.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Ratio {
    pub scenario: String,
    /// The target whose ops/s is the numerator.
    pub target: String,
    /// The target whose ops/s is the denominator.
    pub baseline: String,
    /// target ops/s / baseline ops/s: above 1 is faster than the baseline.
    pub ratio: f64,
}

/// Per scenario: every target's ops/s over cairn off's (when cairn off was measured), and
/// cairn sync's over redis always' (when both were). Takes the medians from `summarize`.
pub fn ratios(summary: &[(Row, f64, f64)]) -> Vec<Ratio> {
    let ops = |scenario: &str, target: &str| {
        summary
            .iter()
            .find(|(r, _, _)| r.scenario == scenario && r.target == target)
            .map(|(r, _, _)| r.ops_per_sec)
            .filter(|&o| o > 0.0)
    };
    let mut out = Vec::new();
    for (r, _, _) in summary {
        let mut baselines = Vec::new();
        if r.target != BASELINE {
            baselines.push(BASELINE);
        }
        if r.target == SYNC {
            baselines.push(REDIS_ALWAYS);
        }
        for b in baselines {
            if let Some(base) = ops(&r.scenario, b) {
                out.push(Ratio {
                    scenario: r.scenario.clone(),
                    target: r.target.clone(),
                    baseline: b.into(),
                    ratio: r.ops_per_sec / base,
                });
            }
        }
    }
    out
}

/// Issue 17's three bars per scenario, for every cairn target against memcached: ops/s
/// ratio (>= 1 wanted), server CPU per op ratio (<= 0.8 wanted), and p99 (cairn's <=
/// memcached's wanted). Empty when memcached was not measured.
pub fn against_memcached_table(summary: &[(Row, f64, f64)]) -> String {
    let find = |scenario: &str, target: &str| {
        summary
            .iter()
            .map(|(r, _, _)| r)
            .find(|r| r.scenario == scenario && r.target == target)
    };
    let mut lines = Vec::new();
    for (r, _, _) in summary {
        if !r.target.starts_with("cairn ") {
            continue;
        }
        let Some(m) = find(&r.scenario, "memcached") else {
            continue;
        };
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
        lines.push(format!(
            "| {} | {} | {:.2} | {:.2} / {:.2} = {:.2} | {:.3} / {:.3} |\n",
            r.scenario,
            r.target,
            ratio(r.ops_per_sec, m.ops_per_sec),
            r.server_cpu_us_per_op,
            m.server_cpu_us_per_op,
            ratio(r.server_cpu_us_per_op, m.server_cpu_us_per_op),
            r.p99_ms,
            m.p99_ms,
        ));
    }
    if lines.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "### against memcached\n\nMedians over repeats. Server CPU per op is the server \
         process's user + system time over the phase divided by its successful ops.\n\n\
         | scenario | target | ops/s ratio | server CPU us/op (target / memcached = ratio) | \
         p99 ms (target / memcached) |\n|---|---|---|---|---|\n",
    );
    for l in lines {
        s.push_str(&l);
    }
    s
}

/// The "ratios" markdown table: one row per scenario, one column per (target, baseline).
/// Empty when nothing could be compared.
pub fn ratio_table(ratios: &[Ratio]) -> String {
    let mut scenarios: Vec<&str> = Vec::new();
    let mut columns: Vec<(&str, &str)> = Vec::new();
    for r in ratios {
        if !scenarios.contains(&r.scenario.as_str()) {
            scenarios.push(&r.scenario);
        }
        if !columns.contains(&(r.target.as_str(), r.baseline.as_str())) {
            columns.push((&r.target, &r.baseline));
        }
    }
    if columns.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "### ratios\n\nops/s of a target divided by ops/s of another in the same scenario \
         (medians over repeats); above 1 is faster.\n\n| scenario |",
    );
    for (t, b) in &columns {
        s.push_str(&format!(" {t} / {b} |"));
    }
    s.push_str("\n|---|");
    s.push_str(&"---|".repeat(columns.len()));
    s.push('\n');
    for sc in scenarios {
        s.push_str(&format!("| {sc} |"));
        for (t, b) in &columns {
            match ratios
                .iter()
                .find(|r| r.scenario == sc && r.target == *t && r.baseline == *b)
            {
                Some(r) => s.push_str(&format!(" {:.2} |", r.ratio)),
                None => s.push_str(" - |"),
            }
        }
        s.push('\n');
    }
    s
}

/// The durability issue's goals (issue 15 §2, §2b) from one run's medians, as far as the run
/// measured the targets they compare: SYNC over Redis `always` (>= 1.6 in every scenario),
/// SYNC's insert p50 over OFF's against twice the log's durable write p50 in that same phase
/// (the limit of group commit: a write waits for the durable write running when it arrives,
/// then for its own), SYNC over OFF at 1:9 (>= 0.9 at 2 x 200 connections), ASYNC over OFF
/// (>= 0.97). Empty when none applies.
pub fn durability_goals(summary: &[(Row, f64, f64)]) -> String {
    let row = |scenario: &str, target: &str| {
        summary
            .iter()
            .find(|(r, _, _)| r.scenario == scenario && r.target == target)
            .map(|(r, _, _)| r)
    };
    let mut scenarios: Vec<&str> = Vec::new();
    for (r, _, _) in summary {
        if !scenarios.contains(&r.scenario.as_str()) {
            scenarios.push(&r.scenario);
        }
    }
    let ratio = |sc: &str, a: &str, b: &str| {
        Some(row(sc, a)?.ops_per_sec / row(sc, b)?.ops_per_sec).filter(|r| r.is_finite())
    };
    let list = |a: &str, b: &str, bar: f64| {
        let got: Vec<(&str, f64)> = scenarios
            .iter()
            .filter_map(|sc| Some((*sc, ratio(sc, a, b)?)))
            .collect();
        (!got.is_empty()).then(|| {
            let text: Vec<String> = got.iter().map(|(sc, r)| format!("{sc} {r:.2}")).collect();
            let met = got.iter().all(|(_, r)| *r >= bar);
            (text.join(", "), met)
        })
    };
    let yes = |met: bool| if met { "met" } else { "missed" };
    let mut lines = Vec::new();
    if let Some((text, met)) = list(SYNC, REDIS_ALWAYS, 1.6) {
        lines.push(format!(
            "| SYNC >= 1.6x Redis always | {text} | {} |",
            yes(met)
        ));
    }
    if let (Some(sync), Some(off)) = (row("insert", SYNC), row("insert", BASELINE)) {
        if let Some(l) = sync.log_sync.as_ref().filter(|l| l.count > 0) {
            let gap_us = (sync.p50_ms - off.p50_ms) * 1000.0;
            lines.push(format!(
                "| SYNC insert p50 - OFF insert p50 <= 2x the durable write p50 | {:.0} us - {:.0} us = {gap_us:.0} us; durable write p50 {:.0} us, so {:.2}x it | {} |",
                sync.p50_ms * 1000.0,
                off.p50_ms * 1000.0,
                l.p50_us,
                gap_us / l.p50_us,
                yes(gap_us <= 2.0 * l.p50_us)
            ));
        }
    }
    if let Some(r) = ratio("mixed 1:9", SYNC, BASELINE) {
        lines.push(format!(
            "| SYNC 1:9 >= 0.9x OFF (at 2 x 200) | {r:.2} | {} |",
            yes(r >= 0.9)
        ));
    }
    if let Some((text, met)) = list(ASYNC, BASELINE, 0.97) {
        lines.push(format!("| ASYNC >= 0.97x OFF | {text} | {} |", yes(met)));
    }
    if lines.is_empty() {
        return String::new();
    }
    format!(
        "### durability goals\n\n| goal | measured (medians) | |\n|---|---|---|\n{}\n",
        lines.join("\n")
    )
}
