//! The appender: LSNs in order and the pending buffer the syncer takes from.
//!
//! ```text
//!   append_parts ──lock──> LSN = next_lsn++
//!      small:  frame (header + CRC + parts) into the last Framed chunk ──unlock──> wake syncer
//!      large:  push an empty Slot ──unlock──> frame into a buffer of its own ──lock──> fill it
//! ```
//!
//! An append never waits for the disk: it takes the state lock for the time of a copy (or
//! twice, briefly, for a large record) and returns. Callers hold other locks across it (the
//! store appends under a shard lock), so anything slower here would stall them. Backpressure
//! is the caller's choice, before it appends ([`crate::Log::room`]).

use std::sync::atomic::Ordering;

use crate::error::{poisoned, WalError};
use crate::format;
use crate::fs::DIRECT_ALIGN;
use crate::marks::Lsn;
use crate::options::Durability;
use crate::pending::{
    Chunk, PendingBuf, CHUNK_BUF_BYTES, FRAME_OUTSIDE_LOCK_BYTES, MAX_CHUNK_BYTES,
};
use crate::shared::{Shared, State};

thread_local! {
    /// Set by [`writes_before_sleeping`].
    static WRITES_BEFORE_SLEEPING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Declares that the calling thread calls [`crate::Log::write_ready`] on every log it appends to
/// before it goes to sleep (an event loop's worker, from its park hook). Its async-mode
/// appends then do not wake the syncer: the thread writes them itself, as one batch, before
/// it sleeps (if it never does, the syncer takes them within the flush interval). Sync-mode
/// appends wake the syncer as always.
pub fn writes_before_sleeping() {
    WRITES_BEFORE_SLEEPING.with(|c| c.set(true));
}

pub(crate) fn thread_writes_before_sleeping() -> bool {
    WRITES_BEFORE_SLEEPING.with(|c| c.get())
}

impl State {
    /// How many chunks the syncer takes as its next batch: those before the first unfilled
    /// slot, and no more once they hold `max_batch` bytes (at least one).
    pub(crate) fn ready_chunks(&self, max_batch: usize) -> usize {
        let mut bytes = 0;
        for (i, c) in self.pending.iter().enumerate() {
            if !c.is_filled() {
                return i;
            }
            if bytes >= max_batch {
                return i;
            }
            bytes += c.bytes().len();
        }
        self.pending.len()
    }
}

impl Shared {
    pub(crate) fn append_parts(&self, parts: &[&[u8]]) -> Result<Lsn, WalError> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let max = self.opts.max_record_bytes;
        if len > max {
            return Err(WalError::TooLarge { size: len, max });
        }
        let mut st = self.state.lock();
        if let Some(e) = &st.poisoned {
            return Err(poisoned(e));
        }
        if st.closing {
            return Err(WalError::Closed);
        }
        let lsn = st.next_lsn;
        st.next_lsn += 1;
        self.appended.store(lsn, Ordering::Release);
        let framed_len = format::RECORD_HEADER_LEN + len;
        // Where in its disk block the record lands, if no new segment starts first.
        let head = (st.next_offset % DIRECT_ALIGN as u64) as usize;
        st.next_offset += framed_len as u64;
        if len >= FRAME_OUTSIDE_LOCK_BYTES {
            st.pending.push(Chunk::Slot { lsn, record: None });
            self.add_pending(&mut st, framed_len);
            let reused = PendingBuf::take_free(&mut st.free_buffers, head, framed_len);
            drop(st);
            // A new mapping, when one is needed, is made outside the lock too.
            let mut record = reused.unwrap_or_else(|| PendingBuf::with_capacity(head, framed_len));
            record.push_record(self.log_id, lsn, parts, framed_len);
            let mut st = self.state.lock();
            // The slot is still pending: the syncer takes no chunk at or after an unfilled one.
            let at = st.pending.partition_point(|c| c.last() < lsn);
            match st.pending.get_mut(at) {
                Some(Chunk::Slot { record: slot, .. }) => *slot = Some(record),
                _ => unreachable!("the slot of LSN {lsn} left before it was filled"),
            }
            drop(st);
            self.work_cv.notify_one();
            return Ok(lsn);
        }
        let was_empty = st.pending.is_empty();
        let State {
            pending,
            free_buffers,
            ..
        } = &mut *st;
        let bytes = match pending.last_mut() {
            Some(Chunk::Framed { bytes, last, .. }) if bytes.records().len() < MAX_CHUNK_BYTES => {
                *last = lsn;
                bytes
            }
            _ => {
                let bytes = PendingBuf::take_free(free_buffers, head, CHUNK_BUF_BYTES)
                    .unwrap_or_else(|| PendingBuf::with_capacity(head, CHUNK_BUF_BYTES));
                pending.push(Chunk::Framed {
                    bytes,
                    first: lsn,
                    last: lsn,
                });
                match pending.last_mut() {
                    Some(Chunk::Framed { bytes, .. }) => bytes,
                    _ => unreachable!("just pushed"),
                }
            }
        };
        bytes.push_record(self.log_id, lsn, parts, framed_len);
        self.add_pending(&mut st, framed_len);
        // The syncer waits for work only when nothing is pending: one wake per batch. In
        // async mode a thread that writes before it sleeps writes this batch itself, and
        // the next append from any other thread wakes the syncer.
        let wake = if self.durability() == Durability::Async && thread_writes_before_sleeping() {
            st.unwoken = true;
            false
        } else {
            was_empty || std::mem::take(&mut st.unwoken)
        };
        drop(st);
        if wake {
            self.work_cv.notify_one();
        }
        Ok(lsn)
    }

    fn add_pending(&self, st: &mut State, bytes: usize) {
        st.pending_bytes += bytes;
        self.pending_bytes
            .store(st.pending_bytes, Ordering::Release);
    }
}
