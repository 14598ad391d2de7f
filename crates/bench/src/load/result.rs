//! What a load run measured: successful sets and gets, hits and misses, error replies apart,
//! HDR latency histograms (set, get, all) and a per-second timeline; and the error bar a run
//! must stay under for its figures to count.
//!
//! ```text
//!   engine (per thread: counters, histograms, timeline) ─merge─> LoadResult
//!     ─> memtier.rs (summary, JSON), suites (rows, figures), check_errors()
//! ```
//!
//! Non-goals: printing (the command line and the suites render these figures).

use hdrhistogram::Histogram;

/// Latency histogram in microseconds, 1 us .. 100 s, 3 significant digits.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 100_000_000, 3).expect("valid bounds")
}

/// One second of the run.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Second {
    pub ops: u64,
    pub latency_us_sum: u64,
    pub latency_us_max: u64,
}

/// The highest share of error replies a run may have and still count (0.1%): past it, the
/// figures measure the errors, not the server.
pub const MAX_ERROR_RATE: f64 = 0.001;

/// What a run measured. `sets` and `gets` count successful replies only; an error reply
/// (`ERROR`, `CLIENT_ERROR`, `SERVER_ERROR`, Redis `-ERR`) counts in `set_errors` /
/// `get_errors` instead, and in no latency histogram.
pub struct LoadResult {
    /// Wall-clock seconds from the first request to the last reply.
    pub secs: f64,
    /// Successful sets and gets; a get is a hit or a miss.
    pub sets: u64,
    pub gets: u64,
    pub hits: u64,
    pub misses: u64,
    /// Error replies, counted apart from `sets` and `gets`.
    pub set_errors: u64,
    pub get_errors: u64,
    /// Get hits whose value was not the one this tool sets for the key (`--verify`).
    pub verify_failures: u64,
    /// Latency in microseconds of successful sets, of successful gets, and of both.
    pub set_latency: Histogram<u64>,
    pub get_latency: Histogram<u64>,
    pub all_latency: Histogram<u64>,
    /// Each second of the run, from its start.
    pub timeline: Vec<Second>,
    /// CPU seconds the load generator itself used (user + system).
    pub cpu_secs: f64,
}

impl LoadResult {
    /// Successful operations.
    pub fn ops(&self) -> u64 {
        self.sets + self.gets
    }

    /// Error replies.
    pub fn errors(&self) -> u64 {
        self.set_errors + self.get_errors
    }

    /// Error replies over all replies (0 when there were none).
    pub fn error_rate(&self) -> f64 {
        error_rate(self.errors(), self.ops())
    }

    /// Refuses a run whose error rate passes [`MAX_ERROR_RATE`].
    pub fn check_errors(&self) -> Result<(), String> {
        check_error_rate(self.errors(), self.ops())
    }

    pub fn ops_per_sec(&self) -> f64 {
        self.ops() as f64 / self.secs
    }
}

/// `errors` over all replies, `errors + ops` (0 when there were none).
pub fn error_rate(errors: u64, ops: u64) -> f64 {
    let replies = errors + ops;
    if replies == 0 {
        0.0
    } else {
        errors as f64 / replies as f64
    }
}

/// Err naming the rate when it passes [`MAX_ERROR_RATE`].
pub fn check_error_rate(errors: u64, ops: u64) -> Result<(), String> {
    let rate = error_rate(errors, ops);
    if rate > MAX_ERROR_RATE {
        return Err(format!(
            "{errors} error replies out of {} ({:.3}%, above the {:.1}% allowed): the figures are not valid",
            errors + ops,
            rate * 100.0,
            MAX_ERROR_RATE * 100.0
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_from_the_histogram() {
        let mut h = histogram();
        for us in 1..=1000u64 {
            h.record(us).unwrap();
        }
        assert_eq!(h.value_at_quantile(0.5), 500);
        assert!((990..=991).contains(&h.value_at_quantile(0.99)));
        assert_eq!(h.max(), 1000);
    }
}
