//! Persistence tests on the fault-injecting file system: recovery equals the acknowledged
//! state after power losses, failed checkpoint steps and damaged files.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use cairn_store::StoreConfig;
use cairn_testkit::{power_cut, FaultyFs, Op};
use cairn_wal::{FileSystem, RealFs};

use super::*;
use crate::data_folder::list_snapshots;
use crate::open::CAS_GAP_AFTER_RECOVERY;
use crate::pins::{pins_file_name, read_pins, write_pins};
use cairn_store::now_unix;

fn config(fs: Arc<dyn FileSystem>, root: &Path) -> PersistConfig {
    PersistConfig {
        mode: Mode::Sync,
        data_path: root.join("data"),
        logs_path: root.join("log"),
        async_flush_ms: 100,
        chkpt_interval_pct_snapshot: 100,
        chkpt_interval_min_logsize_mb: 256,
        checkpoint_rate_mb_s: 0,
        segment_bytes: 8 << 10,
        direct_io: false,
        syncer_batch_sched: true,
        max_pending_bytes: DEFAULT_MAX_PENDING_BYTES,
        fs,
        flash: None,
    }
}

fn open(fs: &FaultyFs) -> Result<Persistence, PersistError> {
    Persistence::open(
        config(Arc::new(fs.clone()), Path::new("/t")),
        StoreConfig::default(),
    )
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn set(p: &Persistence, model: &mut Model, key: &str, value: &str) {
    p.store()
        .entry(key.as_bytes(), now_unix(), |e| {
            e.store(&[value.as_bytes()], 0, 0, None)
        })
        .unwrap();
    model.insert(key.into(), value.into());
}

fn delete(p: &Persistence, model: &mut Model, key: &str) {
    p.store().entry(key.as_bytes(), now_unix(), |e| e.delete());
    model.remove(key.as_bytes());
}

fn contents(p: &Persistence) -> Model {
    let store = p.store();
    let mut out = Model::new();
    for i in 0..store.shard_count() {
        store.visit_shard(i, now_unix(), |k, v, _| {
            out.insert(k.to_vec(), v.to_vec());
        });
    }
    out
}

fn workload(p: &Persistence, model: &mut Model, round: u32) {
    for i in 0..300 {
        set(p, model, &format!("k{}", i % 120), &format!("v{round}-{i}"));
        if i % 7 == 0 {
            delete(p, model, &format!("k{}", (i * 3) % 120));
        }
        if i % 50 == 0 {
            // Several batches, so the log spans several segments.
            p.sync().unwrap();
        }
    }
}

/// A log with one round of writes, synced.
fn one_synced_workload(fs: &FaultyFs) -> (Persistence, Model) {
    let mut model = Model::new();
    let p = open(fs).unwrap();
    workload(&p, &mut model, 1);
    p.sync().unwrap();
    (p, model)
}

#[test]
fn log_only_recovery_after_power_loss() {
    let fs = FaultyFs::new();
    let mut model = Model::new();
    let p = open(&fs).unwrap();
    workload(&p, &mut model, 1);
    p.sync().unwrap();
    power_cut(&fs, p);
    let p = open(&fs).unwrap();
    assert_eq!(contents(&p), model);
}

/// Three rounds of writes with a checkpoint after each of the first two: two snapshots, then
/// log records after the newest.
fn two_checkpoints_between_workloads(fs: &FaultyFs) -> (Persistence, Model) {
    let mut model = Model::new();
    let p = open(fs).unwrap();
    workload(&p, &mut model, 1);
    p.checkpoint().unwrap();
    workload(&p, &mut model, 2);
    p.checkpoint().unwrap();
    workload(&p, &mut model, 3);
    (p, model)
}

#[test]
fn checkpoint_then_log_recovers_exactly() {
    let fs = FaultyFs::new();
    let (p, mut model) = two_checkpoints_between_workloads(&fs);
    p.store().flush_all();
    model.clear();
    workload(&p, &mut model, 4);
    p.sync().unwrap();
    let cas_before = p.store().cas_floor();
    power_cut(&fs, p);
    let p = open(&fs).unwrap();
    assert_eq!(contents(&p), model);
    assert!(
        p.store().cas_floor() >= cas_before,
        "CAS uniques are never reused"
    );
    assert_ne!(p.stats().checkpoints.snapshot_lsn, 0);
}

#[test]
fn a_corrupt_snapshot_falls_back_to_the_previous_one() {
    let fs = FaultyFs::new();
    let (p, model) = two_checkpoints_between_workloads(&fs);
    p.sync().unwrap();
    let snaps = list_snapshots(&fs, Path::new("/t/data")).unwrap();
    assert_eq!(snaps.len(), 2, "the previous snapshot is kept");
    drop(p);
    fs.corrupt(
        &Path::new("/t/data").join(snapshot::file_name(snaps[0])),
        |b| b[40] ^= 0xff,
    );
    let p = open(&fs).unwrap();
    assert_eq!(
        p.stats().checkpoints.snapshot_lsn,
        snaps[1],
        "recovered from the previous one"
    );
    assert_eq!(contents(&p), model);
}

#[test]
fn a_damaged_log_refuses_to_start_naming_the_file() {
    let fs = FaultyFs::new();
    let mut model = Model::new();
    let p = open(&fs).unwrap();
    workload(&p, &mut model, 1);
    workload(&p, &mut model, 2);
    p.sync().unwrap();
    drop(p);
    let seg = fs.list(Path::new("/t/log")).unwrap()[0].clone();
    fs.corrupt(&seg, |b| b[100] ^= 0x01);
    let err = open(&fs).err().expect("refused").to_string();
    assert!(err.contains(".wal") && err.contains("offset"), "{err}");
}

#[test]
fn a_crash_at_every_step_of_the_checkpoint_switch_loses_nothing() {
    // Every operation of each kind a checkpoint makes, in order (snapshot file, manifest,
    // dropped segments kept for reuse); counts past the last one let the checkpoint finish.
    let kinds = [Op::Create, Op::Write, Op::Sync, Op::Rename, Op::SyncDir];
    let steps = kinds
        .into_iter()
        .flat_map(|op| (0..8).map(move |skip| (op, skip)));
    for (op, skip) in steps {
        let fs = FaultyFs::new();
        let mut model = Model::new();
        let p = open(&fs).unwrap();
        workload(&p, &mut model, 1);
        p.checkpoint().unwrap();
        workload(&p, &mut model, 2);
        p.sync().unwrap();
        fs.fail_after(op, skip, libc_eio());
        let _ = p.checkpoint();
        power_cut(&fs, p);
        let p = open(&fs).unwrap_or_else(|e| panic!("{op:?}+{skip}: {e}"));
        assert_eq!(contents(&p), model, "{op:?}+{skip}");
    }
}

fn libc_eio() -> i32 {
    5
}

#[test]
fn a_failed_fdatasync_refuses_writes() {
    let fs = FaultyFs::new();
    let mut model = Model::new();
    let p = open(&fs).unwrap();
    workload(&p, &mut model, 1);
    p.sync().unwrap();
    fs.fail_after(Op::Sync, 0, libc_eio());
    set(&p, &mut model, "late", "x");
    assert!(p.sync().is_err());
    assert!(p.write_refusal().is_some());
    model.remove(&b"late"[..]);
    power_cut(&fs, p);
    let p = open(&fs).unwrap();
    assert_eq!(
        contents(&p),
        model,
        "the failed write was never acknowledged"
    );
}

#[test]
fn real_disk_round_trip() {
    // Both ways of writing the log, each over the other's files.
    let tmp = tempfile::tempdir().unwrap();
    let mut model = Model::new();
    let config = |direct_io| PersistConfig {
        direct_io,
        ..config(Arc::new(RealFs), tmp.path())
    };
    for (round, direct_io) in [(1, true), (3, false), (5, true)] {
        let p = Persistence::open(config(direct_io), StoreConfig::default()).unwrap();
        assert_eq!(contents(&p), model, "direct_io {direct_io}");
        workload(&p, &mut model, round);
        p.checkpoint().unwrap();
        workload(&p, &mut model, round + 1);
        p.close().unwrap();
    }
    let p = Persistence::open(config(false), StoreConfig::default()).unwrap();
    assert_eq!(contents(&p), model);
}

#[test]
fn checkpoint_makes_its_log_position_durable() {
    let fs = FaultyFs::new();
    let mut model = Model::new();
    let p = open(&fs).unwrap();
    for i in 0..100 {
        set(&p, &mut model, &format!("a{i}"), "x");
    }
    // No sync: the checkpoint itself must make records up to its LSN durable, or the log
    // would restart its numbering behind the snapshot after a crash.
    p.checkpoint().unwrap();
    power_cut(&fs, p);
    let p = open(&fs).unwrap();
    assert_eq!(contents(&p), model);
    set(&p, &mut model, "after", "y");
    p.sync().unwrap();
    power_cut(&fs, p);
    let p = open(&fs).unwrap();
    assert_eq!(contents(&p), model);
}

/// Power loss, then reopen: the same file system, a new process.
fn crash_and_reopen(fs: &FaultyFs, p: Persistence) -> Persistence {
    p.sync().unwrap();
    power_cut(fs, p);
    open(fs).unwrap()
}

#[test]
fn a_delayed_flush_survives_restarts_and_checkpoints() {
    let fs = FaultyFs::new();
    let mut model = Model::new();
    let p = open(&fs).unwrap();
    let later = now_unix() + 3600;
    workload(&p, &mut model, 1);
    p.store().schedule_flush(later);
    let p = crash_and_reopen(&fs, p);
    assert_eq!(p.store().scheduled_flush(), Some(later), "lost by recovery");
    assert_eq!(contents(&p), model, "a future flush must not run early");

    // Two checkpoints drop the log segment that held the original record: each restates it.
    p.checkpoint().unwrap();
    workload(&p, &mut model, 2);
    p.checkpoint().unwrap();
    workload(&p, &mut model, 3);
    let p = crash_and_reopen(&fs, p);
    assert_eq!(
        p.store().scheduled_flush(),
        Some(later),
        "lost by a checkpoint"
    );
    assert_eq!(contents(&p), model);

    // A later flush_all replaces the schedule, also after a restart.
    p.store().flush_all();
    model.clear();
    workload(&p, &mut model, 4);
    let p = crash_and_reopen(&fs, p);
    assert_eq!(p.store().scheduled_flush(), None);
    assert_eq!(contents(&p), model);
}

#[test]
fn a_delayed_flush_due_while_down_runs_once_at_recovery() {
    let fs = FaultyFs::new();
    let mut model = Model::new();
    let p = open(&fs).unwrap();
    workload(&p, &mut model, 1);
    // Scheduled for a time that has passed by the restart (the store takes any time).
    p.store().schedule_flush(now_unix() - 1);
    workload(&p, &mut model, 2);
    let p = crash_and_reopen(&fs, p);
    assert_eq!(contents(&p), Model::new(), "the due flush did not run");
    assert_eq!(p.store().scheduled_flush(), None);

    // Writes after that recovery are not flushed again by the next one.
    model.clear();
    workload(&p, &mut model, 3);
    let p = crash_and_reopen(&fs, p);
    assert_eq!(contents(&p), model, "the old schedule ran a second time");
}

#[test]
fn a_truncated_snapshot_falls_back_to_the_previous_one() {
    let fs = FaultyFs::new();
    let (p, model) = two_checkpoints_between_workloads(&fs);
    p.sync().unwrap();
    drop(p);
    let snaps = list_snapshots(&fs, Path::new("/t/data")).unwrap();
    let newest = Path::new("/t/data").join(snapshot::file_name(snaps[0]));
    let size = fs.open(&newest).unwrap().size().unwrap() as usize;
    // Cut the newest snapshot shorter and shorter (the file keeps its cut from round to round).
    for keep in [size - 1, size - 33, size / 2, 40, 31, 0] {
        fs.corrupt(&newest, |b| b.truncate(keep));
        let p = open(&fs).unwrap_or_else(|e| panic!("cut to {keep}: {e}"));
        assert_eq!(
            p.stats().checkpoints.snapshot_lsn,
            snaps[1],
            "cut to {keep}"
        );
        assert_eq!(contents(&p), model, "cut to {keep}");
        drop(p);
    }
}

/// The CAS unique `key` has now.
fn cas_of(p: &Persistence, key: &str) -> u64 {
    let store = p.store();
    let mut found = None;
    for i in 0..store.shard_count() {
        store.visit_shard(i, now_unix(), |k, _, meta| {
            if k == key.as_bytes() {
                found = Some(meta.cas);
            }
        });
    }
    found.unwrap_or_else(|| panic!("{key} is missing"))
}

#[test]
fn cas_uniques_of_deleted_items_are_not_handed_out_again() {
    for checkpoint in [false, true] {
        let fs = FaultyFs::new();
        let mut model = Model::new();
        let p = open(&fs).unwrap();
        set(&p, &mut model, "a", "1");
        set(&p, &mut model, "b", "2");
        let seen = cas_of(&p, "b");
        delete(&p, &mut model, "b");
        if checkpoint {
            // The snapshot holds only `a`, and the log before it is gone from the replay.
            p.checkpoint().unwrap();
        }
        let p = crash_and_reopen(&fs, p);
        assert_eq!(contents(&p), model);
        set(&p, &mut model, "b", "3");
        // Past the gap recovery leaves after the largest unique on disk, which must count
        // the deleted item's.
        assert!(
            cas_of(&p, "b") > seen + CAS_GAP_AFTER_RECOVERY,
            "checkpoint {checkpoint}: {} is not past {seen} and the gap",
            cas_of(&p, "b")
        );
    }
}

#[test]
fn recovery_skips_far_past_the_uniques_on_disk() {
    let fs = FaultyFs::new();
    let mut model = Model::new();
    let p = open(&fs).unwrap();
    set(&p, &mut model, "a", "1");
    let on_disk = cas_of(&p, "a");
    let p = crash_and_reopen(&fs, p);
    set(&p, &mut model, "b", "2");
    assert!(
        cas_of(&p, "b") > on_disk + CAS_GAP_AFTER_RECOVERY,
        "uniques not durable may repeat"
    );
}

#[test]
fn a_version_1_snapshot_still_loads() {
    let fs = FaultyFs::new();
    let path = Path::new("/t/old.snap");
    // An item of versions 1 and 2: no mod_revision.
    let mut block = vec![1, b'k'];
    block.extend_from_slice(&7u32.to_le_bytes());
    block.extend_from_slice(&0u32.to_le_bytes());
    block.extend_from_slice(&42u64.to_le_bytes());
    block.push(0);
    block.extend_from_slice(&1u32.to_le_bytes());
    block.push(b'v');
    let mut file = Vec::new();
    file.extend_from_slice(snapshot::MAGIC);
    file.extend_from_slice(&1u32.to_le_bytes());
    file.extend_from_slice(&[0; 4]);
    file.extend_from_slice(&9u64.to_le_bytes());
    let crc = crc32c::crc32c(&file);
    file.extend_from_slice(&crc.to_le_bytes());
    file.extend_from_slice(&[0; 4]);
    file.extend_from_slice(&(block.len() as u32).to_le_bytes());
    file.extend_from_slice(&crc32c::crc32c(&block).to_le_bytes());
    file.extend_from_slice(&block);
    let mut trailer = Vec::new();
    trailer.extend_from_slice(&u32::MAX.to_le_bytes());
    trailer.extend_from_slice(snapshot::END_MAGIC);
    trailer.extend_from_slice(&1u64.to_le_bytes());
    trailer.extend_from_slice(&1u64.to_le_bytes());
    let crc = crc32c::crc32c(&trailer);
    trailer.extend_from_slice(&crc.to_le_bytes());
    file.extend_from_slice(&trailer);
    fs.create(path).unwrap().write_at(0, &file).unwrap();
    let items = std::sync::Mutex::new(Vec::new());
    let loaded = snapshot::load(&fs, path, 1, |recs| {
        for rec in recs {
            if let snapshot::SnapRecord::Item(it) = rec {
                items
                    .lock()
                    .unwrap()
                    .push((it.key.to_vec(), it.cas, it.mod_revision))
            }
        }
    })
    .unwrap();
    assert_eq!(
        loaded,
        snapshot::Loaded {
            lsn: 9,
            items: 1,
            cas_floor: 0
        }
    );
    assert_eq!(
        items.into_inner().unwrap(),
        vec![(b"k".to_vec(), 42, 9)],
        "an item without a revision gets the snapshot's"
    );
}

fn open_with_item_limit(fs: &FaultyFs, item_size_max_bytes: usize) -> Persistence {
    Persistence::open(
        config(Arc::new(fs.clone()), Path::new("/t")),
        StoreConfig {
            item_size_max_bytes,
            ..StoreConfig::default()
        },
    )
    .unwrap()
}

#[test]
fn a_value_too_large_for_the_restarted_store_does_not_bring_back_the_one_it_replaced() {
    let fs = FaultyFs::new();
    let mut model = Model::new();
    let p = open_with_item_limit(&fs, 64 << 10);
    set(&p, &mut model, "k", "old");
    set(&p, &mut model, "other", "kept");
    p.checkpoint().unwrap();
    set(&p, &mut model, "k", &"n".repeat(20 << 10));
    p.sync().unwrap();
    power_cut(&fs, p);
    // Restarted with a smaller item limit: the new value no longer fits.
    let p = open_with_item_limit(&fs, 8 << 10);
    model.remove(b"k".as_slice());
    assert_eq!(contents(&p), model, "the overwritten value came back");
    assert_eq!(p.stats().recovery.recovery_dropped_items, 1);
}

#[test]
fn the_only_snapshot_damaged_recovers_from_the_whole_log() {
    let fs = FaultyFs::new();
    let (p, mut model) = one_synced_workload(&fs);
    p.checkpoint().unwrap();
    workload(&p, &mut model, 2);
    p.sync().unwrap();
    drop(p);
    let snaps = list_snapshots(&fs, Path::new("/t/data")).unwrap();
    assert_eq!(snaps.len(), 1);
    fs.corrupt(
        &Path::new("/t/data").join(snapshot::file_name(snaps[0])),
        |b| b[40] ^= 0xff,
    );
    let p = open(&fs).expect("the log still starts at its first record");
    assert_eq!(contents(&p), model);
    assert_eq!(p.stats().checkpoints.snapshot_lsn, 0);
}

#[test]
fn every_snapshot_damaged_and_the_log_cut_refuses_to_start() {
    let fs = FaultyFs::new();
    let (p, _) = two_checkpoints_between_workloads(&fs);
    p.sync().unwrap();
    drop(p);
    for snap in list_snapshots(&fs, Path::new("/t/data")).unwrap() {
        fs.corrupt(&Path::new("/t/data").join(snapshot::file_name(snap)), |b| {
            b[40] ^= 0xff
        });
    }
    let err = open(&fs).err().expect("refused").to_string();
    assert!(err.contains("no snapshot could be loaded"), "{err}");
}

#[test]
fn the_checkpoint_trigger_counts_the_log_left_from_before_a_restart() {
    let fs = FaultyFs::new();
    let (p, _) = one_synced_workload(&fs);
    let before = p.stats().log_bytes_since_checkpoint;
    let p = crash_and_reopen(&fs, p);
    let after = p.stats().log_bytes_since_checkpoint;
    assert_ne!(after, 0);
    assert_eq!(
        after, before,
        "the replayed log is the log since the last checkpoint"
    );
    p.checkpoint().unwrap();
    assert_eq!(p.stats().log_bytes_since_checkpoint, 0);
}

#[test]
fn temp_files_of_failed_checkpoints_are_removed() {
    let fs = FaultyFs::new();
    let (p, _) = one_synced_workload(&fs);
    let temps = |fs: &FaultyFs| {
        fs.list(Path::new("/t/data"))
            .unwrap()
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "tmp"))
            .count()
    };
    // Fails after the snapshot file was created and partly written.
    fs.fail_after(Op::Sync, 0, libc_eio());
    assert!(p.checkpoint().is_err());
    assert_eq!(temps(&fs), 0, "left by the failed checkpoint");
    // One left by a crash is removed at the next start.
    fs.create(Path::new("/t/data/snapshot-00000000000000000001.snap.tmp"))
        .unwrap();
    cairn_testkit::kill(&fs, p);
    let _p = open(&fs).unwrap();
    assert_eq!(temps(&fs), 0, "left by a crash");
}

