//! Tier tests on real files with O_DIRECT (the work disk), a store with a small RAM limit in
//! front, and the fault-injecting device for I/O errors.

use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_store::{FlashLoc, FlashTier, Item, ItemMeta, ReadOutcome, Store, StoreConfig};

use super::*;
use crate::format::BLOCK;

const NOW: u32 = 1_000_000;

/// A store of `ram_mb` MiB (one shard) evicting into a flash file of `segments` segments of
/// 64 KiB, in a fresh directory next to the build (the work disk, where O_DIRECT works).
struct Rig {
    store: Arc<Store>,
    flash: Arc<Flash>,
    _dir: tempfile::TempDir,
    path: PathBuf,
}

fn work_dir() -> tempfile::TempDir {
    // The temporary folder must take O_DIRECT (ext4 does); on a tmpfs the tier is refused.
    tempfile::tempdir().unwrap()
}

fn config(path: PathBuf, segments: u64) -> FlashConfig {
    FlashConfig {
        segment_bytes: 64 << 10,
        write_queue: 16,
        // A busy machine can starve the writer: eviction waits for it instead of dropping,
        // so that these tests can expect every item (drops are tested on their own).
        wait_for_writer: true,
        ..FlashConfig::new(path, BLOCK as u64 + segments * (64 << 10))
    }
}

fn rig_with(
    ram_mb: u64,
    config_of: impl FnOnce(PathBuf) -> FlashConfig,
    device: Option<Arc<dyn Device>>,
) -> Rig {
    let r = rig_unstarted(ram_mb, config_of, device);
    r.flash.start(&r.store);
    r
}

/// [`rig_with`] without the writer thread: sealed segments stay in their buffers.
fn rig_unstarted(
    ram_mb: u64,
    config_of: impl FnOnce(PathBuf) -> FlashConfig,
    device: Option<Arc<dyn Device>>,
) -> Rig {
    let dir = work_dir();
    let path = dir.path().join("flash.dat");
    let config = config_of(path.clone());
    let flash = match device {
        Some(d) => Flash::open_on(config, d, false).unwrap(),
        None => Flash::open(config).unwrap(),
    };
    let store = Arc::new(Store::with_flash(
        StoreConfig {
            memory_limit_bytes: ram_mb << 20,
            shard_count: 1,
            hash_seed: Some(flash.hash_seed()),
            ..StoreConfig::default()
        },
        None,
        Some(flash.clone() as Arc<dyn FlashTier>),
    ));
    Rig {
        store,
        flash,
        _dir: dir,
        path,
    }
}

fn rig(ram_mb: u64, segments: u64) -> Rig {
    rig_with(ram_mb, |p| config(p, segments), None)
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

fn set(r: &Rig, key: &[u8], value: &[u8]) -> u64 {
    set_meta(r, key, value).cas
}

/// Stores and returns the item's metadata (its CAS and revision).
fn set_meta(r: &Rig, key: &[u8], value: &[u8]) -> ItemMeta {
    r.store
        .entry(key, NOW, |e| e.store(&[value], 5, 0, None))
        .unwrap()
}

fn get(r: &Rig, key: &[u8]) -> Option<Item> {
    match block_on(r.flash.get(&r.store, key, NOW, Promotion::IfHot)) {
        ReadOutcome::Hit(i) => Some(i),
        _ => None,
    }
}

fn value_of(i: usize) -> Vec<u8> {
    format!("value-{i:08}-").repeat(8).into_bytes()
}

/// Polls `cond` until it holds; fails past a generous bound (not a wait for a fixed time).
fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let give_up = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(Instant::now() < give_up, "never happened: {what}");
        std::thread::yield_now();
    }
}

