//! Reads by LSN range through the sparse index: every record once and in order, from any
//! LSN, across segments, after a restart (the index is built by the first scan), after a
//! truncation; and a read of a record deep in a segment reads a stride, not the segment.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use cairn_wal::{
    Durability, FileSystem, FolderLock, Log, LogFile, LogOptions, Lsn, RealFs, WalError,
};

/// The real disk, counting the bytes read.
struct CountingFs {
    inner: RealFs,
    read: Arc<AtomicU64>,
}

struct CountingFile {
    inner: Box<dyn LogFile>,
    read: Arc<AtomicU64>,
}

impl LogFile for CountingFile {
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.inner.write_at(offset, buf)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read_at(offset, buf)?;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.inner.sync_data()
    }
    fn write_vectored_at(&self, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        self.inner.write_vectored_at(offset, bufs)
    }
    fn size(&self) -> io::Result<u64> {
        self.inner.size()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
}

impl FileSystem for CountingFs {
    fn create(&self, path: &Path) -> io::Result<Box<dyn LogFile>> {
        self.inner.create(path)
    }
    fn open(&self, path: &Path) -> io::Result<Box<dyn LogFile>> {
        Ok(Box::new(CountingFile {
            inner: self.inner.open(path)?,
            read: Arc::clone(&self.read),
        }))
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        self.inner.list(dir)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        self.inner.remove(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.inner.sync_dir(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn lock_folder(&self, dir: &Path) -> io::Result<FolderLock> {
        self.inner.lock_folder(dir)
    }
}

fn payload(i: u64) -> Vec<u8> {
    format!("record-{i}-")
        .repeat((i % 13) as usize + 1)
        .into_bytes()
}

fn range(log: &Log, from: Lsn, upto: Lsn) -> Vec<(Lsn, Vec<u8>)> {
    let mut out = Vec::new();
    log.read_range::<WalError>(from, upto, |lsn, p| {
        out.push((lsn, p.to_vec()));
        Ok(true)
    })
    .unwrap();
    out
}

fn check(log: &Log, from: Lsn, upto: Lsn) {
    let got = range(log, from, upto);
    let want: Vec<Lsn> = (from..=upto).collect();
    assert_eq!(
        got.iter().map(|r| r.0).collect::<Vec<_>>(),
        want,
        "{from}..={upto}"
    );
    assert!(got.iter().all(|(lsn, p)| *p == payload(*lsn)));
}

#[test]
fn a_range_read_gives_each_record_once_from_anywhere_and_reads_a_stride_not_a_segment() {
    let tmp = tempfile::tempdir().unwrap();
    let read = Arc::new(AtomicU64::new(0));
    let fs: Arc<dyn FileSystem> = Arc::new(CountingFs {
        inner: RealFs,
        read: Arc::clone(&read),
    });
    let opts = LogOptions {
        durability: Durability::Sync,
        segment_bytes: 1 << 20,
        ..LogOptions::default()
    };
    let n = 60_000;
    {
        let log = Log::open(Arc::clone(&fs), tmp.path(), opts.clone()).unwrap();
        for chunk in (1..=n).collect::<Vec<u64>>().chunks(500) {
            for &i in chunk {
                assert_eq!(log.append(&payload(i)).unwrap(), i);
            }
            log.sync().unwrap();
        }
        assert!(log.stats().segments >= 3, "several segments");
        assert!(log.index_points() > 100, "noted as written");
        for (from, upto) in [(1, 10), (777, 20_000), (25_000, 25_000), (59_990, n)] {
            check(&log, from, upto);
        }
        // One record deep in a segment: about a stride read, not the segment up to it.
        read.store(0, Ordering::Relaxed);
        check(&log, 41_234, 41_234);
        let bytes = read.load(Ordering::Relaxed);
        assert!(bytes <= 160 << 10, "read {bytes} bytes for one record");
        // A read past what is written stops at the written mark.
        assert_eq!(range(&log, n - 1, n + 100).len(), 2);
        // `f` stops a read.
        let mut seen = 0;
        log.read_range::<WalError>(100, n, |_, _| {
            seen += 1;
            Ok(seen < 5)
        })
        .unwrap();
        assert_eq!(seen, 5);
    }
    // After a restart the index is empty: the first read of a segment scans it and notes
    // points, and the next read of a record deep in it reads a stride again.
    let log = Log::open(Arc::clone(&fs), tmp.path(), opts).unwrap();
    check(&log, 25_000, 35_000);
    read.store(0, Ordering::Relaxed);
    check(&log, 31_000, 31_000);
    assert!(read.load(Ordering::Relaxed) <= 160 << 10);
    // Truncation drops whole segments and their points; what is kept reads as before.
    let first = log.segments()[2].0;
    log.truncate_before(first).unwrap();
    assert_eq!(log.first_lsn(), first);
    check(&log, first, first + 5_000);
    let got = range(&log, 1, first);
    assert_eq!(
        got[0].0, first,
        "older records are gone: the first one read tells"
    );
}
