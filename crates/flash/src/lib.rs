//! cairn-flash: the flash tier. Items evicted from RAM are packed into segments written whole
//! with O_DIRECT; the store keeps an 8-byte location per item (`cairn_store::FlashLoc`), and a
//! hit costs one aligned device read through io_uring.
//!
//! ```text
//!   RAM eviction ──admit (under a shard lock: a memcpy, never I/O)──> open segment buffer
//!                                                                       │ full: sealed
//!                                                                       v
//!                     bounded queue of sealed buffers (full: admit says no, the item is
//!                     evicted for good and counted) ──> writer thread: one pwrite per segment
//!                                                                       │
//!   writer thread, when free segments run low: flash eviction, segment FIFO ────┘
//!     dead segments first (no read), then all-expired, then the oldest: read it whole, each
//!     item still indexed is reinserted if it was read since written (bounded), else dropped
//!
//!   get ──Store::lookup──> FlashLoc ──Flash::fetch──> buffered segment: copy under the lock
//!                                                  └> device: one read of its blocks (io_uring
//!                                                     or pread pool) ─> checksum, key ─> item
//!        ──Store::flash_found: still indexed there? not expired? ─> serve (or promote)
//! ```
//!
//! What is trusted after a restart (with persistence on) is decided by the checkpoint, see
//! the `checkpoint` module; the on-device bytes are in `format`.
//!
//! Non-goals: no RAM index of its own (the store's index is the only one), no compaction of
//! live data beyond reinsertion, no TRIM.
//!
//! The modules, one concern each:
//!
//! ```text
//!   config       FlashConfig and the geometry checks      error     FlashError
//!   tier         the Flash struct: open, start, stop       segments  the segment table
//!   admit        items into the open segment, sealing      get       reads, confirm, promote
//!   writer       the writer thread: writes, drops          reclaim   flash eviction
//!   checkpoint   segments a checkpoint names (the why)     recover   what a restart keeps
//!   flash_tier   the store's FlashTier calls               counters  the tier's stats
//!   device       O_DIRECT file, aligned buffers            format    the on-device bytes
//!   faulty_device  (tests only) a device failing chosen ranges
//!   reader/      the read engines (io_uring rings, pread pool)
//! ```

mod admit;
mod checkpoint;
mod config;
mod counters;
pub mod device;
mod error;
#[cfg(any(test, feature = "test-util"))]
mod faulty_device;
mod flash_tier;
pub mod format;
mod get;
mod reader;
mod reclaim;
mod recover;
mod segments;
mod tier;
mod writer;

pub use checkpoint::Pin;
pub use config::{FlashConfig, MIN_SEGMENTS};
pub use counters::{Counters, COUNTERS};
pub use device::{AlignedBuf, Device, FileDevice, OpenError};
pub use error::FlashError;
#[cfg(any(test, feature = "test-util"))]
pub use faulty_device::FaultyDevice;
pub use get::{Fetch, Promotion};
pub use reader::{lend_thread_ring, ReadBuf, Reader, ThreadRing};
pub use recover::PastItem;
pub use tier::Flash;

#[cfg(test)]
mod tests;