#[test]
fn the_arcus_rule_needs_both_the_minimum_size_and_the_snapshot_percentage() {
    let fs = FaultyFs::new();
    let p = Persistence::open(
        PersistConfig {
            chkpt_interval_min_logsize_mb: 1,
            chkpt_interval_pct_snapshot: 200,
            ..config(Arc::new(fs.clone()), Path::new("/t"))
        },
        StoreConfig::default(),
    )
    .unwrap();
    let mut model = Model::new();
    let value = "x".repeat(1000);
    let mut write_kib = |from: usize, kib: usize| {
        for i in from..from + kib {
            set(&p, &mut model, &format!("k{i}"), &value);
        }
        p.sync().unwrap();
    };
    // No snapshot yet: only the size counts.
    write_kib(0, 900);
    assert!(!p.checkpoint_due(), "under 1 MiB of log");
    write_kib(900, 200);
    assert!(p.checkpoint_due(), "1 MiB of log and no snapshot");
    p.checkpoint().unwrap();
    assert!(!p.checkpoint_due(), "just taken");
    // The snapshot holds about 1.1 MiB: the log must now reach 200% of it, past the 1 MiB.
    write_kib(0, 1100);
    assert!(!p.checkpoint_due(), "1 MiB but under 200% of the snapshot");
    write_kib(0, 1300);
    assert!(p.checkpoint_due(), "over 200% of the snapshot");
    // A run-time change applies at once.
    p.set_chkpt_interval_min_logsize_mb(64);
    assert!(!p.checkpoint_due(), "under the raised minimum");
}

