//! `--watch-history-mb` bounds the memory the watch history really holds: the bytes the hub
//! counts for its ring match what its events hold in the heap, measured by a counting
//! allocator around the system's.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use cairn_store::{ItemMeta, Mutation, MutationSink};
use cairn_watch::Hub;

/// The system allocator, keeping a running total of the bytes it holds as glibc malloc holds
/// them: each request plus an 8 B header, rounded up to 16 B, at least 32 B.
struct Counting;

static HELD: AtomicUsize = AtomicUsize::new(0);

fn held(size: usize) -> usize {
    ((size + 8).div_ceil(16) * 16).max(32)
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        HELD.fetch_add(held(layout.size()), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        HELD.fetch_sub(held(layout.size()), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// One test, not one a size: the heap's count is the process's, and tests run side by side.
#[test]
fn the_history_counts_the_memory_its_events_hold() {
    // Events of the seed's shape, each with bytes of its own.
    check(50, 50_000);
    // Events past 1 KiB, packed in the thread's chunks.
    check(2_000, 5_000);
}

fn check(value_len: usize, events: usize) {
    // Room for every event: the ring drops nothing, so all of them are held.
    let hub = Hub::counting(1 << 30);
    hub.activate();
    let meta = ItemMeta {
        flags: 0,
        exptime: 0,
        cas: 1,
        last_access: 0,
        fetched: false,
        stale: false,
        win_sent: false,
        mod_revision: 0,
    };
    let value = vec![b'x'; value_len];
    let keys: Vec<Vec<u8>> = (0..events)
        .map(|i| format!("memtier-{}", 1_000_000 + i).into_bytes())
        .collect();
    let before = HELD.load(Ordering::Relaxed);
    for key in &keys {
        hub.on_mutation(&Mutation::Stored {
            key,
            value: &value,
            meta,
            prev: None,
        });
    }
    let held_bytes = HELD.load(Ordering::Relaxed) - before;
    let counted = hub.stats().history_bytes as usize;
    assert_eq!(hub.stats().history_events, keys.len() as u64);
    // The ring's slots grow by doubling; its spare slots (capacity beyond the events) are the
    // only memory the count leaves out, with the unused end of the last chunk.
    let spare = (keys.len().next_power_of_two() - keys.len()) * size_of::<usize>();
    assert!(
        counted * 100 >= (held_bytes - spare) * 95 && counted * 100 <= held_bytes * 105,
        "{value_len} B values: counted {counted} B for {} events ({} B each), the heap holds \
         {held_bytes} B ({} B each, {spare} B of them spare ring slots)",
        keys.len(),
        counted / keys.len(),
        held_bytes / keys.len()
    );
}
