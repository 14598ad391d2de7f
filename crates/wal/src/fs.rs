//! All file I/O of the log (and of the snapshots built on it) goes through [`FileSystem`], so
//! tests can swap the real disk for `cairn_testkit::FaultyFs`, which fails chosen operations
//! and forgets unsynced bytes on a simulated power loss.
//!
//! Non-goals: buffering or caching; each call maps to one system call on the real disk (a
//! vectored write to as few as the kernel takes: 1,024 parts each, and again after a short one).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// One open file, read and written at explicit offsets.
pub trait LogFile: Send + Sync {
    /// Writes all of `buf` at `offset`.
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()>;
    /// Reads up to `buf.len()` bytes at `offset`; returns how many (0 at the end).
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize>;
    /// fdatasync: the bytes written so far survive a power loss once this returns Ok.
    fn sync_data(&self) -> io::Result<()>;
    /// Writes `bufs` back to back from `offset`, as one write of the log (one before each
    /// fdatasync). By default the parts are joined first; the real disk hands them to the
    /// kernel as they are (pwritev, more than one call past 1,024 parts or after a short write).
    fn write_vectored_at(&self, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        match bufs {
            [one] => self.write_at(offset, one),
            _ => self.write_at(offset, &bufs.concat()),
        }
    }
    /// Writes `buf` at `offset` and makes it durable, in one system call on the real disk.
    /// Meant for files opened with [`FileSystem::open_direct`] whose every write goes through
    /// it: it covers `buf` only, not other bytes written earlier.
    fn write_at_durable(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.write_at(offset, buf)?;
        self.sync_data()
    }
    fn size(&self) -> io::Result<u64>;
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// A hint that the whole file is about to be read: the real disk starts reading it into
    /// the page cache in the background, so reading overlaps checking. Does nothing by default.
    fn will_need(&self) {}
    /// A hint that the file's cached pages are not needed: the real disk drops the clean ones
    /// (`POSIX_FADV_DONTNEED`). Does nothing by default.
    fn drop_cache(&self) {}
}

/// Directory operations plus opening files.
pub trait FileSystem: Send + Sync {
    /// Creates a new file (fails if it exists).
    fn create(&self, path: &Path) -> io::Result<Box<dyn LogFile>>;
    /// Opens an existing file for reading and writing.
    fn open(&self, path: &Path) -> io::Result<Box<dyn LogFile>>;
    /// Opens an existing file for writes that bypass the page cache (O_DIRECT). The caller
    /// writes only [`DIRECT_ALIGN`]-aligned buffers at aligned offsets with aligned lengths.
    /// A file system without such a mode (the fault-injecting one) opens the file normally.
    fn open_direct(&self, path: &Path) -> io::Result<Box<dyn LogFile>> {
        self.open(path)
    }
    /// The paths of the entries of `dir`.
    fn list(&self, dir: &Path) -> io::Result<Vec<PathBuf>>;
    fn remove(&self, path: &Path) -> io::Result<()>;
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// fsync of the directory: makes creations, renames and removals in it durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Takes this process's exclusive hold on `dir` (see [`FolderLock`]). Another process
    /// holding it is an error of kind `WouldBlock` whose message names its PID when known.
    fn lock_folder(&self, dir: &Path) -> io::Result<FolderLock>;
}

/// The file in a folder whose `flock` says which process holds the folder; it holds that
/// process's PID as text, for the message of the one refused.
pub const LOCK_FILE: &str = "LOCK";

/// A folder held by this process: a `flock` on its [`LOCK_FILE`], so that a second process
/// opening the same folder (two servers started with one data folder) is refused instead of
/// writing the same log. The kernel releases it when the guard drops or the process ends in
/// any way (kill -9 included), so nothing stale is ever left to clean up.
#[derive(Debug)]
pub struct FolderLock {
    /// The locked file (None where the file system is not the real disk).
    _file: Option<File>,
}

