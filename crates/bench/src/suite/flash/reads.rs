//! F2 and F3 alone, for work on the flash read path: `--flash-phases reads` (cairn,
//! memcached extstore and fio, side by side)
//! and `--flash-phases reads-ab` (`--cairn-bin` against each `--cairn-alt` build, rounds
//! alternating, fio in each, medians).
//!
//! ```text
//!   reads:    cairn RAM-only (QD1 p50) ─> cairn flash ─> memcached extstore
//!             ─> fio QD n and 1 ─> flash-reads-results.{md,json}
//!   reads-ab: every build started and filled ─> rounds: each build's F2, F3, then fio
//!             ─> flash-reads-ab-results.{md,json}
//! ```
//!
//! Non-goals: the other F figures (run.rs).

use std::fmt::Write as _;
use std::path::Path;

use super::fio::fio_qd_and_qd1;
use super::phases::{get_phases, insert, ram_qd1_p50, ratio, read_phases, Figures};
use super::servers::{cairn, cairn_env, extstore, flash_server_args};
use crate::report::median;
use crate::servers::free_port;
use crate::suite::SuiteArgs;

/// `--flash-phases reads`: F2 and F3 alone, side by side in one run: cairn RAM-only (the
/// one-client p50 without flash), cairn with flash, memcached extstore, and fio on cairn's
/// flash file at the load's queue depth and at 1.
pub(super) fn reads(
    args: &SuiteArgs,
    dir: &Path,
    flash_mb: u64,
    ram_only_mb: u64,
) -> Result<(), String> {
    let qd = args.threads * args.clients;
    let say = |s: &str| {
        if !args.quiet {
            eprintln!("[flash reads] {s}");
        }
    };
    say("cairn RAM-only: insert, one client's gets");
    let ram_p50 = {
        let d = tempfile::tempdir_in(dir).map_err(|e| e.to_string())?;
        let extra = vec![
            "-m".to_string(),
            ram_only_mb.to_string(),
            "--persistence".into(),
            "off".into(),
        ];
        let p = cairn(args, free_port()?, &extra, d.path())?;
        ram_qd1_p50(args, &p)?
    };
    let cairn_dir = tempfile::tempdir_in(dir).map_err(|e| e.to_string())?;
    let file = cairn_dir.path().join("cairn.flash");
    let mut written = 0.0;
    let mut run_cairn = |env: &[(&str, &str)]| -> Result<Figures, String> {
        let _ = std::fs::remove_file(&file);
        let extra = flash_server_args(args, &file, flash_mb);
        let p = cairn_env(args, free_port()?, &extra, cairn_dir.path(), env)?;
        let f = read_phases(args, &p, true)?;
        written = p
            .stats()?
            .get("extstore_bytes_used")
            .copied()
            .unwrap_or(0.0);
        Ok(f)
    };
    say("cairn flash: insert, uniform gets, one client's gets");
    let own = run_cairn(&[])?;
    say("memcached extstore: the same");
    let mc = extstore(args, cairn_dir.path(), flash_mb, |p| {
        read_phases(args, p, false)
    })?;
    say(&format!("fio on cairn's flash file, QD {qd} and QD 1"));
    let (fio_iops, fio_qd1_p50) = fio_qd_and_qd1(&file, written, qd, args.phase_secs)?;
    let mut md = format!(
        "flash suite, F2 and F3 alone: {} keys of {} bytes, -m {} MiB, flash {} MiB, {} threads          x {} clients; 2 cores shared by the servers, the load generator, fio and other work.\n\n",
        args.keys, args.data_size, args.ram_mb, flash_mb, args.threads, args.clients
    );
    md.push_str("| server | F2 gets/s | from flash | hit ratio | x fio QD | x extstore | reads/flash hit | device reads/miss | F3 p50 us | p99 us | p50 - fio QD1 p50 |\n");
    md.push_str("|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (name, f) in [("cairn", &own), ("memcached extstore", &mc)] {
        let _ = writeln!(
            md,
            "| {name} | {:.0} | {:.0}% | {:.2} | {:.2}x | {:.2}x | {:.3} | {:.4} | {:.0} | {:.0} | {:+.0} |",
            f.get_ops_per_sec,
            f.get_from_flash * 100.0,
            f.get_hit_ratio,
            ratio(f.get_ops_per_sec, fio_iops),
            ratio(f.get_ops_per_sec, mc.get_ops_per_sec),
            f.reads_per_flash_hit,
            f.device_reads_per_miss,
            f.qd1_get_p50_us,
            f.qd1_get_p99_us,
            f.qd1_get_p50_us - fio_qd1_p50
        );
    }
    let _ = writeln!(
        md,
        "\nfio QD {qd}: {fio_iops:.0} IOPS; fio QD1 p50 {fio_qd1_p50:.0} us; cairn RAM-only one-client get p50 {ram_p50:.0} us."
    );
    println!("{md}");
    std::fs::write(args.out_dir.join("flash-reads-results.md"), &md).map_err(|e| e.to_string())?;
    let json = serde_json::json!({
        "keys": args.keys, "data_size": args.data_size, "ram_mb": args.ram_mb,
        "flash_mb": flash_mb, "threads": args.threads, "clients": args.clients,
        "phase_secs": args.phase_secs, "cairn_ram_only_qd1_p50_us": ram_p50,
        "cairn": own, "memcached_extstore": mc,
        "fio": {"qd": qd, "iops": fio_iops, "qd1_p50_us": fio_qd1_p50},
    });
    std::fs::write(
        args.out_dir.join("flash-reads-results.json"),
        serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())
}

