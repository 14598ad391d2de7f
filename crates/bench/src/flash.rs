//! `cairn-bench suite flash`: the fatcache seed's figures (issue 13, F1-F6) in one run, side by
//! side: cairn with everything in RAM, cairn with `-m RAM` and a flash file, memcached with
//! extstore (`-o ext_path=FILE:SIZE,ext_item_size=64`, same `-m`), and fio on cairn's flash file.
//!
//! ```text
//!   cairn RAM-only ─ insert (F1 baseline)
//!   cairn flash    ─ insert (F1, F4) ─ uniform gets (F2) ─ one client gets (F3) ─ 9:1 sets
//!                    with hot gets (F6)
//!   memcached ext  ─ the same phases
//!   fio            ─ 4 KiB random reads, O_DIRECT, io_uring, at the load's queue depth and at 1
//!   cairn flash, persistence sync ─ insert, overwrite + delete some, kill -9, restart (F5)
//! ```
//!
//! The flash files go in `--flash-dir` (default: the output folder), which must be on the disk
//! being measured (not tmpfs).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::keys::Pattern;
use crate::load::{self, LoadConfig, LoadResult, Protocol};
use crate::procstat::rss_bytes;
use crate::report::median;
use crate::servers::{free_port, memcache_stats, wait_ready};
use crate::suite::SuiteArgs;

/// A server started for one part of the run, killed on drop.
struct Proc {
    child: Child,
    port: u16,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    fn pid(&self) -> String {
        self.child.id().to_string()
    }

    fn stats(&self) -> Result<HashMap<String, f64>, String> {
        Ok(memcache_stats("127.0.0.1", self.port, "")?
            .into_iter()
            .filter_map(|(k, v)| Some((k, v.parse().ok()?)))
            .collect())
    }
}

fn cairn(args: &SuiteArgs, port: u16, extra: &[String], dir: &Path) -> Result<Proc, String> {
    cairn_env(args, port, extra, dir, &[])
}

/// [`cairn`] with environment variables set for the server.
fn cairn_env(
    args: &SuiteArgs,
    port: u16,
    extra: &[String],
    dir: &Path,
    env: &[(&str, &str)],
) -> Result<Proc, String> {
    let mut child = Command::new(&args.cairn_bin)
        .envs(env.iter().copied())
        // The gRPC API on a free port: its default one may be another server's.
        .args([
            "-p",
            &port.to_string(),
            "-t",
            "2",
            "--grpc-listen",
            "127.0.0.1:0",
        ])
        .arg("--data-dir")
        .arg(dir)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{}: {e}", args.cairn_bin.display()))?;
    let out = child.stdout.take().ok_or("no stdout")?;
    let ready = BufReader::new(out)
        .lines()
        .map_while(Result::ok)
        .any(|l| l.starts_with("cairn listening on "));
    if !ready {
        let status = child.wait().map_err(|e| e.to_string())?;
        return Err(format!(
            "cairn {extra:?} exited before it was ready ({status})"
        ));
    }
    Ok(Proc { child, port })
}

