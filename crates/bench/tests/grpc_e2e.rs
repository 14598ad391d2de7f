//! `cairn-bench grpc` against the real cairn binary: preloaded gets all hit, every call is
//! counted, the open loop sends what it is asked to, and the server's CPU is read.

mod common;

use std::process::Command;

fn bench(addr: &str, pid: u32, args: &[&str]) -> serde_json::Value {
    let out = tempfile::tempdir().unwrap();
    let json = out.path().join("r.json");
    let run = Command::new(env!("CARGO_BIN_EXE_cairn-bench"))
        .args(["grpc", "--addr", addr, "--server-pid", &pid.to_string()])
        .args(args)
        .arg("--json-out-file")
        .arg(&json)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&run.stdout).into_owned() + &String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{text}");
    assert!(text.contains("us per call"), "{text}");
    serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap()
}

#[test]
fn grpc_mode_counts_every_call_and_reads_the_server_cpu() {
    let Some(mut cairn) = common::Cairn::start(&["--grpc-listen", "127.0.0.1:0"]) else {
        return;
    };
    let addr = cairn.grpc_addr.clone().expect("gRPC address");
    let pid = cairn.child.id();
    // Before any set, gets miss (NOT_FOUND is a miss, not an error).
    let r0 = bench(
        &addr,
        pid,
        &["--call", "get", "-c", "3", "-n", "10", "--keys", "50"],
    );
    assert_eq!(r0["misses"], 30, "{r0}");
    assert_eq!(r0["ok"], 0, "{r0}");
    // Preloaded: every get hits; 3 workers x 10 calls.
    let r = bench(
        &addr,
        pid,
        &[
            "--call",
            "get",
            "-c",
            "3",
            "-n",
            "10",
            "--keys",
            "50",
            "--preload",
        ],
    );
    assert_eq!(r["ok"], 30, "{r}");
    assert_eq!(r["misses"], 0, "{r}");
    assert_eq!(r["errors"], 0, "{r}");
    assert!(r["server_cpu_us_per_op"].as_f64().unwrap() >= 0.0, "{r}");
    // Sets and health checks answer OK.
    for call in ["set", "health"] {
        let r = bench(&addr, pid, &["--call", call, "-c", "2", "-n", "5"]);
        assert_eq!(r["ok"], 10, "{call}: {r}");
    }
    // Open loop: the calls asked for, paced (2 workers x 20 at 2,000/s in total).
    let r = bench(
        &addr,
        pid,
        &[
            "--call", "get", "-c", "2", "-n", "20", "--keys", "50", "--rate", "2000",
        ],
    );
    assert_eq!(r["ok"], 40, "{r}");
    assert_eq!(r["offered_rate"], 2000, "{r}");
    cairn.child.kill().unwrap();
    cairn.child.wait().unwrap();
}
