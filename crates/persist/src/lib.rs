//! cairn-persist: command logging, checkpoints and recovery, gluing cairn-store and cairn-wal.
//!
//! ```text
//!   Store mutation (under the shard lock) ──LogSink──> record::encode_head ──> Log::append_parts
//!        └─ the LSN joins the thread's ticket; the front end awaits `acknowledged(ticket)`
//!           (the durable mark in sync mode, the written mark in async mode): durability.rs
//!
//!   checkpoint:  L0 = appended LSN ─> copy shard by shard ─> snapshot-L0.snap.tmp (throttled)
//!                ─> trailer + fdatasync ─> L1 = appended LSN, wait until the log is durable
//!                to L1 ─> rename ─> fsync dir ─> MANIFEST.tmp ─> fdatasync
//!                ─> rename MANIFEST ─> fsync dir ─> drop log segments older than the previous
//!                snapshot, and snapshots older than the previous one
//!
//!   recovery:    MANIFEST ─> newest valid snapshot (else the previous one, else the whole
//!                log) ─> open the log
//!                ─> replay records with LSN > snapshot LSN ─> raise the CAS floor past every
//!                unique on disk (+ 2^32 for uniques never durable)
//! ```
//!
//! Why a fuzzy snapshot plus replay gives the exact state: L0 is read before the first shard
//! is copied. A mutation whose record has LSN <= L0 was applied to memory before L0 was read
//! (the store changes and the LSN is assigned in one critical section), so its result or a later
//! one is in the snapshot. Every later mutation has a record with LSN > L0, and records hold
//! resulting states, so replaying them in order over the snapshot ends with each key's last
//! state, provided the log reaches every record whose mutation the copy holds: the copy may
//! hold mutations after L0 (up to L1, read once it ended), so the log is made durable up to
//! L1 before the snapshot is named. Expiry and eviction are logged too (small records, never waited for): replaying them
//! removes the key, so an evicted item does not come back after a restart; a deleted or
//! overwritten value never comes back, because its delete or overwrite is a later record.
//!
//! Revisions: every record's LSN is the revision of its mutation (`ItemMeta::mod_revision`),
//! so revisions increase along the log and are never reused after a restart. Observers of the
//! mutation seam ([`LogObserver`], the gRPC watch hub) get each mutation with its LSN, and
//! [`Persistence::safe_lsn`] / [`Persistence::on_advance`] tell them how far the log is safe,
//! so that they publish nothing a crash could take back.

mod durability;
mod open;
pub mod record;
mod replay;
mod sink;
pub mod snapshot;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use cairn_store::{Mutation, Store};
use cairn_wal::{Durability, FileSystem, Log, Lsn, WalError};
use parking_lot::Mutex;

pub use cairn_wal::writes_before_sleeping;
pub use durability::{capture, take_ticket, ReplicationGate, Ticket};
pub use open::Unrecoverable;
pub use sink::LogObserver;

