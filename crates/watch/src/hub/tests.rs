//! The hub's tests: publishing order, the ring's bound, events reused where they were made,
//! and writers and waiting readers on several threads.

use std::cell::Cell;

use cairn_persist::LogObserver;
use cairn_store::{Mutation, MutationSink, PrevItem, Revision};

use super::*;
use crate::event_bytes::FRESH_ALLOCATIONS;

use crate::test_items::{meta, put};

fn revisions(hub: &Hub, from: Revision) -> Vec<Revision> {
    let (events, _) = hub.read(from, hub.published(), usize::MAX).unwrap();
    events.iter().map(|e| e.revision).collect()
}

/// A fed hub's event: a skeleton (see `Shape`).
fn skeleton_size() -> usize {
    Event::from_mutation_in(
        &put(b"k", &[0]),
        1,
        Box::default(),
        Shape::Skeleton { keep_prev: false },
    )
    .unwrap()
    .size_bytes()
}

#[test]
fn a_fed_hub_publishes_the_safe_filled_prefix_in_order() {
    let hub = Hub::new(10, 1 << 20, false);
    hub.activate();
    hub.on_logged(12, &put(b"b", b"2"));
    hub.on_safe(12);
    assert_eq!(hub.published(), 10, "11 is not there yet");
    hub.on_logged(11, &put(b"a", b"1"));
    assert_eq!(hub.published(), 12);
    assert_eq!(revisions(&hub, 11), vec![11, 12]);
    hub.on_logged(13, &put(b"c", b"3"));
    hub.on_no_event(14);
    hub.on_logged(15, &Mutation::Flushed);
    assert_eq!(hub.published(), 12, "13.. are not safe yet");
    hub.on_safe(14);
    assert_eq!(hub.published(), 14);
    hub.on_safe(15);
    assert_eq!(revisions(&hub, 11), vec![11, 12, 13, 15]);
    // A ready prefix shorter than the rest (it moves, not the rest).
    for r in 16..=19 {
        hub.on_logged(r, &put(b"d", &[r as u8]));
    }
    hub.on_safe(16);
    assert_eq!(revisions(&hub, 15), vec![15, 16]);
    hub.on_safe(19);
    assert_eq!(revisions(&hub, 15), vec![15, 16, 17, 18, 19]);
    let (e, next) = hub.read(12, 15, 1).unwrap();
    assert_eq!((e[0].revision, next), (12, 13), "max bounds a read");
    assert_eq!(hub.read(10, 15, 9), Err(ReadError::Compacted(11)));
}

/// A fed hub's drain leaves the small events that fall off the ring to the writers, who
/// take one a revision (two past half the bound), and keeps at most `FALLEN_MAX` of them
/// waiting.
#[test]
fn a_fed_hub_leaves_fallen_events_to_the_writers() {
    let hub = Hub::new(0, 3 * skeleton_size(), false);
    hub.activate();
    let fallen = |hub: &Hub| hub.pending.lock().fallen.len();
    for r in 1..=10 {
        hub.on_logged(r, &put(b"k", &[r as u8]));
    }
    hub.on_safe(10);
    assert_eq!(revisions(&hub, 8), vec![8, 9, 10]);
    assert_eq!(fallen(&hub), 7, "revisions 1-7 wait for the writers");
    hub.on_logged(11, &put(b"k", &[11]));
    assert_eq!(fallen(&hub), 6, "a writer takes one for its next event");
    let many = FALLEN_MAX as u64 + 100;
    for r in 12..12 + many {
        hub.on_no_event(r);
    }
    for r in 12 + many..12 + 2 * many {
        hub.on_logged(r, &put(b"k", &[0]));
    }
    hub.on_safe(12 + 2 * many);
    assert_eq!(
        fallen(&hub),
        FALLEN_MAX,
        "the drain frees what is past the bound"
    );
    hub.on_no_event(12 + 2 * many + 1);
    assert_eq!(
        fallen(&hub),
        FALLEN_MAX - 2,
        "past half the bound, a writer takes two"
    );
}

