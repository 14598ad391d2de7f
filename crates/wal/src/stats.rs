//! The log's figures: latencies of its calls, batch sizes, marks and segment counts, read by
//! [`crate::Log::stats`] for `stats persistence`, the Prometheus endpoint and the benchmark.
//!
//! ```text
//!   syncer: each write / fdatasync / batch ─> LogHistograms (under the state lock)
//!   Log::stats() ─> LogStats { CallLatency p50/p99, marks, segments, ..., histograms }
//! ```
//!
//! Non-goals: rendering them (the server does, as text and as Prometheus metrics).

use crate::error::WalError;
use crate::marks::Lsn;

/// Median and 99th percentile of one kind of call, in microseconds, and how many were made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallLatency {
    pub count: u64,
    pub p50_us: u64,
    pub p99_us: u64,
}

/// Figures for `stats`, metrics and the benchmark.
#[derive(Clone, Debug)]
pub struct LogStats {
    /// Plain writes of a batch (no sync in the call): async mode, and sync mode without
    /// O_DIRECT (where an fdatasync follows each).
    pub write: CallLatency,
    /// fdatasync calls alone (the write before each is in `write`).
    pub fdatasync: CallLatency,
    /// O_DIRECT batches written and made durable by one `pwritev2(RWF_DSYNC)`: the write and
    /// the device's cache flush in one call, timed together (there is no separate fdatasync
    /// to time).
    pub dsync_write: CallLatency,
    /// O_DIRECT durable writes whose records were copied into the staging buffer first
    /// (a batch of more than one chunk, or the first batch in a new segment); the others
    /// (`dsync_write.count` minus these) went from the pending buffer itself.
    pub staged_writes: u64,
    /// Records per batch the syncer took: median and 99th percentile.
    pub batch_records_p50: u64,
    pub batch_records_p99: u64,
    /// Bytes handed to write() in total.
    pub bytes_written: u64,
    /// Highest LSN assigned.
    pub appended_lsn: Lsn,
    /// Highest LSN handed to the kernel.
    pub written_lsn: Lsn,
    /// Highest LSN known durable.
    pub durable_lsn: Lsn,
    /// Bytes appended and not yet taken care of: buffered, or in the batch being written (in
    /// sync mode: written and made durable; after a failed write, that batch stays counted).
    pub pending_bytes: u64,
    /// Times [`crate::Log::room`] found the pending buffer full (backpressure).
    pub backpressure_waits: u64,
    /// Segment switches that had to wait for the spare thread to finish preparing the file.
    pub spare_waits: u64,
    /// Segments that reused the file of a truncated one (see [`crate::LogOptions::reuse_segments`]).
    pub segments_reused: u64,
    /// Whether the spare thread is asked for, or busy making, the next segment file.
    pub spare_preparing: bool,
    /// Times the log went quiet after appends and its buffers went back to the operating
    /// system (see [`crate::LogOptions::release_after`]).
    pub buffer_releases: u64,
    /// Segment files in the log.
    pub segments: usize,
    /// Bytes of all segment files (their preallocated size).
    pub log_bytes: u64,
    /// The failure that poisoned the log, if any.
    pub poisoned: Option<WalError>,
    /// The whole distributions behind the figures above (for Prometheus histograms).
    pub histograms: LogHistograms,
}

/// Distributions kept by the syncer, one value per call or batch since open.
#[derive(Clone, Debug)]
pub struct LogHistograms {
    /// Microseconds of each plain write of a batch ([`LogStats::write`]).
    pub write_us: hdrhistogram::Histogram<u64>,
    /// Microseconds of each fdatasync alone ([`LogStats::fdatasync`]).
    pub fdatasync_us: hdrhistogram::Histogram<u64>,
    /// Microseconds of each `pwritev2(RWF_DSYNC)` ([`LogStats::dsync_write`]).
    pub dsync_write_us: hdrhistogram::Histogram<u64>,
    /// Bytes of records in each batch the syncer took (group commit).
    pub batch_bytes: hdrhistogram::Histogram<u64>,
    /// Records in each batch.
    pub batch_records: hdrhistogram::Histogram<u64>,
}

impl LogHistograms {
    pub(crate) fn new() -> LogHistograms {
        let h = |max| hdrhistogram::Histogram::new_with_bounds(1, max, 2).expect("valid bounds");
        LogHistograms {
            write_us: h(60_000_000),
            fdatasync_us: h(60_000_000),
            dsync_write_us: h(60_000_000),
            batch_bytes: h(1 << 40),
            batch_records: h(1 << 40),
        }
    }
}

/// The figures of one kind of call from its histogram.
pub(crate) fn latency(h: &hdrhistogram::Histogram<u64>) -> CallLatency {
    CallLatency {
        count: h.len(),
        p50_us: h.value_at_quantile(0.5),
        p99_us: h.value_at_quantile(0.99),
    }
}
