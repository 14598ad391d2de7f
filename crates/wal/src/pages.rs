//! Memory for the log's I/O buffers: anonymous mappings, outside malloc's heap.
//!
//! Two reasons. An O_DIRECT write needs [`DIRECT_ALIGN`]-aligned memory, and a mapping starts
//! at a page. And a buffer of a burst goes back to the operating system when it is dropped:
//! from malloc, a freed buffer of a megabyte stays in the heap behind the cache's items and
//! raises glibc's mmap threshold, so that the store's segments are then carved from the heap
//! too, where the buffers' freed pages can never be returned (the defaults' memory per item
//! at 1M items, docs/PERFORMANCE.md "Memory per item"). Pages of a mapping that are never
//! written cost nothing, so a buffer is mapped at the largest size it may need (with
//! transparent huge pages set to "always", an aligned 2 MiB of a larger mapping may come in
//! whole; Debian's default is "madvise").
//!
//! Reads of the log (recovery's scan, the reader) use [`ReadBuf`] for the same reason: a freed
//! read buffer of several megabytes would raise the threshold as well, and a restart put every
//! segment into the heap (102 bytes an item at 1M items after a restart, against 93 loaded).
//!
//! Non-goals: what the buffers hold (`crate::pending`, `crate::tail`, `crate::recovery`).

use memmap2::MmapMut;

use crate::fs::DIRECT_ALIGN;

/// A zeroed, page-aligned buffer of at least `len` bytes (whole blocks).
pub(crate) fn zeroed(len: usize) -> MmapMut {
    let len = len.max(1).next_multiple_of(DIRECT_ALIGN);
    MmapMut::map_anon(len)
        .unwrap_or_else(|e| panic!("out of memory for a log buffer of {len} bytes: {e}"))
}

/// A growable byte buffer in a mapping, for reads of the log (recovery's scan, the reader):
/// the operations of `Vec<u8>` that they use. Bytes it grows by are zero, as `Vec::resize`'s.
pub(crate) struct ReadBuf {
    mem: MmapMut,
    len: usize,
}

impl ReadBuf {
    pub fn new() -> ReadBuf {
        ReadBuf {
            mem: zeroed(DIRECT_ALIGN),
            len: 0,
        }
    }

    /// Grows to `len` bytes with zeros, or shortens to it.
    pub fn resize(&mut self, len: usize) {
        if len > self.mem.len() {
            let mut bigger = zeroed(len.max(2 * self.mem.len()));
            bigger[..self.len].copy_from_slice(&self.mem[..self.len]);
            self.mem = bigger;
        } else if len > self.len {
            self.mem[self.len..len].fill(0);
        }
        self.len = len;
    }

    /// Shortens to `len` bytes.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Drops the first `n` bytes, moving the rest to the front.
    pub fn drain_front(&mut self, n: usize) {
        assert!(n <= self.len);
        self.mem.copy_within(n..self.len, 0);
        self.len -= n;
    }
}

impl std::ops::Deref for ReadBuf {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        &self.mem[..self.len]
    }
}

impl std::ops::DerefMut for ReadBuf {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.mem[..self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_buffer_behaves_as_a_vec() {
        let mut b = ReadBuf::new();
        let mut v: Vec<u8> = Vec::new();
        assert!(b.is_empty());
        for (i, step) in [10usize, 5000, 3, 70_000, 1].into_iter().enumerate() {
            let have = v.len();
            v.resize(have + step, 0);
            b.resize(have + step);
            for (j, x) in v[have..].iter_mut().enumerate() {
                *x = (i * 31 + j) as u8;
            }
            b[have..].copy_from_slice(&v[have..]);
            let cut = v.len() / 3;
            v.drain(..cut);
            b.drain_front(cut);
            v.truncate(v.len() - 1);
            b.truncate(b.len() - 1);
            assert_eq!(&b[..], &v[..], "step {i}");
        }
        // Grown again after a cut, the new bytes are zero as a Vec's are.
        let have = v.len();
        v.resize(have + 100, 0);
        b.resize(have + 100);
        assert_eq!(&b[..], &v[..]);
    }

    #[test]
    fn a_buffer_is_zeroed_aligned_and_whole_blocks() {
        let b = zeroed(5000);
        assert_eq!(b.len(), 2 * DIRECT_ALIGN);
        assert_eq!(b.as_ptr() as usize % DIRECT_ALIGN, 0);
        assert!(b.iter().all(|&x| x == 0));
    }
}
