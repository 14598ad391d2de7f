//! The server's test switches: environment variables (not settings: `--help` does not show
//! them) with which tests make the machine misbehave on purpose: a slow log disk, a ring that
//! cannot be made, a kernel without multishot receives, a small registered file table, a
//! flash writer that eviction waits for.
//!
//! This module exists only with the `test-hooks` feature of cairn-server, which only tests
//! turn on: the package is its own dev-dependency with that feature, so `cargo test` (and
//! `cargo build --all-targets`) builds the `cairn` binary that the integration tests and the
//! Python suites run with the switches, while `cargo build --release` builds it without them:
//! the release binary reads no `CAIRN_TEST_*` variable. Each place that reads a switch says
//! so with `#[cfg(feature = "test-hooks")]`. The log's and the flash tier's switches log a
//! warning when they are in force.
//!
//! ```text
//!   a test ── CAIRN_TEST_* in the environment ──> cairn (built with test-hooks)
//!     LOG_SYNC_DELAY_MS, LOG_PENDING_KIB ──> Ctx::open: the log's file system and bound
//!     FLASH_WAIT_FOR_WRITER ──────────────> flash::open: FlashConfig::wait_for_writer
//!     REFUSE_IO_URING ────────────────────> uring: making a thread's ring fails (EPERM)
//!     SINGLE_SHOT_RECV, FIXED_FILES ──────> uring: receives and the registered file table
//! ```

use std::sync::Arc;

use cairn_flash::FlashConfig;

/// `N`: every fdatasync of the log (and every durable write) takes N ms longer once recovery
/// is done, on the real file system (`cairn_wal::DelayedSyncFs`), for the tests that check a
/// slow or hung log disk never holds up reads.
pub const LOG_SYNC_DELAY_MS: &str = "CAIRN_TEST_LOG_SYNC_DELAY_MS";

/// `N`: the log bytes that wait for the disk are bounded at N KiB instead of 16 MiB, so a
/// test fills the bound quickly.
pub const LOG_PENDING_KIB: &str = "CAIRN_TEST_LOG_PENDING_KIB";

/// `1`: RAM eviction waits for a flash writer that is behind instead of dropping items
/// (`FlashConfig::wait_for_writer`), so that tests on a busy machine can expect every item.
pub const FLASH_WAIT_FOR_WRITER: &str = "CAIRN_TEST_FLASH_WAIT_FOR_WRITER";

/// Set: making a connection thread's ring fails as in a sandbox that forbids io_uring (EPERM),
/// so that the fallback to the tokio engine can be tested anywhere.
pub const REFUSE_IO_URING: &str = "CAIRN_TEST_REFUSE_IO_URING";

/// Set: each read is a single-shot receive into the connection's own buffer (as on a kernel
/// without provided buffer rings) instead of a multishot receive.
pub const SINGLE_SHOT_RECV: &str = "CAIRN_TEST_SINGLE_SHOT_RECV";

/// `N`: a smaller registered file table per ring (N slots), so that a test can fill it and
/// see the slots of ended connections reused.
pub const FIXED_FILES: &str = "CAIRN_TEST_FIXED_FILES";

/// Opens the server's state with `open`, handing it the log's file system and its bound on
/// pending bytes: the real file system and the default bound, unless [`LOG_PENDING_KIB`] or
/// [`LOG_SYNC_DELAY_MS`] says otherwise (the delay starts once `open` returned, so recovery
/// is not slowed). A value that is not a number refuses the start.
pub fn open_log_disk<T>(
    open: impl FnOnce(Arc<dyn cairn_wal::FileSystem>, usize) -> Result<T, String>,
) -> Result<T, String> {
    let env = |name: &str| {
        std::env::var(name)
            .ok()
            .map(|v| {
                v.parse::<u64>()
                    .map_err(|_| format!("refusing to start: {name}={v:?}"))
            })
            .transpose()
    };
    let pending = env(LOG_PENDING_KIB)?.map_or(cairn_persist::DEFAULT_MAX_PENDING_BYTES, |kib| {
        (kib as usize) << 10
    });
    let Some(ms) = env(LOG_SYNC_DELAY_MS)? else {
        return open(Arc::new(cairn_wal::RealFs), pending);
    };
    tracing::warn!("{LOG_SYNC_DELAY_MS}={ms}: every log fdatasync is delayed (a test switch)");
    let fs = cairn_wal::DelayedSyncFs::new(Arc::new(cairn_wal::RealFs));
    let opened = open(Arc::new(fs.clone()), pending)?;
    fs.set_delay(std::time::Duration::from_millis(ms));
    Ok(opened)
}

/// `config` with [`FLASH_WAIT_FOR_WRITER`] applied.
pub fn flash_config(mut config: FlashConfig) -> FlashConfig {
    if std::env::var_os(FLASH_WAIT_FOR_WRITER).is_some_and(|v| v == "1") {
        tracing::warn!(
            "{FLASH_WAIT_FOR_WRITER}=1: eviction waits for the flash writer (a test switch)"
        );
        config.wait_for_writer = true;
    }
    config
}

/// Whether [`REFUSE_IO_URING`] is set.
pub fn refuse_io_uring() -> bool {
    std::env::var_os(REFUSE_IO_URING).is_some()
}

/// Whether [`SINGLE_SHOT_RECV`] is set.
pub fn single_shot_recv() -> bool {
    std::env::var_os(SINGLE_SHOT_RECV).is_some()
}

/// The registered file slots per ring that [`FIXED_FILES`] asks for, if it is set to a number.
pub fn fixed_files() -> Option<u64> {
    std::env::var(FIXED_FILES)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
}
