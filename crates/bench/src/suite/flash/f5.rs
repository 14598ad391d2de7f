//! F5: cairn with flash and persistence sync loaded with every key (in `--f5-insert-holds`
//! parts, each in a hold of `--lock-file`), then acknowledged changes (the first 1000 keys
//! overwritten, the next 1000 deleted), kill -9, a restart on the same folder, and every key
//! read back by eight connections: what recovery took and whether anything acknowledged was
//! lost beyond what the cache evicted.
//!
//! ```text
//!   cairn (sync, flash) ─> insert parts ─> overwrite 1..=1000, delete 1001..=2000 ─> stats
//!     ─> kill -9 ─> restart ─> stats persistence ─> get every key (8 stripes) ─> Crash
//! ```
//!
//! Non-goals: losses under a power cut (the server's own tests cut power with a fake file
//! system); memcached (no persistence to compare).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use super::phases::{insert_range, ratio};
use super::servers::cairn;
use crate::load;
use crate::servers::{free_port, memcache_stats};
use crate::suite::SuiteArgs;

/// A hold of the bench lock file (flock, exclusive), released on drop; none without a path.
struct BenchLock(Option<std::fs::File>);

impl BenchLock {
    /// Takes the lock of `path` (waiting for it), or nothing without a path.
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
pub(super) struct Crash {
    /// Keys inserted.
    keys: u64,
    /// Items on flash before the kill.
    flash_items_before: f64,
    /// From spawning the restarted server to its `cairn listening` line.
    restart_to_ready_ms: f64,
    /// The server's own recovery time (`stats persistence` recovery_ms).
    recovery_ms: f64,
    /// Flash entries restored, and log records replayed after the snapshot.
    recovered_flash_items: f64,
    recovered_log_records: f64,
    /// Where recovery_ms went (`stats persistence`).
    recovery_log_open_ms: f64,
    recovery_flash_pins_ms: f64,
    recovery_snapshot_ms: f64,
    recovery_replay_ms: f64,
    /// recovered_flash_items per second of recovery_ms.
    index_rebuild_items_per_sec: f64,
    /// Checkpoints the killed server finished, and how long its last one took.
    checkpoints_before_kill: f64,
    last_checkpoint_ms: f64,
    /// Keys read back after the restart.
    checked: u64,
    /// Keys that should hold a value and answered a miss after the restart.
    missing: u64,
    /// Items evicted for good (flash full, or the flash writer behind) before the kill, read
    /// from the server that was killed, and by the restarted one until the check ended.
    evicted_before_kill: u64,
    evicted_after_restart: u64,
    /// Missing keys that evictions do not account for.
    lost: u64,
    /// Keys that answered another value than the last acknowledged one: an overwritten key's
    /// old value, a deleted key's value.
    came_back: u64,
}

/// Acknowledged values lost across the crash: the keys found missing after the restart, less
/// the items the cache evicted for good on either side of it (an eviction is not a loss, and
/// the restarted server's counters start at zero, so the killed server's must be read before
/// the kill). An upper bound of what evictions could explain, never negative.
fn lost_beyond_evictions(missing: u64, evicted_before_kill: u64, evicted_after: u64) -> u64 {
    missing.saturating_sub(evicted_before_kill + evicted_after)
}

/// `get` of every key in `keys` at once: the values found, by key.
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

/// Sends one command line and returns the reply's first line.
fn command(s: &mut TcpStream, line: &str) -> Result<String, String> {
    s.write_all(line.as_bytes()).map_err(|e| e.to_string())?;
    let mut r = BufReader::new(s.try_clone().map_err(|e| e.to_string())?);
    let mut reply = String::new();
    r.read_line(&mut reply).map_err(|e| e.to_string())?;
    Ok(reply)
}

/// Runs F5 in a fresh folder `f5` under `dir`, with a flash file of `flash_mb` MiB.
pub(super) fn crash(args: &SuiteArgs, dir: &Path, flash_mb: u64) -> Result<Crash, String> {
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
pub(super) fn f5_row(f5: &Crash) -> String {
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

#[cfg(test)]
mod tests {
    use super::lost_beyond_evictions;

    #[test]
    fn evictions_on_either_side_of_the_kill_are_not_losses() {
        // Writer drops before the kill explain missing keys the restarted server never saw.
        assert_eq!(lost_beyond_evictions(9_716, 9_716, 0), 0);
        assert_eq!(lost_beyond_evictions(9_716, 9_700, 10), 6);
        assert_eq!(lost_beyond_evictions(3, 0, 0), 3);
        assert_eq!(lost_beyond_evictions(0, 50, 5), 0);
    }
}
