//! cairn-bench against the real cairn binary: error replies are counted apart from successful
//! operations, shown in the table and the JSON, and a run with more than 0.1% of them fails.

mod common;

use std::process::Command;

/// cairn with `args` and no gRPC (its default port is fixed, and the tests run side by side).
fn start_cairn(args: &[&str]) -> Option<common::Cairn> {
    common::Cairn::start(&[&["--grpc-listen", "off"], args].concat())
}

/// Runs `requests` sets of `size` bytes; returns (exit success, stdout+stderr, JSON).
fn bench(port: u16, size: &str, requests: &str) -> (bool, String, serde_json::Value) {
    let out = tempfile::tempdir().unwrap();
    let json = out.path().join("r.json");
    let run = Command::new(env!("CARGO_BIN_EXE_cairn-bench"))
        .args([
            "-s",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "--protocol",
            "memcache_text",
        ])
        .args([
            "--ratio",
            "1:0",
            "--key-pattern",
            "P:P",
            "--key-maximum",
            "100000",
        ])
        .args(["--threads", "1", "--clients", "2", "--quiet"])
        .args([
            "--data-size",
            size,
            "--requests",
            requests,
            "--json-out-file",
        ])
        .arg(&json)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&run.stdout).into_owned() + &String::from_utf8_lossy(&run.stderr);
    let value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    (run.status.success(), text, value)
}

#[test]
fn error_replies_are_counted_apart_and_fail_the_run() {
    // 2 MiB of memory and no eviction: most 10 KB sets get SERVER_ERROR out of memory.
    let Some(mut cairn) = start_cairn(&["-m", "2", "-M"]) else {
        return;
    };
    let (ok, text, json) = bench(cairn.port, "10000", "500");
    let (sets, errors) = (
        json["sets"].as_u64().unwrap(),
        json["errors"].as_u64().unwrap(),
    );
    assert!(!ok, "a run with {errors} errors passed:\n{text}");
    assert!(errors > 0 && sets > 0, "{json}");
    // Every request got exactly one reply, counted once: as a success or as an error.
    assert_eq!(sets + errors, 1000, "{json}");
    assert_eq!(json["set_errors"].as_u64(), Some(errors));
    assert!(text.contains("above the 0.1% allowed"), "{text}");
    let totals = text.lines().find(|l| l.starts_with("Totals")).unwrap();
    let cells: Vec<&str> = totals.split_whitespace().collect();
    assert_eq!(cells[4], errors.to_string(), "{text}");

    cairn.child.kill().unwrap();
    cairn.child.wait().unwrap();

    // With room for them, no error: the run passes.
    let mut cairn = start_cairn(&["-M"]).unwrap();
    let (ok, text, json) = bench(cairn.port, "10000", "500");
    assert!(ok, "{text}");
    assert_eq!(json["errors"].as_u64(), Some(0));
    assert_eq!(json["sets"].as_u64(), Some(1000));
    cairn.child.kill().unwrap();
    cairn.child.wait().unwrap();
}
