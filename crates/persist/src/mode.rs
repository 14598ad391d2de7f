//! [`Mode`]: how writes are acknowledged (off, async, sync), and the log durability each
//! asks of cairn-wal.
//!
//! Non-goals: switching at run time ([`crate::Persistence::set_mode`]).

use cairn_wal::Durability;

/// How writes are acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Pure cache: nothing is logged; a restart starts empty.
    Off,
    /// Acknowledged once the log record is handed to the kernel (one write per group of
    /// requests, as in sync mode, without waiting for the disk); the log is fdatasync'd at
    /// least every `async_flush_ms`. A crash of the process (kill -9) loses nothing
    /// acknowledged; a power loss loses at most the writes of that last interval.
    Async,
    /// Acknowledged only after the fdatasync covering the write returned. A power loss loses
    /// nothing acknowledged.
    Sync,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::Async => "async",
            Mode::Sync => "sync",
        }
    }

    /// The log's durability for this mode (none for `Off`, which has no log).
    pub(crate) fn log_durability(self) -> Durability {
        match self {
            Mode::Sync => Durability::Sync,
            _ => Durability::Async,
        }
    }

    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "off" => Some(Mode::Off),
            "async" => Some(Mode::Async),
            "sync" => Some(Mode::Sync),
            _ => None,
        }
    }
}
