//! Store tests: every method, a model comparison, eviction under a limit, threads.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::sync::Mutex as StdMutex;

use proptest::prelude::*;

use super::*;

fn store(limit_mb: u64) -> Store {
    Store::new(
        StoreConfig {
            memory_limit_bytes: limit_mb << 20,
            ..StoreConfig::default()
        },
        None,
    )
}

/// One 8 MiB shard with eviction: eviction order is easy to reason about.
fn one_shard_8_mib() -> Store {
    Store::new(
        StoreConfig {
            memory_limit_bytes: 8 << 20,
            shard_count: 1,
            ..StoreConfig::default()
        },
        None,
    )
}

fn set(s: &Store, key: &[u8], value: &[u8], flags: u32, exptime: u32) -> ItemMeta {
    s.entry(key, 100, |e| e.store(&[value], flags, exptime, None))
        .unwrap()
}

/// A store of keys `k0` .. `k{n - 1}`, each a 50 B value with this expiry.
fn store_of_keys(n: u32, exptime: u32) -> Store {
    let s = store(64);
    for i in 0..n {
        set(&s, format!("k{i}").as_bytes(), &[b'v'; 50], 0, exptime);
    }
    s
}

fn value(s: &Store, key: &[u8], now: u32) -> Option<Vec<u8>> {
    match s.get(key, now) {
        ReadOutcome::Hit(i) => Some(i.value),
        _ => None,
    }
}

#[test]
fn store_get_overwrite_delete() {
    let s = store(64);
    let m1 = set(&s, b"a", b"one", 7, 0);
    assert_eq!(m1.flags, 7);
    let ReadOutcome::Hit(item) = s.get(b"a", 100) else {
        panic!("hit")
    };
    assert_eq!(
        (item.value.as_slice(), item.meta.cas),
        (&b"one"[..], m1.cas)
    );
    let m2 = set(&s, b"a", b"two!", 0, 0);
    assert!(m2.cas > m1.cas, "a fresh unique per store");
    assert_eq!(value(&s, b"a", 100).as_deref(), Some(&b"two!"[..]));
    assert_eq!(s.stats().curr_items, 1);
    assert_eq!(s.stats().total_items, 2);
    assert!(s.entry(b"a", 100, |e| e.delete()));
    assert!(!s.entry(b"a", 100, |e| e.delete()));
    assert_eq!(s.get(b"a", 100), ReadOutcome::Miss);
    assert_eq!(s.stats().curr_items, 0);
    assert_eq!(s.stats().bytes, 0);
}

#[test]
fn parts_are_concatenated_and_fetched_is_tracked() {
    let s = store(64);
    s.entry(b"k", 1, |e| e.store(&[b"ab", b"", b"cd"], 0, 0, Some(99)))
        .unwrap();
    assert_eq!(
        s.entry(b"k", 1, |e| e.peek())
            .map(|(m, l)| (m.cas, l, m.fetched)),
        Some((99, 4, false))
    );
    assert_eq!(value(&s, b"k", 1).as_deref(), Some(&b"abcd"[..]));
    assert_eq!(
        s.entry(b"k", 1, |e| e.peek()).map(|(m, _)| m.fetched),
        Some(true)
    );
}

#[test]
fn expiry_is_lazy_and_counted() {
    let s = store(64);
    set(&s, b"e", b"x", 0, 150);
    assert!(value(&s, b"e", 149).is_some());
    assert_eq!(s.get(b"e", 150), ReadOutcome::Expired);
    assert_eq!(s.get(b"e", 150), ReadOutcome::Miss);
    set(&s, b"f", b"x", 0, 150);
    assert!(s.entry(b"f", 200, |e| e.was_expired() && e.peek().is_none()));
    let st = s.stats();
    assert_eq!(
        (st.curr_items, st.reclaimed, st.expired_unfetched),
        (0, 2, 1)
    );
}

