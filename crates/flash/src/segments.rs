//! The segment table: the state of each segment of the device, the one being filled, the
//! write queue and the flash eviction FIFO, all under the tier's one lock (`Flash::inner`).
//!
//! ```text
//!          open_segment       seal (full, or named by a checkpoint)    written
//!   Free ──────────────> Open ──────────────────────> Queued ───────────> Sealed
//!    ^                                                  │ write failed      │  │ a read failed
//!    │                                                  v                   │  v
//!    │                                                Failed (never used)   │  Failed
//!    │     flash eviction (reclaim.rs), not named by a checkpoint           │
//!    ├──────────────────────────────────────────────────────────────────────┤
//!    │     flash eviction, named by a checkpoint                            │
//!    └── no checkpoint names it any more ── Retired <───────────────────────┘
//! ```
//!
//! Non-goals: no I/O and no logic here: the tier's modules change the table under the lock.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::device::AlignedBuf;

/// Free segments the writer keeps ready by flash eviction.
pub(crate) const FREE_RESERVE: usize = 2;

/// The state of one segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SegState {
    /// Holds nothing indexed; may be opened.
    Free,
    /// The buffer items are being appended to.
    Open,
    /// Sealed, waiting for (or in) its write; read from its buffer meanwhile.
    Queued,
    /// On the device.
    Sealed,
    /// Emptied by flash eviction while a checkpoint still names it: free once it does not.
    Retired,
    /// Its write or a read failed: never used again.
    Failed,
}

/// One segment of the device, as the table keeps it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Seg {
    /// Where it is in its life (the diagram above).
    pub(crate) state: SegState,
    /// Sequence number of its current contents (also in its header on the device).
    pub(crate) seq: u64,
    /// Index entries pointing into it.
    pub(crate) live: u32,
    /// Latest expiry of its items; u32::MAX if one never expires.
    pub(crate) max_exptime: u32,
    /// Smallest revision of the items written into it (0 if unknown: a segment kept from
    /// before a restart). See [`crate::Flash::checkpoint_entry`].
    pub(crate) min_revision: u64,
    /// Largest revision of the items written into it (0 if unknown: a segment kept from
    /// before a restart whose pins file did not say). See [`crate::Flash::items_past`].
    pub(crate) max_revision: u64,
    /// Named by the last completed checkpoint: its contents must stay as they are.
    pub(crate) pinned: bool,
    /// Named by the checkpoint in progress.
    pub(crate) pin_next: bool,
    /// Being emptied by flash eviction right now.
    pub(crate) reclaiming: bool,
}

/// The segment items are appended to.
pub(crate) struct Open {
    /// The segment it fills.
    pub(crate) seg: u32,
    /// Its bytes, written whole once sealed (block 0: the header, at the seal).
    pub(crate) buf: AlignedBuf,
    /// Next block to fill (block 0 is the header).
    pub(crate) block: u32,
    /// Bytes used in `block`.
    pub(crate) off: usize,
    /// Tags of the items in `block`: no two items of a block share one (see
    /// `cairn_store::flash`), so an entry's place names one item.
    pub(crate) block_tags: Vec<u32>,
    /// Items appended (for the header).
    pub(crate) items: u32,
}

/// The segment table, under the tier's one lock.
pub(crate) struct Inner {
    /// Every segment of the device, by number.
    pub(crate) segs: Vec<Seg>,
    /// Segments that may be opened, in the order they were freed.
    pub(crate) free: VecDeque<u32>,
    /// Sealed segments in write order, oldest first (the flash eviction FIFO).
    pub(crate) sealed: VecDeque<u32>,
    /// The segment items are appended to, if one is open.
    pub(crate) open: Option<Open>,
    /// Sealed buffers in write order; the front is being written when `writing` is set.
    pub(crate) queued: VecDeque<(u32, Arc<AlignedBuf>)>,
    /// The writer thread is writing the front of `queued`.
    pub(crate) writing: bool,
    /// Segments whose index entries must be dropped (a failed read or write).
    pub(crate) to_drop: Vec<u32>,
    /// The seq the next opened segment gets (from the superblock's random base).
    pub(crate) next_seq: u64,
    /// Buffers kept for the next open segment.
    pub(crate) spare: Vec<AlignedBuf>,
    /// Set when flash eviction found only segments a checkpoint still needs.
    pub(crate) stalled: bool,
}
