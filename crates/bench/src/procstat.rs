//! A process's figures from /proc (through procfs): CPU seconds, user + system, of this
//! process or of a server by its PID, and a server's resident memory.
//!
//! Non-goals: anything /proc does not give directly (no sampling, no per-thread figures).

/// CPU seconds (user + system) this process used so far.
pub fn self_cpu_secs() -> f64 {
    proc_cpu_secs("self").unwrap_or(0.0)
}

/// /proc's figures of a process (`self` or a PID), read by procfs.
pub fn proc_stat(pid: &str) -> Option<procfs::process::Stat> {
    let process = match pid {
        "self" => procfs::process::Process::myself(),
        pid => procfs::process::Process::new(pid.parse().ok()?),
    };
    process.and_then(|p| p.stat()).ok()
}

/// CPU seconds (user + system) of a process.
pub fn proc_cpu_secs(pid: &str) -> Option<f64> {
    let stat = proc_stat(pid)?;
    Some((stat.utime + stat.stime) as f64 / procfs::ticks_per_second() as f64)
}

/// Resident memory of a process in bytes (0 when it cannot be read).
pub fn rss_bytes(pid: &str) -> u64 {
    use procfs::WithCurrentSystemInfo;
    proc_stat(pid).map_or(0, |s| s.rss_bytes().get())
}
