//! This process's CPU time and resident size, from procfs: the `rusage_*` and `rss_bytes`
//! figures.
//!
//! Non-goals: the machine's figures.

/// CPU time and memory of this process.
pub struct ProcessFigures {
    pub cpu_user_seconds: f64,
    pub cpu_system_seconds: f64,
    pub rss_bytes: u64,
}

/// Reads this process's CPU time and resident size (procfs; zeros if /proc cannot be read).
pub fn process_figures() -> ProcessFigures {
    use procfs::WithCurrentSystemInfo;
    let stat = procfs::process::Process::myself().and_then(|p| p.stat());
    match stat {
        Ok(stat) => {
            let hz = procfs::ticks_per_second() as f64;
            ProcessFigures {
                cpu_user_seconds: stat.utime as f64 / hz,
                cpu_system_seconds: stat.stime as f64 / hz,
                rss_bytes: stat.rss_bytes().get(),
            }
        }
        Err(_) => ProcessFigures {
            cpu_user_seconds: 0.0,
            cpu_system_seconds: 0.0,
            rss_bytes: 0,
        },
    }
}
