//! The servers of the flash scenarios, each on a free loopback port and killed when dropped:
//! cairn (RAM-only, or `-m RAM` with a flash file, with persistence off or sync, with
//! environment variables of its own) and memcached with extstore on a file.
//!
//! ```text
//!   cairn / cairn_env ─> Proc (ready: its `cairn listening on` line) ─> phases ─> drop: kill
//!   extstore ─> memcached ─> Proc (answers `version`) ─> measure ─> drop: kill, file removed
//! ```
//!
//! Non-goals: Redis (no flash tier to compare).

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::load::Protocol;
use crate::servers::{free_port, memcache_stats, wait_ready};
use crate::suite::SuiteArgs;

/// A server started for one part of the run, killed on drop.
pub(super) struct Proc {
    /// The server process.
    pub(super) child: Child,
    /// Its memcached port on 127.0.0.1.
    pub(super) port: u16,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    /// The process id, as /proc names it.
    pub(super) fn pid(&self) -> String {
        self.child.id().to_string()
    }

    /// `stats`, the numeric fields only.
    pub(super) fn stats(&self) -> Result<HashMap<String, f64>, String> {
        Ok(memcache_stats("127.0.0.1", self.port, "")?
            .into_iter()
            .filter_map(|(k, v)| Some((k, v.parse().ok()?)))
            .collect())
    }
}

/// cairn from `--cairn-bin` on `port` with `dir` as its data folder and `extra` arguments,
/// once it is ready.
pub(super) fn cairn(
    args: &SuiteArgs,
    port: u16,
    extra: &[String],
    dir: &Path,
) -> Result<Proc, String> {
    cairn_env(args, port, extra, dir, &[])
}

/// [`cairn`] with environment variables set for the server.
pub(super) fn cairn_env(
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

/// memcached with `-m ram_mb` and extstore on `file` of `size_mb` MiB, once it answers.
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

/// memcached with extstore on a file in `dir` (removed afterwards), measured by `measure`.
pub(super) fn extstore<T>(
    args: &SuiteArgs,
    dir: &Path,
    flash_mb: u64,
    measure: impl FnOnce(&Proc) -> Result<T, String>,
) -> Result<T, String> {
    let file = dir.join("memcached.flash");
    let figures = memcached(args.ram_mb, &file, flash_mb).and_then(|p| measure(&p));
    let _ = std::fs::remove_file(&file);
    figures
}

/// cairn's arguments for the flash runs: the RAM limit, no persistence, and the flash file.
pub(super) fn flash_server_args(args: &SuiteArgs, file: &Path, flash_mb: u64) -> Vec<String> {
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