#[test]
fn an_event_off_the_ring_becomes_the_threads_next_event_unless_a_reader_holds_it() {
    let one_event = Event::from_mutation(&put(b"a", &[1]), 1)
        .unwrap()
        .size_bytes();
    let hub = Hub::counting(one_event);
    hub.activate();
    let event = |rev: Revision| hub.read(rev, rev, 1).unwrap().0.remove(0);
    let fresh = || FRESH_ALLOCATIONS.with(Cell::get);
    let made = |hub: &Hub, key: &[u8], value: u8| {
        let before = fresh();
        hub.on_mutation(&put(key, &[value]));
        fresh() - before
    };
    assert_eq!(
        made(&hub, b"a", 1),
        2,
        "the first event: its Arc and its bytes"
    );
    assert_eq!(made(&hub, b"b", 2), 2, "nothing fell off yet");
    // Revision 1 fell off and waits as this thread's spare; 3 is made in it.
    assert_eq!(made(&hub, b"c", 3), 0, "both allocations reused");
    let third = event(3);
    assert_eq!(
        (third.revision, third.key(), third.value()),
        (3, &b"c"[..], Some(&[3][..]))
    );
    // A longer key: the Arc is reused, the bytes are not.
    assert_eq!(made(&hub, b"dd", 4), 1);
    // A reader still holds revision 3 when it falls off: it is not reused, and the
    // reader's event stays as it was.
    assert_eq!(made(&hub, b"e", 5), 2);
    assert_eq!(event(5).key(), b"e");
    assert_eq!(
        (third.revision, third.key(), third.value()),
        (3, &b"c"[..], Some(&[3][..]))
    );
}

#[test]
fn the_ring_drops_the_oldest_past_its_bound() {
    // Every event here takes the same bytes (one-byte key and value, revisions < 128).
    let size = Event::from_mutation(&put(b"k", &[0]), 1)
        .unwrap()
        .size_bytes();
    let hub = Hub::counting(3 * size);
    hub.activate();
    for i in 0..10u8 {
        assert_eq!(hub.on_mutation(&put(b"k", &[i])), u64::from(i) + 1);
    }
    assert_eq!(hub.published(), 10);
    assert_eq!(revisions(&hub, 8), vec![8, 9, 10]);
    assert_eq!(hub.read(7, 10, 9), Err(ReadError::Compacted(8)));
    let e = &hub.read(10, 10, 1).unwrap().0[0];
    assert_eq!((e.key(), e.value().unwrap()), (&b"k"[..], &[9u8][..]));
}

/// Two threads at once, each setting its own one-byte key (0 and 1) to 0, 1, ..
/// `writes` - 1 (8-byte little-endian values).
fn write_from_two_threads(hub: &Hub, writes: u64) {
    std::thread::scope(|s| {
        for w in 0..2u8 {
            s.spawn(move || {
                for i in 0..writes {
                    hub.on_mutation(&put(&[w], &i.to_le_bytes()));
                }
            });
        }
    });
}

/// Two threads writing at once into a counting hub: every revision is handed out once,
/// the ring holds them in order, and each key's events come in the order of its writes.
#[test]
fn concurrent_writers_get_one_revision_each_in_ring_order() {
    const WRITES: u64 = 5_000;
    let hub = Hub::counting(64 << 20);
    hub.activate();
    write_from_two_threads(&hub, WRITES);
    let (events, _) = hub.read(1, hub.published(), usize::MAX).unwrap();
    let revs: Vec<Revision> = events.iter().map(|e| e.revision).collect();
    assert_eq!(revs, (1..=2 * WRITES).collect::<Vec<_>>());
    for w in 0..2u8 {
        let values: Vec<u64> = events
            .iter()
            .filter(|e| e.key() == [w])
            .map(|e| u64::from_le_bytes(e.value().unwrap().try_into().unwrap()))
            .collect();
        assert_eq!(values, (0..WRITES).collect::<Vec<_>>(), "writer {w}");
    }
}

