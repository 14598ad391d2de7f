//! Memory for the log's I/O buffers: anonymous mappings, outside malloc's heap.
//!
//! Two reasons. An O_DIRECT write needs [`DIRECT_ALIGN`]-aligned memory, and a mapping starts
//! at a page. And a buffer of a burst goes back to the operating system when it is dropped:
//! from malloc, a freed buffer of a megabyte stays in the heap behind the cache's items and
//! raises glibc's mmap threshold, so that the store's segments are then carved from the heap
//! too, where the buffers' freed pages can never be returned (the defaults' memory per item
//! at 1M items, docs/PERFORMANCE.md "Memory per item"). Pages of a mapping that are never
//! written cost nothing, so a buffer is mapped at the largest size it may need.
//!
//! Non-goals: what the buffers hold (`crate::pending`, `crate::tail`).

use memmap2::MmapMut;

use crate::fs::DIRECT_ALIGN;

/// A zeroed, page-aligned buffer of at least `len` bytes (whole blocks).
pub(crate) fn zeroed(len: usize) -> MmapMut {
    let len = len.max(1).next_multiple_of(DIRECT_ALIGN);
    MmapMut::map_anon(len)
        .unwrap_or_else(|e| panic!("out of memory for a log buffer of {len} bytes: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_is_zeroed_aligned_and_whole_blocks() {
        let b = zeroed(5000);
        assert_eq!(b.len(), 2 * DIRECT_ALIGN);
        assert_eq!(b.as_ptr() as usize % DIRECT_ALIGN, 0);
        assert!(b.iter().all(|&x| x == 0));
    }
}
