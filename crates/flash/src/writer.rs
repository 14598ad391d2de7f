//! The writer thread: writes sealed segments in queue order (one pwrite each), drops the
//! entries of segments whose I/O failed, and frees segments by flash eviction when few are
//! free (see `reclaim`).
//!
//! ```text
//!   write queue ──front──> write_segment: one write of the whole segment
//!                            ok: Sealed, on the eviction FIFO    failed: entries removed, Failed
//!   to_drop (a read failed) ──> drop_segment: entries removed (a scan of the store)
//!   free < FREE_RESERVE ──> reclaim_one (reclaim.rs)
//! ```
//!
//! Jobs that take shard locks run inside `taking_shard_locks`, so that an admit waiting for
//! the writer under a shard lock gives up instead of waiting for it.
//!
//! Non-goals: no reads for lookups (`get`), no admission (`admit`).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Weak};
use std::time::Duration;

use cairn_store::Store;

use crate::device::AlignedBuf;
use crate::segments::{SegState, FREE_RESERVE};
use crate::tier::Flash;

impl Flash {
    pub(crate) fn writer_loop(self: Arc<Flash>) {
        enum Job {
            Write(u32, Arc<AlignedBuf>),
            Drop(u32),
            Reclaim,
        }
        loop {
            let job = {
                let mut inner = self.inner.lock();
                loop {
                    if self.stop.load(Relaxed) {
                        return;
                    }
                    if let Some(seg) = inner.to_drop.pop() {
                        break Job::Drop(seg);
                    }
                    if !inner.writing {
                        if let Some((seg, buf)) = inner.queued.front() {
                            let job = Job::Write(*seg, Arc::clone(buf));
                            inner.writing = true;
                            break job;
                        }
                    }
                    if inner.free.len() < FREE_RESERVE && !inner.stalled && !inner.sealed.is_empty()
                    {
                        break Job::Reclaim;
                    }
                    // A timeout too: all-expired segments become reclaimable with time.
                    self.work.wait_for(&mut inner, Duration::from_secs(1));
                    inner.stalled = false;
                }
            };
            let Some(store) = self.store.get().and_then(Weak::upgrade) else {
                return;
            };
            match job {
                Job::Write(seg, buf) => self.write_segment(&store, seg, &buf),
                Job::Drop(seg) => self.taking_shard_locks(|| self.drop_segment(&store, seg)),
                Job::Reclaim => {
                    if !self.taking_shard_locks(|| self.reclaim_one(&store)) {
                        self.inner.lock().stalled = true;
                    }
                }
            }
        }
    }

    /// Runs `f`, which takes shard locks, while an admit that waits for the writer under a
    /// shard lock gives up instead (else each would wait for the other).
    fn taking_shard_locks<R>(&self, f: impl FnOnce() -> R) -> R {
        self.taking_shard_locks.store(true, Relaxed);
        // Under the lock the waiters check the flag with: none misses it.
        drop(self.inner.lock());
        self.written.notify_all();
        let r = f();
        self.taking_shard_locks.store(false, Relaxed);
        r
    }

    fn write_segment(&self, store: &Store, seg: u32, buf: &AlignedBuf) {
        let result = self.device.write_at(self.seg_offset(seg), buf);
        if let Err(e) = &result {
            tracing::error!("flash write of segment {seg} failed ({e}): dropping its items");
            self.counters.extstore_io_errors.fetch_add(1, Relaxed);
            // Its entries go before the buffer does, so no read can meet what the device
            // holds there instead.
            self.taking_shard_locks(|| self.remove_entries(store, seg));
        } else {
            self.counters
                .extstore_bytes_written
                .fetch_add(buf.len() as u64, Relaxed);
        }
        let mut inner = self.inner.lock();
        let (s, b) = inner.queued.pop_front().expect("the segment being written");
        assert_eq!(s, seg, "segments are written in queue order");
        inner.writing = false;
        if result.is_ok() {
            inner.segs[seg as usize].state = SegState::Sealed;
            inner.sealed.push_back(seg);
        } else {
            inner.segs[seg as usize].state = SegState::Failed;
        }
        if let Ok(b) = Arc::try_unwrap(b) {
            if inner.spare.len() < 2 {
                inner.spare.push(b);
            }
        }
        drop(inner);
        self.written.notify_all();
    }

    fn drop_segment(&self, store: &Store, seg: u32) {
        self.remove_entries(store, seg);
    }

    /// Removes every index entry into `seg` (a scan of the store) and counts the segment.
    fn remove_entries(&self, store: &Store, seg: u32) {
        let first = self.device_block(seg, 0);
        let dropped = store.flash_drop_blocks(first..first + self.blocks_per_seg);
        self.counters.flash_segments_failed.fetch_add(1, Relaxed);
        self.counters
            .extstore_objects_evicted
            .fetch_add(dropped, Relaxed);
    }
}
