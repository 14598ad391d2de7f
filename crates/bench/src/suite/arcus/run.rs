//! `cairn-bench suite arcus` from its flags: every target measured, `--repeat` times,
//! alternating (A B C A B C ...), then the report: the markdown tables (printed and written to
//! results.md), results.json with per-second timelines, and the SVG charts. A run whose error
//! replies pass the bar still writes its report, then fails.
//!
//! ```text
//!   targets ─> for each repeat, each target: measure ─> rows, recoveries
//!     ─> report::summarize ─> tables ─> results.md ; rows ─> results.json ; chart::all ─> *.svg
//! ```
//!
//! Non-goals: the flash scenarios (suite/flash).

use super::phases::measure;
use super::target::targets;
use crate::report;
use crate::suite::SuiteArgs;

/// Runs the ARCUS scenarios and writes their report.
pub fn run(args: &SuiteArgs) -> Result<(), String> {
    let targets = targets(args)?;
    if targets.is_empty() {
        return Err("no target to measure".into());
    }
    std::fs::create_dir_all(&args.out_dir)
        .map_err(|e| format!("{}: {e}", args.out_dir.display()))?;
    let mut rows = Vec::new();
    let mut recoveries = Vec::new();
    for rep in 0..args.repeat.max(1) {
        for t in &targets {
            let (r, recovery) = measure(t, args, rep)?;
            rows.extend(r);
            recoveries.extend(recovery);
        }
    }
    let summary = report::summarize(&rows);
    let ratios = report::ratios(&summary);
    let mut md = report::table(&summary, args.repeat.max(1));
    for extra in [
        report::ratio_table(&ratios),
        report::against_memcached_table(&summary),
        report::durability_goals(&summary),
        report::dip_table(&rows),
        report::recovery_table(&recoveries),
    ] {
        if !extra.is_empty() {
            md.push('\n');
            md.push_str(&extra);
        }
    }
    println!("{md}");
    std::fs::write(args.out_dir.join("results.md"), &md).map_err(|e| e.to_string())?;
    let json = serde_json::json!({
        "keys": args.keys, "phase_secs": args.phase_secs, "threads": args.threads,
        "clients": args.clients, "data_size": args.data_size, "repeat": args.repeat,
        "pipeline": args.pipeline,
        "rows": rows, "ratios": ratios, "recovery": recoveries,
    });
    std::fs::write(
        args.out_dir.join("results.json"),
        serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())?;
    crate::chart::all(&summary, &rows, &args.out_dir)?;
    eprintln!(
        "wrote {}/results.md, results.json, throughput.svg, latency.svg, timeline.svg",
        args.out_dir.display()
    );
    // The report is written either way, so that the errors can be seen; the run fails.
    let failed: Vec<String> = rows
        .iter()
        .filter(|r| r.error_rate > crate::load::MAX_ERROR_RATE)
        .map(|r| {
            format!(
                "{} / {} (repeat {}): {:.3}% errors",
                r.target,
                r.scenario,
                r.repeat,
                r.error_rate * 100.0
            )
        })
        .collect();
    if !failed.is_empty() {
        return Err(format!(
            "error rate above {:.1}%: {}",
            crate::load::MAX_ERROR_RATE * 100.0,
            failed.join("; ")
        ));
    }
    Ok(())
}