#[test]
fn evicted_items_go_to_flash_and_read_back_exactly() {
    // 6 MiB of items through 4 MiB of RAM: most end on flash.
    let r = rig(4, 200);
    let n = 50_000;
    let mut metas = Vec::new();
    for i in 0..n {
        metas.push(set_meta(&r, format!("key-{i}").as_bytes(), &value_of(i)));
    }
    let s = r.store.stats();
    assert!(s.flash_items > (n / 3) as u64, "{s:?}");
    assert_eq!((s.curr_items, s.evictions), (n as u64, 0), "{s:?}");
    eventually("segments written", || {
        r.flash.counters.extstore_bytes_written.load(Relaxed) > 0
    });
    for (i, m) in metas.iter().enumerate() {
        let item = get(&r, format!("key-{i}").as_bytes()).unwrap_or_else(|| panic!("key-{i}"));
        assert_eq!(item.value, value_of(i), "key-{i}");
        assert_eq!(
            (item.meta.cas, item.meta.mod_revision, item.meta.flags),
            (m.cas, m.mod_revision, 5),
            "key-{i} keeps its CAS and revision"
        );
    }
    let c = &r.flash.counters;
    assert!(c.flash_device_reads.load(Relaxed) > 0);
    assert_eq!(c.badcrc_from_extstore.load(Relaxed), 0);
    // Reads per flash hit: exactly one, device or buffer, apart from tag collisions.
    let reads = c.flash_device_reads.load(Relaxed) + c.flash_buffered_reads.load(Relaxed);
    assert_eq!(
        reads,
        c.get_extstore.load(Relaxed) + c.miss_from_extstore.load(Relaxed)
    );
    // A miss touches the device only on a tag collision.
    let before = c.flash_device_reads.load(Relaxed);
    for i in 0..1000 {
        assert!(get(&r, format!("absent-{i}").as_bytes()).is_none());
    }
    assert!(c.flash_device_reads.load(Relaxed) - before <= 10);
    r.flash.stop();
}

#[test]
fn items_the_writer_cannot_take_are_dropped_and_counted() {
    // No writer, a queue of two segments: once it is full, eviction drops instead of waiting.
    let r = rig_unstarted(
        4,
        |p| FlashConfig {
            write_queue: 2,
            wait_for_writer: false,
            ..config(p, 20)
        },
        None,
    );
    let n = 40_000;
    for i in 0..n {
        set(&r, format!("key-{i}").as_bytes(), &value_of(i));
    }
    let s = r.store.stats();
    let drops = r.flash.counters.flash_writer_drops.load(Relaxed);
    assert!(drops > 0 && s.flash_items > 0, "{s:?}");
    assert_eq!(s.evictions, drops, "every drop is an eviction");
    assert_eq!(s.curr_items + s.evictions, n as u64);
    let misses = (0..n)
        .filter(|i| match get(&r, format!("key-{i}").as_bytes()) {
            Some(item) => {
                assert_eq!(item.value, value_of(*i));
                false
            }
            None => true,
        })
        .count();
    assert_eq!(misses as u64, drops, "every item not dropped reads back");
}

#[test]
fn overwrite_and_delete_never_bring_back_a_flash_copy() {
    let r = rig(4, 200);
    for i in 0..40_000 {
        set(&r, format!("key-{i}").as_bytes(), &value_of(i));
    }
    assert!(
        r.store.flash_candidates(b"key-0").len() == 1,
        "key-0 is on flash"
    );
    set(&r, b"key-0", b"new");
    assert_eq!(get(&r, b"key-0").unwrap().value, b"new");
    assert!(r.store.entry(b"key-1", NOW, |e| e.delete()) || get(&r, b"key-1").is_none());
    assert!(
        get(&r, b"key-1").is_none(),
        "a deleted flash item stays deleted"
    );
    // Push the new copy of key-0 to flash too, then read it: the new value, never the old.
    for i in 40_000..80_000 {
        set(&r, format!("key-{i}").as_bytes(), &value_of(i));
    }
    assert_eq!(get(&r, b"key-0").map(|i| i.value), Some(b"new".to_vec()));
    r.flash.stop();
}

