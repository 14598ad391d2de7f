//! One read: the request handed to a reading thread, the bytes it yields, and what its
//! errors mean.
//!
//! ```text
//!   Req { offset, buf, done } ──a ring or pread thread──> done: (buf, result)
//!   a completion's res ──completed──> the buffer, or an error (negative errno, short read)
//!   an error ──is_device_error──> the device's verdict (drop the segment) or "not done"
//! ```
//!
//! Non-goals: no I/O here.

use std::io;

use tokio::sync::oneshot;

use crate::device::AlignedBuf;

/// One read: fill `buf` from `offset`, answer on `done`.
pub(super) struct Req {
    pub(super) offset: u64,
    pub(super) buf: AlignedBuf,
    pub(super) done: oneshot::Sender<(AlignedBuf, io::Result<()>)>,
}

/// The bytes of one read.
pub enum ReadBuf {
    /// Read into an aligned buffer of its own (a worker's ring, the shared ring, the pool).
    Aligned(AlignedBuf),
    /// Read through a lent ring, into `len` bytes at `start` of `vec` (a block boundary).
    InVec {
        vec: Vec<u8>,
        start: usize,
        len: usize,
    },
}

impl std::ops::Deref for ReadBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            ReadBuf::Aligned(b) => b,
            ReadBuf::InVec { vec, start, len } => &vec[*start..*start + *len],
        }
    }
}

/// A read's result from its completion's `res`.
pub(super) fn completed(buf: AlignedBuf, result: i32) -> io::Result<AlignedBuf> {
    if result < 0 {
        Err(io::Error::from_raw_os_error(-result))
    } else if result as usize != buf.len() {
        Err(short_read(result, buf.len()))
    } else {
        Ok(buf)
    }
}

/// Whether a read's error is the device's verdict on its blocks (EIO and the like, or a
/// short read), for which the segment is dropped. The others say the read was not done: the
/// reader stopped, a ring was full or busy, the read was cancelled or interrupted, memory ran
/// out. Those leave the data as it was, and the caller answers for this once only.
pub fn is_device_error(e: &io::Error) -> bool {
    match e.raw_os_error() {
        Some(code) => !matches!(
            code,
            libc::ECANCELED
                | libc::EINTR
                | libc::EAGAIN
                | libc::EBUSY
                | libc::ENOMEM
                | libc::EEXIST
        ),
        None => e.kind() == io::ErrorKind::UnexpectedEof,
    }
}

pub(super) fn short_read(result: i32, len: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("short flash read: {result} of {len} bytes"),
    )
}