fn memcached(ram_mb: u64, file: &Path, size_mb: u64) -> Result<Proc, String> {
    let port = free_port()?;
    let child = Command::new("memcached")
        .args([
            "-l",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-U",
            "0",
            "-t",
            "2",
        ])
        .args(["-m", &ram_mb.to_string(), "-c", "4096", "-u", "root", "-o"])
        .arg(format!(
            "ext_path={}:{}m,ext_item_size=64",
            file.display(),
            size_mb
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("memcached: {e}"))?;
    let p = Proc { child, port };
    wait_ready(port, Protocol::MemcacheText)?;
    Ok(p)
}

/// The load of one phase.
fn load_cfg(args: &SuiteArgs, port: u16, ratio: (u32, u32), pattern: Pattern) -> LoadConfig {
    LoadConfig {
        server: "127.0.0.1".into(),
        port,
        protocol: Protocol::MemcacheText,
        threads: args.threads,
        clients: args.clients,
        data_size_min: args.data_size,
        data_size_max: args.data_size,
        key_prefix: "memtier-".into(),
        set_pattern: pattern,
        get_pattern: pattern,
        key_min: 1,
        key_max: args.keys,
        ratio,
        requests: None,
        test_time: Some(Duration::from_secs(args.phase_secs)),
        pipeline: 1,
        seed: 1,
        distinct_client_seed: true,
        rate: None,
        verify: false,
        quiet: args.quiet,
    }
}

fn insert(args: &SuiteArgs, port: u16) -> Result<LoadResult, String> {
    insert_range(args, port, 1, args.keys)
}

/// Requests per client that set every key of a range of `span` keys with the parallel
/// pattern (see [`insert_range`]).
fn insert_requests(span: u64, clients: u64) -> u64 {
    span / clients + span % clients
}

/// Sets every key of `min..=max` (a few twice when the clients do not divide the range).
fn insert_range(args: &SuiteArgs, port: u16, min: u64, max: u64) -> Result<LoadResult, String> {
    let clients = args.threads * args.clients;
    let span = max - min + 1;
    load::run(&LoadConfig {
        // The parallel pattern gives each client span / clients keys and the last one the
        // rest too: enough requests for the last one's range (the others wrap around). With
        // span.div_ceil(clients), the last client left up to `clients - 1` keys unset: F5
        // in 3 parts of 10M keys counted those 97 never-set keys as lost (2026-11-27).
        requests: Some(insert_requests(span, clients)),
        test_time: None,
        key_min: min,
        key_max: max,
        ..load_cfg(args, port, (1, 0), Pattern::Parallel)
    })
}

/// What one server did in the phases both servers run.
#[derive(Default, Debug, Clone, serde::Serialize)]
struct Figures {
    insert_ops_per_sec: f64,
    get_ops_per_sec: f64,
    get_hit_ratio: f64,
    /// Share of the get hits served from flash.
    get_from_flash: f64,
    reads_per_flash_hit: f64,
    device_reads_per_miss: f64,
    qd1_get_p50_us: f64,
    qd1_get_p99_us: f64,
    /// F2's CPU per get: the server's (all its threads) and the load generator's, us.
    f2_server_cpu_us_per_get: f64,
    f2_client_cpu_us_per_get: f64,
    write_amplification: f64,
    rss_after_insert_mib: f64,
    flash_items: f64,
    index_bytes_per_flash_item: f64,
    rss_bytes_per_flash_item: f64,
}

fn delta(a: &HashMap<String, f64>, b: &HashMap<String, f64>, k: &str) -> f64 {
    b.get(k).copied().unwrap_or(0.0) - a.get(k).copied().unwrap_or(0.0)
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

/// The key+value bytes of one set of the load (keys are `memtier-<n>`).
fn item_bytes(args: &SuiteArgs) -> f64 {
    ("memtier-".len() + (args.keys / 2).to_string().len() + args.data_size) as f64
}

/// Runs the flash phases on a server with a flash tier: `cairn` says which stats names to use.
fn phases(args: &SuiteArgs, p: &Proc, cairn: bool) -> Result<Figures, String> {
    let mut f = read_phases(args, p, cairn)?;
    // F6: steady state, 9 sets to 1 get, the gets on a hot part of the keys (gaussian); a
    // first phase reaches steady state, the second is measured.
    let mixed = load_cfg(args, p.port, (9, 1), Pattern::Gaussian);
    let mixed = LoadConfig {
        set_pattern: Pattern::Random,
        ..mixed
    };
    load::run(&mixed)?;
    let s4 = p.stats()?;
    let m = load::run(&mixed)?;
    let s5 = p.stats()?;
    let device = delta(&s4, &s5, "extstore_bytes_written");
    f.write_amplification = ratio(device, m.sets as f64 * item_bytes(args));
    Ok(f)
}

/// F1 to F4 (the insert, uniform gets, one client's gets).
fn read_phases(args: &SuiteArgs, p: &Proc, cairn: bool) -> Result<Figures, String> {
    let mut f = Figures::default();
    // F1 + F4: a quarter of the keys first (RAM is full by then), then the rest: the RSS
    // growth over the second part, per item that went to flash meanwhile, is what an item on
    // flash costs in RAM. (cairn counts its index in -m, so it takes RAM from items instead
    // of growing the RSS; the index bytes from its stats show that cost.)
    let first = args.keys / 4;
    let a = insert_range(args, p.port, 1, first)?;
    let s0 = p.stats()?;
    let rss0 = rss_bytes(&p.pid());
    let b = insert_range(args, p.port, first + 1, args.keys)?;
    f.insert_ops_per_sec = (a.sets + b.sets) as f64 / (a.secs + b.secs);
    let s1 = p.stats()?;
    let rss1 = rss_bytes(&p.pid());
    f.rss_after_insert_mib = rss1 as f64 / (1 << 20) as f64;
    f.flash_items = if cairn {
        s1.get("flash_items").copied().unwrap_or(0.0)
    } else {
        s1.get("extstore_objects_used").copied().unwrap_or(0.0)
    };
    if cairn {
        f.index_bytes_per_flash_item = ratio(
            s1.get("flash_index_bytes").copied().unwrap_or(0.0),
            f.flash_items,
        );
    }
    let flash_key = if cairn {
        "flash_items"
    } else {
        "extstore_objects_used"
    };
    f.rss_bytes_per_flash_item =
        ratio(rss1.saturating_sub(rss0) as f64, delta(&s0, &s1, flash_key));
    get_phases(args, p, cairn, &mut f)?;
    Ok(f)
}

/// F2 (uniform random gets over the whole set, from `--threads` x `--clients`) and F3 (one
/// client, one request at a time) into `f`.
fn get_phases(args: &SuiteArgs, p: &Proc, cairn: bool, f: &mut Figures) -> Result<(), String> {
    // F2: uniform random gets over the whole set.
    let s2 = p.stats()?;
    let cpu0 = crate::procstat::proc_cpu_secs(&p.pid()).unwrap_or(0.0);
    let g = load::run(&load_cfg(args, p.port, (0, 1), Pattern::Random))?;
    let cpu1 = crate::procstat::proc_cpu_secs(&p.pid()).unwrap_or(0.0);
    let s3 = p.stats()?;
    f.get_ops_per_sec = g.ops_per_sec();
    f.f2_server_cpu_us_per_get = ratio((cpu1 - cpu0) * 1e6, g.gets as f64);
    f.f2_client_cpu_us_per_get = ratio(g.cpu_secs * 1e6, g.gets as f64);
    f.get_hit_ratio = ratio(g.hits as f64, g.gets as f64);
    let hits = delta(&s2, &s3, "get_hits");
    let misses = delta(&s2, &s3, "get_misses");
    let flash_hits = delta(&s2, &s3, "get_extstore");
    f.get_from_flash = ratio(flash_hits, hits);
    if cairn {
        let reads = delta(&s2, &s3, "flash_device_reads") + delta(&s2, &s3, "flash_buffered_reads");
        f.reads_per_flash_hit = ratio(reads - delta(&s2, &s3, "miss_from_extstore"), flash_hits);
        f.device_reads_per_miss = ratio(delta(&s2, &s3, "miss_from_extstore"), misses);
    }
    // F3: one client, one request at a time.
    let one = load::run(&LoadConfig {
        threads: 1,
        clients: 1,
        ..load_cfg(args, p.port, (0, 1), Pattern::Random)
    })?;
    f.qd1_get_p50_us = one.get_latency.value_at_percentile(50.0) as f64;
    f.qd1_get_p99_us = one.get_latency.value_at_percentile(99.0) as f64;
    Ok(())
}

/// The one-client get p50 of a server holding every key in RAM, us (the request path's own
/// cost, without a device read).
fn ram_qd1_p50(args: &SuiteArgs, p: &Proc) -> Result<f64, String> {
    insert(args, p.port)?;
    let one = load::run(&LoadConfig {
        threads: 1,
        clients: 1,
        ..load_cfg(args, p.port, (0, 1), Pattern::Random)
    })?;
    Ok(one.get_latency.value_at_percentile(50.0) as f64)
}

/// `--flash-phases reads`: F2 and F3 alone, side by side in one run: cairn RAM-only (the
/// one-client p50 without flash), cairn with flash reading through each worker's own ring,
/// cairn with flash reading through the one shared ring thread (`CAIRN_FLASH_SHARED_RING=1`),
/// memcached extstore, and fio on cairn's flash file at the load's queue depth and at 1.
fn reads(args: &SuiteArgs, dir: &Path, flash_mb: u64, ram_only_mb: u64) -> Result<(), String> {
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
    say("cairn flash, a ring per worker: insert, uniform gets, one client's gets");
    let own = run_cairn(&[])?;
    say("cairn flash, the shared ring thread: the same");
    let shared = run_cairn(&[(cairn_flash_shared_ring_env(), "1")])?;
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
    for (name, f) in [
        ("cairn, ring per worker", &own),
        ("cairn, shared ring thread", &shared),
        ("memcached extstore", &mc),
    ] {
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
        "cairn_ring_per_worker": own, "cairn_shared_ring": shared, "memcached_extstore": mc,
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
fn reads_ab(args: &SuiteArgs, dir: &Path, flash_mb: u64) -> Result<(), String> {
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

/// The server's switch back to the shared ring thread (cairn_flash::reader::SHARED_RING_ENV).
fn cairn_flash_shared_ring_env() -> &'static str {
    "CAIRN_FLASH_SHARED_RING"
}

/// memcached with extstore on a file in `dir` (removed afterwards), measured by `measure`.
fn extstore(
    args: &SuiteArgs,
    dir: &Path,
    flash_mb: u64,
    measure: impl FnOnce(&Proc) -> Result<Figures, String>,
) -> Result<Figures, String> {
    let file = dir.join("memcached.flash");
    let figures = memcached(args.ram_mb, &file, flash_mb).and_then(|p| measure(&p));
    let _ = std::fs::remove_file(&file);
    figures
}

/// fio's random reads of `file` (over the `written` bytes, at least 64 MiB): IOPS at queue
/// depth `qd`, and the completion latency p50 in us at queue depth 1.
fn fio_qd_and_qd1(file: &Path, written: f64, qd: u64, secs: u64) -> Result<(f64, f64), String> {
    let bytes = (written as u64).max(64 << 20);
    let (iops, _) = fio(file, bytes, qd, secs)?;
    let (_, qd1_p50) = fio(file, bytes, 1, secs)?;
    Ok((iops, qd1_p50))
}

/// What fio measured: (IOPS, total latency p50 in us: submission to completion, what a
/// server's read waits). Not fio's `clat` alone: when the kernel does the read inside the
/// submitting `io_uring_enter`, the time moves into `slat` and `clat` reads as ~0.4 us.
fn fio(file: &Path, bytes: u64, depth: u64, secs: u64) -> Result<(f64, f64), String> {
    let out = Command::new("fio")
        .args([
            &format!("--size={bytes}"),
            "--name=randread",
            "--ioengine=io_uring",
            "--direct=1",
            "--rw=randread",
            "--bs=4k",
            &format!("--iodepth={depth}"),
            &format!("--runtime={secs}"),
            "--time_based",
            "--lat_percentiles=1",
            "--output-format=json",
        ])
        .arg(format!("--filename={}", file.display()))
        .output()
        .map_err(|e| format!("fio: {e} (apt-get install fio)"))?;
    if !out.status.success() {
        return Err(format!("fio: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("fio output: {e}"))?;
    let read = &v["jobs"][0]["read"];
    let iops = read["iops"].as_f64().unwrap_or(0.0);
    let p50_ns = read["lat_ns"]["percentile"]["50.000000"]
        .as_f64()
        .unwrap_or(0.0);
    Ok((iops, p50_ns / 1000.0))
}

/// A hold of the bench lock file (flock, exclusive), released on drop; none without a path.
struct BenchLock(Option<std::fs::File>);

impl BenchLock {
    fn take(path: Option<&Path>) -> Result<BenchLock, String> {
        let Some(path) = path else {
            return Ok(BenchLock(None));
        };
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        f.lock()
            .map_err(|e| format!("flock {}: {e}", path.display()))?;
        Ok(BenchLock(Some(f)))
    }
}

impl Drop for BenchLock {
    fn drop(&mut self) {
        if let Some(f) = &self.0 {
            let _ = f.unlock();
        }
    }
}

/// F5's outcome.
#[derive(Default, Debug, Clone, serde::Serialize)]
struct Crash {
    keys: u64,
    flash_items_before: f64,
    restart_to_ready_ms: f64,
    recovery_ms: f64,
    recovered_flash_items: f64,
    recovered_log_records: f64,
    /// Where recovery_ms went (`stats persistence`).
    recovery_log_open_ms: f64,
    recovery_flash_pins_ms: f64,
    recovery_snapshot_ms: f64,
    recovery_replay_ms: f64,
    index_rebuild_items_per_sec: f64,
    /// Checkpoints the killed server finished, and how long its last one took.
    checkpoints_before_kill: f64,
    last_checkpoint_ms: f64,
    checked: u64,
    /// Keys that should hold a value and answered a miss after the restart.
    missing: u64,
    /// Items evicted for good (flash full, or the flash writer behind) before the kill, read
    /// from the server that was killed, and by the restarted one until the check ended.
    evicted_before_kill: u64,
    evicted_after_restart: u64,
    /// Missing keys that evictions do not account for.
    lost: u64,
    came_back: u64,
}

/// Acknowledged values lost across the crash: the keys found missing after the restart, less
/// the items the cache evicted for good on either side of it (an eviction is not a loss, and
/// the restarted server's counters start at zero, so the killed server's must be read before
/// the kill). An upper bound of what evictions could explain, never negative.
fn lost_beyond_evictions(missing: u64, evicted_before_kill: u64, evicted_after: u64) -> u64 {
    missing.saturating_sub(evicted_before_kill + evicted_after)
}

fn get_many(s: &mut TcpStream, keys: &[String]) -> Result<HashMap<String, Vec<u8>>, String> {
    s.write_all(format!("get {}\r\n", keys.join(" ")).as_bytes())
        .map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 1 << 16];
    while !buf.ends_with(b"END\r\n") {
        let n = s.read(&mut chunk).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("server closed".into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let mut out = HashMap::new();
    let mut at = 0;
    while at < buf.len() && !buf[at..].starts_with(b"END\r\n") {
        let eol = at
            + buf[at..]
                .windows(2)
                .position(|w| w == b"\r\n")
                .ok_or("bad reply")?;
        let head = String::from_utf8_lossy(&buf[at..eol]).into_owned();
        let parts: Vec<&str> = head.split(' ').collect();
        let len: usize = parts
            .get(3)
            .and_then(|l| l.parse().ok())
            .ok_or("bad VALUE")?;
        out.insert(parts[1].to_string(), buf[eol + 2..eol + 2 + len].to_vec());
        at = eol + 2 + len + 2;
    }
    Ok(out)
}

fn command(s: &mut TcpStream, line: &str) -> Result<String, String> {
    s.write_all(line.as_bytes()).map_err(|e| e.to_string())?;
    let mut r = BufReader::new(s.try_clone().map_err(|e| e.to_string())?);
    let mut reply = String::new();
    r.read_line(&mut reply).map_err(|e| e.to_string())?;
    Ok(reply)
}

fn crash(args: &SuiteArgs, dir: &Path, flash_mb: u64) -> Result<Crash, String> {
    let data = dir.join("f5");
    let _ = std::fs::remove_dir_all(&data);
    std::fs::create_dir_all(&data).map_err(|e| e.to_string())?;
    let flash_args: Vec<String> = [
        "-m",
        &args.ram_mb.to_string(),
        "--persistence",
        "sync",
        "--flash-path",
        &data.join("cairn.flash").display().to_string(),
        "--flash-size",
        &format!("{flash_mb}m"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let port = free_port()?;
    let mut p = cairn(args, port, &flash_args, &data)?;
    // The insert in parts, each in a hold of the lock (if one is given); the server idles
    // between them.
    let parts = args.f5_insert_holds.clamp(1, args.keys.max(1));
    for part in 0..parts {
        let min = 1 + args.keys * part / parts;
        let max = args.keys * (part + 1) / parts;
        let _hold = BenchLock::take(args.lock_file.as_deref())?;
        eprintln!(
            "[flash f5] insert part {}/{parts}: keys {min}..={max}",
            part + 1
        );
        insert_range(args, port, min, max)?;
    }
    let _hold = BenchLock::take(args.lock_file.as_deref())?;
    let mut c = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    c.set_read_timeout(Some(Duration::from_secs(60)))
        .map_err(|e| e.to_string())?;
    // Acknowledged changes after the insert: the first 1000 keys overwritten, the next 1000
    // deleted (each acknowledged in sync mode before the kill).
    for k in 1..=1000u64 {
        let v = format!("overwritten-{k}");
        command(
            &mut c,
            &format!("set memtier-{k} 0 0 {}\r\n{v}\r\n", v.len()),
        )?;
    }
    for k in 1001..=2000u64 {
        command(&mut c, &format!("delete memtier-{k}\r\n"))?;
    }
    let before = p.stats()?;
    let mut crash = Crash {
        keys: args.keys,
        flash_items_before: before.get("flash_items").copied().unwrap_or(0.0),
        evicted_before_kill: before.get("evictions").copied().unwrap_or(0.0) as u64,
        ..Crash::default()
    };
    let pst: HashMap<String, f64> = memcache_stats("127.0.0.1", port, "persistence")?
        .into_iter()
        .filter_map(|(k, v)| Some((k, v.parse().ok()?)))
        .collect();
    crash.checkpoints_before_kill = pst.get("checkpoints_done").copied().unwrap_or(0.0);
    crash.last_checkpoint_ms = pst
        .get("last_checkpoint_duration_ms")
        .copied()
        .unwrap_or(0.0);
    p.child.kill().map_err(|e| e.to_string())?;
    p.child.wait().map_err(|e| e.to_string())?;
    drop(p);
    let t0 = Instant::now();
    let p = cairn(args, port, &flash_args, &data)?;
    crash.restart_to_ready_ms = t0.elapsed().as_secs_f64() * 1000.0;
    let ps: HashMap<String, f64> = memcache_stats("127.0.0.1", port, "persistence")?
        .into_iter()
        .filter_map(|(k, v)| Some((k, v.parse().ok()?)))
        .collect();
    crash.recovery_ms = ps.get("recovery_ms").copied().unwrap_or(0.0);
    crash.recovered_flash_items = ps.get("recovered_flash_items").copied().unwrap_or(0.0);
    crash.recovered_log_records = ps.get("recovered_log_records").copied().unwrap_or(0.0);
    let step = |k: &str| ps.get(k).copied().unwrap_or(0.0);
    crash.recovery_log_open_ms = step("recovery_log_open_ms");
    crash.recovery_flash_pins_ms = step("recovery_flash_pins_ms");
    crash.recovery_snapshot_ms = step("recovery_snapshot_ms");
    crash.recovery_replay_ms = step("recovery_replay_ms");
    crash.index_rebuild_items_per_sec = ratio(
        crash.recovered_flash_items * 1000.0,
        crash.recovery_ms.max(1.0),
    );
    // Every key checked: overwritten ones hold the new value, deleted ones are gone, the rest
    // hold what the insert wrote (evicted items may be missing: see lost_beyond_evictions). Eight
    // connections at once, each its own stripe of the keys (a flash hit is a device read).
    const CHECKERS: u64 = 8;
    let counts: Vec<Result<(u64, u64, u64), String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..CHECKERS)
            .map(|stripe| {
                s.spawn(move || -> Result<(u64, u64, u64), String> {
                    let mut c =
                        TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
                    c.set_read_timeout(Some(Duration::from_secs(60)))
                        .map_err(|e| e.to_string())?;
                    let (mut checked, mut missing, mut back) = (0, 0, 0);
                    let mut k = 1 + stripe * 100;
                    while k <= args.keys {
                        let batch: Vec<String> = (k..(k + 100).min(args.keys + 1))
                            .map(|i| format!("memtier-{i}"))
                            .collect();
                        let got = get_many(&mut c, &batch)?;
                        for (i, key) in (k..).zip(&batch) {
                            checked += 1;
                            let want: Option<Vec<u8>> = match i {
                                1..=1000 => Some(format!("overwritten-{i}").into_bytes()),
                                1001..=2000 => None,
                                _ => Some(load::value_for(i, args.data_size)),
                            };
                            match (got.get(key), &want) {
                                (Some(v), Some(w)) if v == w => {}
                                (None, Some(_)) => missing += 1,
                                (None, None) => {}
                                _ => back += 1,
                            }
                        }
                        k += 100 * CHECKERS;
                    }
                    Ok((checked, missing, back))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a checker panicked".into()))
            })
            .collect()
    });
    for c in counts {
        let (checked, missing, back) = c?;
        crash.checked += checked;
        crash.missing += missing;
        crash.came_back += back;
    }
    crash.evicted_after_restart = p.stats()?.get("evictions").copied().unwrap_or(0.0) as u64;
    crash.lost = lost_beyond_evictions(
        crash.missing,
        crash.evicted_before_kill,
        crash.evicted_after_restart,
    );
    drop(p);
    let _ = std::fs::remove_dir_all(&data);
    Ok(crash)
}

/// F5's row of the table.
fn f5_row(f5: &Crash) -> String {
    format!(
        "| F5 | kill -9, {} keys, sync: restart to ready | {:.0} ms (recovery {:.0} ms: log open {:.0}, flash pins {:.0}, snapshot {:.0}, replay {:.0}; {:.0} flash items restored of {:.0}, {:.0} items/s; {:.0} log records replayed; {:.0} checkpoints before the kill, the last {:.0} ms); {} checked: {} missing, {} evicted before the kill + {} after the restart, {} lost beyond evictions, {} came back | | | | <= 3 s, 0, 0 |\n",
        f5.keys,
        f5.restart_to_ready_ms,
        f5.recovery_ms,
        f5.recovery_log_open_ms,
        f5.recovery_flash_pins_ms,
        f5.recovery_snapshot_ms,
        f5.recovery_replay_ms,
        f5.recovered_flash_items,
        f5.flash_items_before,
        f5.index_rebuild_items_per_sec,
        f5.recovered_log_records,
        f5.checkpoints_before_kill,
        f5.last_checkpoint_ms,
        f5.checked,
        f5.missing,
        f5.evicted_before_kill,
        f5.evicted_after_restart,
        f5.lost,
        f5.came_back
    )
}

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

/// cairn's arguments for the flash runs: the RAM limit, no persistence, and the flash file.
fn flash_server_args(args: &SuiteArgs, file: &Path, flash_mb: u64) -> Vec<String> {
    vec![
        "-m".into(),
        args.ram_mb.to_string(),
        "--persistence".into(),
        "off".into(),
        "--flash-path".into(),
        file.display().to_string(),
        "--flash-size".into(),
        format!("{flash_mb}m"),
    ]
}

#[cfg(test)]
mod tests {
    use super::{insert_requests, lost_beyond_evictions};
    use crate::keys::{KeyGen, Pattern, Rng};

    #[test]
    fn an_insert_in_parts_sets_every_key() {
        // The parts F5 inserts 10M keys in (3 holds) and small ranges around the client count.
        for (min, max) in [
            (1, 3_333_333),
            (3_333_334, 6_666_666),
            (6_666_667, 10_000_000),
            (1, 49),
            (1, 50),
            (1, 51),
            (5, 5),
        ] {
            let clients = 50;
            let span = max - min + 1;
            let mut seen = vec![false; span as usize];
            let mut rng = Rng::new(1);
            for c in 0..clients {
                let mut g = KeyGen::new(Pattern::Parallel, min, max, c, clients);
                for _ in 0..insert_requests(span, clients) {
                    seen[(g.next(&mut rng) - min) as usize] = true;
                }
            }
            assert!(seen.iter().all(|&s| s), "keys {min}..={max} left unset");
        }
    }

    #[test]
    fn evictions_on_either_side_of_the_kill_are_not_losses() {
        // Writer drops before the kill explain missing keys the restarted server never saw.
        assert_eq!(lost_beyond_evictions(9_716, 9_716, 0), 0);
        assert_eq!(lost_beyond_evictions(9_716, 9_700, 10), 6);
        assert_eq!(lost_beyond_evictions(3, 0, 0), 3);
        assert_eq!(lost_beyond_evictions(0, 50, 5), 0);
    }
}
