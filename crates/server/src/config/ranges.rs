//! The settings an admin line can also change while running (`config KEY N`, `cmd/admin.rs`):
//! their ranges in one place, so that the file, the flags and the admin line accept exactly
//! the same values.

use std::ops::RangeInclusive;

use super::error::ConfigError;

/// Values of `chkpt_interval_pct_snapshot` (percent of the snapshot size). 0 is refused: it
/// would drop the ratio condition, leaving only the size one. Above 10000 (a log 100 times the
/// snapshot before a checkpoint, all of it replayed at recovery) is taken for a typo.
pub const CHKPT_INTERVAL_PCT_SNAPSHOT: RangeInclusive<u64> = 1..=10_000;

/// Values of `chkpt_interval_min_logsize` (MiB). 0 is refused: with an empty snapshot it
/// checkpoints at every check of the rule, that is every second. The top, 1 TiB, keeps the
/// size in bytes (`<< 20`) far from overflowing a u64.
pub const CHKPT_INTERVAL_MIN_LOGSIZE_MB: RangeInclusive<u64> = 1..=1 << 20;

/// A checkpoint-interval setting: a key of the file and a flag at start, and an ARCUS admin line
/// (`config KEY [N]`) while running. Both paths check a value with [`ChkptSetting::check`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChkptSetting {
    /// `chkpt_interval_pct_snapshot`, in % ([`CHKPT_INTERVAL_PCT_SNAPSHOT`]).
    PctSnapshot,
    /// `chkpt_interval_min_logsize`, in MiB ([`CHKPT_INTERVAL_MIN_LOGSIZE_MB`]).
    MinLogsize,
}

impl ChkptSetting {
    /// The setting named `key` (the TOML key, which is also ARCUS's name), if it is one.
    pub fn from_key(key: &str) -> Option<ChkptSetting> {
        match key {
            "chkpt_interval_pct_snapshot" => Some(ChkptSetting::PctSnapshot),
            "chkpt_interval_min_logsize" => Some(ChkptSetting::MinLogsize),
            _ => None,
        }
    }

    /// The TOML key and admin-line name.
    pub fn key(self) -> &'static str {
        match self {
            ChkptSetting::PctSnapshot => "chkpt_interval_pct_snapshot",
            ChkptSetting::MinLogsize => "chkpt_interval_min_logsize",
        }
    }

    /// The values accepted, everywhere.
    pub fn range(self) -> RangeInclusive<u64> {
        match self {
            ChkptSetting::PctSnapshot => CHKPT_INTERVAL_PCT_SNAPSHOT,
            ChkptSetting::MinLogsize => CHKPT_INTERVAL_MIN_LOGSIZE_MB,
        }
    }

    /// `v` if it is in [`ChkptSetting::range`]; otherwise an error naming the key and the range.
    pub fn check(self, v: u64) -> Result<u64, ConfigError> {
        let range = self.range();
        if range.contains(&v) {
            return Ok(v);
        }
        let unit = match self {
            ChkptSetting::PctSnapshot => "% of the snapshot size",
            ChkptSetting::MinLogsize => "MiB",
        };
        Err(ConfigError::Invalid {
            key: self.key(),
            why: format!(
                "must be between {} and {} ({unit})",
                range.start(),
                range.end()
            ),
        })
    }
}
