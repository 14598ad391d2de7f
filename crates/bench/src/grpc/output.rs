//! What `cairn-bench grpc` prints and writes: the summary lines of a run, its JSON
//! (`--json-out-file`), and `main`, which runs the load and fails when errors pass the bar.
//!
//! ```text
//!   GrpcArgs ─> run ─> GrpcResult ─> report (stdout), json (file) ─> check_error_rate
//! ```
//!
//! Non-goals: measuring (run.rs).

use super::args::GrpcArgs;
use super::run::{run, GrpcResult};

/// The summary lines of a run.
pub fn report(args: &GrpcArgs, r: &GrpcResult) -> String {
    let ms = |p: f64| r.latency.value_at_percentile(p) as f64 / 1000.0;
    let mode = match args.rate {
        Some(rate) => format!("offered {rate}/s"),
        None => "closed loop".to_string(),
    };
    let mut s = format!(
        "grpc {}: {} concurrent on {} connections, {mode}, {:.1} s\n\
         ops/s {:.0}  ok {}  misses {}  errors {}\n\
         latency ms: avg {:.3}  p50 {:.3}  p90 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}\n\
         load generator CPU {:.2} s ({:.0}% of one core)",
        args.call,
        args.concurrency,
        args.connections,
        r.secs,
        r.ops_per_sec(),
        r.ok,
        r.misses,
        r.errors,
        r.latency.mean() / 1000.0,
        ms(50.0),
        ms(90.0),
        ms(99.0),
        ms(99.9),
        r.latency.max() as f64 / 1000.0,
        r.bench_cpu_secs,
        100.0 * r.bench_cpu_secs / r.secs.max(1e-9),
    );
    if let (Some(cpu), Some(per_op)) = (r.server_cpu_secs, r.server_us_per_op()) {
        s += &format!(
            "; server CPU {cpu:.2} s ({:.0}% of one core), {per_op:.1} us per call",
            100.0 * cpu / r.secs.max(1e-9)
        );
    }
    s
}

/// The JSON of a run.
pub fn json(args: &GrpcArgs, r: &GrpcResult) -> serde_json::Value {
    let ms = |p: f64| r.latency.value_at_percentile(p) as f64 / 1000.0;
    serde_json::json!({
        "call": args.call, "concurrency": args.concurrency, "connections": args.connections,
        "offered_rate": args.rate, "seconds": r.secs, "ops_per_sec": r.ops_per_sec(),
        "ok": r.ok, "misses": r.misses, "errors": r.errors,
        "latency": {
            "avg_ms": r.latency.mean() / 1000.0, "p50_ms": ms(50.0), "p90_ms": ms(90.0),
            "p99_ms": ms(99.0), "p99.9_ms": ms(99.9), "max_ms": r.latency.max() as f64 / 1000.0,
        },
        "load_generator_cpu_seconds": r.bench_cpu_secs,
        "server_cpu_seconds": r.server_cpu_secs,
        "server_cpu_us_per_op": r.server_us_per_op(),
    })
}

/// `cairn-bench grpc` from its arguments (without the subcommand word).
pub fn main(args: &GrpcArgs) -> Result<(), String> {
    let r = run(args)?;
    println!("{}", report(args, &r));
    if let Some(path) = &args.json_out_file {
        let text = serde_json::to_string_pretty(&json(args, &r)).map_err(|e| e.to_string())?;
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    crate::load::check_error_rate(r.errors, r.answered())
}