#[test]
fn reclaim_frees_expired_items() {
    let s = store(64);
    for i in 0..1000u32 {
        set(
            &s,
            format!("k{i}").as_bytes(),
            b"v",
            0,
            if i % 2 == 0 { 150 } else { 0 },
        );
    }
    let mut total = 0;
    for _ in 0..10 {
        total += s.reclaim_expired(200, 10_000);
    }
    assert_eq!(total, 500);
    assert_eq!(s.stats().curr_items, 500);
    assert!(value(&s, b"k1", 200).is_some());
}

/// The sweep reads only segments that hold an item written with an expiry; a touch can give
/// an expiry in place only to an item written with one, so nothing is missed. Before, it
/// read every item of every segment it passed.
#[test]
fn the_expiry_sweep_reads_only_segments_with_expiring_items() {
    let s = store_of_keys(20_000, 0);
    for _ in 0..10 {
        assert_eq!(s.reclaim_expired(200, 10_000), 0);
    }
    assert_eq!(
        s.stats().crawler_items_checked,
        0,
        "read items that cannot expire"
    );
    // One item with an expiry, then a touch that moves it (in place): the sweep finds it.
    set(&s, b"ttl", b"v", 0, 150);
    assert!(s.entry(b"ttl", 100, |e| e.update_meta(|m| m.exptime = 160)));
    let mut total = 0;
    for _ in 0..10 {
        total += s.reclaim_expired(200, 10_000);
    }
    assert_eq!(total, 1);
    // Only the segments holding "ttl" were read: fewer items than one pass over them all.
    let checked = s.stats().crawler_items_checked;
    assert!(checked > 0 && checked < 20_000, "{checked} items read");
    assert!(value(&s, b"k1", 200).is_some());
}

/// The sweep's bound holds within a segment: a call reads at most its share of items per
/// shard and the next call goes on from there, until every expired item is gone. Before, a
/// call read at least one whole segment of each shard.
#[test]
fn the_expiry_sweep_stops_at_its_bound_inside_a_segment() {
    let s = store_of_keys(20_000, 150);
    let bound = 10 * s.shard_count();
    let mut total = 0;
    while total < 20_000 {
        let before = s.stats().crawler_items_checked;
        let got = s.reclaim_expired(200, bound);
        let read = s.stats().crawler_items_checked - before;
        assert!(
            read <= bound as u64,
            "a call read {read} items (bound {bound})"
        );
        assert!(
            got > 0,
            "a call reclaimed nothing with {total} of 20,000 reclaimed"
        );
        total += got;
    }
    assert_eq!((total, s.stats().curr_items), (20_000, 0));
}

/// A sink that numbers mutations and keeps one line per report.
#[derive(Default)]
struct Reports {
    lines: StdMutex<Vec<String>>,
    revision: AtomicU64,
}

impl MutationSink for Reports {
    fn on_mutation(&self, m: &Mutation<'_>) -> Revision {
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let prev = |p: &PrevItem<'_>| format!("{}@{}", text(p.value), p.meta.mod_revision);
        let rev = self.revision.fetch_add(1, Ordering::Relaxed) + 1;
        let line = match m {
            Mutation::Stored {
                key,
                value,
                meta,
                prev: p,
            } => {
                assert_eq!(meta.mod_revision, 0, "the sink assigns the revision");
                format!(
                    "{rev} S {} {} {} {} prev={}",
                    text(key),
                    text(value),
                    meta.exptime,
                    meta.stale,
                    p.as_ref().map_or("-".into(), prev)
                )
            }
            Mutation::Deleted {
                key,
                reason,
                prev: p,
            } => {
                format!(
                    "{rev} D {} {reason:?} prev={}",
                    text(key),
                    p.as_ref().map_or("-".into(), prev)
                )
            }
            Mutation::Flushed => format!("{rev} F"),
            Mutation::FlushScheduled { at } => format!("{rev} FS {at}"),
        };
        self.lines.lock().unwrap().push(line);
        rev
    }
}

