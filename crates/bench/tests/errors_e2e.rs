//! cairn-bench against the real cairn binary: error replies are counted apart from successful
//! operations, shown in the table and the JSON, and a run with more than 0.1% of them fails.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// `target/debug/cairn -p 0 <args>` with a fresh data folder, once it is ready; None where the
/// server is not built (a failure under CI).
fn start_cairn(args: &[&str]) -> Option<(Child, u16, tempfile::TempDir)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let cairn = root.join("target/debug/cairn");
    if !cairn.exists() {
        assert!(
            std::env::var_os("CI").is_none(),
            "target/debug/cairn missing under CI"
        );
        eprintln!("skipped: build the server first (cargo build -p cairn-server)");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(cairn)
        // No gRPC: its default port is fixed, and the tests run side by side.
        .args(["-p", "0", "--persistence", "off", "--grpc-listen", "off"])
        .arg("--data-dir")
        .arg(dir.path())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let port = lines
        .map_while(Result::ok)
        .find_map(|l| {
            l.strip_prefix("cairn listening on ")?
                .rsplit(':')
                .next()?
                .parse()
                .ok()
        })
        .expect("cairn exited before it was ready");
    Some((child, port, dir))
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
    let Some((mut cairn, port, _dir)) = start_cairn(&["-m", "2", "-M"]) else {
        return;
    };
    let (ok, text, json) = bench(port, "10000", "500");
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

    cairn.kill().unwrap();
    cairn.wait().unwrap();

    // With room for them, no error: the run passes.
    let (mut cairn, port, _dir) = start_cairn(&["-M"]).unwrap();
    let (ok, text, json) = bench(port, "10000", "500");
    assert!(ok, "{text}");
    assert_eq!(json["errors"].as_u64(), Some(0));
    assert_eq!(json["sets"].as_u64(), Some(1000));
    cairn.kill().unwrap();
    cairn.wait().unwrap();
}