use sink::LogSink;

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
    fn log_durability(self) -> Durability {
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

/// Errors of persistence.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    #[error("I/O error on {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("corrupt file {} at offset {offset}: {why}", path.display())]
    Corrupt {
        path: PathBuf,
        offset: u64,
        why: &'static str,
    },
    #[error(transparent)]
    Log(#[from] WalError),
    #[error("cannot recover: {0}")]
    Unrecoverable(#[from] Unrecoverable),
    #[error("a checkpoint is already running")]
    Busy,
    /// Safe locally, but the replication gate did not let it be acknowledged (sync
    /// replication: no replica holds it durable in time).
    #[error("replication: {0}")]
    Replication(String),
}

impl PersistError {
    pub(crate) fn io(path: &Path, e: std::io::Error) -> PersistError {
        PersistError::Io {
            path: path.to_path_buf(),
            source: e,
        }
    }
}

/// The default of [`PersistConfig::max_pending_bytes`]: 16 MiB.
pub const DEFAULT_MAX_PENDING_BYTES: usize = 16 << 20;

/// Persistence settings (ARCUS's names where it has them).
#[derive(Clone)]
pub struct PersistConfig {
    pub mode: Mode,
    /// Where snapshots and the manifest live (ARCUS `data_path`).
    pub data_path: PathBuf,
    /// Where the command log lives (ARCUS `logs_path`; may be another disk).
    pub logs_path: PathBuf,
    /// Async mode: the longest time a write stays only in memory.
    pub async_flush_ms: u64,
    /// Checkpoint when the log is at least this % of the snapshot size (ARCUS
    /// `chkpt_interval_pct_snapshot`)...
    pub chkpt_interval_pct_snapshot: u64,
    /// ...and at least this many MiB (ARCUS `chkpt_interval_min_logsize`).
    pub chkpt_interval_min_logsize_mb: u64,
    /// Snapshot write rate limit in MiB/s (0 = unlimited), so serving keeps its speed.
    pub checkpoint_rate_mb_s: u64,
    /// Size of a log segment file.
    pub segment_bytes: u64,
    /// Write the log with O_DIRECT (see `cairn_wal::LogOptions::direct_io`).
    pub direct_io: bool,
    /// Run the log's syncer under SCHED_BATCH (see `cairn_wal::LogOptions::syncer_batch_sched`).
    pub syncer_batch_sched: bool,
    /// Log bytes waiting for the disk past which writers wait for room (see
    /// `cairn_wal::LogOptions::max_pending_bytes`; [`DEFAULT_MAX_PENDING_BYTES`]).
    pub max_pending_bytes: usize,
    /// The file system (the real disk, or a fault-injecting one in tests).
    pub fs: Arc<dyn FileSystem>,
    /// The flash tier, if one is on: checkpoints record its entries (not their values) and
    /// recovery restores those it can still trust (see `cairn_flash`'s checkpoint notes).
    pub flash: Option<Arc<cairn_flash::Flash>>,
}

/// Why [`Persistence::read_history`] could not answer.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The log no longer holds `from`: a checkpoint dropped the segments before `first`.
    #[error("the command log starts at record {first}")]
    Compacted { first: Lsn },
    #[error(transparent)]
    Failed(#[from] PersistError),
}

/// How a history read stops inside [`Log::read_from`].
enum ReadStop {
    /// Enough records (or past `upto`): not an error.
    Full,
    /// The first record read had this LSN, past the one asked for.
    Compacted(Lsn),
    Failed(PersistError),
}

impl From<WalError> for ReadStop {
    fn from(e: WalError) -> Self {
        ReadStop::Failed(e.into())
    }
}

/// Figures shown by `stats persistence`.
#[derive(Default, Clone, Debug)]
pub struct PersistStats {
    pub checkpoints_done: u64,
    pub checkpoints_failed: u64,
    /// Failures since the last checkpoint that succeeded (ARCUS `last_chkpt_failure_count`).
    pub checkpoints_failed_in_a_row: u64,
    pub last_checkpoint_start_unix: u64,
    pub last_checkpoint_duration_ms: u64,
    pub last_checkpoint_status: String,
    pub last_checkpoint_items: u64,
    pub snapshot_bytes: u64,
    pub snapshot_lsn: Lsn,
    pub recovery_ms: u64,
    pub recovered_items: u64,
    pub recovered_log_records: u64,
    /// Items left out at recovery because they no longer fit the store's limits.
    pub recovery_dropped_items: u64,
    /// Flash entries recovery put back in the index (their items stayed on flash).
    pub recovered_flash_items: u64,
    /// Replayed log records recovery put straight on flash (newer records of their shard
    /// would have evicted them from RAM; see `replay`).
    pub recovery_replayed_to_flash: u64,
    /// Flash entries of the snapshot recovery could not trust (their segment was rewritten,
    /// the tier is gone or reshaped): lost, as if evicted.
    pub recovery_flash_dropped: u64,
    /// Where recovery_ms went: opening the log (finding its end), reading the flash
    /// segments' headers the checkpoints name, loading the snapshot, replaying the log.
    pub recovery_log_open_ms: u64,
    pub recovery_flash_pins_ms: u64,
    pub recovery_snapshot_ms: u64,
    pub recovery_replay_ms: u64,
}

/// The running persistence layer.
pub struct Persistence {
    config: PersistConfig,
    log: Arc<Log>,
    sink: Arc<LogSink>,
    store: Arc<Store>,
    /// Sync or Async (switchable at run time).
    mode: AtomicU8,
    stats: Mutex<PersistStats>,
    /// Held while a checkpoint runs.
    checkpoint_running: Mutex<()>,
    /// Readers of old log records ([`Persistence::read_history`]) hold it shared; dropping
    /// log segments holds it exclusively, since a dropped segment's file may be reused.
    history: parking_lot::RwLock<()>,
    /// Log bytes after the snapshot that recovery found (replayed at open): they count
    /// toward the next checkpoint like bytes written since.
    log_bytes_recovered: u64,
    /// [`Persistence::log_bytes_written`] when the last checkpoint started (for the ARCUS
    /// trigger).
    log_bytes_at_checkpoint: AtomicU64,
    /// ARCUS trigger settings, changeable at run time.
    pct_snapshot: AtomicU64,
    min_logsize_mb: AtomicU64,
    /// The cluster layer's condition on acknowledgements and refusal of client writes (see
    /// [`ReplicationGate`]); unset without replication.
    replication: std::sync::OnceLock<Arc<dyn ReplicationGate>>,
    /// This process's hold on the data folder when the log lives elsewhere (the log holds
    /// its own folder): a second process on the same folder is refused at start.
    _data_lock: Option<cairn_wal::FolderLock>,
}

/// Threads that load the snapshot and replay the log at recovery: one per core.
fn recovery_threads() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

fn now_unix() -> u32 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as u32)
}

