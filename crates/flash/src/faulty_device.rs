//! A fault-injecting device, for tests only: compiled for this crate's tests and for crates
//! that turn on the `test-util` feature (from their dev-dependencies), never into the server.
//!
//! ```text
//!   Flash ──Device::read_at / write_at──> FaultyDevice ── range failing? ──> Err(errno)
//!                                                       └─ else ──> the real device
//! ```
//!
//! Non-goals: no io_uring path (its `fd` is None, so reads take the pread pool and meet the
//! faults), no torn writes.

use std::io;
use std::ops::Range;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::device::Device;

/// Test-only fault injection: fails reads or writes that touch chosen byte ranges, with EIO
/// or a chosen error. Reads go through [`Device::read_at`] (no io_uring fd), so the faults
/// apply to them.
pub struct FaultyDevice {
    inner: Box<dyn Device>,
    failing_reads: Mutex<Vec<(Range<u64>, i32)>>,
    failing_writes: Mutex<Vec<(Range<u64>, i32)>>,
    /// Reads that failed because of an injected fault.
    pub injected: AtomicU64,
}

impl FaultyDevice {
    pub fn new(inner: Box<dyn Device>) -> FaultyDevice {
        FaultyDevice {
            inner,
            failing_reads: Mutex::new(Vec::new()),
            failing_writes: Mutex::new(Vec::new()),
            injected: AtomicU64::new(0),
        }
    }

    /// Reads overlapping `range` fail with EIO from now on.
    pub fn fail_reads(&self, range: Range<u64>) {
        self.fail_reads_with(range, libc::EIO);
    }

    /// Reads overlapping `range` fail with the OS error `errno` from now on.
    pub fn fail_reads_with(&self, range: Range<u64>, errno: i32) {
        self.failing_reads.lock().push((range, errno));
    }

    /// Reads no longer fail.
    pub fn heal_reads(&self) {
        self.failing_reads.lock().clear();
    }

    /// Writes overlapping `range` fail with EIO from now on.
    pub fn fail_writes(&self, range: Range<u64>) {
        self.failing_writes.lock().push((range, libc::EIO));
    }

    fn hit(
        &self,
        ranges: &Mutex<Vec<(Range<u64>, i32)>>,
        offset: u64,
        len: usize,
    ) -> io::Result<()> {
        let end = offset + len as u64;
        let failing = ranges.lock();
        if let Some((_, errno)) = failing
            .iter()
            .find(|(r, _)| r.start < end && offset < r.end)
        {
            self.injected.fetch_add(1, Ordering::Relaxed);
            return Err(io::Error::from_raw_os_error(*errno));
        }
        Ok(())
    }
}

impl Device for FaultyDevice {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.hit(&self.failing_reads, offset, buf.len())?;
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.hit(&self.failing_writes, offset, buf.len())?;
        self.inner.write_at(offset, buf)
    }
    fn sync(&self) -> io::Result<()> {
        self.inner.sync()
    }
    fn fd(&self) -> Option<RawFd> {
        None
    }
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
}
