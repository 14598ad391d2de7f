//! The MANIFEST: which snapshot is current and the CAS floor, written atomically (temp file,
//! fdatasync, rename, fsync of the folder) so that it names only a durable snapshot.
//!
//! ```text
//!   cairn-manifest 1
//!   snapshot_lsn <LSN, 0: none>
//!   cas_floor <a unique at least as large as any handed out before it was written>
//!   crc <CRC32C of the lines above>
//! ```
//!
//! Non-goals: the snapshot files themselves (`crate::snapshot`).

use std::path::Path;

use cairn_wal::{FileSystem, Lsn};

use crate::error::PersistError;

const MANIFEST: &str = "MANIFEST";

/// What the manifest says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Manifest {
    /// The current snapshot (0 = none).
    pub snapshot_lsn: Lsn,
    /// A CAS unique at least as large as any handed out before the manifest was written
    /// (0 in a manifest of an earlier build, which had no such line).
    pub cas_floor: u64,
}

/// Writes the manifest: temp file, fdatasync, rename, fsync dir.
pub(crate) fn write_manifest(
    fs: &dyn FileSystem,
    dir: &Path,
    m: Manifest,
) -> Result<(), PersistError> {
    let body = format!(
        "cairn-manifest 1\nsnapshot_lsn {}\ncas_floor {}\n",
        m.snapshot_lsn, m.cas_floor
    );
    let text = format!("{body}crc {}\n", crc32c::crc32c(body.as_bytes()));
    let tmp = dir.join("MANIFEST.tmp");
    let _ = fs.remove(&tmp);
    let f = fs.create(&tmp).map_err(|e| PersistError::io(&tmp, e))?;
    f.write_at(0, text.as_bytes())
        .map_err(|e| PersistError::io(&tmp, e))?;
    f.sync_data().map_err(|e| PersistError::io(&tmp, e))?;
    let path = dir.join(MANIFEST);
    fs.rename(&tmp, &path)
        .map_err(|e| PersistError::io(&path, e))?;
    fs.sync_dir(dir).map_err(|e| PersistError::io(dir, e))
}

/// Reads the manifest: Ok(None) if there is none yet.
pub(crate) fn read_manifest(
    fs: &dyn FileSystem,
    dir: &Path,
) -> Result<Option<Manifest>, PersistError> {
    let path = dir.join(MANIFEST);
    let f = match fs.open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(PersistError::io(&path, e)),
    };
    let size = f.size().map_err(|e| PersistError::io(&path, e))? as usize;
    let mut buf = vec![0u8; size.min(4096)];
    let n = f
        .read_at(0, &mut buf)
        .map_err(|e| PersistError::io(&path, e))?;
    let text = String::from_utf8_lossy(&buf[..n]).into_owned();
    let bad = || PersistError::Corrupt {
        path: path.clone(),
        offset: 0,
        why: "unreadable manifest",
    };
    let (body, crc_line) = text.rsplit_once("crc ").ok_or_else(bad)?;
    if crc_line.trim().parse::<u32>().ok() != Some(crc32c::crc32c(body.as_bytes()))
        || !body.starts_with("cairn-manifest 1\n")
    {
        return Err(bad());
    }
    let field = |name: &str| {
        body.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .map(|v| v.parse::<u64>().map_err(|_| bad()))
    };
    Ok(Some(Manifest {
        snapshot_lsn: field("snapshot_lsn").ok_or_else(bad)??,
        cas_floor: field("cas_floor").transpose()?.unwrap_or(0),
    }))
}
