//! Starting a target of the ARCUS run on a free loopback port with its own temporary data
//! directory, stopping it (SIGTERM on drop), and for cairn async/sync the kill -9 and restart
//! on the same directory with what its recovery did.
//!
//! ```text
//!   start ─> Running ─> (phases) ─> kill_and_recover ─> Running (restarted) ─> drop: stop
//! ```
//!
//! Non-goals: servers this suite does not start (`--target`): only checked to be reachable.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use super::target::Target;
use crate::load::Protocol;
use crate::rows::Recovery;
use crate::servers::{free_port, memcache_stats, numeric_stat, wait_ready};
use crate::suite::SuiteArgs;

/// A started server, stopped on drop.
pub(super) struct Running {
    /// The server process; None for a server this suite did not start.
    child: Option<Child>,
    /// Where it listens.
    pub(super) host: String,
    pub(super) port: u16,
    /// The server's data directory, removed on drop; a restart after kill -9 reuses it.
    dir: Option<tempfile::TempDir>,
}

impl Running {
    pub(super) fn pid(&self) -> Option<String> {
        self.child.as_ref().map(|c| c.id().to_string())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
            let _ = c.wait();
        }
    }
}

/// The memory limit every server gets: room for the keys with headroom.
fn mem_mb(args: &SuiteArgs) -> String {
    (args.keys * 400 / (1 << 20)).max(256).to_string()
}

/// Starts `t` (or checks that a `--target` server is reachable) and waits until it answers.
pub(super) fn start(t: &Target, args: &SuiteArgs) -> Result<Running, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let port = free_port()?;
    let mem_mb = mem_mb(args);
    let child = match t {
        Target::External {
            host,
            port,
            protocol,
        } => {
            wait_ready_external(host, *port, *protocol)?;
            return Ok(Running {
                child: None,
                host: host.clone(),
                port: *port,
                dir: None,
            });
        }
        Target::Cairn { mode, alt } => {
            spawn_cairn(args, cairn_bin(args, alt), mode, port, dir.path())?
        }
        Target::Memcached => Command::new("memcached")
            .args([
                "-l",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-U",
                "0",
                "-t",
                "2",
                "-m",
                &mem_mb,
                "-c",
                "4096",
                "-u",
                "root",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("memcached: {e}"))?,
        Target::Redis(mode) => {
            let mut cmd = Command::new("redis-server");
            cmd.args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--dir",
            ])
            .arg(dir.path())
            .args(["--maxclients", "4096"]);
            match mode.as_str() {
                "none" => cmd.args(["--appendonly", "no"]),
                m => cmd.args(["--appendonly", "yes", "--appendfsync", m]),
            };
            cmd.stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("redis-server: {e}"))?
        }
    };
    let running = Running {
        child: Some(child),
        host: "127.0.0.1".into(),
        port,
        dir: Some(dir),
    };
    wait_ready(port, t.protocol())?;
    Ok(running)
}

/// Starts cairn and returns once it printed its `cairn listening on` line (after recovery).
/// The same arguments every time, so a restart finds the same data directory and port.
fn spawn_cairn(
    args: &SuiteArgs,
    bin: &std::path::Path,
    mode: &str,
    port: u16,
    dir: &std::path::Path,
) -> Result<Child, String> {
    let mem_mb = mem_mb(args);
    let mut child = Command::new(bin)
        .args([
            "-p",
            &port.to_string(),
            "-t",
            "2",
            "-m",
            &mem_mb,
            "--persistence",
            mode,
            // The checkpoint dip phase sends `checkpoint`.
            "--enable-admin",
            // The gRPC API stays on (its hub is part of the default cost), on a free port: a
            // fixed one would collide with any other cairn on the machine.
            "--grpc-listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{}: {e}", bin.display()))?;
    let out = child.stdout.take().ok_or("no stdout")?;
    let ready = BufReader::new(out)
        .lines()
        .map_while(Result::ok)
        .any(|l| l.starts_with("cairn listening on "));
    if !ready {
        let status = child.wait().map_err(|e| e.to_string())?;
        return Err(format!("cairn exited before it was ready ({status})"));
    }
    Ok(child)
}

/// The binary of a cairn target.
fn cairn_bin<'a>(args: &'a SuiteArgs, alt: &'a Option<(String, PathBuf)>) -> &'a std::path::Path {
    alt.as_ref()
        .map_or(args.cairn_bin.as_path(), |(_, p)| p.as_path())
}

/// Kills a cairn target with SIGKILL (no shutdown checkpoint), starts it again on the same data
/// directory and port, and reads what its recovery did from `stats persistence`. The restarted
/// server replaces the killed one in `server`, so dropping `server` stops it.
pub(super) fn kill_and_recover(
    server: &mut Running,
    t: &Target,
    args: &SuiteArgs,
    repeat: usize,
) -> Result<Recovery, String> {
    let Target::Cairn { mode, alt } = t else {
        return Err(format!("{}: only cairn is restarted", t.name()));
    };
    let mut child = server.child.take().ok_or("no server process to kill")?;
    child.kill().map_err(|e| format!("kill -9: {e}"))?;
    child.wait().map_err(|e| e.to_string())?;
    let dir = server.dir.as_ref().ok_or("no data directory")?.path();
    let spawned = Instant::now();
    server.child = Some(spawn_cairn(
        args,
        cairn_bin(args, alt),
        mode,
        server.port,
        dir,
    )?);
    let restart_to_ready_ms = spawned.elapsed().as_secs_f64() * 1000.0;
    wait_ready(server.port, t.protocol())?;
    let stats = memcache_stats(&server.host, server.port, "persistence")?;
    let field = |name: &str| numeric_stat(&stats, "persistence", name);
    let recovery_ms = field("recovery_ms")?;
    let recovered_items = field("recovered_items")?;
    Ok(Recovery {
        target: t.name(),
        repeat,
        recovery_ms,
        restart_to_ready_ms,
        recovered_items,
        recovered_log_records: field("recovered_log_records")?,
        items_per_sec: (recovery_ms > 0)
            .then(|| recovered_items as f64 * 1000.0 / recovery_ms as f64),
    })
}

fn wait_ready_external(host: &str, port: u16, _p: Protocol) -> Result<(), String> {
    TcpStream::connect((host, port))
        .map(|_| ())
        .map_err(|e| format!("{host}:{port}: {e}"))
}