#[test]
fn uniques_of_a_run_that_made_nothing_durable_are_skipped_too() {
    let fs = FaultyFs::new();
    let mut model = Model::new();
    let p = open(&fs).unwrap();
    set(&p, &mut model, "a", "1");
    let p = crash_and_reopen(&fs, p);
    // Handed out (a client may have read it), never durable.
    set(&p, &mut model, "b", "2");
    let seen = cas_of(&p, "b");
    power_cut(&fs, p);
    let p = open(&fs).unwrap();
    set(&p, &mut model, "c", "3");
    assert!(cas_of(&p, "c") > seen, "{} repeats {seen}", cas_of(&p, "c"));
}

#[test]
fn a_damaged_only_snapshot_with_its_log_gone_refuses_to_start() {
    let fs = FaultyFs::new();
    let (p, _) = one_synced_workload(&fs);
    p.checkpoint().unwrap();
    drop(p);
    let snaps = list_snapshots(&fs, Path::new("/t/data")).unwrap();
    fs.corrupt(
        &Path::new("/t/data").join(snapshot::file_name(snaps[0])),
        |b| b[40] ^= 0xff,
    );
    // The log folder lost (or logs_path pointed elsewhere): a new, empty log.
    for f in fs.list(Path::new("/t/log")).unwrap() {
        fs.remove(&f).unwrap();
    }
    let err = open(&fs).err().expect("refused").to_string();
    assert!(err.contains("no snapshot could be loaded"), "{err}");
}

