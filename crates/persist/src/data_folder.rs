//! What is in the data folder: the snapshots present, and what an unfinished checkpoint left
//! behind (removed at start and after a failed checkpoint).
//!
//! ```text
//!   data_path/  MANIFEST  snapshot-<LSN>.snap  flash-<LSN>.pins   (current and previous)
//!               MANIFEST.tmp  snapshot-<LSN>.snap.tmp  flash-<LSN>.pins.tmp   (leftovers)
//! ```
//!
//! Non-goals: the format of each file (`crate::manifest`, `crate::snapshot`, `crate::pins`).

use std::path::Path;

use cairn_wal::{FileSystem, Lsn};

use crate::error::PersistError;
use crate::snapshot;

/// Removes what an unfinished checkpoint left in `dir` (its `.tmp` snapshot or manifest), so
/// that failed checkpoints do not fill the disk. Never called while a checkpoint runs.
pub(crate) fn remove_temp_files(fs: &dyn FileSystem, dir: &Path) {
    let Ok(paths) = fs.list(dir) else { return };
    for p in paths {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name == "MANIFEST.tmp"
            || (name.starts_with("snapshot-") && name.ends_with(".snap.tmp"))
            || (name.starts_with("flash-") && name.ends_with(".pins.tmp"))
        {
            match fs.remove(&p) {
                Ok(()) => {
                    tracing::info!("removed {}, left by an unfinished checkpoint", p.display())
                }
                Err(e) => tracing::warn!("cannot remove {}: {e}", p.display()),
            }
        }
    }
}

/// Snapshot LSNs present in `dir`, newest first.
pub(crate) fn list_snapshots(fs: &dyn FileSystem, dir: &Path) -> Result<Vec<Lsn>, PersistError> {
    let mut v: Vec<Lsn> = fs
        .list(dir)
        .map_err(|e| PersistError::io(dir, e))?
        .iter()
        .filter_map(|p| snapshot::parse_file_name(p.file_name()?.to_str()?))
        .collect();
    v.sort_unstable_by(|a, b| b.cmp(a));
    Ok(v)
}
