//! `cairn-bench suite flash` from its flags: `--flash-phases all` runs cairn RAM-only (F1's
//! baseline), cairn with flash and memcached extstore through every phase, fio on cairn's
//! flash file, then F5; the table goes to stdout and flash-results.md, the figures to
//! flash-results.json. `f5` runs F5 alone; `reads` and `reads-ab` are in reads.rs.
//!
//! ```text
//!   cairn RAM-only insert ─> cairn flash phases ─> extstore phases ─> fio ─> F5
//!     ─> table (F1-F6 against their bars) ─> flash-results.{md,json}
//! ```
//!
//! Non-goals: Redis; more than one build (reads-ab does A/B).

use std::fmt::Write as _;
use std::path::PathBuf;

use super::f5::{crash, f5_row};
use super::fio::fio_qd_and_qd1;
use super::phases::{insert, item_bytes, phases, ratio};
use super::reads::{reads, reads_ab};
use super::servers::{cairn, extstore};
use crate::servers::free_port;
use crate::suite::SuiteArgs;

/// Runs the flash scenarios `--flash-phases` names and writes their report.
pub fn run(args: &SuiteArgs) -> Result<(), String> {
    std::fs::create_dir_all(&args.out_dir)
        .map_err(|e| format!("{}: {e}", args.out_dir.display()))?;
    let dir: PathBuf = args
        .flash_dir
        .clone()
        .unwrap_or_else(|| args.out_dir.clone());
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let data_bytes = args.keys as f64 * item_bytes(args);
    // Room for every item twice over (headers, dead copies of overwrites), at least 512 MiB.
    let flash_mb = ((data_bytes * 2.5) as u64 >> 20).max(512);
    let ram_only_mb = ((data_bytes * 3.0) as u64 >> 20).max(1024);
    let qd = args.threads * args.clients;
    let say = |s: &str| {
        if !args.quiet {
            eprintln!("[flash] {s}");
        }
    };
    match args.flash_phases.as_str() {
        "all" => {}
        "reads" => return reads(args, &dir, flash_mb, ram_only_mb),
        "reads-ab" => return reads_ab(args, &dir, flash_mb),
        "f5" => {
            say("F5 alone: cairn with flash, persistence sync: insert, kill -9, restart");
            let f5 = crash(args, &dir, flash_mb)?;
            let mut md = format!(
                "flash suite, F5 alone: {} keys of {} bytes, -m {} MiB, flash {} MiB; 2 cores \
                 shared by the server, the load generator and other work.\n\n",
                args.keys, args.data_size, args.ram_mb, flash_mb
            );
            md.push_str(&f5_row(&f5));
            println!("{md}");
            std::fs::write(args.out_dir.join("flash-f5-results.md"), &md)
                .map_err(|e| e.to_string())?;
            let json = serde_json::json!({
                "keys": args.keys, "data_size": args.data_size, "ram_mb": args.ram_mb,
                "flash_mb": flash_mb, "f5": f5,
            });
            std::fs::write(
                args.out_dir.join("flash-f5-results.json"),
                serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?,
            )
            .map_err(|e| e.to_string())?;
            return Ok(());
        }
        other => {
            return Err(format!(
                "--flash-phases {other:?}: expected all, reads, reads-ab or f5"
            ))
        }
    }

    say(&format!(
        "cairn RAM-only (-m {ram_only_mb}): insert {} keys",
        args.keys
    ));
    let ram_dir = tempfile::tempdir_in(&dir).map_err(|e| e.to_string())?;
    let ram_only = {
        let port = free_port()?;
        let extra = vec![
            "-m".to_string(),
            ram_only_mb.to_string(),
            "--persistence".into(),
            "off".into(),
        ];
        let p = cairn(args, port, &extra, ram_dir.path())?;
        let r = insert(args, port)?.ops_per_sec();
        drop(p);
        r
    };

    say("cairn with flash: all phases");
    let cairn_dir = tempfile::tempdir_in(&dir).map_err(|e| e.to_string())?;
    let cairn_file = cairn_dir.path().join("cairn.flash");
    let written;
    let cairn_figs = {
        let port = free_port()?;
        let extra: Vec<String> = vec![
            "-m".into(),
            args.ram_mb.to_string(),
            "--persistence".into(),
            "off".into(),
            "--flash-path".into(),
            cairn_file.display().to_string(),
            "--flash-size".into(),
            format!("{flash_mb}m"),
        ];
        let p = cairn(args, port, &extra, cairn_dir.path())?;
        let f = phases(args, &p, true)?;
        // Segments are written from the start of the file: fio reads that written part (an
        // unwritten extent reads as zeros without touching the disk).
        written = p
            .stats()?
            .get("extstore_bytes_used")
            .copied()
            .unwrap_or(0.0);
        f
    };

    say("memcached extstore: all phases");
    let mc_figs = extstore(args, cairn_dir.path(), flash_mb, |p| phases(args, p, false))?;

    say(&format!("fio on the flash file, QD {qd} and QD 1"));
    let (fio_iops, fio_qd1_p50) = fio_qd_and_qd1(&cairn_file, written, qd, args.phase_secs)?;
    drop(cairn_dir);

    say("F5: cairn with flash, persistence sync: insert, kill -9, restart");
    let f5 = crash(args, &dir, flash_mb)?;

    let c = &cairn_figs;
    let m = &mc_figs;
    let mut md = String::new();
    let _ = writeln!(
        md,
        "flash suite: {} keys of {} bytes ({:.0} MiB of items), -m {} MiB, flash {} MiB, {} \
         threads x {} clients; 2 cores shared by servers, load generator and fio.\n",
        args.keys,
        args.data_size,
        data_bytes / (1 << 20) as f64,
        args.ram_mb,
        flash_mb,
        args.threads,
        args.clients
    );
    md.push_str("| # | measure | cairn flash | memcached extstore | reference | ratio | bar |\n");
    md.push_str("|---|---|---|---|---|---|---|\n");
    let _ = writeln!(
        md,
        "| F1 | set rate, ops/s | {:.0} | {:.0} | cairn RAM-only {:.0} | {:.2}x RAM-only, {:.2}x extstore | >= 0.9x, >= 1.0x |",
        c.insert_ops_per_sec,
        m.insert_ops_per_sec,
        ram_only,
        ratio(c.insert_ops_per_sec, ram_only),
        ratio(c.insert_ops_per_sec, m.insert_ops_per_sec)
    );
    let _ = writeln!(
        md,
        "| F2 | uniform gets, ops/s (hits from flash: cairn {:.0}%, extstore {:.0}%; hit ratio {:.2} / {:.2}) | {:.0} | {:.0} | fio QD {qd} {:.0} IOPS | {:.2}x fio, {:.2}x extstore | >= 0.7x, >= 1.0x |",
        c.get_from_flash * 100.0,
        m.get_from_flash * 100.0,
        c.get_hit_ratio,
        m.get_hit_ratio,
        c.get_ops_per_sec,
        m.get_ops_per_sec,
        fio_iops,
        ratio(c.get_ops_per_sec, fio_iops),
        ratio(c.get_ops_per_sec, m.get_ops_per_sec)
    );
    let _ = writeln!(
        md,
        "| F2 | device reads per flash hit / per miss (stats) | {:.3} / {:.4} | | | | 1.00 / <= 0.01 |",
        c.reads_per_flash_hit, c.device_reads_per_miss
    );
    let _ = writeln!(
        md,
        "| F3 | one client get p50 / p99, us | {:.0} / {:.0} | {:.0} / {:.0} | fio QD1 p50 {:.0} | +{:.0} us | <= fio + 50 us |",
        c.qd1_get_p50_us,
        c.qd1_get_p99_us,
        m.qd1_get_p50_us,
        m.qd1_get_p99_us,
        fio_qd1_p50,
        c.qd1_get_p50_us - fio_qd1_p50
    );
    let _ = writeln!(
        md,
        "| F4 | RAM index per flash item, B (stats) / RSS delta per flash item, B | {:.1} / {:.1} ({:.0} flash items) | - / {:.1} ({:.0} items on flash) | | | <= 16 |",
        c.index_bytes_per_flash_item,
        c.rss_bytes_per_flash_item,
        c.flash_items,
        m.rss_bytes_per_flash_item,
        m.flash_items
    );
    md.push_str(&f5_row(&f5));
    let _ = writeln!(
        md,
        "| F6 | write amplification, 9:1 sets:gets, hot gets | {:.2} | {:.2} | | | <= 1.5 |",
        c.write_amplification, m.write_amplification
    );
    println!("{md}");
    std::fs::write(args.out_dir.join("flash-results.md"), &md).map_err(|e| e.to_string())?;
    let json = serde_json::json!({
        "keys": args.keys, "data_size": args.data_size, "ram_mb": args.ram_mb,
        "flash_mb": flash_mb, "threads": args.threads, "clients": args.clients,
        "phase_secs": args.phase_secs, "cairn_ram_only_insert_ops_per_sec": ram_only,
        "cairn": cairn_figs, "memcached_extstore": mc_figs,
        "fio": {"qd": qd, "iops": fio_iops, "qd1_p50_us": fio_qd1_p50},
        "f5": f5,
    });
    std::fs::write(
        args.out_dir.join("flash-results.json"),
        serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())?;
    Ok(())
}