impl FolderLock {
    /// A hold that holds nothing: for file systems that no other process can see (the
    /// fault-injecting one of the tests).
    pub fn in_memory() -> FolderLock {
        FolderLock { _file: None }
    }
}

/// Alignment of buffers, offsets and lengths written through [`FileSystem::open_direct`].
pub const DIRECT_ALIGN: usize = 4096;

/// Most iovecs one pwritev takes (Linux's UIO_MAXIOV).
const IOV_MAX: usize = 1024;

/// The real disk.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealFs;

struct RealFile(File);

impl LogFile for RealFile {
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.0.write_all_at(buf, offset)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        FileExt::read_at(&self.0, buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn write_vectored_at(&self, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        let mut iov: Vec<libc::iovec> = bufs
            .iter()
            .filter(|b| !b.is_empty())
            .map(|b| libc::iovec {
                iov_base: b.as_ptr() as *mut libc::c_void,
                iov_len: b.len(),
            })
            .collect();
        let mut offset = offset;
        let mut done = 0; // iovecs written in full
        while done < iov.len() {
            let at =
                i64::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
            let count = (iov.len() - done).min(IOV_MAX) as libc::c_int;
            // SAFETY: each iovec points into one of `bufs` (advanced within it below), which
            // outlive the call; the fd is open.
            let n = unsafe { libc::pwritev(self.0.as_raw_fd(), iov[done..].as_ptr(), count, at) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return Err(e);
            }
            if n == 0 {
                return Err(io::Error::from(io::ErrorKind::WriteZero));
            }
            // A short write: skip what was written and go on, as `write_all_at` does.
            let mut n = n as usize;
            offset += n as u64;
            while n > 0 {
                let v = &mut iov[done];
                if n >= v.iov_len {
                    n -= v.iov_len;
                    done += 1;
                } else {
                    v.iov_base = (v.iov_base as *mut u8).wrapping_add(n) as *mut libc::c_void;
                    v.iov_len -= n;
                    n = 0;
                }
            }
        }
        Ok(())
    }
    /// pwritev2 with RWF_DSYNC: the write and the fdatasync in one system call (the same
    /// guarantee as O_DSYNC for this one write: data plus the metadata needed to read it).
    fn write_at_durable(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        let at = i64::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let iov = libc::iovec {
            iov_base: buf.as_ptr() as *mut libc::c_void,
            iov_len: buf.len(),
        };
        loop {
            // SAFETY: `iov` points into `buf`, which outlives the call; the fd is open.
            let n = unsafe { libc::pwritev2(self.0.as_raw_fd(), &iov, 1, at, libc::RWF_DSYNC) };
            if n >= 0 && n as usize == buf.len() {
                return Ok(());
            }
            if n >= 0 {
                // Only at a full disk, in practice. Not retried: the rest would start at an
                // unaligned offset, which O_DIRECT refuses with a less telling error.
                return Err(io::Error::other(format!(
                    "short write: {n} of {} bytes",
                    buf.len()
                )));
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                // A kernel without pwritev2 (before 4.6) or RWF_DSYNC (before 4.7).
                Some(libc::ENOSYS) | Some(libc::EOPNOTSUPP) => {
                    self.write_at(offset, buf)?;
                    return self.sync_data();
                }
                _ => return Err(e),
            }
        }
    }
    fn size(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
    fn will_need(&self) {
        // SAFETY: the fd is open; a hint has no effect on memory safety. Failure is harmless.
        unsafe {
            libc::posix_fadvise(self.0.as_raw_fd(), 0, 0, libc::POSIX_FADV_WILLNEED);
        }
    }
    fn drop_cache(&self) {
        // SAFETY: the fd is open; a hint has no effect on memory safety. Failure is harmless.
        unsafe {
            libc::posix_fadvise(self.0.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
        }
    }
}

impl FileSystem for RealFs {
    fn create(&self, path: &Path) -> io::Result<Box<dyn LogFile>> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)?;
        Ok(Box::new(RealFile(f)))
    }
    fn open(&self, path: &Path) -> io::Result<Box<dyn LogFile>> {
        let f = OpenOptions::new().read(true).write(true).open(path)?;
        Ok(Box::new(RealFile(f)))
    }
    fn open_direct(&self, path: &Path) -> io::Result<Box<dyn LogFile>> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)?;
        Ok(Box::new(RealFile(f)))
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        std::fs::read_dir(dir)?
            .map(|e| e.map(|e| e.path()))
            .collect()
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }
    fn lock_folder(&self, dir: &Path) -> io::Result<FolderLock> {
        let path = dir.join(LOCK_FILE);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        match file.try_lock() {
            Ok(()) => {
                file.set_len(0)?;
                file.write_all_at(format!("{}\n", std::process::id()).as_bytes(), 0)?;
                Ok(FolderLock { _file: Some(file) })
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                let holder = std::fs::read_to_string(&path).unwrap_or_default();
                let holder = match holder.trim() {
                    "" => "another process".to_string(),
                    pid => format!("another process (PID {pid})"),
                };
                Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    format!("held by {holder}"),
                ))
            }
            Err(std::fs::TryLockError::Error(e)) => Err(e),
        }
    }
}

