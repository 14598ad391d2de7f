//! `cairn-wal-bench [DIR] [--quick]`: the log against the raw write bound of the same disk,
//! in one run (Mashona's SimpleHardwareBenchmark idea).
//!
//! ```text
//!   raw bound: one file, write(entry) + fdatasync per entry (buffered, then O_DIRECT)
//!   log:       Log::append per entry, sync and async, 1 and 4 threads, 64 committers
//!   recovery:  Log::open + read of every record  vs  a plain sequential read of the files
//! ```
//!
//! Prints a markdown table. Each row runs for a fixed number of entries (not a fixed time),
//! so the figures are throughput over the same work.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use cairn_wal::{Durability, FileSystem, Log, LogOptions, RealFs, WalError};

struct Row {
    name: String,
    entries: u64,
    bytes: u64,
    secs: f64,
    fsyncs: Option<u64>,
}

impl Row {
    fn print(&self, bound: Option<f64>) {
        let mb_s = self.bytes as f64 / self.secs / 1e6;
        let ratio = bound.map_or(String::from("-"), |b| format!("{:.2}x", mb_s / b));
        let fsyncs = self.fsyncs.map_or(String::from("-"), |f| f.to_string());
        println!(
            "| {} | {} | {:.0} | {:.1} | {} | {} |",
            self.name,
            self.entries,
            self.entries as f64 / self.secs,
            mb_s,
            fsyncs,
            ratio
        );
    }
}

fn raw(dir: &Path, size: usize, count: u64, direct: bool) -> Row {
    let path = dir.join(if direct { "raw-direct" } else { "raw-buffered" });
    let _ = std::fs::remove_file(&path);
    let mut o = OpenOptions::new();
    o.create(true).write(true).read(true);
    if direct {
        o.custom_flags(libc::O_DIRECT);
    }
    let f = o.open(&path).expect("open raw file");
    // O_DIRECT needs 4 KiB-aligned buffers and lengths: round the entry up.
    let len = if direct {
        size.div_ceil(4096) * 4096
    } else {
        size
    };
    let layout = std::alloc::Layout::from_size_align(len, 4096).expect("layout");
    let mut buf = vec![0u8; len + 4096];
    let shift = buf.as_ptr().align_offset(layout.align());
    let aligned = &mut buf[shift..shift + len];
    aligned.fill(0xab);
    let t = Instant::now();
    let mut off = 0u64;
    for _ in 0..count {
        f.write_all_at(aligned, off).expect("raw write");
        f.sync_data().expect("raw fdatasync");
        off += len as u64;
    }
    let secs = t.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&path);
    Row {
        name: format!(
            "raw write+fdatasync {} ({} B)",
            if direct { "O_DIRECT" } else { "buffered" },
            size
        ),
        entries: count,
        bytes: count * size as u64,
        secs,
        fsyncs: Some(count),
    }
}

fn log_run(dir: &Path, size: usize, count: u64, threads: u64, durability: Durability) -> Row {
    let dir = dir.join(format!("log-{size}-{threads}-{durability:?}"));
    let _ = std::fs::remove_dir_all(&dir);
    let fs: Arc<dyn FileSystem> = Arc::new(RealFs);
    let opts = LogOptions {
        durability,
        max_record_bytes: 2 << 20,
        ..LogOptions::default()
    };
    let log = Arc::new(Log::open(fs, &dir, opts).expect("open log"));
    let payload = Arc::new(vec![0xcdu8; size]);
    let per_thread = count / threads;
    let t = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let log = Arc::clone(&log);
            let payload = Arc::clone(&payload);
            std::thread::spawn(move || {
                for _ in 0..per_thread {
                    log.append(&payload).expect("append");
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("writer");
    }
    log.sync().expect("final sync");
    let secs = t.elapsed().as_secs_f64();
    let fsyncs = log.stats().fsync_count;
    drop(log);
    let _ = std::fs::remove_dir_all(&dir);
    Row {
        name: format!("log {durability:?} {threads} thread(s) ({size} B)"),
        entries: per_thread * threads,
        bytes: per_thread * threads * size as u64,
        secs,
        fsyncs: Some(fsyncs),
    }
}

fn recovery(dir: &Path, total_mb: u64) -> (Row, Row) {
    let dir = dir.join("recovery");
    let _ = std::fs::remove_dir_all(&dir);
    let fs: Arc<dyn FileSystem> = Arc::new(RealFs);
    let opts = LogOptions {
        durability: Durability::Async,
        ..LogOptions::default()
    };
    let payload = vec![0x5au8; 100];
    let count = total_mb * 1_000_000 / 116;
    {
        let log = Log::open(Arc::clone(&fs), &dir, opts.clone()).expect("open");
        for _ in 0..count {
            log.append_nowait(&payload).expect("append");
        }
        log.close().expect("close");
    }
    let files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("dir")
        .map(|e| e.expect("entry").path())
        .collect();
    let bytes: u64 = files
        .iter()
        .map(|p| std::fs::metadata(p).expect("meta").len())
        .sum();
    let t = Instant::now();
    let mut buf = vec![0u8; 4 << 20];
    let mut read = 0u64;
    for p in &files {
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
    let raw_secs = t.elapsed().as_secs_f64();
    assert_eq!(read, bytes);
    let t = Instant::now();
    let log = Log::open(Arc::clone(&fs), &dir, opts).expect("reopen");
    let mut seen = 0u64;
    log.read_from::<WalError>(1, |_, p| {
        seen += p.len() as u64;
        Ok(())
    })
    .expect("scan");
    let log_secs = t.elapsed().as_secs_f64();
    assert_eq!(seen, count * 100);
    drop(log);
    let _ = std::fs::remove_dir_all(&dir);
    (
        Row {
            name: format!(
                "raw sequential read of the segment files ({} MiB)",
                bytes >> 20
            ),
            entries: count,
            bytes,
            secs: raw_secs,
            fsyncs: None,
        },
        Row {
            name: "log open + scan of every record".to_string(),
            entries: count,
            bytes,
            secs: log_secs,
            fsyncs: None,
        },
    )
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
    println!("| run | entries | entries/s | MB/s | fdatasyncs | vs raw buffered |");
    println!("|---|---|---|---|---|---|");
    for (size, count) in [(100usize, 5000u64), (1024, 5000), (1 << 20, 500)] {
        let count = count / scale;
        let bound = raw(&dir, size, count, false);
        let bound_mb = bound.bytes as f64 / bound.secs / 1e6;
        bound.print(None);
        raw(&dir, size, count, true).print(Some(bound_mb));
        for threads in [1, 4] {
            log_run(&dir, size, count, threads, Durability::Sync).print(Some(bound_mb));
        }
        log_run(&dir, size, count * 10, 1, Durability::Async).print(Some(bound_mb));
        if size == 100 {
            log_run(&dir, size, 200_000 / scale, 64, Durability::Sync).print(Some(bound_mb));
        }
        std::io::stdout().flush().ok();
    }
    let (raw_read, scan) = recovery(&dir, if quick { 64 } else { 1024 });
    let raw_mb = raw_read.bytes as f64 / raw_read.secs / 1e6;
    raw_read.print(None);
    scan.print(Some(raw_mb));
}
