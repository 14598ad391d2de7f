//! cairn-wal: a checksummed, segmented, append-only log with group commit.
//!
//! ```text
//!   append(payload parts) ──lock──> pending chunks (LSNs assigned in order); never waits
//!        │   small record: framed under the lock into the last chunk          [appender]
//!        │   large record: reserve a slot, unlock, frame it (CRC + copy), lock, fill the slot
//!        v
//!   syncer thread: take the pending chunks up to the first unfilled slot ─> taken mark
//!        Sync:  write them at the segment's end and make them durable in one go
//!               (O_DIRECT: one pwritev2 with RWF_DSYNC; else pwritev + fdatasync)
//!               ─> written = durable = last LSN of the batch
//!        Async: write them (pwritev, page cache) ─> written = last LSN; fdatasync at least
//!               every flush_interval, or at once for a fence ─> durable
//!        ─> wake the waiters each mark covers, call the listeners                [syncer]
//!   async, a thread that writes before it sleeps (`writes_before_sleeping`): its appends
//!        do not wake the syncer; before it sleeps it calls `Log::write_ready`: if the writer
//!        lock is free, it writes what is ready (one pwritev, no fdatasync, never a new
//!        segment) ─> written ─> wakes its waiters itself; if not, it wakes the syncer
//!   (writers that arrive while one batch is written share the next one: group commit, no
//!    sleep)
//!
//!   spare thread, once the tail is half full: hand out a kept file, or create
//!        "next-….spare", preallocate (zero fill), fdatasync ─> ready               [segment]
//!   syncer, when a batch does not fit the tail: rename the ready spare to "<first LSN>.wal",
//!        write header + batch, make it durable, fsync the directory, then acknowledge
//!   truncate_before: rename dropped segments to spare names (up to reuse_segments kept,
//!        header zeroed) or delete them
//! ```
//!
//! The modules follow that picture: [`format`] is the record codec, `log` the [`Log`] type
//! (open, append, wait, read, truncate, close), `shared` what its threads share, `pending` the
//! pending buffer and `appender` the appends into it, `syncer` the thread that writes it,
//! `tail` the segment being written, `spare` the next segment file and `segment` the switch to
//! it, the spare thread and truncation, [`waiters`] the one registry through which threads and
//! async tasks wait for the three watermarks, `recovery` the scan on open. `options`, `error`,
//! `marks` and `stats` hold the types every part uses: [`LogOptions`], [`WalError`], [`Lsn`]
//! and [`Marks`], [`LogStats`].
//!
//! **Three watermarks**, each an LSN that only grows:
//! - *taken*: the syncer took every record up to it. Appends never wait; a caller that wants
//!   backpressure waits for [`Log::room`] before it appends (the pending buffer is below
//!   `max_pending_bytes`, or the batch in it was taken).
//! - *written*: handed to the kernel. Survives a crash of the process (kill -9), not a power
//!   loss.
//! - *durable*: fdatasync'd. Survives a power loss.
//!
//! Waiting is never done under a lock of the caller's and never needs a thread: [`Log::written`],
//! [`Log::durable`] and [`Log::room`] are futures ([`Reach`]) that an async task awaits;
//! [`Log::wait_durable`] and [`Log::commit`] block a thread on the same futures.
//!
//! Segments are files named by their first LSN, preallocated, each with a header carrying the
//! log's random id; every record carries a CRC32C over that id, its header and its payload (the
//! format is in [`format`] and docs/FORMATS.md). Every write ends with an end marker (16 zero
//! bytes) after its records, so a scan stops before whatever a reused file held. The next
//! segment is prepared by a background thread, so the syncer never waits for a segment's
//! preallocation unless the disk cannot keep up. With [`LogOptions::direct_io`] the tail is
//! written with O_DIRECT in whole 4 KiB blocks in sync mode. Recovery on [`Log::open`] finds
//! the end of the log and applies the caller's [`RecoveryMode`]; it never silently cuts the
//! middle of a log. A failed write or fdatasync poisons the log: nothing after it is
//! acknowledged, every waiter gets the error, and it is never retried.
//!
//! Non-goals: no compression, no record types (payloads are opaque), no replication.

mod appender;
mod error;
pub mod format;
pub mod fs;
mod index;
mod log;
mod marks;
mod options;
mod pages;
mod pending;
mod reader;
mod recovery;
mod segment;
mod shared;
mod spare;
mod stats;
mod syncer;
mod tail;
pub mod waiters;

pub use appender::writes_before_sleeping;
pub use error::{IoCause, WalError};
pub use fs::{DelayedSyncFs, FileSystem, FolderLock, LogFile, RealFs, DIRECT_ALIGN};
pub use log::{lock_folder, random_id, Log};
pub use marks::{Listener, Lsn, Marks};
pub use options::{Durability, LogOptions, Prealloc, RecoveryMode};
pub use pending::FRAME_OUTSIDE_LOCK_BYTES;
pub use recovery::{read_records, scan_dir, DirScan, SegmentReport};
pub use stats::{CallLatency, LogHistograms, LogStats};
pub use waiters::{block_on, Reach};