/// Two keys whose hashes share the flash tag (a birthday search under the store's seed).
fn same_tag_pair(store: &Store, prefix: &str) -> (String, String) {
    let mut seen = std::collections::HashMap::new();
    (0..)
        .find_map(|i: u64| {
            let k = format!("{prefix}{i}");
            let tag = cairn_store::flash::tag_of(store.key_hash(k.as_bytes()));
            seen.insert(tag, k.clone()).map(|other| (other, k))
        })
        .unwrap()
}

/// Sets `n` items of other keys: enough to push what came before out of RAM.
fn fill(r: &Rig, round: &str, n: usize) {
    for i in 0..n {
        set(r, format!("fill-{round}-{i}").as_bytes(), &value_of(i));
    }
}

#[test]
fn keys_sharing_a_tag_are_told_apart_and_an_overwrite_of_one_keeps_the_other() {
    let r = rig(4, 200);
    let (a, b) = same_tag_pair(&r.store, "t");
    // Apart by more than a block, so that each has a flash block of its own.
    set(&r, a.as_bytes(), b"A1");
    for i in 0..100 {
        set(&r, format!("gap-{i}").as_bytes(), &value_of(i));
    }
    set(&r, b.as_bytes(), b"B1");
    fill(&r, "1", 40_000);
    assert_eq!(
        r.store.flash_candidates(a.as_bytes()).len(),
        2,
        "both on flash, one tag"
    );
    assert_eq!(get(&r, a.as_bytes()).unwrap().value, b"A1");
    assert_eq!(get(&r, b.as_bytes()).unwrap().value, b"B1");
    eventually("both written", || {
        r.store
            .flash_candidates(a.as_bytes())
            .iter()
            .all(|&l| r.flash.sealed_seq(l).is_some())
    });
    // A store with no read before it (as log replay makes): the tier reads B's entry under
    // the shard lock to tell it from A's.
    let verify_reads = r.flash.counters.flash_verify_reads.load(Relaxed);
    set(&r, a.as_bytes(), b"A2");
    assert_eq!(get(&r, a.as_bytes()).unwrap().value, b"A2");
    assert_eq!(get(&r, b.as_bytes()).unwrap().value, b"B1", "B stays");
    assert!(r.flash.counters.flash_verify_reads.load(Relaxed) > verify_reads);
    // A's new copy goes to flash too, then A is deleted: B stays, A is gone for good.
    fill(&r, "2", 40_000);
    assert_eq!(r.store.flash_candidates(a.as_bytes()).len(), 2);
    assert!(r.store.entry(a.as_bytes(), NOW, |e| e.delete()));
    assert!(get(&r, a.as_bytes()).is_none());
    assert_eq!(get(&r, b.as_bytes()).unwrap().value, b"B1");
    assert_eq!(r.store.stats().flash_tag_drops, 0);
    r.flash.stop();
}

