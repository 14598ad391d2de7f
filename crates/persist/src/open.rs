//! Opening the persistence layer: recovery as a short list of named steps.
//!
//! ```text
//!   open_log ─> build_store ─> remove_temp_files ─> read_manifest
//!     ─> load_snapshot (the newest loadable one the manifest allows; flash pins first)
//!     ─> replay_log (records after it; the log must reach back to it and up to it)
//!     ─> raise_cas_floor (past every unique on disk, + 2^32; into MANIFEST before serving)
//!     ─> start_logging (mutations are logged from here; a flush_all due while down runs)
//! ```
//!
//! Each step that can refuse the start says why with an [`Unrecoverable`] variant.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_store::{MutationSink, Store, StoreConfig};
use cairn_wal::{Log, LogOptions, Lsn};
use parking_lot::Mutex;

use crate::config::PersistConfig;
use crate::data_folder::{list_snapshots, remove_temp_files};
use crate::error::{PersistError, Unrecoverable};
use crate::manifest::{read_manifest, write_manifest, Manifest};
use crate::mode::Mode;
use crate::persistence::Persistence;
use crate::pins::read_pins;
use crate::sink::LogSink;
use crate::stats::{CheckpointStats, RecoveryStats};
use crate::{record, replay, snapshot};
use cairn_store::now_unix;

/// How far recovery moves the CAS counter past the largest unique found on disk (2^32: far
/// more than the records one log can hold in memory before they are written, so no unique
/// a client saw before a crash is handed out again).
pub(crate) const CAS_GAP_AFTER_RECOVERY: u64 = 1 << 32;

/// Threads that load the snapshot and replay the log at recovery: one per core.
fn recovery_threads() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

/// What loading a snapshot left for the log replay to build on.
#[derive(Clone, Copy)]
struct Base {
    /// The snapshot the manifest names (0: none).
    named: Lsn,
    /// The snapshot loaded (0: none, replay from the log's start).
    loaded: Lsn,
    /// Snapshots exist but none loaded: only a log that reaches back to its first record can
    /// stand in for them.
    none_loadable: bool,
}

impl Persistence {
    /// Recovers the store from disk (snapshot + log) and starts logging. `mode` must not be
    /// `Off` (then the caller builds a plain store).
    pub fn open(
        config: PersistConfig,
        store_config: StoreConfig,
    ) -> Result<Persistence, PersistError> {
        assert_ne!(config.mode, Mode::Off, "no persistence layer in off mode");
        let started = Instant::now();
        let fs = config.fs.as_ref();
        // One process per folder: the data folder here, the log's folder by the log itself.
        let data_lock = (config.data_path != config.logs_path)
            .then(|| cairn_wal::lock_folder(fs, &config.data_path))
            .transpose()?;
        let log = open_log(&config, &store_config)?;
        let mut stats = RecoveryStats {
            recovery_log_open_ms: started.elapsed().as_millis() as u64,
            ..RecoveryStats::default()
        };
        let (store, sink) = build_store(&config, store_config, &log);
        remove_temp_files(fs, &config.data_path);
        let manifest = read_manifest(fs, &config.data_path)?;
        let base = load_snapshot(&config, &store, manifest, &mut stats)?;
        let replay_started = Instant::now();
        let log_bytes_recovered = replay_log(&config, &log, &store, base, &mut stats)?;
        stats.recovery_replay_ms = replay_started.elapsed().as_millis() as u64;
        stats.recovery_ms = started.elapsed().as_millis() as u64;
        tracing::info!(
            "recovery done in {} ms (log open {} ms, flash pins {} ms, snapshot {} ms, replay \
             {} ms): snapshot at {} ({} items), {} log records ({} straight to flash), {} live \
             items",
            stats.recovery_ms,
            stats.recovery_log_open_ms,
            stats.recovery_flash_pins_ms,
            stats.recovery_snapshot_ms,
            stats.recovery_replay_ms,
            base.loaded,
            stats.recovered_items,
            stats.recovered_log_records,
            stats.recovery_replayed_to_flash,
            store.stats().curr_items
        );
        stats.recovered_items = store.stats().curr_items;
        raise_cas_floor(&config, &store, manifest, base)?;
        start_logging(&config, &store, &sink);
        let p = Persistence {
            mode: AtomicU8::new(config.mode as u8),
            pct_snapshot: AtomicU64::new(config.chkpt_interval_pct_snapshot),
            min_logsize_mb: AtomicU64::new(config.chkpt_interval_min_logsize_mb),
            config,
            log,
            sink,
            store,
            checkpoints: Mutex::new(CheckpointStats {
                snapshot_lsn: stats.snapshot_lsn,
                snapshot_bytes: stats.snapshot_bytes,
                ..CheckpointStats::default()
            }),
            recovery: stats,
            checkpoint_running: Mutex::new(()),
            history: parking_lot::RwLock::new(()),
            log_bytes_recovered,
            log_bytes_at_checkpoint: AtomicU64::new(0),
            replication: std::sync::OnceLock::new(),
            _data_lock: data_lock,
        };
        p.watch_log_failure();
        Ok(p)
    }
}

