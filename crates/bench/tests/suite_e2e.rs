//! A tiny suite against the real cairn binary: every scenario of every target has a row in the
//! table and the JSON, with non-zero figures, and the charts are written.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn tiny_suite_reports_every_row() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let cairn = root.join("target/debug/cairn");
    if !cairn.exists() {
        assert!(
            std::env::var_os("CI").is_none(),
            "target/debug/cairn missing under CI"
        );
        eprintln!("skipped: build the server first (cargo build -p cairn-server)");
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let status = Command::new(env!("CARGO_BIN_EXE_cairn-bench"))
        .args([
            "suite",
            "arcus",
            "--keys",
            "2000",
            "--phase-secs",
            "1",
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
    for chart in ["throughput.svg", "latency.svg", "timeline.svg"] {
        let svg = std::fs::read_to_string(out.path().join(chart)).unwrap();
        assert!(
            svg.contains("<svg") && svg.contains("cairn sync"),
            "{chart}"
        );
    }
}
