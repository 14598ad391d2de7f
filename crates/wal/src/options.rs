//! A log's settings: its durability mode, what recovery does with a bad record, how segment
//! files are prepared, and the options [`crate::Log::open`] takes.
//!
//! Non-goals: the persistence layer's settings (cairn-persist's `PersistConfig`), which map
//! onto these.

use std::time::Duration;

/// When a record counts as safe, and so what a crash can take. Switchable while the log runs
/// ([`crate::Log::set_durability`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// The syncer writes and makes durable each batch as soon as it takes it; a record is
    /// safe once durable ([`crate::Log::commit`] waits for that). A power loss loses nothing
    /// committed.
    Sync,
    /// The syncer writes each batch to the kernel as soon as it takes it (the *written* mark),
    /// and fdatasyncs at least every `flush_interval` (and whenever `flush_bytes` were written
    /// since the last one, or a caller waits for [`crate::Log::durable`]). A record is safe once
    /// written ([`crate::Log::commit`] waits for that): a crash of the process loses nothing
    /// committed; a power loss loses at most what was written in the last `flush_interval`
    /// (plus the time of one fdatasync).
    Async,
}

impl Durability {
    pub(crate) fn code(self) -> u8 {
        match self {
            Durability::Sync => 0,
            Durability::Async => 1,
        }
    }

    pub(crate) fn from_code(code: u8) -> Durability {
        if code == 0 {
            Durability::Sync
        } else {
            Durability::Async
        }
    }
}

/// What [`crate::Log::open`] does with a record that fails its checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecoveryMode {
    /// Any bad byte is an error, even a torn tail.
    Strict,
    /// A torn record at the end of the newest segment (nothing valid after it) is cut off;
    /// anything else is an error. The default: this is what a crash mid-write leaves.
    TolerateTornTail,
    /// Keep the longest valid prefix; cut everything after the first bad record, in every
    /// segment after it too. For an operator who accepts losing the rest.
    Salvage,
}

/// How a new segment file is prepared (by the spare thread, ahead of time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prealloc {
    /// `set_len` to the segment size: no data blocks written up front, so every fdatasync of
    /// an append also commits the file system's block allocation.
    SetLen,
    /// Write zeros over the whole segment and fdatasync once, so appends overwrite allocated
    /// blocks (a cheaper fdatasync). Costs one extra write of every segment, in the background.
    ZeroFill,
}

/// Settings of a log.
#[derive(Clone, Debug)]
pub struct LogOptions {
    /// The mode at open; [`crate::Log::set_durability`] changes it later.
    pub durability: Durability,
    /// Async: the longest time a written record waits for its fdatasync.
    pub flush_interval: Duration,
    /// Async: fdatasync as soon as this many bytes were written since the last one.
    pub flush_bytes: usize,
    /// [`crate::Log::room`] waits while this many bytes are buffered and not yet taken by the syncer
    /// (backpressure). Appends themselves never wait: a caller that appends without asking
    /// for room may go past it.
    pub max_pending_bytes: usize,
    /// Size of a segment file; a batch that does not fit starts a new segment.
    pub segment_bytes: u64,
    /// Largest payload accepted: at most 4 GiB - 1 (the format's length field has 32 bits;
    /// [`crate::Log::open`] refuses more).
    pub max_record_bytes: usize,
    pub recovery: RecoveryMode,
    pub prealloc: Prealloc,
    /// In sync mode, write the tail segment with O_DIRECT ([`crate::FileSystem::open_direct`]):
    /// whole 4 KiB blocks from an aligned buffer, skipping the page cache, each batch written
    /// and made durable by one `pwritev2(RWF_DSYNC)`. Async mode writes through the page cache
    /// either way (a write there is a copy, not a device round trip). Falls back to buffered
    /// writes where the file system refuses O_DIRECT (EINVAL, e.g. tmpfs).
    ///
    /// Off by default in the library: it is slower for megabyte records on the disk where it
    /// was measured (docs/decisions/0010-o-direct-log-writes-with-rwf-dsync.md); the server
    /// turns it on.
    pub direct_io: bool,
    /// Segments dropped by [`crate::Log::truncate_before`] are kept, up to this many, and become the
    /// next segments instead of new files. A reused file is already allocated and written,
    /// so writing it again needs neither a zero fill nor a metadata change. 0 deletes them.
    /// Kept files are spares (see [`crate::format::spare_name`]): reopening the log removes them.
    pub reuse_segments: usize,
    /// Run the syncer thread under Linux's SCHED_BATCH policy (same share of the CPU, but its
    /// wake-ups do not preempt the thread running on that core). The syncer sleeps and wakes
    /// several times per fdatasync; on a machine whose cores are busy, each such wake-up
    /// otherwise preempts whoever runs there, e.g. a thread serving requests. A hint: where the
    /// policy cannot be set, the log runs the same. Off by default; the server turns it on
    /// (docs/decisions/0011-the-log-syncer-under-sched-batch.md has the measurement).
    pub syncer_batch_sched: bool,
    /// After this long without an append, the syncer hands the memory of the last burst's
    /// buffers (pending chunks kept for reuse, the pages the O_DIRECT staging buffer touched)
    /// back to the operating system ([`crate::LogStats::buffer_releases`]). The time counts
    /// from when the syncer, between batches, first sees no new append (in async mode, within
    /// `flush_interval` of the last one). Zero releases them after every quiet moment, and the
    /// next burst maps and faults them in again.
    pub release_after: Duration,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            durability: Durability::Sync,
            flush_interval: Duration::from_millis(100),
            flush_bytes: 4 << 20,
            max_pending_bytes: 16 << 20,
            segment_bytes: 64 << 20,
            max_record_bytes: 16 << 20,
            recovery: RecoveryMode::TolerateTornTail,
            prealloc: Prealloc::SetLen,
            direct_io: false,
            reuse_segments: 2,
            syncer_batch_sched: false,
            release_after: Duration::from_secs(1),
        }
    }
}
