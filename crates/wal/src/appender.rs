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

use crate::{format, poisoned, Lsn, Shared, State, WalError};

/// Records of at least this many bytes are framed (checksummed and copied) by their appender
/// outside the state lock, in a slot reserved in LSN order, so that other appenders and the
/// syncer do not wait for the lock meanwhile (records after the slot still wait for it to be
/// filled before they are written); smaller records are framed under the lock, which costs
/// less than a second lock round.
pub const FRAME_OUTSIDE_LOCK_BYTES: usize = 64 << 10;

/// A `Chunk::Framed` takes records until it holds this many bytes; then a new one starts, so
/// that the syncer can bound a batch (at whole chunks) even when appends outrun it.
pub(crate) const MAX_CHUNK_BYTES: usize = 1 << 20;

/// A run of appended records, in LSN order, waiting for the syncer.
pub(crate) enum Chunk {
    /// Records framed under the state lock, back to back: LSNs `first..=last`.
    Framed {
        bytes: Vec<u8>,
        first: Lsn,
        last: Lsn,
    },
    /// One large record, framed by its appender outside the lock: `None` until it is.
    Slot { lsn: Lsn, record: Option<Vec<u8>> },
}

impl Chunk {
    pub fn first(&self) -> Lsn {
        match self {
            Chunk::Framed { first, .. } => *first,
            Chunk::Slot { lsn, .. } => *lsn,
        }
    }

    pub fn last(&self) -> Lsn {
        match self {
            Chunk::Framed { last, .. } => *last,
            Chunk::Slot { lsn, .. } => *lsn,
        }
    }

    /// The framed bytes; empty for an unfilled slot (which the syncer never takes).
    pub fn bytes(&self) -> &[u8] {
        match self {
            Chunk::Framed { bytes, .. } => bytes,
            Chunk::Slot { record, .. } => record.as_deref().unwrap_or_default(),
        }
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            Chunk::Framed { bytes, .. } => bytes,
            Chunk::Slot { record, .. } => record.as_deref_mut().unwrap_or_default(),
        }
    }

    pub fn is_filled(&self) -> bool {
        !matches!(self, Chunk::Slot { record: None, .. })
    }
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
        if len >= FRAME_OUTSIDE_LOCK_BYTES {
            st.pending.push(Chunk::Slot { lsn, record: None });
            self.add_pending(&mut st, framed_len);
            drop(st);
            let mut record = Vec::with_capacity(framed_len);
            format::encode_record_parts(&mut record, self.log_id, lsn, parts);
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
            Some(Chunk::Framed { bytes, last, .. }) if bytes.len() < MAX_CHUNK_BYTES => {
                *last = lsn;
                bytes
            }
            _ => {
                pending.push(Chunk::Framed {
                    bytes: free_buffers.pop().unwrap_or_default(),
                    first: lsn,
                    last: lsn,
                });
                match pending.last_mut() {
                    Some(Chunk::Framed { bytes, .. }) => bytes,
                    _ => unreachable!("just pushed"),
                }
            }
        };
        format::encode_record_parts(bytes, self.log_id, lsn, parts);
        self.add_pending(&mut st, framed_len);
        drop(st);
        // The syncer waits for work only when nothing is pending: one wake per batch.
        if was_empty {
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