/// A Unix time as ARCUS prints it in `stats persistence`: `YYYYMMDDhhmmss` (UTC here;
/// ARCUS uses local time), or `0` for "never".
fn arcus_time(unix: u64) -> String {
    if unix == 0 {
        return "0".into();
    }
    let (days, secs) = (unix / 86_400, unix % 86_400);
    // Civil date from days since 1970-01-01 (the proleptic Gregorian calendar).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}{:02}{:02}{:02}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

const MANIFEST: &str = "MANIFEST";

/// How far recovery moves the CAS counter past the largest unique found on disk (2^32: far
/// more than the records one log can hold in memory before they are written, so no unique
/// a client saw before a crash is handed out again).
const CAS_GAP_AFTER_RECOVERY: u64 = 1 << 32;

/// What the manifest says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Manifest {
    /// The current snapshot (0 = none).
    snapshot_lsn: Lsn,
    /// A CAS unique at least as large as any handed out before the manifest was written
    /// (0 in a manifest of an earlier build, which had no such line).
    cas_floor: u64,
}

/// Writes the manifest: temp file, fdatasync, rename, fsync dir.
fn write_manifest(fs: &dyn FileSystem, dir: &Path, m: Manifest) -> Result<(), PersistError> {
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
fn read_manifest(fs: &dyn FileSystem, dir: &Path) -> Result<Option<Manifest>, PersistError> {
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

/// Removes what an unfinished checkpoint left in `dir` (its `.tmp` snapshot or manifest), so
/// that failed checkpoints do not fill the disk. Never called while a checkpoint runs.
fn remove_temp_files(fs: &dyn FileSystem, dir: &Path) {
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

/// The pins file of the snapshot at `lsn`: the flash segments its flash records point into.
fn pins_file_name(lsn: Lsn) -> String {
    format!("flash-{lsn:020}.pins")
}

/// Writes the pins file of snapshot `lsn` (temp file, fdatasync, rename; the directory is
/// fsynced with the snapshot's rename that follows).
///
/// ```text
/// "CAIRNFPN" | version u32 = 1 | count u32 | (segment u32 | seq u64) * count |
/// crc u32 (CRC32C of everything before it)
/// ```
fn write_pins(
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
fn read_pins(fs: &dyn FileSystem, dir: &Path, lsn: Lsn) -> Vec<cairn_flash::Pin> {
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

/// Snapshot LSNs present in `dir`, newest first.
fn list_snapshots(fs: &dyn FileSystem, dir: &Path) -> Result<Vec<Lsn>, PersistError> {
    let mut v: Vec<Lsn> = fs
        .list(dir)
        .map_err(|e| PersistError::io(dir, e))?
        .iter()
        .filter_map(|p| snapshot::parse_file_name(p.file_name()?.to_str()?))
        .collect();
    v.sort_unstable_by(|a, b| b.cmp(a));
    Ok(v)
}

impl Persistence {
    /// The recovered store, with logging switched on.
    pub fn store(&self) -> Arc<Store> {
        Arc::clone(&self.store)
    }

    pub fn mode(&self) -> Mode {
        match self.mode.load(Ordering::Relaxed) {
            x if x == Mode::Sync as u8 => Mode::Sync,
            _ => Mode::Async,
        }
    }

    /// Switches between sync and async acknowledgement (off needs a restart).
    pub fn set_mode(&self, mode: Mode) -> Result<(), &'static str> {
        if mode == Mode::Off {
            return Err("persistence cannot be switched off while running");
        }
        self.mode.store(mode as u8, Ordering::Relaxed);
        self.log.set_durability(mode.log_durability());
        tracing::info!("persistence mode is now {}", mode.name());
        Ok(())
    }

    /// Blocks until everything logged so far is durable (not from an async task).
    pub fn sync(&self) -> Result<(), PersistError> {
        Ok(self.log.sync()?)
    }

    /// Registers an observer of every logged mutation (see [`LogObserver`]).
    pub fn add_observer(&self, o: Arc<dyn LogObserver>) {
        self.sink.add_observer(o);
    }

    /// Calls `f` with the durable records from `from` to `upto` in order, at most `max_records`
    /// of them or about `max_bytes` of payload, and returns the LSN to continue from. The
    /// watch reads revisions older than its in-memory history this way. Compacted when a
    /// checkpoint already dropped `from`.
    ///
    /// A read scans its first segment from the start (segments have no index), so a reader
    /// far behind pays a scan of up to one segment per call.
    pub fn read_history(
        &self,
        from: Lsn,
        upto: Lsn,
        max_records: usize,
        max_bytes: usize,
        mut f: impl FnMut(Lsn, record::Record<'_>),
    ) -> Result<Lsn, HistoryError> {
        let _no_truncation = self.history.read();
        let mut next = from;
        let mut bytes = 0usize;
        let mut count = 0usize;
        let r = self.log.read_from::<ReadStop>(from, |lsn, payload| {
            if lsn > upto || count >= max_records || bytes >= max_bytes {
                return Err(ReadStop::Full);
            }
            if lsn != next {
                // The first record read is past `from`: the segments holding it are gone.
                return Err(ReadStop::Compacted(lsn));
            }
            let rec = record::decode(payload)
                .ok_or_else(|| ReadStop::Failed(Unrecoverable::BadRecord { lsn }.into()))?;
            f(lsn, rec);
            next = lsn + 1;
            count += 1;
            bytes += payload.len();
            Ok(())
        });
        match r {
            Ok(()) | Err(ReadStop::Full) => Ok(next),
            Err(ReadStop::Compacted(first)) => Err(HistoryError::Compacted { first }),
            Err(ReadStop::Failed(e)) => Err(HistoryError::Failed(e)),
        }
    }

    /// The highest LSN assigned so far: a revision beyond it has not happened yet.
    pub fn appended_lsn(&self) -> Lsn {
        self.log.appended_lsn()
    }

    /// The ARCUS checkpoint trigger's `chkpt_interval_pct_snapshot` in force.
    pub fn chkpt_interval_pct_snapshot(&self) -> u64 {
        self.pct_snapshot.load(Ordering::Relaxed)
    }

    /// The ARCUS checkpoint trigger's `chkpt_interval_min_logsize` (MiB) in force.
    pub fn chkpt_interval_min_logsize_mb(&self) -> u64 {
        self.min_logsize_mb.load(Ordering::Relaxed)
    }

    pub fn set_chkpt_interval_pct_snapshot(&self, v: u64) {
        self.pct_snapshot.store(v, Ordering::Relaxed);
    }

    pub fn set_chkpt_interval_min_logsize_mb(&self, v: u64) {
        self.min_logsize_mb.store(v, Ordering::Relaxed);
    }

    /// Log bytes since the snapshot recovery started from, given the log's own count of
    /// bytes written: those recovery replayed plus those written since.
    fn log_bytes_written(&self, written_since_open: u64) -> u64 {
        self.log_bytes_recovered + written_since_open
    }

    /// Log bytes written since the last checkpoint started. Saturating: a checkpoint that
    /// started after `written_since_open` was read may have moved the mark past it.
    fn log_bytes_since_checkpoint(&self, written_since_open: u64) -> u64 {
        self.log_bytes_written(written_since_open)
            .saturating_sub(self.log_bytes_at_checkpoint.load(Ordering::Relaxed))
    }

    /// The ARCUS rule: log >= min size AND log >= snapshot size x pct / 100.
    pub fn checkpoint_due(&self) -> bool {
        let log_bytes = self.log_bytes_since_checkpoint(self.log.stats().bytes_written);
        let snap = self.stats.lock().snapshot_bytes;
        // Flash eviction waits for a checkpoint that no longer names the old segments.
        let flash_stuck = self
            .config
            .flash
            .as_ref()
            .is_some_and(|f| f.needs_checkpoint());
        flash_stuck
            || log_bytes >= self.chkpt_interval_min_logsize_mb() << 20
                && log_bytes as u128 * 100
                    >= snap as u128 * self.chkpt_interval_pct_snapshot() as u128
    }

    /// Takes a checkpoint now (blocking; runs while the server keeps serving).
    pub fn checkpoint(&self) -> Result<(u64, u64), PersistError> {
        let Some(_running) = self.checkpoint_running.try_lock() else {
            return Err(PersistError::Busy);
        };
        let started = Instant::now();
        let start_unix = now_unix() as u64;
        let result = self.checkpoint_inner();
        if let Some(f) = &self.config.flash {
            if result.is_ok() {
                f.checkpoint_commit();
            } else {
                f.checkpoint_abort();
            }
        }
        let mut st = self.stats.lock();
        st.last_checkpoint_start_unix = start_unix;
        st.last_checkpoint_duration_ms = started.elapsed().as_millis() as u64;
        match &result {
            Ok((items, bytes)) => {
                st.checkpoints_done += 1;
                st.checkpoints_failed_in_a_row = 0;
                st.last_checkpoint_status = "success".into();
                st.last_checkpoint_items = *items;
                st.snapshot_bytes = *bytes;
                tracing::info!(
                    "checkpoint done: {items} items, {bytes} bytes in {} ms",
                    st.last_checkpoint_duration_ms
                );
            }
            Err(e) => {
                st.checkpoints_failed += 1;
                st.checkpoints_failed_in_a_row += 1;
                st.last_checkpoint_status = format!("failed: {e}");
                tracing::error!("checkpoint failed: {e}");
                remove_temp_files(self.config.fs.as_ref(), &self.config.data_path);
            }
        }
        result
    }

    fn checkpoint_inner(&self) -> Result<(u64, u64), PersistError> {
        let fs = self.config.fs.as_ref();
        let dir = &self.config.data_path;
        let bytes_at_start = self.log_bytes_written(self.log.stats().bytes_written);
        // L0: every mutation with a record <= L0 is in memory already (see the module doc).
        // A pending `flush_all <delay>` is restated by a record after L0, since recovery from
        // this snapshot replays only records after L0 and the snapshot holds no schedule.
        let (l0, restated) = self.store.with_scheduled_flush(|scheduled| {
            let l0 = self.log.appended_lsn();
            let restated = match scheduled {
                Some(at) => {
                    let mut buf = Vec::new();
                    record::encode(&mut buf, &Mutation::FlushScheduled { at });
                    self.sink.append_bookkeeping(&buf)
                }
                None => Ok(l0),
            };
            (l0, restated)
        });
        let restated = restated?;
        let tmp = dir.join(format!("{}.tmp", snapshot::file_name(l0)));
        let _ = fs.remove(&tmp);
        let mut writer =
            snapshot::Writer::create(fs, &tmp, l0, self.config.checkpoint_rate_mb_s << 20)?;
        let now = now_unix();
        let mut buf = Vec::new();
        let flash = self.config.flash.as_deref();
        if let Some(f) = flash {
            f.checkpoint_begin();
        }
        let shard_count = self.store.shard_count() as u32;
        for shard in 0..self.store.shard_count() {
            buf.clear();
            let items = std::cell::Cell::new(0u64);
            let buf_cell = std::cell::RefCell::new(&mut buf);
            // RAM items and flash entries under one hold of the shard lock, so an item moving
            // to flash meanwhile is copied exactly once.
            self.store.visit_shard_with_flash(
                shard,
                now,
                |key, value, meta| {
                    snapshot::encode_item(
                        &mut buf_cell.borrow_mut(),
                        &snapshot::SnapItem {
                            key,
                            value,
                            flags: meta.flags,
                            exptime: meta.exptime,
                            cas: meta.cas,
                            stale: meta.stale,
                            mod_revision: meta.mod_revision,
                        },
                    );
                    items.set(items.get() + 1);
                },
                |loc| {
                    let Some(f) = flash else { return };
                    // None: every item of its segment is stored by a record after L0, which
                    // recovery from this snapshot replays (see `Flash::checkpoint_entry`).
                    let Some(seq) = f.checkpoint_entry(loc, l0) else {
                        return;
                    };
                    snapshot::encode_flash(
                        &mut buf_cell.borrow_mut(),
                        &snapshot::SnapFlash {
                            shard: shard as u32,
                            shard_count,
                            loc: loc.0,
                            seq,
                        },
                    );
                    items.set(items.get() + 1);
                },
            );
            writer.add_encoded(&buf, items.get())?;
        }
        // Read after the last item was copied: covers every unique handed out so far,
        // including those of items deleted before the copy reached them.
        let (items, bytes) = writer.finish(self.store.cas_floor())?;
        // The flash segments the snapshot names are on the device and synced, and listed
        // beside it, before the snapshot can become current.
        if let Some(f) = flash {
            let pins = f
                .checkpoint_sync()
                .map_err(|e| PersistError::io(Path::new("flash"), e))?;
            write_pins(fs, dir, l0, &pins)?;
        }
        // The copy is fuzzy: it holds every mutation up to L0 and some after it, up to L1,
        // the last LSN appended once the copy ended (a mutation's record is appended under
        // its shard lock, the lock the copy of that shard holds). Records up to L1 must be
        // durable before the snapshot becomes current: otherwise a power cut could leave a
        // log that ends between L0 and L1, and recovery would serve the snapshot's later
        // writes on top of an earlier log end (found by the power-cut loop in async mode),
        // or a log that restarts numbering below L0, behind the snapshot. So must the
        // restated schedule.
        let l1 = self.log.appended_lsn();
        self.log.wait_durable(l1.max(restated))?;
        let path = dir.join(snapshot::file_name(l0));
        fs.rename(&tmp, &path)
            .map_err(|e| PersistError::io(&path, e))?;
        fs.sync_dir(dir).map_err(|e| PersistError::io(dir, e))?;
        // The snapshot is durable: only now does the manifest point at it.
        write_manifest(
            fs,
            dir,
            Manifest {
                snapshot_lsn: l0,
                // At least the floor the last start wrote: the counter only grows.
                cas_floor: self.store.cas_floor(),
            },
        )?;
        self.log_bytes_at_checkpoint
            .store(bytes_at_start, Ordering::Relaxed);
        let previous = self.stats.lock().snapshot_lsn;
        self.stats.lock().snapshot_lsn = l0;
        // Keep the previous snapshot (a fallback) and the log back to it; drop what is older.
        {
            let _no_history_reads = self.history.write();
            self.log.truncate_before(previous + 1)?;
        }
        for old in list_snapshots(fs, dir)? {
            if old < previous {
                let p = dir.join(snapshot::file_name(old));
                fs.remove(&p).map_err(|e| PersistError::io(&p, e))?;
                let _ = fs.remove(&dir.join(pins_file_name(old)));
            }
        }
        fs.sync_dir(dir).map_err(|e| PersistError::io(dir, e))?;
        Ok((items, bytes))
    }

    /// `stats persistence` lines: (name, value). ARCUS's fields come first, with its names and
    /// formats; cairn's own follow.
    /// The command log's own figures, with its latency and batch-size histograms.
    pub fn log_stats(&self) -> cairn_wal::LogStats {
        self.log.stats()
    }

    pub fn stats(&self) -> Vec<(&'static str, String)> {
        let l = self.log.stats();
        let s = self.stats.lock().clone();
        let mode = self.mode();
        let since_checkpoint = self.log_bytes_since_checkpoint(l.bytes_written);
        let yes_no = |b: bool| if b { "true" } else { "false" }.to_string();
        vec![
            ("use_persistence", "on".into()),
            ("data_path", self.config.data_path.display().to_string()),
            ("logs_path", self.config.logs_path.display().to_string()),
            ("async_logging", yes_no(mode == Mode::Async)),
            (
                "chkpt_interval_pct_snapshot",
                self.chkpt_interval_pct_snapshot().to_string(),
            ),
            (
                "chkpt_interval_min_logsize",
                self.chkpt_interval_min_logsize_mb().to_string(),
            ),
            (
                "recovery_elapsed_time_sec",
                (s.recovery_ms / 1000).to_string(),
            ),
            (
                "last_chkpt_in_progress",
                yes_no(self.checkpoint_running.is_locked()),
            ),
            (
                "last_chkpt_failure_count",
                s.checkpoints_failed_in_a_row.to_string(),
            ),
            (
                "last_chkpt_start_time",
                arcus_time(s.last_checkpoint_start_unix),
            ),
            (
                "last_chkpt_elapsed_time_sec",
                (s.last_checkpoint_duration_ms / 1000).to_string(),
            ),
            (
                "last_chkpt_snapshot_filesize_bytes",
                s.snapshot_bytes.to_string(),
            ),
            (
                "current_command_log_filesize_bytes",
                since_checkpoint.to_string(),
            ),
            ("mode", mode.name().into()),
            (
                "loss_window_ms",
                if mode == Mode::Async {
                    self.config.async_flush_ms
                } else {
                    0
                }
                .to_string(),
            ),
            (
                "checkpoint_rate_mb_s",
                self.config.checkpoint_rate_mb_s.to_string(),
            ),
            ("log_segments", l.segments.to_string()),
            ("log_file_bytes", l.log_bytes.to_string()),
            ("log_bytes_since_checkpoint", since_checkpoint.to_string()),
            ("log_appended_lsn", l.appended_lsn.to_string()),
            ("log_written_lsn", l.written_lsn.to_string()),
            ("log_durable_lsn", l.durable_lsn.to_string()),
            ("log_pending_bytes", l.pending_bytes.to_string()),
            ("log_backpressure_waits", l.backpressure_waits.to_string()),
            ("log_batch_records_p50", l.batch_records_p50.to_string()),
            ("log_batch_records_p99", l.batch_records_p99.to_string()),
            // Each call timed alone: a plain write of a batch, an fdatasync, and (O_DIRECT in
            // sync mode) a write that is made durable in the same call (pwritev2 RWF_DSYNC).
            ("log_write_count", l.write.count.to_string()),
            ("log_write_latency_us_p50", l.write.p50_us.to_string()),
            ("log_write_latency_us_p99", l.write.p99_us.to_string()),
            ("fdatasync_count", l.fdatasync.count.to_string()),
            ("fdatasync_latency_us_p50", l.fdatasync.p50_us.to_string()),
            ("fdatasync_latency_us_p99", l.fdatasync.p99_us.to_string()),
            ("log_dsync_write_count", l.dsync_write.count.to_string()),
            (
                "log_dsync_write_latency_us_p50",
                l.dsync_write.p50_us.to_string(),
            ),
            (
                "log_dsync_write_latency_us_p99",
                l.dsync_write.p99_us.to_string(),
            ),
            ("log_staged_writes", l.staged_writes.to_string()),
            ("snapshot_lsn", s.snapshot_lsn.to_string()),
            ("snapshot_bytes", s.snapshot_bytes.to_string()),
            ("checkpoints_done", s.checkpoints_done.to_string()),
            ("checkpoints_failed", s.checkpoints_failed.to_string()),
            (
                "last_checkpoint_start",
                s.last_checkpoint_start_unix.to_string(),
            ),
            (
                "last_checkpoint_duration_ms",
                s.last_checkpoint_duration_ms.to_string(),
            ),
            (
                "last_checkpoint_status",
                if s.last_checkpoint_status.is_empty() {
                    "none".into()
                } else {
                    s.last_checkpoint_status.replace(' ', "_")
                },
            ),
            ("last_checkpoint_items", s.last_checkpoint_items.to_string()),
            ("recovery_ms", s.recovery_ms.to_string()),
            ("recovered_items", s.recovered_items.to_string()),
            ("recovered_log_records", s.recovered_log_records.to_string()),
            (
                "recovery_dropped_items",
                s.recovery_dropped_items.to_string(),
            ),
            ("recovered_flash_items", s.recovered_flash_items.to_string()),
            (
                "recovery_replayed_to_flash",
                s.recovery_replayed_to_flash.to_string(),
            ),
            (
                "recovery_flash_dropped",
                s.recovery_flash_dropped.to_string(),
            ),
            ("recovery_log_open_ms", s.recovery_log_open_ms.to_string()),
            (
                "recovery_flash_pins_ms",
                s.recovery_flash_pins_ms.to_string(),
            ),
            ("recovery_snapshot_ms", s.recovery_snapshot_ms.to_string()),
            ("recovery_replay_ms", s.recovery_replay_ms.to_string()),
            (
                "writes_refused",
                if self.write_refusal().is_some() {
                    "yes"
                } else {
                    "no"
                }
                .into(),
            ),
        ]
    }

    /// Makes everything logged durable and stops the log (graceful shutdown).
    pub fn close(&self) -> Result<(), PersistError> {
        self.log.close()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
