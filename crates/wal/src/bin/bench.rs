//! `cairn-wal-bench [DIR] [--quick] [--sizes=100,1024,1048576] [--no-recovery] [--reused-only]`:
//! the log against the raw write bound of the same disk, in one run (Mashona's
//! SimpleHardwareBenchmark idea). `--reused-only` keeps, for 1 MiB, only the raw bound and the
//! reused-segment rows (the steady state), for repeated runs.
//!
//! ```text
//!   raw bound: write(entry) + fdatasync per entry, overwriting a preallocated, zero-filled
//!              file (what the log does to a ZeroFill segment), buffered and O_DIRECT,
//!              with the thread's CPU and voluntary switches an entry in the notes;
//!              plus, for reference only, appending to a fresh file (each fdatasync also
//!              commits the file's growth)
//!   log:       Log::commit per entry (append, then wait until durable in sync mode, until
//!              written to the kernel in async mode) with the server's segment preparation
//!              (ZeroFill), buffered and O_DIRECT; sync and async, 1 and 4 threads, and 64
//!              committers on 64 threads of their own;
//!              for 1 MiB also "reused segments": the steady state behind checkpoints, where
//!              the log is truncated as it goes and new segments reuse old files
//!   recovery:  Log::open + read of every record  vs  a plain sequential read of the files,
//!              with a warm and (when /proc/sys/vm/drop_caches can be written) a cold cache
//! ```
//!
//! Prints a markdown table. The ratio column compares a row with the best raw overwrite row
//! of the same entry size (the faster of buffered and O_DIRECT; named under the table), and
//! a recovery row with the raw read of the same cache state. Each row runs for a fixed number
//! of entries (not a fixed time), so the figures are throughput over the same work.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use cairn_wal::{Durability, FileSystem, Log, LogOptions, Prealloc, RealFs, WalError};

struct Row {
    name: String,
    entries: u64,
    bytes: u64,
    secs: f64,
    fsyncs: Option<u64>,
    notes: String,
}

impl Row {
    fn mb_s(&self) -> f64 {
        self.bytes as f64 / self.secs / 1e6
    }

    fn print(&self, bound_mb_s: Option<f64>) {
        let ratio = bound_mb_s.map_or(String::from("-"), |b| format!("{:.2}x", self.mb_s() / b));
        let fsyncs = self.fsyncs.map_or(String::from("-"), |f| f.to_string());
        println!(
            "| {} | {} | {:.0} | {:.1} | {} | {} | {} |",
            self.name,
            self.entries,
            self.entries as f64 / self.secs,
            self.mb_s(),
            fsyncs,
            ratio,
            self.notes
        );
        std::io::stdout().flush().ok();
    }
}

/// A 4 KiB-aligned buffer of `len` bytes inside a larger Vec (no unsafe allocation).
fn aligned(len: usize, fill: u8) -> (Vec<u8>, usize) {
    let mut buf = vec![fill; len + 4096];
    let shift = (4096 - buf.as_ptr() as usize % 4096) % 4096;
    buf.truncate(shift + len);
    (buf, shift)
}

/// How the raw bound's file is prepared.
#[derive(Clone, Copy, PartialEq)]
enum RawFile {
    /// Zero-filled and fdatasync'd before the clock starts; entries overwrite it.
    Overwrite,
    /// A fresh empty file; every entry grows it.
    Append,
}

fn raw(dir: &Path, size: usize, count: u64, direct: bool, kind: RawFile) -> Row {
    let path = dir.join(if direct { "raw-direct" } else { "raw-buffered" });
    let _ = std::fs::remove_file(&path);
    // O_DIRECT needs 4 KiB-aligned buffers and lengths: round the entry up.
    let len = if direct {
        size.div_ceil(4096) * 4096
    } else {
        size
    };
    let total = (count * len as u64).div_ceil(4096) * 4096;
    if kind == RawFile::Overwrite {
        let f = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(&path)
            .expect("create raw file");
        let zeros = vec![0u8; 1 << 20];
        let mut at = 0;
        while at < total {
            let n = zeros.len().min((total - at) as usize);
            f.write_all_at(&zeros[..n], at).expect("zero fill");
            at += n as u64;
        }
        f.sync_all().expect("sync zero fill");
    }
    let mut o = OpenOptions::new();
    o.create(true).write(true).read(true);
    if direct {
        o.custom_flags(libc::O_DIRECT);
    }
    let f = o.open(&path).expect("open raw file");
    let (buf, shift) = aligned(len, 0xab);
    let entry = &buf[shift..shift + len];
    let before = ThreadCpu::now();
    let t = Instant::now();
    let mut off = 0u64;
    for _ in 0..count {
        f.write_all_at(entry, off).expect("raw write");
        f.sync_data().expect("raw fdatasync");
        off += len as u64;
    }
    let secs = t.elapsed().as_secs_f64();
    let cpu = ThreadCpu::now().since(&before, count);
    let _ = std::fs::remove_file(&path);
    let mode = if direct { "O_DIRECT" } else { "buffered" };
    Row {
        name: match kind {
            RawFile::Overwrite => format!("raw overwrite+fdatasync {mode} ({size} B)"),
            RawFile::Append => {
                format!("(reference) raw append to a fresh file+fdatasync {mode} ({size} B)")
            }
        },
        entries: count,
        bytes: count * size as u64,
        secs,
        fsyncs: Some(count),
        notes: cpu,
    }
}