/// A file system whose fdatasyncs (and durable writes) take `delay` longer than the one it
/// wraps: a slow or hung log disk, for tests of the real server (the `cairn` binary turns it
/// on from an environment variable that `--help` does not show). Everything else is passed
/// through. The delay can be changed at any time; it starts at zero, so that opening and
/// recovering are not slowed down.
#[derive(Clone)]
pub struct DelayedSyncFs {
    inner: std::sync::Arc<dyn FileSystem>,
    delay_ms: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl DelayedSyncFs {
    pub fn new(inner: std::sync::Arc<dyn FileSystem>) -> DelayedSyncFs {
        DelayedSyncFs {
            inner,
            delay_ms: Default::default(),
        }
    }

    /// From now on every fdatasync (and durable write) sleeps `delay` first.
    pub fn set_delay(&self, delay: std::time::Duration) {
        self.delay_ms.store(
            delay.as_millis() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    fn wrap(&self, file: Box<dyn LogFile>) -> Box<dyn LogFile> {
        Box::new(DelayedFile {
            inner: file,
            delay_ms: std::sync::Arc::clone(&self.delay_ms),
        })
    }
}

struct DelayedFile {
    inner: Box<dyn LogFile>,
    delay_ms: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl DelayedFile {
    fn delay(&self) {
        let ms = self.delay_ms.load(std::sync::atomic::Ordering::Relaxed);
        if ms > 0 {
            std::thread::sleep(std::time::Duration::from_millis(ms));
        }
    }
}

impl LogFile for DelayedFile {
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.inner.write_at(offset, buf)
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read_at(offset, buf)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.delay();
        self.inner.sync_data()
    }
    fn write_vectored_at(&self, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        self.inner.write_vectored_at(offset, bufs)
    }
    fn write_at_durable(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.delay();
        self.inner.write_at_durable(offset, buf)
    }
    fn size(&self) -> io::Result<u64> {
        self.inner.size()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn will_need(&self) {
        self.inner.will_need()
    }
    fn drop_cache(&self) {
        self.inner.drop_cache()
    }
}

impl FileSystem for DelayedSyncFs {
    fn create(&self, path: &Path) -> io::Result<Box<dyn LogFile>> {
        Ok(self.wrap(self.inner.create(path)?))
    }
    fn open(&self, path: &Path) -> io::Result<Box<dyn LogFile>> {
        Ok(self.wrap(self.inner.open(path)?))
    }
    fn open_direct(&self, path: &Path) -> io::Result<Box<dyn LogFile>> {
        Ok(self.wrap(self.inner.open_direct(path)?))
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
    fn lock_folder(&self, dir: &Path) -> io::Result<FolderLock> {
        self.inner.lock_folder(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.inner.create_dir_all(dir)
    }
}