/// Readers waiting for `published` to move while writers on other threads publish: every
/// reader sees the last revision. A publish that saw no reader counted while one was
/// about to sleep would leave it asleep at the end (the writers skip the wake-up when
/// nobody waits).
#[test]
fn every_waiting_reader_sees_the_last_revision() {
    const WRITES: u64 = 20_000;
    let hub = Hub::counting(1 << 20);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let readers: Vec<_> = (0..8)
        .map(|_| {
            let mut sub = hub.subscribe();
            rt.spawn(async move {
                while sub.latest() < 2 * WRITES {
                    sub.changed().await;
                }
            })
        })
        .collect();
    // Every reader asleep before the first write (a bound, not a wait for a fixed time).
    let since = std::time::Instant::now();
    while hub.published.waiting() < readers.len() {
        assert!(since.elapsed().as_secs() < 20, "the readers never waited");
        std::thread::yield_now();
    }
    write_from_two_threads(&hub, WRITES);
    assert_eq!(hub.published(), 2 * WRITES);
    rt.block_on(async {
        for r in readers {
            let done = tokio::time::timeout(std::time::Duration::from_secs(20), r).await;
            done.expect("a reader slept through the last revision")
                .unwrap();
        }
    });
    assert_eq!(hub.published.waiting(), 0, "a count left behind");
}

/// Before the first watch a hub keeps nothing: it numbers (without persistence) or follows
/// the safe mark (with it), and makes no event. Once started, its history begins after what
/// was assigned: an earlier revision is compacted (or, with persistence, the log's).
#[test]
fn an_idle_hub_keeps_nothing_and_starts_after_what_was_assigned() {
    let hub = Hub::counting(1 << 20);
    let fresh = || FRESH_ALLOCATIONS.with(Cell::get);
    let before = fresh();
    for i in 0..5u8 {
        assert_eq!(hub.on_mutation(&put(b"k", &[i])), u64::from(i) + 1);
    }
    assert_eq!(fresh(), before, "no event made");
    let s = hub.stats();
    assert_eq!(
        (s.history_active, s.history_events, s.history_bytes),
        (false, 0, 0)
    );
    assert_eq!(hub.first_in_memory(), 6);
    hub.activate();
    hub.on_mutation(&put(b"k", &[9]));
    assert_eq!(revisions(&hub, 6), vec![6]);
    assert_eq!(hub.read(5, 6, 9), Err(ReadError::Compacted(6)));
    assert_eq!(hub.stats().history_first_revision, 6);

    let fed = Hub::new(0, 1 << 20, false);
    fed.on_logged(1, &put(b"a", b"1"));
    fed.on_logged(2, &put(b"b", b"2"));
    fed.on_safe(2);
    assert_eq!(
        fed.published(),
        2,
        "idle: the safe mark is published as it is"
    );
    assert_eq!(fed.pending.lock().slots.len(), 0);
    fed.activate();
    fed.on_logged(3, &put(b"c", b"3"));
    fed.on_safe(3);
    assert_eq!(revisions(&fed, 3), vec![3]);
    assert_eq!(fed.read(2, 3, 9), Err(ReadError::Compacted(3)));
}

/// With persistence the history keeps skeletons: the key and the revision, not the value;
/// the previous item by its revision, and by value only when it is older than the log.
#[test]
fn a_fed_hubs_events_name_their_items_and_keep_no_value() {
    let hub = Hub::new(0, 1 << 20, false);
    hub.activate();
    hub.log_first.store(5, Ordering::Relaxed);
    let over = |prev_rev| Mutation::Stored {
        key: b"k",
        value: b"new value",
        meta: meta(0),
        prev: Some(PrevItem {
            value: b"old value",
            meta: meta(prev_rev),
        }),
    };
    hub.on_logged(1, &over(7));
    hub.on_logged(2, &over(3));
    hub.on_safe(2);
    let (events, _) = hub.read(1, 2, 9).unwrap();
    let [a, b] = &events[..] else {
        panic!("two events")
    };
    assert_eq!((a.key(), a.value(), a.value_len), (&b"k"[..], None, 9));
    assert!(a.needs_value && a.needs(false));
    assert_eq!(
        (a.prev_revision, a.prev_value()),
        (7, None),
        "its record is in the log"
    );
    assert_eq!(
        (b.prev_revision, b.prev_value()),
        (3, Some(&b"old value"[..])),
        "older than the log: kept"
    );
    assert!(
        a.needs_prev() && !b.needs_prev(),
        "only a's previous item is in the log"
    );
}
