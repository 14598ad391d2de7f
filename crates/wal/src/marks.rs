//! Log sequence numbers and the marks the log reports as they advance.
//!
//! ```text
//!   append ─> Lsn (1, 2, 3, ...) ─> taken ─> written ─> durable
//!                                            └─ each advance: Listener(Ok(Marks))
//! ```
//!
//! Non-goals: the marks themselves (the watermarks threads wait on) are in [`crate::waiters`].

use crate::error::WalError;

/// A record's sequence number: 1 for the first record of a log, then +1 per record.
pub type Lsn = u64;

/// The marks after an advance, as listeners see them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Marks {
    /// Highest LSN handed to the kernel.
    pub written: Lsn,
    /// Highest LSN fdatasync'd.
    pub durable: Lsn,
}

/// Called after every advance of the written or durable mark, or with the error that poisoned
/// the log. It runs on the thread that advanced it: the syncer, or in async mode a thread in
/// [`crate::Log::write_ready`]. Keep it short and never block in it.
pub type Listener = Box<dyn Fn(Result<Marks, &WalError>) + Send + Sync>;
