//! What an accept loop does when `accept` fails (out of file descriptors, ENFILE, ENOBUFS
//! ...): count it, log the first failure of a run, and wait before the next try, 5 ms doubling
//! up to 1 s, so that the loop neither spins (the listener stays readable) nor takes long to
//! resume once descriptors are free again. The memcached port's loop (`server.rs`) and the
//! metrics endpoint's (`metrics.rs`) share it.
//!
//! ```text
//!   accept ── Err ──> AcceptBackoff::wait: accept_errors += 1, sleep 5 ms, 10 ms, ... 1 s
//!          └─ Ok ───> AcceptBackoff::reset
//! ```

use std::time::Duration;

use crate::stats::bump;
use crate::Ctx;

/// Waits after a failed accept: 5 ms, doubling up to 1 s while accepts keep failing, so that a
/// process out of file descriptors neither spins nor takes long to resume once some close.
#[derive(Debug, Default)]
pub struct AcceptBackoff {
    /// The next wait; zero after a successful accept.
    delay: Duration,
}

impl AcceptBackoff {
    const FIRST: Duration = Duration::from_millis(5);
    const MOST: Duration = Duration::from_secs(1);

    /// A successful accept: the next failure waits [`Self::FIRST`] again.
    pub fn reset(&mut self) {
        self.delay = Duration::ZERO;
    }

    /// Counts the failure, logs the first of a run, and sleeps.
    pub async fn wait(&mut self, ctx: &Ctx, listener: &str, e: &std::io::Error) {
        bump(&ctx.counters.accept_errors);
        if self.delay.is_zero() {
            tracing::warn!("{listener} accept failed, backing off: {e}");
            self.delay = Self::FIRST;
        } else {
            self.delay = (self.delay * 2).min(Self::MOST);
        }
        tokio::time::sleep(self.delay).await;
    }
}
