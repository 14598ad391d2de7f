//! Pins files: beside each snapshot, the flash segments its flash records point into (with
//! the sequence number each had), so that recovery trusts a flash entry only while its
//! segment still holds what the checkpoint saw.
//!
//! ```text
//!   checkpoint: Flash::checkpoint_sync ─> pins ─> flash-<LSN>.pins.tmp ─> fdatasync ─> rename
//!   recovery:   read_pins(each loadable snapshot) ─> Flash::recover_pins
//! ```
//!
//! Non-goals: the flash tier's own checks (`cairn_flash`).

use std::path::Path;

use cairn_wal::{FileSystem, Lsn};

use crate::error::PersistError;

/// The pins file of the snapshot at `lsn`: the flash segments its flash records point into.
pub(crate) fn pins_file_name(lsn: Lsn) -> String {
    format!("flash-{lsn:020}.pins")
}

/// Writes the pins file of snapshot `lsn` (temp file, fdatasync, rename; the directory is
/// fsynced with the snapshot's rename that follows).
///
/// ```text
/// "CAIRNFPN" | version u32 = 2 | count u32 | (segment u32 | seq u64 | max_revision u64) * count |
/// crc u32 (CRC32C of everything before it)
/// ```
pub(crate) fn write_pins(
    fs: &dyn FileSystem,
    dir: &Path,
    lsn: Lsn,
    pins: &[cairn_flash::Pin],
) -> Result<(), PersistError> {
    let mut b = Vec::with_capacity(16 + pins.len() * PIN_BYTES + 4);
    b.extend_from_slice(b"CAIRNFPN");
    b.extend_from_slice(&2u32.to_le_bytes());
    b.extend_from_slice(
        &u32::try_from(pins.len())
            .expect("segments fit u32")
            .to_le_bytes(),
    );
    for pin in pins {
        b.extend_from_slice(&pin.segment.to_le_bytes());
        b.extend_from_slice(&pin.seq.to_le_bytes());
        b.extend_from_slice(&pin.max_revision.to_le_bytes());
    }
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    let path = dir.join(pins_file_name(lsn));
    let tmp = dir.join(format!("{}.tmp", pins_file_name(lsn)));
    let _ = fs.remove(&tmp);
    let f = fs.create(&tmp).map_err(|e| PersistError::io(&tmp, e))?;
    f.write_at(0, &b).map_err(|e| PersistError::io(&tmp, e))?;
    f.sync_data().map_err(|e| PersistError::io(&tmp, e))?;
    fs.rename(&tmp, &path)
        .map_err(|e| PersistError::io(&path, e))
}

/// Bytes of one pin in a pins file (version 2; version 1's had no largest revision: 12).
const PIN_BYTES: usize = 20;

/// Reads the pins file of snapshot `lsn`; empty if it is missing or damaged (then none of
/// that snapshot's flash records is trusted).
pub(crate) fn read_pins(fs: &dyn FileSystem, dir: &Path, lsn: Lsn) -> Vec<cairn_flash::Pin> {
    let path = dir.join(pins_file_name(lsn));
    let Ok(f) = fs.open(&path) else {
        return Vec::new();
    };
    let size = f.size().unwrap_or(0) as usize;
    let mut b = vec![0u8; size];
    if size < 20 || f.read_at(0, &mut b).ok() != Some(size) {
        return Vec::new();
    }
    let crc = u32::from_le_bytes(b[size - 4..].try_into().expect("4 bytes"));
    let version = u32::from_le_bytes(b[8..12].try_into().expect("4 bytes"));
    let count = u32::from_le_bytes(b[12..16].try_into().expect("4 bytes")) as usize;
    let each = match version {
        1 => 12,
        _ => PIN_BYTES,
    };
    if &b[0..8] != b"CAIRNFPN"
        || !(1..=2).contains(&version)
        || crc != crc32c::crc32c(&b[..size - 4])
        || size != 20 + count * each
    {
        tracing::warn!(
            "{} is damaged: its snapshot's flash items are lost",
            path.display()
        );
        return Vec::new();
    }
    (0..count)
        .map(|i| {
            let at = 16 + i * each;
            cairn_flash::Pin {
                segment: u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes")),
                seq: u64::from_le_bytes(b[at + 4..at + 12].try_into().expect("8 bytes")),
                // Version 1 did not say: unknown, nothing is left out for it.
                max_revision: match version {
                    1 => 0,
                    _ => u64::from_le_bytes(b[at + 12..at + 20].try_into().expect("8 bytes")),
                },
            }
        })
        .collect()
}