#[test]
fn a_key_in_a_segment_not_yet_written_survives_writes_of_keys_sharing_its_tag() {
    // No writer: every segment stays in its buffer, as the newest ones are at any moment.
    let r = rig_unstarted(
        4,
        |p| FlashConfig {
            write_queue: 390,
            wait_for_writer: false,
            ..config(p, 400)
        },
        None,
    );
    let (a, b) = same_tag_pair(&r.store, "u");
    set(&r, b.as_bytes(), b"B1");
    fill(&r, "1", 25_000);
    assert_eq!(
        r.store.flash_candidates(b.as_bytes()).len(),
        1,
        "B on flash"
    );
    assert_eq!(
        r.flash
            .sealed_seq(r.store.flash_candidates(b.as_bytes())[0]),
        None
    );
    // A new key with B's tag, then A to flash as well, overwritten, promoted and deleted.
    set(&r, a.as_bytes(), b"A1");
    assert_eq!(get(&r, b.as_bytes()).unwrap().value, b"B1");
    fill(&r, "2", 25_000);
    assert_eq!(r.store.flash_candidates(a.as_bytes()).len(), 2);
    set(&r, a.as_bytes(), b"A2");
    assert_eq!(get(&r, b.as_bytes()).unwrap().value, b"B1");
    fill(&r, "3", 25_000);
    for _ in 0..2 {
        assert_eq!(get(&r, a.as_bytes()).unwrap().value, b"A2");
    }
    assert!(r.store.stats().flash_promotions > 0, "A is back in RAM");
    assert!(r.store.entry(a.as_bytes(), NOW, |e| e.delete()));
    assert!(get(&r, a.as_bytes()).is_none());
    assert_eq!(get(&r, b.as_bytes()).unwrap().value, b"B1");
    let s = r.store.stats();
    assert_eq!((s.flash_tag_drops, s.evictions), (0, 0), "{s:?}");
    assert_eq!(r.flash.counters.flash_verify_reads.load(Relaxed), 0);
}

#[test]
fn flash_eviction_reuses_segments_and_never_serves_a_wrong_value() {
    // 10 segments of 64 KiB behind 4 MiB of RAM: flash fills many times over (and the items
    // evicted while it has no free segment are dropped).
    let r = rig(4, 10);
    let n = 60_000;
    for i in 0..n {
        set(&r, format!("key-{i}").as_bytes(), &value_of(i));
    }
    eventually("flash eviction ran", || {
        r.flash.counters.extstore_page_evictions.load(Relaxed)
            + r.flash.counters.extstore_page_reclaims.load(Relaxed)
            > 0
    });
    let mut hits = 0;
    for i in 0..n {
        if let Some(item) = get(&r, format!("key-{i}").as_bytes()) {
            assert_eq!(item.value, value_of(i), "key-{i}");
            hits += 1;
        }
    }
    assert!(hits > 0 && hits < n, "{hits}");
    let s = r.store.stats();
    assert!(s.evictions > 0, "items left for good: {s:?}");
    r.flash.stop();
}

#[test]
fn a_hot_item_is_promoted_to_ram_on_its_second_read() {
    let r = rig(4, 200);
    for i in 0..40_000 {
        set(&r, format!("key-{i}").as_bytes(), &value_of(i));
    }
    assert_eq!(r.store.flash_candidates(b"key-3").len(), 1);
    let first = get(&r, b"key-3").unwrap().meta;
    let cas = first.cas;
    assert_ne!(first.mod_revision, 0, "the revision came back from flash");
    assert_eq!(
        r.store.flash_candidates(b"key-3").len(),
        1,
        "first read: stays on flash"
    );
    assert_eq!(get(&r, b"key-3").unwrap().meta.cas, cas);
    assert!(
        r.store.flash_candidates(b"key-3").is_empty(),
        "second read: in RAM"
    );
    let ReadOutcome::Hit(item) = r.store.get(b"key-3", NOW) else {
        panic!("in RAM")
    };
    assert_eq!(
        (item.value, item.meta.cas, item.meta.flags),
        (value_of(3), cas, 5)
    );
    assert_eq!(
        item.meta.mod_revision, first.mod_revision,
        "a promotion is a move, not a mutation: the revision stays"
    );
    assert_eq!(r.store.stats().flash_promotions, 1);
    r.flash.stop();
}