/// The calling thread's CPU and voluntary context switches (`getrusage(RUSAGE_THREAD)`):
/// what one durable write costs the kernel besides its wait
/// (docs/decisions/0009-group-commit-one-durable-write-in-flight.md).
struct ThreadCpu {
    user_us: u64,
    system_us: u64,
    voluntary_switches: u64,
}

impl ThreadCpu {
    fn now() -> ThreadCpu {
        // SAFETY: getrusage writes one rusage struct into ours, which it fully initialises.
        let ru = unsafe {
            let mut ru = std::mem::zeroed::<libc::rusage>();
            libc::getrusage(libc::RUSAGE_THREAD, &mut ru);
            ru
        };
        let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
        ThreadCpu {
            user_us: us(ru.ru_utime),
            system_us: us(ru.ru_stime),
            voluntary_switches: ru.ru_nvcsw as u64,
        }
    }

    /// The notes column: CPU and switches an entry since `before`, over `entries`.
    fn since(&self, before: &ThreadCpu, entries: u64) -> String {
        let per = |a: u64, b: u64| (a - b) as f64 / entries.max(1) as f64;
        format!(
            "an entry: {:.1} us system CPU, {:.1} us user, {:.2} voluntary switches",
            per(self.system_us, before.system_us),
            per(self.user_us, before.user_us),
            per(self.voluntary_switches, before.voluntary_switches)
        )
    }
}

/// One log configuration.
#[derive(Clone, Copy)]
struct LogRun {
    size: usize,
    count: u64,
    threads: u64,
    durability: Durability,
    direct_io: bool,
    prealloc: Prealloc,
    /// Steady state of a log behind checkpoints: truncated as it goes, so new segments reuse
    /// the files of old ones (`LogOptions::reuse_segments`) instead of zero-filling new ones.
    reuse: bool,
}

