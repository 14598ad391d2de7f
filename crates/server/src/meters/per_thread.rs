//! [`PerThread`]: one value per thread, each on cache lines of its own, added up by readers;
//! what the counters and the latency histograms are kept in.
//!
//! ```text
//!   thread 1 ─> cell 1 ─┐
//!   thread 2 ─> cell 2 ─┼─> reader: all() adds them up
//!   thread 17 ─> cell 1 ┘   (more threads than cells: they share, still correct)
//! ```
//!
//! Non-goals: what the cells hold.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// Cells of a [`PerThread`] value: more than the threads that serve requests on the machines
/// cairn runs on; past that, threads share cells (still correct, only slower).
pub const CELLS: usize = 16;

/// One value per thread (up to [`CELLS`], then shared), each on its own cache lines, so that
/// threads updating "their" value never write to a line another core holds.
pub struct PerThread<T> {
    /// Thread `i` uses cell `i % CELLS` (numbered in the order threads first count).
    cells: [Padded<T>; CELLS],
}

/// Two cache lines (the spatial prefetcher pulls lines in pairs).
#[repr(align(128))]
#[derive(Default)]
struct Padded<T>(T);

impl<T: Default> Default for PerThread<T> {
    fn default() -> Self {
        PerThread {
            cells: std::array::from_fn(|_| Padded::default()),
        }
    }
}

impl<T> PerThread<T> {
    /// This thread's cell.
    pub fn mine(&self) -> &T {
        &self.cells[cell_index()].0
    }

    /// Every cell, to add them up.
    pub fn all(&self) -> impl Iterator<Item = &T> {
        self.cells.iter().map(|c| &c.0)
    }
}

/// This thread's cell number: threads take the next one when they first count something.
fn cell_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static CELL: usize = NEXT.fetch_add(1, Relaxed) % CELLS;
    }
    CELL.with(|c| *c)
}