#[test]
fn a_corrupted_segment_gives_misses_not_wrong_values() {
    let r = rig(4, 200);
    for i in 0..40_000 {
        set(&r, format!("key-{i}").as_bytes(), &value_of(i));
    }
    // Wait until the first segment is on the device, then flip a byte in every block of it.
    eventually("first segment written", || {
        r.flash.counters.extstore_bytes_written.load(Relaxed) >= 64 << 10
    });
    let mut bytes = std::fs::read(&r.path).unwrap();
    let seg0 = BLOCK;
    for block in 1..16 {
        bytes[seg0 + block * BLOCK + 40] ^= 0x55;
    }
    std::fs::write(&r.path, &bytes).unwrap();
    let mut misses = 0;
    for i in 0..40_000 {
        match get(&r, format!("key-{i}").as_bytes()) {
            Some(item) => assert_eq!(item.value, value_of(i), "key-{i}"),
            None => misses += 1,
        }
    }
    assert!(misses > 0);
    assert!(r.flash.counters.badcrc_from_extstore.load(Relaxed) > 0);
    r.flash.stop();
}

/// A rig whose flash device fails the reads and writes the test chooses (reads through the
/// pread pool, where the faults apply).
fn faulty_rig() -> (tempfile::TempDir, Arc<FaultyDevice>, Rig) {
    let dir = work_dir();
    let path = dir.path().join("flash.dat");
    let cfg = config(path.clone(), 200);
    let real = FileDevice::open(&path, cfg.size_bytes, true).unwrap();
    let faulty = Arc::new(FaultyDevice::new(Box::new(real)));
    let r = rig_with(4, |_| cfg, Some(faulty.clone() as Arc<dyn Device>));
    (dir, faulty, r)
}

#[test]
fn an_io_error_drops_the_segment_and_serving_goes_on() {
    let (_dir, faulty, r) = faulty_rig();
    assert_eq!(
        r.flash.io_engine(),
        "pread",
        "faults apply to the pread path"
    );
    for i in 0..40_000 {
        set(&r, format!("key-{i}").as_bytes(), &value_of(i));
    }
    eventually("two segments written", || {
        r.flash.counters.extstore_bytes_written.load(Relaxed) >= 2 * (64 << 10)
    });
    // Reads of segment 0 fail from now on.
    faulty.fail_reads(BLOCK as u64..BLOCK as u64 + (64 << 10));
    let before = r.store.stats().flash_items;
    let mut ok = 0;
    for i in 0..40_000 {
        if let Some(item) = get(&r, format!("key-{i}").as_bytes()) {
            assert_eq!(item.value, value_of(i));
            ok += 1;
        }
    }
    assert!(ok > 0, "the other segments still serve");
    assert!(r.flash.counters.extstore_io_errors.load(Relaxed) >= 1);
    eventually("segment 0 dropped", || {
        r.flash.counters.flash_segments_failed.load(Relaxed) == 1
    });
    assert!(r.store.stats().flash_items < before);
    // A failing write drops that segment's items too, and the server goes on.
    faulty.fail_writes(0..u64::MAX);
    for i in 40_000..60_000 {
        set(&r, format!("key-{i}").as_bytes(), &value_of(i));
    }
    eventually("a failed write", || {
        r.flash.counters.flash_segments_failed.load(Relaxed) >= 2
    });
    r.flash.stop();
}

/// A read that could not be done (here EBUSY, as a busy ring gives) is a miss this once and
/// changes nothing: the segment stays, the item stays indexed, a command that would change
/// the item is refused, and once reads are done again every value is served. Before, any
/// read error dropped the whole segment and forgot the key.
#[test]
fn a_read_not_done_is_a_miss_that_drops_nothing() {
    let (_dir, faulty, r) = faulty_rig();
    for i in 0..40_000 {
        set(&r, format!("key-{i}").as_bytes(), &value_of(i));
    }
    eventually("two segments written", || {
        r.flash.counters.extstore_bytes_written.load(Relaxed) >= 2 * (64 << 10)
    });
    faulty.fail_reads_with(BLOCK as u64..BLOCK as u64 + (64 << 10), libc::EBUSY);
    let mut not_served = Vec::new();
    for i in 0..40_000 {
        match get(&r, format!("key-{i}").as_bytes()) {
            Some(item) => assert_eq!(item.value, value_of(i), "key-{i}"),
            None => not_served.push(i),
        }
    }
    assert!(!not_served.is_empty(), "segment 0's items were read");
    let c = &r.flash.counters;
    assert_eq!(
        c.flash_reads_not_done.load(Relaxed),
        not_served.len() as u64
    );
    assert_eq!(
        c.extstore_io_errors.load(Relaxed),
        0,
        "counted as a device error"
    );
    assert_eq!(
        c.flash_segments_failed.load(Relaxed),
        0,
        "a segment was dropped"
    );
    let key = format!("key-{}", not_served[0]);
    assert!(
        block_on(r.flash.bring_to_ram(&r.store, key.as_bytes(), NOW)).is_err(),
        "a command would have run on {key} as if it were absent"
    );
    faulty.heal_reads();
    for i in not_served {
        let item = get(&r, format!("key-{i}").as_bytes());
        assert_eq!(item.map(|it| it.value), Some(value_of(i)), "key-{i} lost");
    }
    r.flash.stop();
}