fn log_run(dir: &Path, r: LogRun) -> Row {
    let LogRun {
        size,
        count,
        threads,
        durability,
        direct_io,
        prealloc,
        reuse,
    } = r;
    let dir = dir.join(format!("log-{size}-{threads}-{durability:?}-{direct_io}"));
    let _ = std::fs::remove_dir_all(&dir);
    let fs: Arc<dyn FileSystem> = Arc::new(RealFs);
    let opts = LogOptions {
        durability,
        max_record_bytes: 2 << 20,
        direct_io,
        prealloc,
        ..LogOptions::default()
    };
    let segment_bytes = opts.segment_bytes;
    let reusable = opts.reuse_segments as u64;
    let log = Arc::new(Log::open(fs, &dir, opts).expect("open log"));
    let payload = Arc::new(vec![0xcdu8; size]);
    // With `reuse`: truncate once per segment written. The best case, where every switch
    // finds a kept file: a server truncates at each checkpoint (every 256 MiB of log by
    // default) and keeps as many files as one checkpoint interval needs.
    let truncate_every = (segment_bytes / size as u64 / threads).max(1);
    if reuse {
        // Before the clock: write and drop enough segments that every switch finds a file.
        let warm = (reusable + 1) * segment_bytes / size as u64 + 1;
        for _ in 0..warm {
            log.wait_room().expect("warm-up room");
            log.append(&payload).expect("warm-up append");
        }
        log.sync().expect("warm-up sync");
        log.truncate_before(log.durable_lsn())
            .expect("warm-up truncate");
    }
    let before = log.stats();
    let per_thread = count / threads;
    let t = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let log = Arc::clone(&log);
            let payload = Arc::clone(&payload);
            std::thread::spawn(move || {
                for i in 0..per_thread {
                    log.commit(&payload).expect("commit");
                    if reuse && i % truncate_every == 0 {
                        log.truncate_before(log.durable_lsn()).expect("truncate");
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("writer");
    }
    log.sync().expect("final sync");
    let secs = t.elapsed().as_secs_f64();
    let stats = log.stats();
    drop(log);
    let _ = std::fs::remove_dir_all(&dir);
    let io = if direct_io { "O_DIRECT" } else { "buffered" };
    let prep = match (prealloc, reuse) {
        (_, true) => " reused segments",
        (Prealloc::ZeroFill, false) => "",
        (Prealloc::SetLen, false) => " SetLen",
    };
    Row {
        name: format!("log {durability:?} {threads} thread(s) {io}{prep} ({size} B)"),
        entries: per_thread * threads,
        bytes: per_thread * threads * size as u64,
        secs,
        fsyncs: Some(durable_points(&stats) - durable_points(&before)),
        notes: format!(
            "{}, spare waits {}, backpressure waits {}, segments reused {}",
            sync_latency(&stats),
            stats.spare_waits - before.spare_waits,
            stats.backpressure_waits - before.backpressure_waits,
            stats.segments_reused - before.segments_reused
        ),
    }
}

/// Calls that made a batch durable: fdatasyncs and `pwritev2(RWF_DSYNC)` writes.
fn durable_points(s: &cairn_wal::LogStats) -> u64 {
    s.fdatasync.count + s.dsync_write.count
}

/// The median latency of the calls that made batches durable, named for what they are.
fn sync_latency(s: &cairn_wal::LogStats) -> String {
    if s.dsync_write.count > 0 {
        format!("RWF_DSYNC write p50 {} us", s.dsync_write.p50_us)
    } else {
        format!(
            "write p50 {} us, fdatasync p50 {} us",
            s.write.p50_us, s.fdatasync.p50_us
        )
    }
}

/// Empties the page cache (needs root); false if that is not allowed here.
fn drop_caches() -> bool {
    // Dirty pages would stay cached: write them back first.
    let _ = std::process::Command::new("sync").status();
    std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}

fn raw_read(files: &[PathBuf]) -> (u64, f64) {
    let t = Instant::now();
    let mut buf = vec![0u8; 4 << 20];
    let mut read = 0u64;
    for p in files {
        let f = std::fs::File::open(p).expect("open");
        let mut off = 0;
        loop {
            let n = f.read_at(&mut buf, off).expect("read");
            if n == 0 {
                break;
            }
            read += n as u64;
            off += n as u64;
        }
    }
    (read, t.elapsed().as_secs_f64())
}

/// Open + read_from(1): (seconds for open, seconds in total).
fn log_scan(fs: &Arc<dyn FileSystem>, dir: &Path, opts: &LogOptions, count: u64) -> (f64, f64) {
    let t = Instant::now();
    let log = Log::open(Arc::clone(fs), dir, opts.clone()).expect("reopen");
    let open_secs = t.elapsed().as_secs_f64();
    let mut seen = 0u64;
    log.read_from::<WalError>(1, |_, p| {
        seen += p.len() as u64;
        Ok(())
    })
    .expect("scan");
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(seen, count * 100);
    drop(log);
    (open_secs, secs)
}

fn recovery(dir: &Path, total_mb: u64) -> Vec<(Row, Row)> {
    let dir = dir.join("recovery");
    let _ = std::fs::remove_dir_all(&dir);
    let fs: Arc<dyn FileSystem> = Arc::new(RealFs);
    let opts = LogOptions {
        durability: Durability::Async,
        prealloc: Prealloc::ZeroFill,
        ..LogOptions::default()
    };
    let payload = vec![0x5au8; 100];
    let count = total_mb * 1_000_000 / 116;
    {
        let log = Log::open(Arc::clone(&fs), &dir, opts.clone()).expect("open");
        for _ in 0..count {
            log.wait_room().expect("room");
            log.append(&payload).expect("append");
        }
        log.close().expect("close");
    }
    // Opening removes the spare the writer left, so the raw read sees the same files.
    drop(Log::open(Arc::clone(&fs), &dir, opts.clone()).expect("open"));
    let files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .collect();
    let bytes: u64 = files
        .iter()
        .map(|p| std::fs::metadata(p).expect("meta").len())
        .sum();
    let mut out = Vec::new();
    let caches = if drop_caches() {
        vec!["warm", "cold"]
    } else {
        println!("(cannot write /proc/sys/vm/drop_caches: no cold-cache rows)");
        vec!["warm"]
    };
    for cache in caches {
        let cold = cache == "cold";
        if cold {
            drop_caches();
        } else {
            raw_read(&files);
        }
        let (read, raw_secs) = raw_read(&files);
        assert_eq!(read, bytes);
        if cold {
            drop_caches();
        } else {
            log_scan(&fs, &dir, &opts, count);
        }
        let (open_secs, log_secs) = log_scan(&fs, &dir, &opts, count);
        out.push((
            Row {
                name: format!(
                    "raw sequential read of the segment files, {cache} cache ({} MiB)",
                    bytes >> 20
                ),
                entries: count,
                bytes,
                secs: raw_secs,
                fsyncs: None,
                notes: String::new(),
            },
            Row {
                name: format!("log open + read_from(1) of every record, {cache} cache"),
                entries: count,
                bytes,
                secs: log_secs,
                fsyncs: None,
                notes: format!("open {:.0} ms", open_secs * 1e3),
            },
        ));
    }
    let _ = std::fs::remove_dir_all(&dir);
    out
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let dir = args
        .iter()
        .find(|a| !a.starts_with("--"))
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target/wal-bench"));
    std::fs::create_dir_all(&dir).expect("bench dir");
    let scale = if quick { 10 } else { 1 };
    let sizes: Option<Vec<usize>> = args
        .iter()
        .find_map(|a| a.strip_prefix("--sizes="))
        .map(|l| {
            l.split(',')
                .map(|n| n.parse().expect("--sizes=N,N"))
                .collect()
        });
    let with_recovery = !args.iter().any(|a| a == "--no-recovery");
    let reused_only = args.iter().any(|a| a == "--reused-only");
    println!("| run | entries | entries/s | MB/s | fdatasyncs | vs best raw overwrite | notes |");
    println!("|---|---|---|---|---|---|---|");
    let mut bounds = Vec::new();
    for (size, count) in [(100usize, 5000u64), (1024, 5000), (1 << 20, 2000)] {
        if sizes.as_ref().is_some_and(|s| !s.contains(&size)) {
            continue;
        }
        let count = count / scale;
        let buffered = raw(&dir, size, count, false, RawFile::Overwrite);
        let direct = raw(&dir, size, count, true, RawFile::Overwrite);
        let (best, which) = if direct.mb_s() > buffered.mb_s() {
            (direct.mb_s(), "O_DIRECT")
        } else {
            (buffered.mb_s(), "buffered")
        };
        bounds.push(format!("{size} B: {which} ({best:.1} MB/s)"));
        buffered.print(Some(best));
        direct.print(Some(best));
        raw(&dir, size, count, false, RawFile::Append).print(Some(best));
        if size == 1 << 20 {
            for direct_io in [false, true] {
                for threads in [1, 4] {
                    let r = LogRun {
                        size,
                        count,
                        threads,
                        durability: Durability::Sync,
                        direct_io,
                        prealloc: Prealloc::ZeroFill,
                        reuse: true,
                    };
                    log_run(&dir, r).print(Some(best));
                }
            }
            // This disk slows down after many GB in a row: the bound again, for drift.
            for direct in [false, true] {
                let mut again = raw(&dir, size, count, direct, RawFile::Overwrite);
                again.name = format!("{} again, after the reused-segment rows", again.name);
                again.print(Some(best));
            }
            if reused_only {
                continue;
            }
        }
        let base = LogRun {
            size,
            count,
            threads: 1,
            durability: Durability::Sync,
            direct_io: false,
            prealloc: Prealloc::ZeroFill,
            reuse: false,
        };
        for direct_io in [false, true] {
            for threads in [1, 4] {
                let r = LogRun {
                    threads,
                    direct_io,
                    ..base
                };
                log_run(&dir, r).print(Some(best));
            }
            let r = LogRun {
                count: count * 10,
                durability: Durability::Async,
                direct_io,
                ..base
            };
            log_run(&dir, r).print(Some(best));
            if size == 100 {
                let r = LogRun {
                    count: 200_000 / scale,
                    threads: 64,
                    direct_io,
                    ..base
                };
                log_run(&dir, r).print(Some(best));
            }
        }
        if size == 1 << 20 {
            let r = LogRun {
                prealloc: Prealloc::SetLen,
                ..base
            };
            log_run(&dir, r).print(Some(best));
        }
    }
    let recovery_runs = if with_recovery {
        recovery(&dir, if quick { 64 } else { 1024 })
    } else {
        Vec::new()
    };
    for (raw_read, scan) in recovery_runs {
        let raw_mb = raw_read.mb_s();
        raw_read.print(None);
        scan.print(Some(raw_mb));
    }
    println!();
    println!("best raw overwrite per entry size: {}", bounds.join("; "));
    println!("recovery rows: ratio against the raw read with the same cache state");
}