impl Reports {
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.lines.lock().unwrap())
    }
}

#[test]
fn update_meta_and_mutation_reports() {
    let log = Arc::new(Reports::default());
    let s = Store::new(StoreConfig::default(), Some(log.clone()));
    assert_eq!(set(&s, b"k", b"v", 0, 0).mod_revision, 1);
    assert!(
        s.entry(b"k", 100, |e| e.update_meta(|m| m.fetched = true)),
        "not reported"
    );
    assert!(s.entry(b"k", 100, |e| e.update_meta(|m| m.exptime = 500)));
    assert!(s.entry(b"k", 100, |e| e.update_meta(|m| m.stale = true)));
    assert!(s.entry(b"k", 100, |e| e.update_meta(|m| m.flags = 3)));
    assert_eq!(
        s.entry(b"k", 100, |e| e.peek()).map(|(m, _)| (
            m.flags,
            m.stale,
            m.exptime,
            m.mod_revision
        )),
        Some((3, true, 500, 4)),
        "each visible change is a revision, kept by the item"
    );
    assert!(!s.entry(b"nope", 100, |e| e.update_meta(|m| m.exptime = 1)));
    s.entry(b"k", 100, |e| e.delete());
    s.get(b"k", 100);
    s.flush_all();
    // A schedule replaced by a later one runs only as the later one; flush_all cancels it.
    s.schedule_flush(200);
    s.schedule_flush(300);
    assert!(
        !s.run_scheduled_flush(200),
        "a replaced schedule must not run"
    );
    assert!(s.run_scheduled_flush(300));
    assert!(!s.run_scheduled_flush(300), "runs once");
    s.schedule_flush(400);
    s.flush_all();
    assert_eq!(s.scheduled_flush(), None);
    assert!(
        !s.run_scheduled_flush(400),
        "flush_all cancels the schedule"
    );
    assert_eq!(
        log.take(),
        vec![
            "1 S k v 0 false prev=-",
            "2 S k v 500 false prev=v@1",
            "3 S k v 500 true prev=v@2",
            "4 S k v 500 true prev=v@3",
            "5 D k Client prev=v@4",
            "6 F",
            "7 FS 200",
            "8 FS 300",
            "9 F",
            "10 FS 400",
            "11 F",
        ]
    );
}

