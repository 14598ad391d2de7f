//! A tiny suite against the real cairn binary: every scenario of every target has a row in the
//! table and the JSON, with non-zero figures; the ratios, checkpoint dip and recovery tables
//! and fields are there; and the charts are written.

mod common;

use std::process::Command;

#[test]
fn tiny_suite_reports_every_row() {
    let Some(cairn) = common::cairn_binary() else {
        return;
    };
    let out = tempfile::tempdir().unwrap();
    let status = Command::new(env!("CARGO_BIN_EXE_cairn-bench"))
        .args([
            "suite",
            "arcus",
            "--keys",
            "2000",
            // 3 s is the shortest phase with a checkpoint dip: warm-up second, the second the
            // checkpoint (at 1 s) overlaps, and one steady second.
            "--phase-secs",
            "3",
            "--threads",
            "1",
            "--clients",
            "4",
        ])
        .args([
            "--cairn-modes",
            "off,sync",
            "--redis-modes",
            "",
            "--no-memcached",
            "--quiet",
        ])
        .arg("--cairn-bin")
        .arg(&cairn)
        .arg("--out-dir")
        .arg(out.path())
        .status()
        .unwrap();
    assert!(status.success());
    let table = std::fs::read_to_string(out.path().join("results.md")).unwrap();
    for scenario in ["insert", "retrieval", "mixed 1:9", "mixed 3:7", "mixed 5:5"] {
        for target in ["cairn off", "cairn sync"] {
            let row = table
                .lines()
                .find(|l| l.starts_with(&format!("| {scenario} | {target} |")))
                .unwrap_or_else(|| panic!("no row for {scenario} / {target}:\n{table}"));
            let ops: f64 = row.split('|').nth(3).unwrap().trim().parse().unwrap();
            assert!(ops > 0.0, "{row}");
        }
    }
    let cell = |line: &str, i: usize| -> f64 {
        let c = line.split('|').nth(i).unwrap().trim();
        c.parse()
            .unwrap_or_else(|_| panic!("cell {i} of {line:?} is not a number"))
    };
    let section = |title: &str| -> Vec<&str> {
        table
            .split(&format!("### {title}\n"))
            .nth(1)
            .unwrap_or_else(|| panic!("no {title:?} table:\n{table}"))
            .lines()
            .take_while(|l| !l.starts_with("### "))
            .filter(|l| l.starts_with('|'))
            .collect()
    };
    let ratios = section("ratios");
    assert_eq!(
        ratios[0], "| scenario | cairn sync / cairn off |",
        "{table}"
    );
    for scenario in ["insert", "retrieval", "mixed 1:9", "mixed 3:7", "mixed 5:5"] {
        let row = ratios
            .iter()
            .find(|l| l.starts_with(&format!("| {scenario} |")))
            .unwrap_or_else(|| panic!("no ratio for {scenario}:\n{table}"));
        assert!(cell(row, 2) > 0.0, "{row}");
    }
    let dip = section("throughput during checkpoint / steady");
    assert_eq!(dip.len(), 3, "header, rule, cairn sync only:\n{table}");
    assert!(
        dip[2].starts_with("| mixed 1:9 | cairn sync | 0 |"),
        "{table}"
    );
    assert!(cell(dip[2], 9) > 0.0, "during / steady: {table}");
    let recovery = section("recovery after kill -9");
    assert_eq!(recovery.len(), 3, "header, rule, cairn sync only:\n{table}");
    assert!(recovery[2].starts_with("| cairn sync | 0 |"), "{table}");
    assert_eq!(cell(recovery[2], 5), 2000.0, "every key recovered: {table}");
    assert!(cell(recovery[2], 4) > 0.0, "restart to ready: {table}");

    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("results.json")).unwrap())
            .unwrap();
    let rows = json["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 10);
    assert!(rows
        .iter()
        .all(|r| r["ops_per_sec"].as_f64().unwrap() > 0.0 && r["p99_ms"].as_f64().unwrap() > 0.0));
    assert!(rows
        .iter()
        .all(|r| !r["timeline_ops"].as_array().unwrap().is_empty()));
    for r in rows {
        let dip = &r["checkpoint_dip"];
        if r["target"] == "cairn sync" && r["scenario"] == "mixed 1:9" {
            let (a, b) = (
                r["checkpoint_window"][0].as_f64().unwrap(),
                r["checkpoint_window"][1].as_f64().unwrap(),
            );
            assert!((1.0..b).contains(&a), "checkpoint at 1 s: {r}");
            assert!(dip["checkpoint_secs"].as_f64().unwrap() > 0.0, "{r}");
            assert!(dip["during_ops_per_sec"].as_f64().unwrap() > 0.0, "{r}");
            assert!(dip["steady_ops_per_sec"].as_f64().unwrap() > 0.0, "{r}");
            assert!(dip["during_over_steady"].as_f64().unwrap() > 0.0, "{r}");
            assert!(!dip["seconds_overlapped"].as_array().unwrap().is_empty());
            assert!(dip["shorter_than_one_second"].is_boolean());
        } else {
            assert!(dip.is_null(), "no checkpoint, no dip: {r}");
        }
    }
    let ratios = json["ratios"].as_array().unwrap();
    assert_eq!(ratios.len(), 5, "cairn sync / cairn off per scenario");
    assert!(ratios.iter().all(|r| r["target"] == "cairn sync"
        && r["baseline"] == "cairn off"
        && r["ratio"].as_f64().unwrap() > 0.0));
    let recovery = json["recovery"].as_array().unwrap();
    assert_eq!(recovery.len(), 1, "only cairn sync is killed and restarted");
    let r = &recovery[0];
    assert_eq!(r["target"], "cairn sync");
    assert_eq!(r["recovered_items"], 2000, "{r}");
    assert!(r["restart_to_ready_ms"].as_f64().unwrap() > 0.0, "{r}");
    // recovery_ms is whole milliseconds and may be 0 for 2000 items; items/s only when not.
    assert!(r["recovery_ms"].is_u64(), "{r}");
    assert_eq!(r["items_per_sec"].is_null(), r["recovery_ms"] == 0, "{r}");
    for chart in ["throughput.svg", "latency.svg", "timeline.svg"] {
        let svg = std::fs::read_to_string(out.path().join(chart)).unwrap();
        assert!(
            svg.contains("<svg") && svg.contains("cairn sync"),
            "{chart}"
        );
    }
}
