//! Figures the suite derives from what it measured, as pure functions so they can be unit
//! tested without a server: throughput ratios against a baseline, the throughput dip while a
//! checkpoint runs, and the markdown tables for those and for recovery after `kill -9`.
//!
//! ```text
//!   summary (medians) ───────────────────> ratios ─────────> "ratios" table, JSON "ratios"
//!   row.timeline_ops + checkpoint_window ─> checkpoint_dip ─> "checkpoint" table, JSON row field
//!   Recovery (one per cairn async/sync run) ────────────────> "recovery" table, JSON "recovery"
//! ```
//!
//! Non-goals: statistics beyond medians; the machine is noisy, so the report gives ratios from
//! one side-by-side run rather than confidence intervals.

use crate::suite::{Recovery, Row};

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

/// Throughput while a checkpoint ran against throughput in the rest of the phase.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct CheckpointDip {
    /// How long the checkpoint took: end - start of its window.
    pub checkpoint_secs: f64,
    /// The whole seconds of the phase (0-based) that overlap the window, warm-up excluded:
    /// `during_ops_per_sec` is their mean.
    pub seconds_overlapped: Vec<usize>,
    /// Mean ops in the seconds the checkpoint overlapped.
    pub during_ops_per_sec: f64,
    /// Mean ops in the other whole seconds after the warm-up second.
    pub steady_ops_per_sec: f64,
    /// during / steady: 1 is no dip, 0.5 is half the throughput while checkpointing.
    pub during_over_steady: f64,
    /// The checkpoint took less than one second, so every overlapped second also holds normal
    /// traffic and the ratio understates the dip.
    pub shorter_than_one_second: bool,
}

/// The dip of one phase. `timeline_ops[i]` holds the ops completed in second `[i, i+1)` of a
/// phase that lasted `phase_secs`; `window` is the checkpoint's (start, end) in the same
/// seconds. Only whole seconds count: the last, partial one is left out, and so is second 0
/// (warm-up: connections opening, caches cold), both from "during" and from "steady".
/// None when no whole second is left on either side (a phase too short, or a checkpoint that
/// fell in the warm-up second or after the phase).
pub fn checkpoint_dip(
    timeline_ops: &[u64],
    phase_secs: f64,
    window: (f64, f64),
) -> Option<CheckpointDip> {
    let (start, end) = window;
    assert!(start >= 0.0 && end >= start, "bad window {window:?}");
    let whole = phase_secs.max(0.0).floor() as usize;
    let ops = |i: usize| timeline_ops.get(i).copied().unwrap_or(0) as f64;
    // Second i overlaps [start, end] if it starts at or before end and ends after start; a
    // window ending exactly on a boundary does not reach into the next second.
    let first = start.floor() as usize;
    let last = (end.ceil() as usize).saturating_sub(1).max(first);
    let during: Vec<usize> = (first..=last).filter(|&i| i >= 1 && i < whole).collect();
    let steady: Vec<usize> = (1..whole).filter(|i| !(first..=last).contains(i)).collect();
    if during.is_empty() || steady.is_empty() {
        return None;
    }
    let mean = |v: &[usize]| v.iter().map(|&i| ops(i)).sum::<f64>() / v.len() as f64;
    let (d, s) = (mean(&during), mean(&steady));
    Some(CheckpointDip {
        checkpoint_secs: end - start,
        seconds_overlapped: during,
        during_ops_per_sec: d,
        steady_ops_per_sec: s,
        during_over_steady: if s > 0.0 { d / s } else { 0.0 },
        shorter_than_one_second: end - start < 1.0,
    })
}