#[test]
fn the_pread_pool_serves_when_io_uring_is_off() {
    let r = rig_with(
        4,
        |p| FlashConfig {
            io_uring: false,
            ..config(p, 200)
        },
        None,
    );
    assert_eq!(r.flash.io_engine(), "pread");
    for i in 0..30_000 {
        set(&r, format!("key-{i}").as_bytes(), &value_of(i));
    }
    eventually("segments written", || {
        r.flash.counters.extstore_bytes_written.load(Relaxed) > 0
    });
    let mut misses = 0;
    for i in 0..30_000 {
        match get(&r, format!("key-{i}").as_bytes()) {
            Some(item) => assert_eq!(item.value, value_of(i)),
            None => misses += 1,
        }
    }
    assert_eq!(misses, 0);
    assert!(r.flash.counters.flash_device_reads.load(Relaxed) > 0);
    r.flash.stop();
}

#[test]
fn io_uring_is_used_on_the_work_disk() {
    let r = rig(4, 20);
    // This kernel has io_uring; a machine without it falls back (and logs why).
    assert_eq!(
        r.flash.io_engine(),
        "io_uring",
        "{:?}",
        r.flash.uring_unavailable
    );
    r.flash.stop();
}

#[test]
fn a_current_thread_runtime_reads_through_its_own_ring_and_others_through_the_shared_one() {
    let r = rig(4, 200);
    for i in 0..30_000 {
        set(&r, format!("key-{i}").as_bytes(), &value_of(i));
    }
    eventually("segments written", || {
        r.flash.counters.extstore_bytes_written.load(Relaxed) > 0
    });
    let own = || r.flash.counters.flash_reads_own_ring.load(Relaxed);
    let device = || r.flash.counters.flash_device_reads.load(Relaxed);
    // One current-thread runtime (a server worker's kind) reading many keys at once: every
    // device read goes through the thread's own ring, each value exact.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (own0, dev0) = (own(), device());
    let keys: Vec<usize> = (0..30_000).step_by(7).collect();
    let found = rt.block_on(async {
        // Many reads in flight at once on one thread: one read's poll reaps the others'
        // completions and wakes them. In waves as large as the thread's ring: past that, a
        // read goes to the shared ring by design (the ring is full).
        let mut found = 0;
        for wave in keys.chunks(crate::reader::LOCAL_RING_ENTRIES as usize) {
            let mut tasks = tokio::task::JoinSet::new();
            for &i in wave {
                let (flash, store) = (Arc::clone(&r.flash), Arc::clone(&r.store));
                tasks.spawn(async move {
                    let key = format!("key-{i}");
                    match flash
                        .get(&store, key.as_bytes(), NOW, Promotion::IfHot)
                        .await
                    {
                        ReadOutcome::Hit(item) => item.value == value_of(i),
                        _ => false,
                    }
                });
            }
            while let Some(ok) = tasks.join_next().await {
                found += usize::from(ok.unwrap());
            }
        }
        found
    });
    assert_eq!(found, keys.len());
    assert!(device() > dev0, "no device read at all");
    assert_eq!(own() - own0, device() - dev0, "a read left the thread");
    // A multi-thread runtime's task may move between threads: the shared ring serves it.
    let mt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (own1, dev1) = (own(), device());
    for i in (1..30_000).step_by(101) {
        let key = format!("key-{i}");
        match mt.block_on(r.flash.get(&r.store, key.as_bytes(), NOW, Promotion::IfHot)) {
            ReadOutcome::Hit(item) => assert_eq!(item.value, value_of(i)),
            _ => panic!("{key} missing"),
        }
    }
    assert!(device() > dev1);
    assert_eq!(own(), own1);
    r.flash.stop();
}

