//! A connection thread's ring of provided buffers (`IORING_REGISTER_PBUF_RING`), which its
//! multishot receives fill: the kernel picks a buffer per completion, the driver copies the
//! bytes out into the connection's arrivals and gives the buffer back at once. Not here: what
//! a receive does with the bytes (`driver.rs`, `socket.rs`).
//!
//! ```text
//!   kernel ── recv completion (buffer id, length) ──> Driver::complete ── data(bid, len) ──>
//!       Arrivals.bytes;  give_back(bid) ──> the ring's tail (Release) ──> kernel
//! ```

use std::io;
use std::sync::atomic::Ordering;

use io_uring::{types, IoUring};

/// Provided buffers per thread and their size: multishot receives copy each completion's
/// bytes out at once and give the buffer back, so a turn needs about one per connection that
/// received; when they run out, a receive ends with ENOBUFS and is submitted again.
const RECV_BUFS: u16 = 256;
const RECV_BUF_SIZE: usize = 2048;
/// The buffer group id of the thread's provided buffers.
pub(super) const RECV_GROUP: u16 = 0;

/// A thread's ring of provided buffers (`IORING_REGISTER_PBUF_RING`) for multishot receives.
pub(super) struct BufRing {
    /// The ring's entries, page-aligned as the kernel requires; never freed (see `run`).
    entries: *mut types::BufRingEntry,
    /// The buffers, `RECV_BUF_SIZE` each.
    memory: Box<[u8]>,
    tail: u16,
}

impl BufRing {
    /// Registers the ring with `ring`; an error where the kernel has no buffer rings (< 5.19).
    pub(super) fn register(ring: &IoUring) -> io::Result<BufRing> {
        let layout = std::alloc::Layout::from_size_align(
            RECV_BUFS as usize * std::mem::size_of::<types::BufRingEntry>(),
            4096,
        )
        .map_err(io::Error::other)?;
        // SAFETY: the layout has a non-zero size.
        let entries = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<types::BufRingEntry>();
        if entries.is_null() {
            return Err(io::ErrorKind::OutOfMemory.into());
        }
        let mut bufs = BufRing {
            entries,
            memory: vec![0u8; RECV_BUFS as usize * RECV_BUF_SIZE].into_boxed_slice(),
            tail: 0,
        };
        // SAFETY: the entries and the buffers are leaked with the ring (never freed under it).
        unsafe {
            ring.submitter().register_buf_ring_with_flags(
                entries as u64,
                RECV_BUFS,
                RECV_GROUP,
                0,
            )?
        };
        for bid in 0..RECV_BUFS {
            bufs.give_back(bid);
        }
        Ok(bufs)
    }

    /// The bytes the kernel put in buffer `bid`.
    pub(super) fn data(&self, bid: u16, len: usize) -> &[u8] {
        let start = bid as usize * RECV_BUF_SIZE;
        &self.memory[start..start + len.min(RECV_BUF_SIZE)]
    }

    /// Returns buffer `bid` to the kernel.
    pub(super) fn give_back(&mut self, bid: u16) {
        let mask = RECV_BUFS - 1;
        // SAFETY: the index is within the ring; the kernel reads entries only up to the tail,
        // which is published after the entry is written.
        unsafe {
            let entry = &mut *self.entries.add((self.tail & mask) as usize);
            entry.set_addr(self.memory.as_ptr().add(bid as usize * RECV_BUF_SIZE) as u64);
            entry.set_len(RECV_BUF_SIZE as u32);
            entry.set_bid(bid);
            self.tail = self.tail.wrapping_add(1);
            let tail = types::BufRingEntry::tail(self.entries).cast_mut();
            std::sync::atomic::AtomicU16::from_ptr(tail).store(self.tail, Ordering::Release);
        }
    }
}
