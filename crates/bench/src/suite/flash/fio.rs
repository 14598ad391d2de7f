//! fio on a flash file: 4 KiB random reads, O_DIRECT, through io_uring, at the load's queue
//! depth and at 1. What the device gives is the bound the flash figures are read against.
//!
//! Non-goals: writes; another engine than io_uring.

use std::path::Path;
use std::process::Command;

/// fio's random reads of `file` (over the `written` bytes, at least 64 MiB): IOPS at queue
/// depth `qd`, and the completion latency p50 in us at queue depth 1.
pub(super) fn fio_qd_and_qd1(
    file: &Path,
    written: f64,
    qd: u64,
    secs: u64,
) -> Result<(f64, f64), String> {
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