/// `--flash-phases reads-ab`: F2 and F3 of `--cairn-bin` against each `--cairn-alt` build
/// (A/B of a change on the read path). Every build runs at once, each with its own flash file,
/// filled once; then `--repeat` rounds, each measuring the builds one after the other (A B,
/// A B, ...) and fio on the first build's file at the load's queue depth and at 1. The table
/// gives every round and the medians; a build's ratio to fio is its median over the rounds
/// of its gets/s to that round's fio IOPS.
pub(super) fn reads_ab(args: &SuiteArgs, dir: &Path, flash_mb: u64) -> Result<(), String> {
    let qd = args.threads * args.clients;
    let say = |s: &str| {
        if !args.quiet {
            eprintln!("[flash reads-ab] {s}");
        }
    };
    let mut builds = vec![("base".to_string(), args.cairn_bin.clone())];
    builds.extend(args.cairn_alt.iter().cloned());
    let mut servers = Vec::new();
    for (label, bin) in &builds {
        let d = tempfile::tempdir_in(dir).map_err(|e| e.to_string())?;
        let file = d.path().join("cairn.flash");
        let extra = flash_server_args(args, &file, flash_mb);
        let build_args = SuiteArgs {
            cairn_bin: bin.clone(),
            ..args.clone()
        };
        say(&format!(
            "cairn [{label}]: start, insert {} keys",
            args.keys
        ));
        let p = cairn(&build_args, free_port()?, &extra, d.path())?;
        insert(args, p.port)?;
        servers.push((label.clone(), p, file, d));
    }
    let written = servers[0]
        .1
        .stats()?
        .get("extstore_bytes_used")
        .copied()
        .unwrap_or(0.0);
    // rounds[r][b]: build b's figures in round r; fio[r]: (IOPS at QD, QD1 p50).
    let mut rounds: Vec<Vec<Figures>> = Vec::new();
    let mut fio_rounds = Vec::new();
    for r in 0..args.repeat.max(1) {
        let mut row = Vec::new();
        for (label, p, _, _) in &servers {
            say(&format!(
                "round {}: cairn [{label}] uniform gets, one client's gets",
                r + 1
            ));
            let mut f = Figures::default();
            get_phases(args, p, true, &mut f)?;
            row.push(f);
        }
        say(&format!("round {}: fio QD {qd} and QD 1", r + 1));
        fio_rounds.push(fio_qd_and_qd1(&servers[0].2, written, qd, args.phase_secs)?);
        rounds.push(row);
    }
    let mut md = format!(
        "flash suite, F2 and F3 A/B: {} keys of {} bytes, -m {} MiB, flash {} MiB, {} threads \
         x {} clients, {} rounds of {} s phases; 2 cores shared by the servers, the load \
         generator, fio and other work.\n\n",
        args.keys,
        args.data_size,
        args.ram_mb,
        flash_mb,
        args.threads,
        args.clients,
        rounds.len(),
        args.phase_secs
    );
    // What the cores allow: were they doing nothing else, the server and the load generator
    // at their CPU per get could make at most this many gets/s (F2's bound beside fio's).
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get()) as f64;
    let cpu_bound = |f: &Figures| {
        ratio(
            cores * 1e6,
            f.f2_server_cpu_us_per_get + f.f2_client_cpu_us_per_get,
        )
    };
    md.push_str("| round | build | F2 gets/s | from flash | x fio QD | reads/flash hit | device reads/miss | F3 p50 us | p99 us | p50 - fio QD1 p50 | fio QD IOPS | fio QD1 p50 us | F2 CPU us/get server + load gen | CPU bound gets/s | bound x fio |\n");
    md.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (r, row) in rounds.iter().enumerate() {
        let (iops, p50) = fio_rounds[r];
        for ((label, ..), f) in servers.iter().zip(row) {
            let _ = writeln!(
                md,
                "| {} | {label} | {:.0} | {:.0}% | {:.2}x | {:.3} | {:.4} | {:.0} | {:.0} | {:+.0} | {iops:.0} | {p50:.0} | {:.1} + {:.1} | {:.0} | {:.2}x |",
                r + 1,
                f.get_ops_per_sec,
                f.get_from_flash * 100.0,
                ratio(f.get_ops_per_sec, iops),
                f.reads_per_flash_hit,
                f.device_reads_per_miss,
                f.qd1_get_p50_us,
                f.qd1_get_p99_us,
                f.qd1_get_p50_us - p50,
                f.f2_server_cpu_us_per_get,
                f.f2_client_cpu_us_per_get,
                cpu_bound(f),
                ratio(cpu_bound(f), iops)
            );
        }
    }
    let mut summary = Vec::new();
    for (b, (label, ..)) in servers.iter().enumerate() {
        let col = |g: &dyn Fn(&Figures, (f64, f64)) -> f64| {
            median(
                rounds
                    .iter()
                    .zip(&fio_rounds)
                    .map(|(row, fio)| g(&row[b], *fio))
                    .collect(),
            )
        };
        let gets = col(&|f, _| f.get_ops_per_sec);
        let x_fio = col(&|f, (iops, _)| ratio(f.get_ops_per_sec, iops));
        let p50 = col(&|f, _| f.qd1_get_p50_us);
        let over = col(&|f, (_, p50)| f.qd1_get_p50_us - p50);
        let bound = col(&|f, _| cpu_bound(f));
        let bound_x = col(&|f, (iops, _)| ratio(cpu_bound(f), iops));
        let _ = writeln!(
            md,
            "| median | {label} | {gets:.0} | | {x_fio:.2}x | | | {p50:.0} | | {over:+.0} | | | | {bound:.0} | {bound_x:.2}x |"
        );
        summary.push(serde_json::json!({
            "build": label, "get_ops_per_sec": gets, "x_fio": x_fio,
            "qd1_p50_us": p50, "qd1_p50_minus_fio_us": over,
            "cpu_bound_gets_per_sec": bound, "cpu_bound_x_fio": bound_x,
        }));
    }
    println!("{md}");
    std::fs::write(args.out_dir.join("flash-reads-ab-results.md"), &md)
        .map_err(|e| e.to_string())?;
    let json = serde_json::json!({
        "keys": args.keys, "data_size": args.data_size, "ram_mb": args.ram_mb,
        "flash_mb": flash_mb, "threads": args.threads, "clients": args.clients,
        "phase_secs": args.phase_secs,
        "builds": builds.iter().map(|(l, p)| serde_json::json!({"label": l, "bin": p})).collect::<Vec<_>>(),
        "rounds": rounds, "fio": fio_rounds, "medians": summary,
    });
    std::fs::write(
        args.out_dir.join("flash-reads-ab-results.json"),
        serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())
}