#[test]
fn a_snapshot_without_its_log_refuses_to_start() {
    let fs = FaultyFs::new();
    let (p, _) = one_synced_workload(&fs);
    p.checkpoint().unwrap();
    drop(p);
    for f in fs.list(Path::new("/t/log")).unwrap() {
        fs.remove(&f).unwrap();
    }
    let err = open(&fs).err().expect("refused").to_string();
    assert!(err.contains("is logs_path right?"), "{err}");
}

/// Every key's mod_revision, read from the store.
fn revisions(p: &Persistence) -> BTreeMap<Vec<u8>, u64> {
    let store = p.store();
    let mut out = BTreeMap::new();
    for i in 0..store.shard_count() {
        store.visit_shard(i, now_unix(), |k, _, m| {
            out.insert(k.to_vec(), m.mod_revision);
        });
    }
    out
}

#[test]
fn revisions_are_log_positions_and_survive_snapshot_and_replay() {
    let fs = FaultyFs::new();
    let mut model = Model::new();
    let p = open(&fs).unwrap();
    workload(&p, &mut model, 1);
    let meta = p
        .store()
        .entry(b"last", now_unix(), |e| e.store(&[b"x"], 0, 0, None))
        .unwrap();
    assert_eq!(
        meta.mod_revision,
        p.appended_lsn(),
        "the revision is the LSN"
    );
    p.checkpoint().unwrap();
    workload(&p, &mut model, 2);
    p.sync().unwrap();
    let before = revisions(&p);
    let p = crash_and_reopen(&fs, p);
    assert_eq!(revisions(&p), before, "from the snapshot and from replay");
    // The next mutation gets a revision past every one before the restart.
    let meta = p
        .store()
        .entry(b"after", now_unix(), |e| e.store(&[b"x"], 0, 0, None))
        .unwrap();
    assert!(meta.mod_revision > *before.values().max().unwrap());
}