#[test]
fn expiry_and_eviction_are_reported_with_their_reason() {
    let log = Arc::new(Reports::default());
    let s = Store::new(
        StoreConfig {
            memory_limit_bytes: 8 << 20,
            shard_count: 1,
            ..StoreConfig::default()
        },
        Some(log.clone()),
    );
    s.entry(b"e1", 100, |e| e.store(&[b"x"], 0, 150, None))
        .unwrap();
    s.entry(b"e2", 100, |e| e.store(&[b"y"], 0, 150, None))
        .unwrap();
    s.entry(b"e3", 100, |e| e.store(&[b"z"], 0, 150, None))
        .unwrap();
    assert_eq!(s.get(b"e1", 150), ReadOutcome::Expired);
    assert!(s.entry(b"e2", 150, |e| e.was_expired()));
    assert_eq!(s.reclaim_expired(150, 100), 1);
    assert_eq!(
        log.take(),
        vec![
            "1 S e1 x 150 false prev=-",
            "2 S e2 y 150 false prev=-",
            "3 S e3 z 150 false prev=-",
            "4 D e1 Expired prev=x@1",
            "5 D e2 Expired prev=y@2",
            "6 D e3 Expired prev=z@3",
        ]
    );
    // Fill past the limit: every item that leaves is reported as evicted, once, and a store
    // that evicted its own key's old copy reports no previous item.
    let value = vec![7u8; 1000];
    for i in 0..20_000u32 {
        s.entry(format!("k{i}").as_bytes(), 100, |e| {
            e.store(&[&value], 0, 0, None)
        })
        .unwrap();
    }
    let lines = log.take();
    let evicted = lines.iter().filter(|l| l.contains(" Evicted ")).count() as u64;
    assert!(evicted > 0);
    assert_eq!(s.stats().evictions, evicted);
    assert_eq!(s.stats().curr_items + evicted, 20_000);
    let revs: Vec<u64> = lines
        .iter()
        .map(|l| l.split(' ').next().unwrap().parse().unwrap())
        .collect();
    assert!(revs.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn moved_items_keep_their_revision() {
    let s = Store::new(
        StoreConfig {
            memory_limit_bytes: 8 << 20,
            shard_count: 1,
            ..StoreConfig::default()
        },
        None,
    );
    let hot = set(&s, b"hot", b"value", 0, 0);
    let value = vec![7u8; 1000];
    for i in 0..20_000u32 {
        // Read the hot key now and then: second chance copies it forward.
        let _ = s.get(b"hot", 100);
        set(&s, format!("k{i}").as_bytes(), &value, 0, 0);
    }
    let ReadOutcome::Hit(item) = s.get(b"hot", 100) else {
        panic!("the hot key was kept")
    };
    assert_eq!(item.meta.mod_revision, hot.mod_revision);
    assert!(s.newest_revision() > 20_000);
}

#[test]
fn last_access_is_the_items_own() {
    let s = one_shard_8_mib();
    let access = |now| s.entry(b"k", now, |e| e.peek()).map(|(m, _)| m.last_access);
    // The segment is opened at 1000 by the first store; later items share it.
    s.entry(b"first", 1000, |e| e.store(&[b"x"], 0, 0, None))
        .unwrap();
    s.entry(b"k", 1500, |e| e.store(&[b"v"], 0, 0, None))
        .unwrap();
    assert_eq!(access(1600), Some(1500), "a store is an access");
    assert!(matches!(s.get(b"k", 1700), ReadOutcome::Hit(_)));
    assert_eq!(access(1800), Some(1700), "a get is an access");
    assert!(s.entry(b"k", 5000, |e| e.update_meta(|m| m.last_access = 5000)));
    assert_eq!(access(5100), Some(5000));
    // A day after the segment opened, the time is rounded by under 1/2048 of a day.
    assert!(matches!(s.get(b"k", 1000 + 86_400), ReadOutcome::Hit(_)));
    let back = access(1000 + 86_400).unwrap();
    assert!(
        (1000 + 86_400 - 43..=1000 + 86_400).contains(&back),
        "{back}"
    );
    // Touching an item stored without an expiry writes a copy with room for one: value, flags,
    // CAS and last access stay.
    let (before, _) = s.entry(b"k", 90_000, |e| e.peek()).unwrap();
    assert!(s.entry(b"k", 90_000, |e| e.update_meta(|m| m.exptime = 99_999)));
    let (after, _) = s.entry(b"k", 90_000, |e| e.peek()).unwrap();
    assert_eq!(
        (after.exptime, after.cas, after.flags),
        (99_999, before.cas, 0)
    );
    assert_eq!(after.last_access, before.last_access);
    assert_eq!(value(&s, b"k", 90_000).as_deref(), Some(&b"v"[..]));
    assert_eq!(s.stats().curr_items, 2);
}

#[test]
fn the_memory_limit_changes_while_serving() {
    let s = store(64);
    let v = vec![7u8; 1000];
    for i in 0..50_000u32 {
        s.entry(format!("key{i}").as_bytes(), 1, |e| {
            e.store(&[&v], 0, 0, None)
        })
        .unwrap();
    }
    let before = s.stats();
    assert!(before.memory_used_bytes > 40 << 20, "{before:?}");
    assert_eq!(
        s.min_memory_limit(),
        32 << 20,
        "16 shards of two 1 MiB segments"
    );
    s.set_memory_limit(32 << 20, 2);
    let after = s.stats();
    assert_eq!(after.limit_maxbytes, 32 << 20);
    assert!(after.memory_used_bytes <= 32 << 20, "{after:?}");
    assert!(after.evictions > before.evictions);
    assert!(value(&s, b"key49999", 2).is_some(), "the newest stay");
    // Growing again lets the store fill up to the new limit.
    s.set_memory_limit(128 << 20, 3);
    for i in 0..100_000u32 {
        s.entry(format!("more{i}").as_bytes(), 3, |e| {
            e.store(&[&v], 0, 0, None)
        })
        .unwrap();
    }
    let grown = s.stats();
    assert!(grown.memory_used_bytes > 64 << 20, "{grown:?}");
    assert!(grown.memory_used_bytes <= 128 << 20, "{grown:?}");
    assert_eq!(
        Store::item_bytes(
            b"k",
            &v,
            &ItemMeta {
                flags: 0,
                exptime: 0,
                cas: 1,
                last_access: 0,
                fetched: false,
                stale: false,
                win_sent: false,
                mod_revision: 0,
            }
        ),
        2 + 2 + 2 + 4 + 4 + 1 + 1000
    );
}

#[test]
fn a_second_chance_keeps_the_last_access() {
    let s = one_shard_8_mib();
    let v = vec![7u8; 1000];
    s.entry(b"hot", 10, |e| e.store(&[&v], 0, 0, None)).unwrap();
    assert!(matches!(s.get(b"hot", 20), ReadOutcome::Hit(_)));
    // Later writes until the hot item's segment is pushed out: it moves to a segment opened
    // after its last access, and keeps that access time.
    let mut i = 0u32;
    while s.stats().evictions == 0 {
        s.entry(format!("cold{i}").as_bytes(), 3000, |e| {
            e.store(&[&v], 0, 0, None)
        })
        .unwrap();
        i += 1;
    }
    let got = s
        .entry(b"hot", 3000, |e| e.peek())
        .map(|(m, _)| m.last_access);
    assert_eq!(got, Some(20));
}

#[test]
fn too_large_and_out_of_memory() {
    let s = Store::new(
        StoreConfig {
            memory_limit_bytes: 8 << 20,
            evict_when_full: false,
            item_size_max_bytes: 1 << 20,
            shard_count: 1,
            ..StoreConfig::default()
        },
        None,
    );
    let big = vec![0u8; 1 << 20];
    assert_eq!(
        s.entry(b"k", 1, |e| e.store(&[&big], 0, 0, None)),
        Err(StoreError::TooLarge)
    );
    let v = vec![1u8; 100_000];
    let mut stored = 0;
    let err = loop {
        match s.entry(format!("k{stored}").as_bytes(), 1, |e| {
            e.store(&[&v], 0, 0, None)
        }) {
            Ok(_) => stored += 1,
            Err(e) => break e,
        }
        assert!(stored < 1000, "never ran out");
    };
    assert_eq!(err, StoreError::OutOfMemory);
    assert!(stored >= 60, "only {stored} fit in 8 MiB");
    assert!(
        value(&s, b"k0", 1).is_some(),
        "nothing evicted with evictions off"
    );
    assert_eq!(s.stats().evictions, 0);
}

#[test]
fn eviction_keeps_memory_under_the_limit() {
    let s = store(16);
    let v = vec![7u8; 1000];
    for i in 0..100_000u32 {
        s.entry(format!("key{i}").as_bytes(), 1, |e| {
            e.store(&[&v], 0, 0, None)
        })
        .unwrap();
    }
    let st = s.stats();
    assert!(st.memory_used_bytes <= 16 << 20, "{st:?}");
    assert!(st.evictions > 50_000, "{st:?}");
    assert_eq!(st.curr_items + st.evictions, 100_000);
    assert!(value(&s, b"key99999", 1).is_some(), "the newest survives");
    assert!(value(&s, b"key0", 1).is_none(), "the oldest went");
}

#[test]
fn fetched_items_get_a_second_chance() {
    let s = one_shard_8_mib();
    let v = vec![7u8; 1000];
    s.entry(b"hot", 1, |e| e.store(&[&v], 0, 0, None)).unwrap();
    for i in 0..20_000u32 {
        if i % 100 == 0 {
            assert!(value(&s, b"hot", 1).is_some(), "hot item lost at {i}");
        }
        s.entry(format!("cold{i}").as_bytes(), 1, |e| {
            e.store(&[&v], 0, 0, None)
        })
        .unwrap();
    }
    assert!(s.stats().evictions > 0);
}

#[test]
fn concurrent_writers_and_readers() {
    let s = Arc::new(store(64));
    let threads: Vec<_> = (0..4u8)
        .map(|t| {
            let s = Arc::clone(&s);
            std::thread::spawn(move || {
                for i in 0..20_000u32 {
                    let key = format!("k{}", i % 500);
                    if i % 3 == 0 {
                        s.entry(key.as_bytes(), 1, |e| {
                            e.store(&[&[t; 10]], u32::from(t), 0, None)
                        })
                        .unwrap();
                    } else if let ReadOutcome::Hit(item) = s.get(key.as_bytes(), 1) {
                        assert_eq!(item.value, vec![item.meta.flags as u8; 10], "torn item");
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(s.stats().curr_items, 500);
}

#[derive(Clone, Debug)]
enum Op {
    Set(u8, Vec<u8>, u32),
    Delete(u8),
    Touch(u8, u32),
    Get(u8),
    Flush,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0u8..20, proptest::collection::vec(any::<u8>(), 0..300), prop_oneof![Just(0u32), 90u32..120]).prop_map(|(k, v, e)| Op::Set(k, v, e)),
        2 => (0u8..20).prop_map(Op::Delete),
        1 => (0u8..20, 90u32..120).prop_map(|(k, e)| Op::Touch(k, e)),
        3 => (0u8..20).prop_map(Op::Get),
        1 => Just(Op::Flush),
    ]
}

proptest! {
    /// The store answers like a BTreeMap with expiry, at a fixed clock of 100.
    #[test]
    fn matches_a_model(ops in proptest::collection::vec(op(), 1..200)) {
        let s = store(64);
        let mut model: BTreeMap<u8, (Vec<u8>, u32)> = BTreeMap::new();
        let now = 100;
        let live = |m: &BTreeMap<u8, (Vec<u8>, u32)>, k: u8| m.get(&k).filter(|(_, e)| *e == 0 || *e > now).cloned();
        for op in ops {
            match op {
                Op::Set(k, v, e) => {
                    s.entry(&[k], now, |en| en.store(&[&v], 0, e, None)).unwrap();
                    model.insert(k, (v, e));
                }
                Op::Delete(k) => {
                    let existed = s.entry(&[k], now, |en| en.delete());
                    prop_assert_eq!(existed, live(&model, k).is_some());
                    model.remove(&k);
                }
                Op::Touch(k, e) => {
                    let touched = s.entry(&[k], now, |en| en.update_meta(|m| m.exptime = e));
                    prop_assert_eq!(touched, live(&model, k).is_some());
                    if let Some(entry) = model.get_mut(&k) {
                        if touched { entry.1 = e; }
                    }
                }
                Op::Get(k) => {
                    prop_assert_eq!(value(&s, &[k], now), live(&model, k).map(|(v, _)| v));
                }
                Op::Flush => {
                    s.flush_all();
                    model.clear();
                }
            }
        }
        let expected = (0..20u8).filter(|&k| live(&model, k).is_some()).count() as u64;
        let actual = (0..20u8).filter(|&k| value(&s, &[k], now).is_some()).count() as u64;
        prop_assert_eq!(actual, expected);
    }
}

#[test]
fn visit_shard_sees_every_live_item_once() {
    let s = store(64);
    for i in 0..1000u32 {
        set(
            &s,
            format!("k{i}").as_bytes(),
            b"v",
            0,
            if i % 10 == 0 { 150 } else { 0 },
        );
    }
    set(&s, b"k1", b"newer", 0, 0);
    let mut seen = Vec::new();
    for i in 0..s.shard_count() {
        s.visit_shard(i, 200, |k, v, _| seen.push((k.to_vec(), v.to_vec())));
    }
    seen.sort();
    assert_eq!(
        seen.len(),
        900,
        "expired and overwritten copies are skipped"
    );
    assert!(seen.contains(&(b"k1".to_vec(), b"newer".to_vec())));
}

#[test]
fn explicit_cas_raises_the_floor() {
    let s = store(64);
    s.entry(b"a", 1, |e| e.store(&[b"x"], 0, 0, Some(1000)))
        .unwrap();
    let m = set(&s, b"b", b"y", 0, 0);
    assert!(m.cas > 1000);
    s.raise_cas_floor(5000);
    assert!(set(&s, b"c", b"z", 0, 0).cas > 5000);
}

#[test]
fn large_items_that_fit_the_limit_are_not_evicted_by_their_shard() {
    // 64 MiB with 4 MiB items: whatever shards the keys land in, four 3 MiB items fit.
    let s = Store::new(
        StoreConfig {
            memory_limit_bytes: 64 << 20,
            item_size_max_bytes: 4 << 20,
            ..StoreConfig::default()
        },
        None,
    );
    let big = vec![7u8; 3 << 20];
    for i in 0..4 {
        let key = format!("big{i}");
        s.entry(key.as_bytes(), 1, |e| e.store(&[&big], 0, 0, None))
            .unwrap();
    }
    for i in 0..4 {
        let key = format!("big{i}");
        assert!(
            s.entry(key.as_bytes(), 1, |e| e.item().is_some()),
            "{key} was evicted"
        );
    }
}

#[test]
fn index_locations_pack_into_five_bytes_exactly() {
    use shard::{Loc, Packed, MAX_SEGMENTS};
    for (slot, offset) in [
        (0, 0),
        (1, 1),
        (MAX_SEGMENTS as u32 - 1, (1 << 20) - 1),
        (0x5_a5a5, 0xa_5a5a),
        (MAX_SEGMENTS as u32 - 1, 0),
        (0, (1 << 20) - 1),
    ] {
        let loc = Loc { slot, offset };
        assert_eq!(Packed::new(loc).loc(), loc);
    }
}

#[test]
fn cas_uniques_stay_exact_far_from_their_segments_base_and_when_moved() {
    let s = one_shard_8_mib();
    // An explicit unique far behind the floor to come, and fresh ones far beyond the base of
    // the segment they are written to: both overflow the 4-byte distance.
    s.entry(b"old", 1, |e| e.store(&[b"v"], 0, 0, Some(7)))
        .unwrap();
    s.raise_cas_floor(1 << 40);
    let new = set(&s, b"new", b"w", 0, 0).cas;
    assert_eq!(new, (1 << 40) + 1);
    let cas = |key: &[u8]| s.entry(key, 2, |e| e.item().map(|i| i.meta.cas));
    // A touch rewrites the item in place and keeps its unique.
    assert!(s.entry(b"old", 2, |e| e.update_meta(|m| m.exptime = 0)));
    let filler = vec![1u8; 1000];
    let mut last = new;
    for i in 0..30_000u32 {
        if i % 500 == 0 {
            // Fetched, so eviction copies them to the head (second chance) with their uniques.
            assert_eq!(value(&s, b"old", 2).as_deref(), Some(&b"v"[..]));
            assert_eq!(value(&s, b"new", 2).as_deref(), Some(&b"w"[..]));
        }
        let m = set(&s, format!("f{i}").as_bytes(), &filler, 0, 0);
        assert!(m.cas > last, "fresh uniques keep growing");
        last = m.cas;
    }
    assert!(s.stats().evictions > 0, "the first segment was emptied");
    assert_eq!((cas(b"old"), cas(b"new")), (Some(7), Some(new)));
}