/// Opens the command log in the mode served, finding its end (cairn-wal's recovery).
fn open_log(config: &PersistConfig, store_config: &StoreConfig) -> Result<Arc<Log>, PersistError> {
    let log = Log::open(
        Arc::clone(&config.fs),
        &config.logs_path,
        LogOptions {
            durability: config.mode.log_durability(),
            flush_interval: Duration::from_millis(config.async_flush_ms.max(1)),
            segment_bytes: config.segment_bytes,
            max_record_bytes: store_config.item_size_max_bytes + 1024,
            prealloc: cairn_wal::Prealloc::ZeroFill,
            direct_io: config.direct_io,
            syncer_batch_sched: config.syncer_batch_sched,
            max_pending_bytes: config.max_pending_bytes,
            // A checkpoint drops about one checkpoint interval of log, at least
            // `chkpt_interval_min_logsize` (as configured at start): keep that many segment
            // files for reuse, so the next interval writes no zero-filled file.
            reuse_segments: usize::try_from(
                (config.chkpt_interval_min_logsize_mb << 20).div_ceil(config.segment_bytes.max(1)),
            )
            .unwrap_or(usize::MAX)
            .max(2),
            ..LogOptions::default()
        },
    )?;
    Ok(Arc::new(log))
}

/// The store, with the log sink (not recording yet: replayed changes are in the log already)
/// and the flash tier, whose writer runs from the start: loading and replay may evict to
/// flash, and wait for it rather than drop what they evict.
fn build_store(
    config: &PersistConfig,
    store_config: StoreConfig,
    log: &Arc<Log>,
) -> (Arc<Store>, Arc<LogSink>) {
    let sink = Arc::new(LogSink::new(Arc::clone(log)));
    let store = Arc::new(Store::with_flash(
        store_config,
        Some(sink.clone() as Arc<dyn MutationSink>),
        config
            .flash
            .clone()
            .map(|f| f as Arc<dyn cairn_store::FlashTier>),
    ));
    if let Some(f) = &config.flash {
        f.start(&store);
        f.set_recovering(true);
    }
    (store, sink)
}

