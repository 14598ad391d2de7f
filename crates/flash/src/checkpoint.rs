//! Checkpoints and recovery: which flash segments a checkpoint names, and why recovery may
//! trust them. This module is the checkpoint's side; `recover` is recovery's.
//!
//! ```text
//!   checkpoint_begin ─> checkpoint_entry (per flash entry, under its shard lock: pin_next)
//!     ─> checkpoint_sync (named segments written + fdatasync) ─> pins file beside the snapshot
//!     ─> checkpoint_commit (manifest switched: pinned = pin_next) | checkpoint_abort
//!
//!   restart ─> recover_pins (named segment whose header still has the seq: kept, pinned)
//!     ─> items_past (entries replay makes again: left out) ─> trusts (entry restored or not)
//! ```
//!
//! What recovery may trust. A checkpoint records, shard by shard under the shard lock,
//! each flash entry as (shard, FlashLoc, seq of its segment) instead of the value, and
//! marks that segment `pin_next`. Before the snapshot becomes current, `checkpoint_sync`
//! makes every marked segment written (sealing the open one early if it is marked) and
//! fdatasyncs the device; the list of (segment, seq) goes into a pins file beside the
//! snapshot. From the manifest's switch on (`checkpoint_commit`) those segments are
//! `pinned`: flash eviction may empty one (its entries leave the index) but never reuses it
//! until a later checkpoint no longer names it. So while a snapshot is current, every
//! segment it names holds, on the device, exactly the bytes it had when the entry was
//! recorded, under the seq recorded.
//!
//! Recovery reads the pins files of the snapshots it may load, keeps each named segment
//! whose header still carries the named seq (`recover_pins`; it is not reused either),
//! and restores an entry only if its (segment, seq) was kept (`trusts`). A restored entry
//! is the key's state as of the shard's copy, like any snapshot item; every later change of
//! the key is a log record after the snapshot's LSN, and replay applies it (a store or a
//! delete removes the key's flash entries), so an overwritten or deleted value never comes
//! back. An entry whose item has a revision past the snapshot's LSN is left out
//! (`items_past`, in `recover`): its record is in the replayed log, which makes the item again.
//! Items that went to flash after the checkpoint need no trust: their values are in
//! the snapshot (they were in RAM then) or in the log. A segment rewritten since (the
//! previous snapshot's, when the newest is damaged) fails the seq check: its items are
//! lost, as if evicted, never read as something else. Seqs start at a random 63-bit base
//! at every start, so a seq never repeats on a device.
//!
//! Non-goals: no files (the pins file is persistence's, docs/FORMATS.md), no device reads.

use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use cairn_store::FlashLoc;

use crate::segments::{SegState, FREE_RESERVE};
use crate::tier::Flash;

/// A segment a checkpoint names, as its pins file records it (docs/FORMATS.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Pin {
    pub segment: u32,
    /// The seq its header carried.
    pub seq: u64,
    /// The largest revision of its items; 0 if unknown (see [`Flash::items_past`]).
    pub max_revision: u64,
}

impl Flash {
    /// A checkpoint starts: no segment is named by it yet.
    pub fn checkpoint_begin(&self) {
        for s in &mut self.inner.lock().segs {
            s.pin_next = false;
        }
    }

    /// The checkpoint whose snapshot replays the log from record `after` + 1 on (its L0)
    /// records the entry `loc` (called under its shard lock): its segment is named, and its
    /// seq returned. None when every item written into the segment has a revision past
    /// `after`: each item's state is then the one its revision's log record makes, a record
    /// recovery replays from this snapshot anyway, so the entry is left out (and the segment
    /// not named). Recovery would otherwise find it under the key's tag when replaying that
    /// record, and read it from the device, under the shard lock, to tell whose it is: at 10M
    /// items, 30K such reads (items stored while the checkpoint ran and evicted to flash
    /// before their shard was copied).
    pub fn checkpoint_entry(&self, loc: FlashLoc, after: u64) -> Option<u64> {
        let seg = self.seg_of(loc.block());
        let mut inner = self.inner.lock();
        let s = &mut inner.segs[seg as usize];
        if s.min_revision > after {
            return None;
        }
        s.pin_next = true;
        Some(s.seq)
    }

    /// Makes every segment the checkpoint named durable on the device (written, then an
    /// fdatasync), and returns them for the pins file.
    pub fn checkpoint_sync(&self) -> io::Result<Vec<Pin>> {
        let mut inner = self.inner.lock();
        loop {
            if let Some(o) = &inner.open {
                if inner.segs[o.seg as usize].pin_next {
                    self.seal(&mut inner);
                }
            }
            let waiting = inner
                .segs
                .iter()
                .any(|s| s.pin_next && matches!(s.state, SegState::Open | SegState::Queued));
            if !waiting {
                break;
            }
            if self.stop.load(Relaxed) {
                return Err(io::Error::other("the flash writer stopped"));
            }
            self.work.notify_one();
            self.written
                .wait_for(&mut inner, Duration::from_millis(100));
        }
        if inner
            .segs
            .iter()
            .any(|s| s.pin_next && s.state == SegState::Failed)
        {
            return Err(io::Error::other(
                "a flash segment the checkpoint names failed its write",
            ));
        }
        let pins = inner
            .segs
            .iter()
            .enumerate()
            .filter(|(_, s)| s.pin_next)
            .map(|(i, s)| Pin {
                segment: i as u32,
                seq: s.seq,
                max_revision: s.max_revision,
            })
            .collect();
        drop(inner);
        self.device.sync()?;
        Ok(pins)
    }

    /// The checkpoint is current: what it named stays; what only the one before named may be
    /// reused.
    pub fn checkpoint_commit(&self) {
        self.swap_pins(true);
    }

    /// The checkpoint failed: the current one's pins stay as they were.
    pub fn checkpoint_abort(&self) {
        self.swap_pins(false);
    }

    fn swap_pins(&self, commit: bool) {
        {
            let mut guard = self.inner.lock();
            let inner = &mut *guard;
            for (i, s) in inner.segs.iter_mut().enumerate() {
                if commit {
                    s.pinned = s.pin_next;
                }
                s.pin_next = false;
                if s.state == SegState::Retired && !s.pinned {
                    s.state = SegState::Free;
                    inner.free.push_back(i as u32);
                }
            }
            inner.stalled = false;
        }
        self.work.notify_one();
    }

    /// Flash eviction is stuck: every old segment is named by the current checkpoint, so
    /// evicted items are being dropped until the next one.
    pub fn needs_checkpoint(&self) -> bool {
        let inner = self.inner.lock();
        inner.stalled && inner.free.len() < FREE_RESERVE
    }
}