#[test]
fn evicted_items_do_not_come_back_after_a_restart() {
    let fs = FaultyFs::new();
    let store_config = StoreConfig {
        memory_limit_bytes: 8 << 20,
        shard_count: 1,
        ..StoreConfig::default()
    };
    let p = Persistence::open(
        config(Arc::new(fs.clone()), Path::new("/t")),
        store_config.clone(),
    )
    .unwrap();
    let value = vec![7u8; 1000];
    for i in 0..20_000u32 {
        p.store()
            .entry(format!("k{i}").as_bytes(), now_unix(), |e| {
                e.store(&[&value], 0, 0, None)
            })
            .unwrap();
    }
    assert!(p.store().stats().evictions > 0);
    p.sync().unwrap();
    let live = contents(&p);
    power_cut(&fs, p);
    // More memory after the restart: only the log's eviction records keep them out.
    let p = Persistence::open(
        config(Arc::new(fs.clone()), Path::new("/t")),
        StoreConfig {
            memory_limit_bytes: 64 << 20,
            ..store_config
        },
    )
    .unwrap();
    assert_eq!(
        contents(&p),
        live,
        "exactly the items live before the crash"
    );
}

/// A persistence layer with a flash tier on a real file in `dir` (the log and snapshots on
/// `fs`), 2 MiB of RAM in 4 shards.
fn open_with_flash(fs: &FaultyFs, dir: &Path) -> Persistence {
    let flash = cairn_flash::Flash::open_keeping(
        cairn_flash::FlashConfig {
            segment_bytes: 64 << 10,
            write_queue: 16,
            // A busy machine can starve the writer: eviction waits for it instead of
            // dropping, so the test can expect every item.
            wait_for_writer: true,
            ..cairn_flash::FlashConfig::new(dir.join("flash.dat"), 4096 + 1000 * (64 << 10))
        },
        true,
    )
    .unwrap();
    Persistence::open(
        PersistConfig {
            flash: Some(flash.clone()),
            ..config(Arc::new(fs.clone()), Path::new("/t"))
        },
        StoreConfig {
            memory_limit_bytes: 2 << 20,
            shard_count: 4,
            hash_seed: Some(flash.hash_seed()),
            ..StoreConfig::default()
        },
    )
    .unwrap()
}