/// Loads the newest loadable snapshot the manifest allows (the one it names, or an older one
/// if that is damaged), after pinning the flash segments any of them names.
fn load_snapshot(
    config: &PersistConfig,
    store: &Store,
    manifest: Option<Manifest>,
    stats: &mut RecoveryStats,
) -> Result<Base, PersistError> {
    let fs = config.fs.as_ref();
    let named = manifest.map_or(0, |m| m.snapshot_lsn);
    let mut base = Base {
        named,
        loaded: 0,
        none_loadable: false,
    };
    if manifest.is_none() {
        return Ok(base);
    }
    let candidates: Vec<Lsn> = list_snapshots(fs, &config.data_path)?
        .into_iter()
        .filter(|&l| l <= named)
        .collect();
    if named > 0 && candidates.is_empty() {
        return Err(Unrecoverable::SnapshotMissing {
            snapshot: snapshot::file_name(named),
        }
        .into());
    }
    if let Some(f) = &config.flash {
        // Before anything is admitted: the segments any loadable snapshot names stay.
        let t = Instant::now();
        let mut pins = Vec::new();
        for &lsn in &candidates {
            pins.extend(read_pins(fs, &config.data_path, lsn));
        }
        let kept = f.recover_pins(&pins);
        stats.recovery_flash_pins_ms = t.elapsed().as_millis() as u64;
        tracing::info!("flash: {kept} segments named by checkpoints are kept");
    }
    let t = Instant::now();
    for lsn in candidates {
        let path = config.data_path.join(snapshot::file_name(lsn));
        tracing::info!("loading snapshot {}", path.display());
        match load_one_snapshot(config, store, &path, lsn, stats) {
            Ok(loaded) => {
                base.loaded = loaded;
                stats.recovery_snapshot_ms = t.elapsed().as_millis() as u64;
                return Ok(base);
            }
            Err(e) => {
                tracing::error!(
                    "snapshot {} is unusable ({e}); trying the previous one",
                    path.display()
                );
                store.flush_all();
            }
        }
    }
    if named > 0 {
        tracing::warn!(
            "no snapshot could be loaded (see the errors above); trying the whole log instead"
        );
        base.none_loadable = true;
    }
    Ok(base)
}