#[test]
fn a_read_given_up_before_its_completion_leaves_the_ring_serving() {
    let r = rig(4, 200);
    for i in 0..30_000 {
        set(&r, format!("key-{i}").as_bytes(), &value_of(i));
    }
    eventually("segments written", || {
        r.flash.counters.extstore_bytes_written.load(Relaxed) > 0
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        for i in (0..30_000).step_by(97) {
            // Polled once (its read submitted), then dropped with the read in flight.
            let key = format!("key-{i}");
            let mut abandoned =
                Box::pin(r.flash.get(&r.store, key.as_bytes(), NOW, Promotion::IfHot));
            let _ = futures_poll_once(abandoned.as_mut()).await;
            drop(abandoned);
            let key = format!("key-{}", i + 1);
            match r
                .flash
                .get(&r.store, key.as_bytes(), NOW, Promotion::IfHot)
                .await
            {
                ReadOutcome::Hit(item) => assert_eq!(item.value, value_of(i + 1)),
                _ => panic!("{key} missing"),
            }
        }
    });
    assert!(r.flash.counters.flash_reads_own_ring.load(Relaxed) > 0);
    drop(rt);
    r.flash.stop();
}

/// Polls `f` once.
async fn futures_poll_once<F: std::future::Future + Unpin>(mut f: F) -> std::task::Poll<F::Output> {
    std::future::poll_fn(|cx| std::task::Poll::Ready(std::pin::Pin::new(&mut f).poll(cx))).await
}

#[test]
fn bad_settings_are_refused_naming_the_path() {
    let dir = work_dir();
    let small = dir.path().join("small.dat");
    let err = Flash::open(config(small.clone(), 3))
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("small.dat") && err.contains("below 8 segments"),
        "{err}"
    );
    let nowhere = dir.path().join("no-such-dir").join("f.dat");
    let err = Flash::open(config(nowhere, 20)).err().unwrap().to_string();
    assert!(
        err.contains("no-such-dir") && err.contains("cannot open"),
        "{err}"
    );
    if std::path::Path::new("/dev/shm").is_dir() {
        let shm = tempfile::tempdir_in("/dev/shm").unwrap();
        let err = Flash::open(config(shm.path().join("f.dat"), 20))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("O_DIRECT") && err.contains("f.dat"), "{err}");
        // Without O_DIRECT it is accepted.
        let ok = Flash::open(FlashConfig {
            direct_io: false,
            ..config(shm.path().join("g.dat"), 20)
        });
        assert!(ok.is_ok());
    }
    let err = Flash::open(FlashConfig {
        segment_bytes: 5000,
        ..config(dir.path().join("odd.dat"), 20)
    })
    .err()
    .unwrap()
    .to_string();
    assert!(err.contains("multiple of 4 KiB"), "{err}");
}

/// An item's metadata with `rev` as its revision (and CAS), as the checkpoint tests admit it.
fn meta_of_revision(rev: u64) -> ItemMeta {
    ItemMeta {
        flags: 0,
        exptime: 0,
        cas: rev,
        last_access: NOW,
        fetched: false,
        stale: false,
        win_sent: false,
        mod_revision: rev,
    }
}