/// What a key holds: value, flags, exptime, CAS, stale, revision.
type Held = (Vec<u8>, u32, u32, u64, bool, u64);

fn read_through_flash(p: &Persistence, key: &[u8]) -> Option<Held> {
    let flash = p.config.flash.clone().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    match rt.block_on(flash.get(&p.store(), key, now_unix(), cairn_flash::Promotion::IfHot)) {
        cairn_store::ReadOutcome::Hit(it) => Some((
            it.value,
            it.meta.flags,
            it.meta.exptime,
            it.meta.cas,
            it.meta.stale,
            it.meta.mod_revision,
        )),
        _ => None,
    }
}

#[test]
fn a_log_tail_longer_than_ram_replays_partly_straight_to_flash_and_exactly() {
    // A snapshot with flash entries, then a log tail of ~12 MiB through 2 MiB of RAM with
    // overwrites (of keys on flash in the snapshot too), deletes, stale marks, expiries and
    // a flush_all: after a power cut every key holds exactly what it held, CAS and revision
    // included, and recovery put most of the tail straight on flash.
    let dir = tempfile::tempdir().unwrap();
    let fs = FaultyFs::new();
    let p = open_with_flash(&fs, dir.path());
    let now = now_unix();
    let mut model: BTreeMap<Vec<u8>, Option<Held>> = BTreeMap::new();
    let put = |p: &Persistence, model: &mut BTreeMap<Vec<u8>, Option<Held>>, i: u32, round: u32| {
        let key = format!("key-{i}");
        let value = format!("{round}-{i}-").repeat(1 + (i as usize % 150));
        let exptime = match i % 11 {
            0 => now + 3600,
            // Expires before the restart: stays expired.
            1 if round > 0 => now - 5,
            _ => 0,
        };
        let meta = p.store().entry(key.as_bytes(), now, |e| {
            e.store(&[value.as_bytes()], i, exptime, None).unwrap();
            if i.is_multiple_of(13) {
                e.update_meta(|m| m.stale = true);
            }
            // As it is now (the stale mark is a mutation of its own, with its revision).
            e.peek().map(|(m, _)| m)
        });
        let held = meta.filter(|_| exptime == 0 || exptime > now).map(|m| {
            (
                value.into_bytes(),
                i,
                exptime,
                m.cas,
                m.stale,
                m.mod_revision,
            )
        });
        model.insert(key.into_bytes(), held);
    };
    for i in 0..6000 {
        put(&p, &mut model, i, 0);
    }
    assert!(
        p.store().stats().flash_items > 1000,
        "the snapshot names flash items"
    );
    p.checkpoint().unwrap();
    for round in 1..4 {
        if round == 2 {
            p.store().flush_all();
            for v in model.values_mut() {
                *v = None;
            }
        }
        // Round 3 leaves the upper keys alone: those round 1 wrote last must stay flushed.
        let keys = if round == 3 { 4500 } else { 9000 };
        for i in (0..keys).filter(|i| i % 3 != round % 3) {
            put(&p, &mut model, i, round);
            if i % 7 == 0 {
                let key = format!("key-{}", (i * 5) % 9000);
                p.store().entry(key.as_bytes(), now, |e| e.delete());
                model.insert(key.into_bytes(), None);
            }
        }
    }
    p.sync().unwrap();
    let flash = p.config.flash.clone().unwrap();
    power_cut(&fs, p);
    flash.stop();
    drop(flash);

    let p = open_with_flash(&fs, dir.path());
    let recovery = p.stats().recovery;
    let to_flash = recovery.recovery_replayed_to_flash;
    let replayed = recovery.recovered_log_records;
    assert!(
        to_flash > replayed / 3,
        "a tail this much longer than RAM goes to flash straight, largely ({to_flash} of \
         {replayed})"
    );
    let in_ram = contents(&p);
    let mut on_flash = 0;
    for (key, want) in &model {
        on_flash += u32::from(want.is_some() && !in_ram.contains_key(key));
        assert_eq!(
            &read_through_flash(&p, key),
            want,
            "{}",
            String::from_utf8_lossy(key)
        );
    }
    assert!(on_flash > 1000, "most items are on flash ({on_flash})");
}