/// Loads one snapshot file (of LSN `lsn`, by its name) into the store; returns its LSN.
fn load_one_snapshot(
    config: &PersistConfig,
    store: &Store,
    path: &std::path::Path,
    lsn: Lsn,
    stats: &mut RecoveryStats,
) -> Result<Lsn, PersistError> {
    let fs = config.fs.as_ref();
    let flash = config.flash.as_ref();
    let now = now_unix();
    // The flash items a record after the snapshot made: replay makes them again, so the
    // snapshot's entries pointing at them are left out (see `Flash::items_past`).
    let remade = flash.map_or_else(Remade::default, |f| Remade::new(store, f.items_past(lsn)));
    let flash_left = AtomicU64::new(0);
    let dropped = AtomicU64::new(0);
    let flash_restored = AtomicU64::new(0);
    let flash_dropped = AtomicU64::new(0);
    let snap = snapshot::load(fs, path, recovery_threads(), |records| {
        // Flash entries of the block: checked and restored in batches, a shard (and the
        // tier's lock) taken once per batch instead of once per entry.
        let mut entries = Vec::new();
        for rec in records {
            let it = match rec {
                snapshot::SnapRecord::Item(it) => it,
                snapshot::SnapRecord::Flash(e) => {
                    if e.shard_count as usize == store.shard_count() && flash.is_some() {
                        entries.push((e.shard, cairn_store::FlashLoc(e.loc), e.seq));
                    } else {
                        flash_dropped.fetch_add(1, Ordering::Relaxed);
                    }
                    continue;
                }
            };
            // An item that expired while cairn was down is not loaded at all.
            if it.exptime != 0 && it.exptime <= now {
                store.raise_cas_floor(it.cas);
            } else if !replay::apply(
                store,
                now,
                it.mod_revision,
                record::Record::Stored {
                    key: it.key,
                    value: it.value,
                    flags: it.flags,
                    exptime: it.exptime,
                    cas: it.cas,
                    stale: it.stale,
                },
            ) {
                dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
        if let (Some(f), false) = (flash, entries.is_empty()) {
            let (restored, lost, left) = restore_flash(store, f, &entries, &remade);
            flash_restored.fetch_add(restored, Ordering::Relaxed);
            flash_dropped.fetch_add(lost, Ordering::Relaxed);
            flash_left.fetch_add(left, Ordering::Relaxed);
        }
    })?;
    store.raise_cas_floor(snap.cas_floor);
    stats.recovered_items = snap.items;
    stats.recovery_dropped_items += dropped.into_inner();
    stats.recovered_flash_items = flash_restored.into_inner();
    stats.recovery_flash_dropped = flash_dropped.into_inner();
    if !remade.places.is_empty() {
        tracing::info!(
            "recovery: {} flash entries of the snapshot left to the replay that remakes them \
             ({} items past its LSN found on flash)",
            flash_left.into_inner(),
            remade.places.len()
        );
    }
    if stats.recovery_flash_dropped > 0 {
        tracing::warn!(
            "recovery: {} flash items of the snapshot could not be trusted (segment rewritten, \
             no flash tier, or another -m) and are lost",
            stats.recovery_flash_dropped
        );
    }
    stats.snapshot_bytes = fs.open(path).and_then(|f| f.size()).unwrap_or(0);
    Ok(snap.lsn)
}

/// The flash items past a snapshot that replay makes again ([`cairn_flash::Flash::items_past`]):
/// the seqs of their few segments, checked first, and their places.
#[derive(Default)]
struct Remade {
    seqs: Vec<u64>,
    places: HashSet<u64>,
}

impl Remade {
    fn new(store: &Store, items: Vec<cairn_flash::PastItem>) -> Remade {
        let mut seqs: Vec<u64> = items.iter().map(|p| p.seq).collect();
        seqs.sort_unstable();
        seqs.dedup();
        let places = items
            .iter()
            .map(|p| cairn_store::FlashLoc::new(store.key_hash(&p.key), p.block, p.nblocks).place())
            .collect();
        Remade { seqs, places }
    }

    /// Whether the entry `loc`, recorded in a segment of seq `seq`, points at such an item
    /// (a search of a few seqs for most of 9M entries, before any hashing).
    fn has(&self, seq: u64, loc: cairn_store::FlashLoc) -> bool {
        self.seqs.binary_search(&seq).is_ok() && self.places.contains(&loc.place())
    }
}

/// Puts back the flash entries (shard, entry, seq) of one snapshot block that the tier still
/// trusts, one shard lock per shard's run, except those `remade` has (replay makes them
/// again); returns (restored, not trusted, left to replay).
fn restore_flash(
    store: &Store,
    flash: &cairn_flash::Flash,
    entries: &[(u32, cairn_store::FlashLoc, u64)],
    remade: &Remade,
) -> (u64, u64, u64) {
    let places: Vec<_> = entries.iter().map(|&(_, loc, seq)| (loc, seq)).collect();
    let trusted = flash.trusts(&places);
    let lost = trusted.iter().filter(|t| !**t).count() as u64;
    let mut left = 0;
    let mut kept: Vec<(u32, cairn_store::FlashLoc)> = entries
        .iter()
        .zip(trusted)
        .filter(|(_, t)| *t)
        .filter(|(&(_, loc, seq), _)| {
            let remade = remade.has(seq, loc);
            left += u64::from(remade);
            !remade
        })
        .map(|(&(shard, loc, _), _)| (shard, loc))
        .collect();
    // The snapshot writes shard by shard: a block's entries are mostly of one shard already.
    kept.sort_by_key(|&(shard, _)| shard);
    let restored = kept.len() as u64;
    let mut locs = Vec::new();
    for run in kept.chunk_by(|a, b| a.0 == b.0) {
        locs.clear();
        locs.extend(run.iter().map(|&(_, loc)| loc));
        store.restore_flash(run[0].0 as usize, &locs);
    }
    (restored, lost, left)
}

/// Replays the log after the loaded snapshot and checks that it is the log of this data: it
/// reaches back to the snapshot and up to it. Returns the log bytes replayed (they count
/// toward the next checkpoint).
fn replay_log(
    config: &PersistConfig,
    log: &Log,
    store: &Store,
    base: Base,
    stats: &mut RecoveryStats,
) -> Result<u64, PersistError> {
    let snapshot = base.loaded;
    let replay::Replayed {
        first_seen,
        records,
        bytes,
        dropped,
        to_flash,
    } = replay::replay(
        log,
        store,
        snapshot + 1,
        if config.flash.is_some() {
            recovery_threads().max(replay::WORKERS_WITH_FLASH)
        } else {
            recovery_threads()
        },
        config.flash.is_some(),
    )?;
    stats.recovery_dropped_items += dropped;
    stats.recovery_replayed_to_flash = to_flash;
    if stats.recovery_dropped_items > 0 {
        tracing::warn!(
            "recovery: {} items did not fit this configuration (-m or -I smaller than when \
             they were written) and were left out",
            stats.recovery_dropped_items
        );
    }
    let last = log.appended_lsn();
    // The whole log stands in for the snapshots only if it is the log they were taken from:
    // it starts at record 1 and reaches the named snapshot's LSN (a checkpoint makes the log
    // durable up to its LSN before the manifest names it). An empty or re-created log does
    // not.
    if base.none_loadable && (first_seen != Some(1) || last < base.named) {
        return Err(Unrecoverable::NoSnapshotAndNoWholeLog {
            named: base.named,
            first: first_seen,
            last,
        }
        .into());
    }
    // A log that ends before the snapshot is not this data's log (a lost log folder, or
    // `logs_path` pointing elsewhere): starting would silently lose what came after.
    if last < snapshot {
        return Err(Unrecoverable::LogEndsBeforeSnapshot {
            dir: config.logs_path.clone(),
            last,
            snapshot,
        }
        .into());
    }
    match first_seen {
        Some(first) if first != snapshot + 1 => {
            return Err(Unrecoverable::LogStartsAfterSnapshot {
                first,
                needed: snapshot + 1,
            }
            .into());
        }
        None if last > snapshot => {
            return Err(Unrecoverable::LogUnreadableAfterSnapshot { last, snapshot }.into());
        }
        _ => {}
    }
    stats.recovered_log_records = records;
    stats.snapshot_lsn = snapshot;
    Ok(bytes)
}

/// CAS uniques handed out before the crash but not durable (async mode, or a `gets` of a sync
/// write that never became durable) are in no file: skip far past them. The new floor goes
/// into the manifest before anything is served, so that uniques handed out by this run and
/// never made durable are skipped by the next recovery too.
fn raise_cas_floor(
    config: &PersistConfig,
    store: &Store,
    manifest: Option<Manifest>,
    base: Base,
) -> Result<(), PersistError> {
    let manifest_floor = manifest.map_or(0, |m| m.cas_floor);
    store.raise_cas_floor(
        store
            .cas_floor()
            .max(manifest_floor)
            .saturating_add(CAS_GAP_AFTER_RECOVERY),
    );
    write_manifest(
        config.fs.as_ref(),
        &config.data_path,
        Manifest {
            snapshot_lsn: base.named,
            cas_floor: store.cas_floor(),
        },
    )
}

/// From here on every mutation is logged. A `flush_all <delay>` whose time passed while cairn
/// was down runs now, and is logged (a Flushed record), so that the next recovery does not
/// run it again over newer writes; one still in the future stays scheduled (the server arms
/// its timer).
fn start_logging(config: &PersistConfig, store: &Store, sink: &LogSink) {
    sink.recording.store(true, Ordering::SeqCst);
    if let Some(f) = &config.flash {
        f.set_recovering(false);
    }
    if let Some(at) = store.scheduled_flush() {
        if at <= now_unix() {
            tracing::info!("running the flush_all scheduled for {at}, due while stopped");
            store.run_scheduled_flush(at);
        }
    }
}