/// The "throughput during checkpoint / steady" markdown table, one line per measured row
/// that took a checkpoint. Empty when none did.
pub fn dip_table(rows: &[Row]) -> String {
    let picked: Vec<&Row> = rows
        .iter()
        .filter(|r| r.checkpoint_window.is_some())
        .collect();
    if picked.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "### throughput during checkpoint / steady\n\nMean ops/s in the whole seconds the \
         checkpoint overlapped, over the mean of the phase's other whole seconds (second 0 is \
         warm-up and left out of both).\n\n\
         | scenario | target | repeat | checkpoint s | window s | seconds averaged | ops/s during | ops/s steady | during / steady | note |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in picked {
        let (a, b) = r.checkpoint_window.unwrap_or_default();
        let head = format!(
            "| {} | {} | {} | {:.3} | {a:.2}-{b:.2} |",
            r.scenario,
            r.target,
            r.repeat,
            b - a
        );
        match &r.checkpoint_dip {
            Some(d) => {
                let secs: Vec<String> = d.seconds_overlapped.iter().map(usize::to_string).collect();
                let note = if d.shorter_than_one_second {
                    "checkpoint shorter than 1 s: averaged over the whole second(s) it overlaps"
                } else {
                    ""
                };
                s.push_str(&format!(
                    "{head} {} | {:.0} | {:.0} | {:.2} | {note} |\n",
                    secs.join(", "),
                    d.during_ops_per_sec,
                    d.steady_ops_per_sec,
                    d.during_over_steady
                ));
            }
            None => s.push_str(&format!(
                "{head} - | - | - | - | no whole second both in and outside the window after warm-up (phase too short) |\n"
            )),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn row(target: &str, scenario: &str, ops: f64) -> Row {
        Row {
            target: target.into(),
            scenario: scenario.into(),
            repeat: 0,
            ops_per_sec: ops,
            avg_ms: 0.0,
            p50_ms: 0.0,
            p90_ms: 0.0,
            p95_ms: 0.0,
            p99_ms: 0.0,
            p999_ms: 0.0,
            errors: 0,
            error_rate: 0.0,
            server_cpu_secs: 0.0,
            server_cpu_us_per_op: 0.0,
            load_generator_cpu_secs: 0.0,
            secs: 0.0,
            rss_after_insert_mib: 0.0,
            bytes_per_item: 0.0,
            timeline_ops: Vec::new(),
            checkpoint_window: None,
            checkpoint_dip: None,
            log_sync: None,
        }
    }

    fn summary(rows: Vec<Row>) -> Vec<(Row, f64, f64)> {
        rows.into_iter().map(|r| (r, 0.0, 0.0)).collect()
    }

    #[test]
    fn ratios_against_cairn_off_and_redis_always() {
        let s = summary(vec![
            row("cairn off", "insert", 100.0),
            row("cairn sync", "insert", 50.0),
            row("redis always", "insert", 25.0),
            row("cairn off", "retrieval", 200.0),
            row("cairn sync", "retrieval", 300.0),
        ]);
        let r = |scenario: &str, target: &str, baseline: &str, ratio: f64| Ratio {
            scenario: scenario.into(),
            target: target.into(),
            baseline: baseline.into(),
            ratio,
        };
        assert_eq!(
            ratios(&s),
            [
                r("insert", "cairn sync", "cairn off", 0.5),
                r("insert", "cairn sync", "redis always", 2.0),
                r("insert", "redis always", "cairn off", 0.25),
                r("retrieval", "cairn sync", "cairn off", 1.5),
            ]
        );
        let table = ratio_table(&ratios(&s));
        assert!(table.contains(
            "| scenario | cairn sync / cairn off | cairn sync / redis always | redis always / cairn off |"
        ));
        assert!(table.contains("| insert | 0.50 | 2.00 | 0.25 |"), "{table}");
        assert!(table.contains("| retrieval | 1.50 | - | - |"), "{table}");
    }

    #[test]
    fn durability_goals_from_the_medians() {
        let mut sync = row("cairn sync", "insert", 80.0);
        sync.p50_ms = 0.5;
        sync.log_sync = Some(crate::suite::LogSync {
            p50_us: 150.0,
            count: 10,
            records: 100,
        });
        let mut off = row("cairn off", "insert", 100.0);
        off.p50_ms = 0.25;
        let s = summary(vec![
            off,
            sync,
            row("redis always", "insert", 40.0),
            row("cairn async", "insert", 98.0),
            row("cairn off", "mixed 1:9", 100.0),
            row("cairn sync", "mixed 1:9", 85.0),
            row("redis always", "mixed 1:9", 60.0),
            row("cairn async", "mixed 1:9", 96.0),
        ]);
        let t = durability_goals(&s);
        assert!(
            t.contains("| SYNC >= 1.6x Redis always | insert 2.00, mixed 1:9 1.42 | missed |"),
            "{t}"
        );
        assert!(
            t.contains("500 us - 250 us = 250 us; durable write p50 150 us, so 1.67x it | met |"),
            "{t}"
        );
        assert!(
            t.contains("| SYNC 1:9 >= 0.9x OFF (at 2 x 200) | 0.85 | missed |"),
            "{t}"
        );
        assert!(
            t.contains("| ASYNC >= 0.97x OFF | insert 0.98, mixed 1:9 0.96 | missed |"),
            "{t}"
        );
        assert_eq!(
            durability_goals(&summary(vec![row("memcached", "insert", 1.0)])),
            ""
        );
    }

    #[test]
    fn no_baseline_no_ratios() {
        let s = summary(vec![
            row("cairn sync", "insert", 50.0),
            row("memcached", "insert", 80.0),
        ]);
        assert!(ratios(&s).is_empty());
        assert_eq!(ratio_table(&[]), "");
        // A baseline that measured nothing divides nothing.
        let s = summary(vec![
            row("cairn off", "insert", 0.0),
            row("cairn sync", "insert", 50.0),
        ]);
        assert!(ratios(&s).is_empty());
    }

    #[test]
    fn dip_of_a_short_checkpoint() {
        // 6.2 s phase: seconds 0..=5 whole, 6 partial. Checkpoint 2.30-2.55 s overlaps second 2.
        let t = [10, 100, 40, 100, 90, 110, 3];
        let d = checkpoint_dip(&t, 6.2, (2.30, 2.55)).unwrap();
        assert_eq!(d.seconds_overlapped, [2]);
        assert_eq!(d.during_ops_per_sec, 40.0);
        // Seconds 1, 3, 4, 5: warm-up (0) and the partial second (6) left out.
        assert_eq!(d.steady_ops_per_sec, 100.0);
        assert!((d.during_over_steady - 0.4).abs() < 1e-12);
        assert!((d.checkpoint_secs - 0.25).abs() < 1e-12);
        assert!(d.shorter_than_one_second);
    }

    #[test]
    fn dip_of_a_long_checkpoint() {
        // 1.5-3.0 overlaps seconds 1 and 2; ending exactly at 3.0 does not reach second 3.
        let t = [10, 50, 30, 80, 120];
        let d = checkpoint_dip(&t, 5.01, (1.5, 3.0)).unwrap();
        assert_eq!(d.seconds_overlapped, [1, 2]);
        assert_eq!(d.during_ops_per_sec, 40.0);
        assert_eq!(d.steady_ops_per_sec, 100.0);
        assert!(!d.shorter_than_one_second);
        // A second with no ops at all (a stall at the end) counts as 0, not as missing.
        let d = checkpoint_dip(&[10, 50, 30, 80], 5.0, (1.5, 3.0)).unwrap();
        assert_eq!(d.steady_ops_per_sec, 40.0);
        // A zero-length window at a boundary overlaps the second it starts.
        let d = checkpoint_dip(&t, 5.0, (3.0, 3.0)).unwrap();
        assert_eq!(d.seconds_overlapped, [3]);
    }

    #[test]
    fn dip_needs_whole_seconds_on_both_sides() {
        // Checkpoint in the warm-up second only.
        assert_eq!(checkpoint_dip(&[10, 100, 100], 3.0, (0.1, 0.4)), None);
        // Two whole seconds: warm-up and the checkpoint's, nothing steady.
        assert_eq!(checkpoint_dip(&[10, 40, 5], 2.01, (1.1, 1.2)), None);
        // Checkpoint finishing after the phase, in the partial second.
        assert_eq!(checkpoint_dip(&[10, 100, 100, 4], 3.1, (3.05, 3.09)), None);
        // Shortest phase that gives a figure: 3 whole seconds.
        let d = checkpoint_dip(&[10, 40, 80, 1], 3.001, (1.1, 1.2)).unwrap();
        assert_eq!(d.during_over_steady, 0.5);
    }

    #[test]
    fn dip_table_says_when_there_is_no_figure() {
        let mut a = row("cairn sync", "mixed 1:9", 1.0);
        a.checkpoint_window = Some((2.3, 2.55));
        a.checkpoint_dip = checkpoint_dip(&[10, 100, 40, 100], 4.0, (2.3, 2.55));
        let mut b = row("cairn async", "mixed 1:9", 1.0);
        b.checkpoint_window = Some((0.0, 0.1));
        let c = row("cairn off", "mixed 1:9", 1.0);
        let t = dip_table(&[a, b, c]);
        assert!(
            t.contains("| mixed 1:9 | cairn sync | 0 | 0.250 | 2.30-2.55 | 2 | 40 | 100 | 0.40 | checkpoint shorter than 1 s"),
            "{t}"
        );
        assert!(
            t.contains("| mixed 1:9 | cairn async | 0 | 0.100 | 0.00-0.10 | - | - | - | - | no whole second"),
            "{t}"
        );
        assert!(!t.contains("cairn off"));
        assert_eq!(dip_table(&[row("cairn off", "insert", 1.0)]), "");
    }
}