#[test]
fn a_pins_file_round_trips_and_an_older_version_reads_with_no_largest_revision() {
    let fs = FaultyFs::new();
    let dir = Path::new("/t");
    let pins = vec![
        cairn_flash::Pin {
            segment: 3,
            seq: 77,
            max_revision: 9_000,
        },
        cairn_flash::Pin {
            segment: 8,
            seq: 80,
            max_revision: 0,
        },
    ];
    write_pins(&fs, dir, 500, &pins).unwrap();
    assert_eq!(read_pins(&fs, dir, 500), pins);

    // Version 1, as written before largest revisions: (segment u32 | seq u64) per pin.
    let mut v1 = b"CAIRNFPN".to_vec();
    v1.extend_from_slice(&1u32.to_le_bytes());
    v1.extend_from_slice(&1u32.to_le_bytes());
    v1.extend_from_slice(&3u32.to_le_bytes());
    v1.extend_from_slice(&77u64.to_le_bytes());
    let crc = crc32c::crc32c(&v1);
    v1.extend_from_slice(&crc.to_le_bytes());
    let f = fs.create(&dir.join(pins_file_name(600))).unwrap();
    f.write_at(0, &v1).unwrap();
    assert_eq!(
        read_pins(&fs, dir, 600),
        vec![cairn_flash::Pin {
            segment: 3,
            seq: 77,
            max_revision: 0,
        }]
    );

    // One bit off: nothing of it is trusted.
    fs.corrupt(&dir.join(pins_file_name(500)), |b| b[20] ^= 1);
    assert!(read_pins(&fs, dir, 500).is_empty());
}