#[test]
fn a_checkpoint_leaves_out_entries_of_segments_written_wholly_after_its_position() {
    // Items admitted with revisions 101..=120 fill one segment, then one with revision 50
    // opens the next... the checkpoint at L0 = 100 leaves out the first segment's entries
    // (their records, 101 on, are replayed from that snapshot anyway) but names a segment
    // holding any item of revision <= 100.
    let r = rig(4, 40);
    let value = vec![7u8; 20_000];
    let admit = |i: u64, rev: u64| {
        let key = format!("k{i}");
        let hash = r.store.key_hash(key.as_bytes());
        r.flash
            .admit(hash, key.as_bytes(), &value, &meta_of_revision(rev))
            .expect("admitted")
    };
    // 64 KiB segments of 20 KB items: three items each.
    let newer: Vec<FlashLoc> = (0..3).map(|i| admit(i, 101 + i)).collect();
    let mixed: Vec<FlashLoc> = vec![admit(10, 150), admit(11, 50), admit(12, 151)];
    assert_ne!(
        r.flash.seg_of(newer[0].block()),
        r.flash.seg_of(mixed[0].block()),
        "two segments"
    );
    r.flash.checkpoint_begin();
    for loc in &newer {
        assert_eq!(r.flash.checkpoint_entry(*loc, 100), None);
    }
    for loc in &mixed {
        assert!(r.flash.checkpoint_entry(*loc, 100).is_some());
    }
    // At L0 = 200 every item is at or before it: all named.
    for loc in newer.iter().chain(&mixed) {
        assert!(r.flash.checkpoint_entry(*loc, 200).is_some());
    }
}

#[test]
fn pins_give_a_segments_largest_revision_and_recovery_finds_its_items_past_a_checkpoint() {
    // One segment holds items of revisions 150, 50 and 151. A checkpoint at L0 = 100 names
    // it (one item is at or before L0) with its largest revision, 151; a restart on the same
    // file finds the two items past 100 (their records are replayed from that snapshot, so
    // recovery leaves their entries out), none past 151, and none when the pins file did not
    // say (an older version: 0).
    let r = rig(4, 40);
    let value = vec![7u8; 20_000];
    let admit = |key: &str, rev: u64| {
        let hash = r.store.key_hash(key.as_bytes());
        r.flash
            .admit(hash, key.as_bytes(), &value, &meta_of_revision(rev))
            .expect("admitted")
    };
    let locs: Vec<FlashLoc> = vec![admit("a", 150), admit("b", 50), admit("c", 151)];
    r.flash.checkpoint_begin();
    for loc in &locs {
        assert!(r.flash.checkpoint_entry(*loc, 100).is_some());
    }
    let pins = r.flash.checkpoint_sync().unwrap();
    assert_eq!(pins.len(), 1, "{pins:?}");
    assert_eq!(pins[0].max_revision, 151);
    r.flash.stop();
    r.flash.unlock_device();

    let reopen = || Flash::open_keeping(config(r.path.clone(), 40), true).unwrap();
    let again = reopen();
    assert_eq!(again.recover_pins(&pins), 1);
    let mut past = again.items_past(100);
    past.sort();
    let found: Vec<(u64, u64)> = past
        .iter()
        .map(|p| {
            let loc = FlashLoc::new(r.store.key_hash(&p.key), p.block, p.nblocks);
            (p.seq, loc.place())
        })
        .collect();
    assert_eq!(
        found,
        vec![
            (pins[0].seq, locs[0].place()),
            (pins[0].seq, locs[2].place())
        ]
    );
    assert!(again.items_past(151).is_empty());
    again.stop();
    again.unlock_device();

    let unknown = reopen();
    let old_pins = [Pin {
        max_revision: 0,
        ..pins[0]
    }];
    assert_eq!(unknown.recover_pins(&old_pins), 1);
    assert!(unknown.items_past(100).is_empty());
}
