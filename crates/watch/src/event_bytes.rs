//! An event's one buffer ([`Wire`]): its `cairn.v1.Event` bytes, in an allocation of their own
//! or, past 1 KiB, in a stretch of a chunk that the thread making events fills in order.
//!
//! ```text
//!   EventFields ── Wire::encode ─┬─> up to CHUNKED_MIN (1 KiB): Own(Box<[u8]>), an old
//!                                │   event's bytes reused when they have the exact length
//!                                ├─> up to CHUNK_BYTES / 4: Chunked, split off this
//!                                │   thread's 64 KiB CHUNK
//!                                └─> longer: Chunked, a chunk of its own
//! ```
//!
//! Also here: what glibc malloc holds for a request ([`malloc_bytes`]), which the history's
//! bound counts. Non-goals: what the bytes mean (crate::wire writes them, crate::event
//! slices them).

use bytes::{Bytes, BytesMut};

use crate::wire::{EventFields, EventLayout};

/// An event's bytes. Up to [`CHUNKED_MIN`] bytes, an allocation of their own, which glibc
/// malloc takes from the thread's cache. Longer, a stretch of a chunk that the thread making
/// events fills in order ([`CHUNK`]): a chunk is one allocation for many events, freed when
/// the last of them is. Why: events fall off the ring in the order they were made, and the
/// longer ones, freed one by one, left malloc's arena with free blocks of every size to sort
/// through on the request path (memslap's sets of 0.25-4.8 KB values, gRPC on: malloc's
/// functions 1.8 us a set; docs/decisions/0019-large-watch-events-in-chunks.md).
///
/// A chunked event's `Bytes` is boxed, so that `Wire` takes no more room in the event than a
/// `Box<[u8]>` (16 bytes, not 24 or 40): the ring's small events stay as small as they were.
#[derive(Clone, Debug)]
pub(crate) enum Wire {
    /// Up to [`CHUNKED_MIN`] bytes: an allocation of their own.
    Own(Box<[u8]>),
    /// Longer: a stretch of a chunk (or a chunk of its own), boxed.
    Chunked(Box<Bytes>),
}

/// Events longer than this take their bytes from the thread's chunk: glibc's per-thread
/// cache holds blocks up to 1,032 bytes.
pub(crate) const CHUNKED_MIN: usize = 1024;

/// A chunk's size. An event longer than a quarter of it gets a chunk of its own length, so
/// that a chunk's unused end is at most a quarter of it.
pub(crate) const CHUNK_BYTES: usize = 64 << 10;

thread_local! {
    /// The room left in this thread's chunk: each event is encoded at its start and split
    /// off. The chunk's memory stays allocated until every event in it is dropped.
    static CHUNK: std::cell::RefCell<BytesMut> = std::cell::RefCell::new(BytesMut::new());
}

impl Wire {
    /// Encodes `fields`: up to [`CHUNKED_MIN`] bytes into `reuse` (an old event's bytes,
    /// when they have the encoding's exact length: an event of the same shape, see
    /// [`make_event`](crate::spare::make_event)) or else bytes of their own; longer, into
    /// this thread's chunk.
    pub(crate) fn encode(fields: &EventFields<'_>, reuse: Box<[u8]>) -> (Wire, EventLayout) {
        let len = fields.len();
        if len <= CHUNKED_MIN {
            let mut bytes = if reuse.len() == len {
                let mut bytes = Vec::from(reuse);
                bytes.clear();
                bytes
            } else {
                #[cfg(test)]
                FRESH_ALLOCATIONS.with(|c| c.set(c.get() + 1));
                Vec::with_capacity(len)
            };
            let layout = fields.encode_into(&mut bytes);
            // Made with its exact length, so this keeps the allocation.
            return (Wire::Own(bytes.into_boxed_slice()), layout);
        }
        if len > CHUNK_BYTES / 4 {
            let mut own = BytesMut::with_capacity(len);
            let layout = fields.encode_into(&mut own);
            return (Wire::Chunked(Box::new(own.freeze())), layout);
        }
        CHUNK.with_borrow_mut(|chunk| {
            if chunk.capacity() < len {
                *chunk = BytesMut::with_capacity(CHUNK_BYTES);
            }
            let layout = fields.encode_into(chunk);
            (
                Wire::Chunked(Box::new(chunk.split_to(len).freeze())),
                layout,
            )
        })
    }

    /// Bytes the event's wire holds in memory: its own allocation as malloc holds it, or its
    /// stretch of a chunk and the box of its `Bytes`.
    pub(crate) fn held_bytes(&self) -> usize {
        match self {
            Wire::Own(b) => malloc_bytes(b.len()),
            Wire::Chunked(b) => b.len() + malloc_bytes(size_of::<Bytes>()),
        }
    }
}

impl Default for Wire {
    fn default() -> Wire {
        Wire::Own(Box::default())
    }
}

impl std::ops::Deref for Wire {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Wire::Own(b) => b,
            Wire::Chunked(b) => b,
        }
    }
}

/// Two events' bytes are equal when they hold the same bytes, wherever they are.
impl PartialEq for Wire {
    fn eq(&self, other: &Wire) -> bool {
        **self == **other
    }
}

impl Eq for Wire {}

/// What glibc malloc holds for a request of `n` bytes: `n` and its 8 B header, rounded up to
/// 16 B, at least 32 B.
pub(crate) const fn malloc_bytes(n: usize) -> usize {
    let held = (n + 8).div_ceil(16) * 16;
    if held < 32 {
        32
    } else {
        held
    }
}

#[cfg(test)]
thread_local! {
    /// Allocations made for events on this thread: the test of
    /// [`make_event`](crate::spare::make_event) counts them (malloc hands a freed block
    /// straight back, so addresses would not tell).
    pub(crate) static FRESH_ALLOCATIONS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}
