//! Device I/O: a file or block device opened with O_DIRECT, and buffers aligned for it (the
//! fault-injecting wrapper for tests is in `faulty_device`).
//!
//! ```text
//!   Device::write_at (writer thread, whole segments)   Device::read_at (pread pool, reclaim)
//!   Device::fd ──> io_uring reads (reader/), when the device is a real file
//! ```
//!
//! Every buffer, offset and length handed to a device is a multiple of 4 KiB ([`BLOCK`]), as
//! O_DIRECT requires.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::Path;

use crate::format::BLOCK;

/// A zeroed heap buffer aligned to [`BLOCK`], for O_DIRECT.
pub struct AlignedBuf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the buffer is uniquely owned heap memory, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only reads it (through &self).
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// `len` bytes, rounded up to a whole number of blocks.
    pub fn new(len: usize) -> AlignedBuf {
        let len = len.div_ceil(BLOCK).max(1) * BLOCK;
        let layout = Layout::from_size_align(len, BLOCK).expect("layout");
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        AlignedBuf { ptr, len }
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for len initialised (zeroed) bytes while self lives.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref, and &mut self makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr, Layout::from_size_align_unchecked(self.len, BLOCK)) }
    }
}

/// Block I/O on the flash file.
pub trait Device: Send + Sync {
    /// Fills `buf` from `offset` (short reads past the end are an error).
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Writes all of `buf` at `offset`.
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()>;
    /// fdatasync: makes the writes so far durable (O_DIRECT bypasses the page cache, not the
    /// device's own cache).
    fn sync(&self) -> io::Result<()>;
    /// The descriptor for io_uring reads, if reads may bypass this trait.
    fn fd(&self) -> Option<RawFd>;
    /// Bytes of the device.
    fn size_bytes(&self) -> u64;
    /// Lets another open of the same file take it, as the end of the process would: for
    /// tests that reopen a tier in one process.
    #[cfg(test)]
    fn unlock(&self) {}
}

/// The real file or block device.
pub struct FileDevice {
    file: File,
    len: u64,
}

/// Why the device cannot be used; each names the path.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("flash path {path}: cannot open for writing: {source}")]
    Open { path: String, source: io::Error },
    #[error("flash path {path}: the file system does not support O_DIRECT (tmpfs?); use another file system or --flash-direct-io false")]
    NoDirectIo { path: String },
    #[error("flash path {path}: cannot allocate {size} bytes: {source}")]
    Allocate {
        path: String,
        size: u64,
        source: io::Error,
    },
    #[error("flash path {path}: {why}")]
    Invalid { path: String, why: String },
    /// Another process holds the file (`flock`): two servers never share a flash tier.
    #[error("flash path {path} is in use by {holder}; one cairn process per flash file")]
    InUse { path: String, holder: String },
}

impl FileDevice {
    /// Opens `path` (created and preallocated to `size` bytes if it is a file), with O_DIRECT
    /// when `direct` is set. A block device keeps its own size (`size` 0 = all of it).
    pub fn open(path: &Path, size: u64, direct: bool) -> Result<FileDevice, OpenError> {
        let name = path.display().to_string();
        let mut opts = OpenOptions::new();
        opts.read(true).write(true);
        let is_block_device = std::fs::metadata(path)
            .map(|m| m.file_type().is_block_device())
            .unwrap_or(false);
        if !is_block_device {
            opts.create(true);
        }
        if direct {
            opts.custom_flags(libc::O_DIRECT);
        }
        let file = match opts.open(path) {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) && direct => {
                return Err(OpenError::NoDirectIo { path: name })
            }
            Err(e) => {
                return Err(OpenError::Open {
                    path: name,
                    source: e,
                })
            }
        };
        // Held before anything is changed (the length below): a second server on the same
        // file or device is refused. The kernel drops the hold when the process ends.
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(OpenError::InUse {
                    holder: lock_holder(&file)
                        .map_or("another process".into(), |pid| format!("process {pid}")),
                    path: name,
                })
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(OpenError::Open {
                    path: name,
                    source: e,
                })
            }
        }
        // Recent kernels accept O_DIRECT on tmpfs, but there it is memory, not a device: a
        // flash tier on it only doubles the RAM used. Refused the same way.
        if direct && is_tmpfs(&file) {
            return Err(OpenError::NoDirectIo { path: name });
        }
        let len = if is_block_device {
            // SAFETY: the fd is open; BLKGETSIZE64 writes one u64.
            let mut bytes: u64 = 0;
            let r = unsafe { libc::ioctl(file.as_raw_fd(), 0x8008_1272, &mut bytes) };
            if r != 0 {
                return Err(OpenError::Open {
                    path: name,
                    source: io::Error::last_os_error(),
                });
            }
            if size > 0 {
                bytes.min(size)
            } else {
                bytes
            }
        } else {
            let have = file
                .metadata()
                .map_err(|e| OpenError::Open {
                    path: name.clone(),
                    source: e,
                })?
                .len();
            if have != size {
                file.set_len(size).map_err(|e| OpenError::Allocate {
                    path: name.clone(),
                    size,
                    source: e,
                })?;
            }
            // Real blocks, so that a full disk shows now and not as EIO later.
            // SAFETY: the fd is open.
            let r = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, size as libc::off_t) };
            if r != 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EOPNOTSUPP) {
                    return Err(OpenError::Allocate {
                        path: name,
                        size,
                        source: e,
                    });
                }
            }
            size
        };
        Ok(FileDevice { file, len })
    }
}

/// The PID holding a `flock` on `file`, from /proc/locks (lines such as `1: FLOCK ADVISORY
/// WRITE 4242 fd:00:1234 0 EOF`: the device's major and minor in hex, then the inode).
fn lock_holder(file: &File) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata().ok()?;
    let want = format!(
        "{:02x}:{:02x}:{}",
        libc::major(meta.dev()),
        libc::minor(meta.dev()),
        meta.ino()
    );
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    locks.lines().find_map(|line| {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            [_, "FLOCK", _, _, pid, id, ..] if *id == want => pid.parse().ok(),
            _ => None,
        }
    })
}

/// Whether `file` lives on tmpfs.
fn is_tmpfs(file: &File) -> bool {
    const TMPFS_MAGIC: libc::c_long = 0x0102_1994;
    // SAFETY: fstatfs fills the zeroed struct for an open fd.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) };
    r == 0 && st.f_type as libc::c_long == TMPFS_MAGIC
}

impl Device for FileDevice {
    #[cfg(test)]
    fn unlock(&self) {
        self.file.unlock().expect("unlock");
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.file.write_all_at(buf, offset)
    }
    fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }
    fn fd(&self) -> Option<RawFd> {
        Some(self.file.as_raw_fd())
    }
    fn size_bytes(&self) -> u64 {
        self.len
    }
}
