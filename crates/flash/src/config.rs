//! The tier's settings, and the geometry checks a device must pass before it is used.
//!
//! ```text
//!   FlashConfig (from the server's flags) ──check_geometry──> Flash::open_on
//!                                          └─ refused: FlashError::Open(OpenError::Invalid)
//! ```
//!
//! Non-goals: no parsing of flags or files (the server's config does that).

use std::path::PathBuf;

use crate::device::OpenError;
use crate::error::FlashError;
use crate::format::BLOCK;

/// Settings of the tier.
#[derive(Clone, Debug)]
pub struct FlashConfig {
    /// A file (created and preallocated if absent) or a block device.
    pub path: PathBuf,
    /// Bytes of the device to use.
    pub size_bytes: u64,
    /// Bytes of one segment, the unit of writes and of flash eviction (a multiple of 4 KiB).
    pub segment_bytes: u64,
    /// Open with O_DIRECT (refused on file systems without it, such as tmpfs).
    pub direct_io: bool,
    /// Read through io_uring when the kernel allows it (else a pread thread pool).
    pub io_uring: bool,
    /// Sealed segments that may wait for the writer; past it evicted items are dropped.
    pub write_queue: usize,
    /// A test switch, not a setting: when the writer is behind, eviction waits for it (as
    /// recovery does) instead of dropping items, so that tests on a loaded machine can
    /// expect every item back. Production never waits for flash on the request path: the
    /// field exists only with the `test-util` feature (and in this crate's tests).
    #[cfg(any(test, feature = "test-util"))]
    pub wait_for_writer: bool,
}

impl FlashConfig {
    pub fn new(path: PathBuf, size_bytes: u64) -> FlashConfig {
        FlashConfig {
            path,
            size_bytes,
            segment_bytes: 1 << 20,
            direct_io: true,
            io_uring: true,
            write_queue: 4,
            #[cfg(any(test, feature = "test-util"))]
            wait_for_writer: false,
        }
    }

    /// Whether eviction waits for the writer ([`FlashConfig::wait_for_writer`]).
    #[cfg(any(test, feature = "test-util"))]
    pub(crate) fn waits_for_writer(&self) -> bool {
        self.wait_for_writer
    }

    /// Whether eviction waits for the writer: never, without the test switch.
    #[cfg(not(any(test, feature = "test-util")))]
    pub(crate) fn waits_for_writer(&self) -> bool {
        false
    }
}

/// Fewest segments a device must hold: one being filled, the write queue, and a reserve
/// for flash eviction to work in.
pub const MIN_SEGMENTS: u64 = 8;

/// Refuses geometry that cannot work, naming the path.
pub(crate) fn check_geometry(config: &FlashConfig) -> Result<(), FlashError> {
    let invalid = |why: String| {
        Err(FlashError::Open(OpenError::Invalid {
            path: config.path.display().to_string(),
            why,
        }))
    };
    let seg = config.segment_bytes;
    if !seg.is_multiple_of(BLOCK as u64) || seg < 16 * BLOCK as u64 || seg > 256 << 20 {
        return invalid(format!(
            "flash_segment_size {seg} must be a multiple of 4 KiB between 64 KiB and 256 MiB"
        ));
    }
    let need = BLOCK as u64 + MIN_SEGMENTS * seg;
    if config.size_bytes < need {
        return invalid(format!(
            "flash_size {} is below {MIN_SEGMENTS} segments of {seg} bytes ({need} bytes)",
            config.size_bytes
        ));
    }
    let blocks = (config.size_bytes / BLOCK as u64) as u128;
    if blocks >= 1 << cairn_store::flash::BLOCK_BITS {
        return invalid(format!(
            "flash_size {} is over the 512 GiB one tier can address",
            config.size_bytes
        ));
    }
    if config.write_queue == 0 {
        return invalid("the write queue must hold at least one segment".into());
    }
    Ok(())
}
