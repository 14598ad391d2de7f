//! The report's figures and tables from hand-made rows, without a server.

use super::dip::{checkpoint_dip, dip_table};
use super::ratios::{durability_goals, ratio_table, ratios, Ratio};
use crate::rows::{LogSync, Row};

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
    sync.log_sync = Some(LogSync {
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
        t.contains(
            "| mixed 1:9 | cairn async | 0 | 0.100 | 0.00-0.10 | - | - | - | - | no whole second"
        ),
        "{t}"
    );
    assert!(!t.contains("cairn off"));
    assert_eq!(dip_table(&[row("cairn off", "insert", 1.0)]), "");
}
