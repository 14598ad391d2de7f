//! What every suite needs around the server processes it starts: a free loopback port,
//! waiting until a server answers (never a fixed sleep), `stats` read over the memcached text
//! protocol, and whether a server's binary is installed.
//!
//! ```text
//!   free_port ─> (a suite spawns the server on it) ─> wait_ready ─> load ─> memcache_stats
//! ```
//!
//! Non-goals: the servers' command lines (each suite starts its servers its own way: see
//! suite/arcus/servers.rs and suite/flash/servers.rs).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::load::Protocol;

pub(crate) fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

/// Polls with a short backoff until the server answers (never a fixed sleep).
pub(crate) fn wait_ready(port: u16, protocol: Protocol) -> Result<(), String> {
    let (probe, expect): (&[u8], &[u8]) = match protocol {
        Protocol::MemcacheText => (b"version\r\n", b"VERSION"),
        Protocol::Redis => (b"PING\r\n", b"+PONG"),
    };
    let mut delay = Duration::from_millis(5);
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let mut buf = [0u8; 64];
            if s.write_all(probe).is_ok()
                && s.read(&mut buf).is_ok_and(|n| buf[..n].starts_with(expect))
            {
                return Ok(());
            }
        }
        std::thread::sleep(delay);
        delay = (delay * 2).min(Duration::from_millis(200));
    }
    Err(format!("server on port {port} never became ready"))
}

/// Whether `bin --version` runs.
pub(crate) fn installed(bin: &str) -> bool {
    Command::new(bin)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// The field `name` of a `stats <group>` reply as a number, or why there is none.
pub(crate) fn numeric_stat(
    stats: &[(String, String)],
    group: &str,
    name: &str,
) -> Result<u64, String> {
    stats
        .iter()
        .find(|(n, _)| n == name)
        .and_then(|(_, v)| v.parse().ok())
        .ok_or_else(|| format!("stats {group}: no numeric {name}"))
}

/// `stats GROUP` over the memcached text protocol, as (name, value) pairs.
pub(crate) fn memcache_stats(
    host: &str,
    port: u16,
    group: &str,
) -> Result<Vec<(String, String)>, String> {
    let mut s = TcpStream::connect((host, port)).map_err(|e| format!("{host}:{port}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let line = if group.is_empty() {
        "stats\r\n".to_string()
    } else {
        format!("stats {group}\r\n")
    };
    s.write_all(line.as_bytes()).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for line in BufReader::new(s).lines() {
        let line = line.map_err(|e| format!("stats {group}: {e}"))?;
        if line == "END" {
            return Ok(out);
        }
        let (name, value) = line
            .strip_prefix("STAT ")
            .and_then(|l| l.split_once(' '))
            .ok_or_else(|| format!("stats {group}: unexpected line {line:?}"))?;
        out.push((name.to_string(), value.to_string()));
    }
    Err(format!("stats {group}: connection closed before END"))
}