#[test]
fn a_block_of_many_small_records_is_handed_over_in_batches_and_whole() {
    // 10,000 flash records (25 bytes each) in one block: the loader hands them over in
    // batches of at most RECORDS_PER_CALL, every record exactly once, in the block's order.
    let fs = FaultyFs::new();
    let path = Path::new("/t/many.snap");
    let mut w = snapshot::Writer::create(&fs, path, 7, 0).unwrap();
    let mut buf = Vec::new();
    for i in 0..10_000u64 {
        snapshot::encode_flash(
            &mut buf,
            &snapshot::SnapFlash {
                shard: 0,
                shard_count: 1,
                loc: i,
                seq: 1,
            },
        );
    }
    w.add_encoded(&buf, 10_000).unwrap();
    w.finish(0).unwrap();
    let calls = std::sync::Mutex::new(Vec::new());
    let loaded = snapshot::load(&fs, path, 1, |recs| {
        let locs: Vec<u64> = recs
            .iter()
            .map(|r| match r {
                snapshot::SnapRecord::Flash(f) => f.loc,
                snapshot::SnapRecord::Item(_) => panic!("only flash records were written"),
            })
            .collect();
        calls.lock().unwrap().push(locs);
    })
    .unwrap();
    assert_eq!(loaded.items, 10_000);
    let calls = calls.into_inner().unwrap();
    assert!(
        calls.len() >= 3,
        "batches, not the block at once: {}",
        calls.len()
    );
    assert!(calls.iter().all(|c| c.len() <= 4096));
    assert_eq!(calls.concat(), (0..10_000).collect::<Vec<u64>>());
}

#[test]
fn a_snapshot_whose_name_and_header_disagree_is_refused() {
    // Recovery leaves out flash entries by the LSN in the name and replays from the one in
    // the header: a file renamed by hand must not be loaded.
    let fs = FaultyFs::new();
    let path = Path::new("/t").join(snapshot::file_name(8));
    let w = snapshot::Writer::create(&fs, &path, 7, 0).unwrap();
    w.finish(0).unwrap();
    let err = snapshot::load(&fs, &path, 1, |_| {})
        .unwrap_err()
        .to_string();
    assert!(err.contains("different LSNs"), "{err}");
    let right = Path::new("/t").join(snapshot::file_name(7));
    let w = snapshot::Writer::create(&fs, &right, 7, 0).unwrap();
    w.finish(0).unwrap();
    assert_eq!(snapshot::load(&fs, &right, 1, |_| {}).unwrap().lsn, 7);
}

/// The watch's reads of old records: a range in order from any revision, bounded by count
/// and bytes; chosen revisions, nearby ones in one run; and what a checkpoint dropped is
/// reported (Compacted) or skipped.
#[test]
fn history_reads_give_records_by_revision_and_report_what_checkpoints_dropped() {
    let fs = FaultyFs::new();
    let mut model = Model::new();
    let p = open(&fs).unwrap();
    workload(&p, &mut model, 1);
    p.sync().unwrap();
    let last = p.appended_lsn();
    let key_of = |rec: &record::Record<'_>| match rec {
        record::Record::Stored { key, .. } | record::Record::Deleted { key, .. } => key.to_vec(),
        _ => Vec::new(),
    };
    let mut all = Vec::new();
    let next = p
        .read_history(1, last, usize::MAX, usize::MAX, |lsn, rec| {
            all.push((lsn, key_of(&rec)))
        })
        .unwrap();
    assert_eq!(next, last + 1);
    assert_eq!(all.len() as u64, last);
    let mut some = Vec::new();
    let next = p
        .read_history(100, last, 10, usize::MAX, |lsn, _| some.push(lsn))
        .unwrap();
    assert_eq!((some, next), ((100..110).collect::<Vec<_>>(), 110));
    let wanted = [3, 4, 90, 91, 200, last];
    let mut got = Vec::new();
    p.read_revisions(&wanted, |lsn, rec| got.push((lsn, key_of(&rec))))
        .unwrap();
    let expected: Vec<_> = wanted
        .iter()
        .map(|&w| all[(w - 1) as usize].clone())
        .collect();
    assert_eq!(got, expected);
    // Two checkpoints drop the log before the first one's snapshot.
    p.checkpoint().unwrap();
    workload(&p, &mut model, 2);
    p.checkpoint().unwrap();
    let first = p.first_lsn();
    assert!(first > 1);
    let r = p.read_history(1, p.appended_lsn(), usize::MAX, usize::MAX, |_, _| {});
    assert!(
        matches!(r, Err(HistoryError::Compacted { first: f }) if f == first),
        "{r:?}"
    );
    let mut got = Vec::new();
    p.read_revisions(&[1, 2, first, first + 1], |lsn, _| got.push(lsn))
        .unwrap();
    assert_eq!(got, vec![first, first + 1], "what was dropped is skipped");
}
