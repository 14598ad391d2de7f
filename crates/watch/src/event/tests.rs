//! The events' tests: the previous item, large events packed in chunks, and the wire bytes
//! against prost's.

use bytes::Bytes;
use cairn_store::{DeleteReason, Mutation, PrevItem};

use super::*;
use crate::event_bytes::{malloc_bytes, Wire, CHUNK_BYTES};

use crate::test_items::{meta, put};

/// Events longer than [`CHUNKED_MIN`] made on one thread lie one after the other in its
/// chunk; a short one has bytes of its own, and one past a quarter of a chunk a chunk of
/// its own, which leaves the thread's chunk as it was.
#[test]
fn large_events_are_packed_in_the_threads_chunk() {
    let value = vec![7u8; 2000];
    let event =
        |key: &[u8], value: &[u8], rev| Event::from_mutation(&put(key, value), rev).unwrap();
    let next_to =
        |a: &Event, b: &Event| b.wire.as_ptr() == a.wire.as_ptr().wrapping_add(a.wire.len());
    let a = event(b"a", &value, 1);
    let b = event(b"b", &value, 2);
    assert!(matches!(a.wire, Wire::Chunked(_)));
    assert!(next_to(&a, &b), "b right after a in the chunk");
    assert!(matches!(event(b"c", b"v", 3).wire, Wire::Own(_)));
    let huge = event(b"d", &vec![1u8; CHUNK_BYTES / 2], 4);
    assert!(matches!(huge.wire, Wire::Chunked(_)));
    let c = event(b"e", &value, 5);
    assert!(
        next_to(&b, &c),
        "the huge event took none of the chunk's room"
    );
    assert_eq!(
        (c.key(), c.value(), c.revision),
        (&b"e"[..], Some(&value[..]), 5)
    );
    // Filled up, the chunk is followed by a new one; the old one's events stay whole.
    let rest: Vec<Event> = (0..CHUNK_BYTES / value.len())
        .map(|i| event(b"f", &value, 6 + i as u64))
        .collect();
    assert!(
        rest.windows(2).any(|w| !next_to(&w[0], &w[1])),
        "a second chunk"
    );
    for e in [&a, &b, &c].into_iter().chain(&rest) {
        assert_eq!(e.value(), Some(&value[..]));
    }
    assert_eq!(
        a.size_bytes(),
        EVENT_FIXED_BYTES + a.wire.len() + malloc_bytes(size_of::<Bytes>()),
        "its stretch of the chunk and its box"
    );
    assert_eq!(size_of::<Wire>(), size_of::<Box<[u8]>>());
}

#[test]
fn events_carry_the_previous_item() {
    let prev = PrevItem {
        value: b"old",
        meta: meta(4),
    };
    let m = Mutation::Stored {
        key: b"key",
        value: b"new",
        meta: meta(0),
        prev: Some(prev),
    };
    let e = Event::from_mutation(&m, 7).unwrap();
    assert_eq!(e.key(), b"key");
    let revs = (
        e.item.as_ref().unwrap().mod_revision,
        e.prev.as_ref().unwrap().mod_revision,
    );
    assert_eq!(
        (e.value(), e.prev_value(), revs),
        (Some(&b"new"[..]), Some(&b"old"[..]), (7, 4))
    );
    let d = Event::from_mutation(
        &Mutation::Deleted {
            key: b"key",
            reason: DeleteReason::Evicted,
            prev: Some(prev),
        },
        8,
    )
    .unwrap();
    assert_eq!(d.kind, EventKind::Delete(DeleteReason::Evicted));
    assert_eq!(d.prev_value(), Some(&b"old"[..]));
    assert_eq!(d.value(), None);
    assert!(Event::from_mutation(&Mutation::FlushScheduled { at: 5 }, 9).is_none());
}

/// The wire form of an event, built as a prost message: what `wire` must match.
fn event_pb(e: &Event, prev_kv: bool) -> pb::Event {
    let state_kv = |s: &ItemState, value: Option<&[u8]>| pb::KeyValue {
        key: Bytes::copy_from_slice(e.key()),
        value: Bytes::copy_from_slice(value.unwrap()),
        flags: s.flags,
        expires_at: s.exptime,
        cas: s.cas,
        mod_revision: s.mod_revision,
        stale: s.stale,
    };
    use pb::event::{DeleteReason as R, EventType as T};
    let (kind, reason) = match e.kind {
        EventKind::Put => (T::Put, R::None),
        EventKind::Delete(DeleteReason::Client) => (T::Delete, R::Client),
        EventKind::Delete(DeleteReason::Expired) => (T::Delete, R::Expired),
        EventKind::Delete(DeleteReason::Evicted) => (T::Delete, R::Evicted),
        EventKind::Flush => (T::Flush, R::Flushed),
    };
    let kv = match (&e.kind, &e.item) {
        (EventKind::Put, Some(item)) => Some(state_kv(item, e.value())),
        (EventKind::Flush, _) => None,
        _ => Some(pb::KeyValue {
            key: Bytes::copy_from_slice(e.key()),
            mod_revision: e.revision,
            ..Default::default()
        }),
    };
    pb::Event {
        r#type: kind as i32,
        kv,
        prev_kv: if prev_kv {
            e.prev.as_ref().map(|p| state_kv(p, e.prev_value()))
        } else {
            None
        },
        reason: reason as i32,
        revision: e.revision,
    }
}

#[test]
fn events_on_the_wire_are_what_prost_writes() {
    use cairn_store::{ItemMeta, Mutation, PrevItem};
    use prost::Message;
    let meta = |flags, exptime, cas, stale, rev| ItemMeta {
        flags,
        exptime,
        cas,
        last_access: 0,
        fetched: false,
        stale,
        win_sent: false,
        mod_revision: rev,
    };
    let big = vec![b'v'; 300];
    // Events past event_bytes::CHUNKED_MIN and past a quarter of a chunk: their bytes come from
    // the thread's chunk, or a chunk of their own.
    let chunked = vec![b'c'; 3000];
    let huge = vec![b'h'; 40_000];
    let prev = PrevItem {
        value: b"old",
        meta: meta(7, 1_900_000_000, 41, true, 3),
    };
    let empty_prev = PrevItem {
        value: b"",
        meta: meta(0, 0, 0, false, 0),
    };
    let mutations = [
        Mutation::Stored {
            key: b"k",
            value: b"v",
            meta: meta(0, 0, 1, false, 0),
            prev: None,
        },
        Mutation::Stored {
            key: b"key",
            value: &big,
            meta: meta(u32::MAX, 5, u64::MAX, true, 0),
            prev: Some(prev),
        },
        Mutation::Stored {
            key: b"key",
            value: b"",
            meta: meta(0, 0, 0, false, 0),
            prev: Some(empty_prev),
        },
        Mutation::Deleted {
            key: b"gone",
            reason: DeleteReason::Client,
            prev: None,
        },
        Mutation::Deleted {
            key: b"gone",
            reason: DeleteReason::Expired,
            prev: Some(prev),
        },
        Mutation::Deleted {
            key: b"gone",
            reason: DeleteReason::Evicted,
            prev: None,
        },
        Mutation::Stored {
            key: b"chunked",
            value: &chunked,
            meta: meta(3, 0, 77, false, 0),
            prev: Some(PrevItem {
                value: &chunked,
                meta: meta(1, 2, 3, false, 4),
            }),
        },
        Mutation::Stored {
            key: b"huge",
            value: &huge,
            meta: meta(0, 0, 78, false, 0),
            prev: None,
        },
        Mutation::Flushed,
    ];
    let events: Vec<Arc<Event>> = mutations
        .iter()
        .zip([1, 200, 1 << 40, 9, 10, 11, 12, 13, u64::MAX])
        .map(|(m, rev)| Arc::new(Event::from_mutation(m, rev).unwrap()))
        .collect();
    // Each event alone, and all of them in one response; with and without prev_kv; watch
    // ids small, large and negative (the stream's own -1).
    let mut batches: Vec<Vec<Arc<Event>>> = events.iter().map(|e| vec![Arc::clone(e)]).collect();
    batches.push(events.clone());
    for batch in &batches {
        for prev_kv in [false, true] {
            for (watch_id, revision, history_id) in
                [(1, 5, 0), (1 << 40, 0, 7), (-1, u64::MAX, u64::MAX)]
            {
                let expected = pb::WatchResponse {
                    header: Some(pb::ResponseHeader {
                        revision,
                        history_id,
                    }),
                    watch_id,
                    events: batch.iter().map(|e| event_pb(e, prev_kv)).collect(),
                    ..Default::default()
                };
                let mut buf = bytes::BytesMut::new();
                wire::put_events_response(
                    &mut buf,
                    watch_id,
                    revision,
                    history_id,
                    batch.iter().map(|e| e.wire_parts(prev_kv)),
                );
                assert_eq!(buf.to_vec(), expected.encode_to_vec(), "{expected:?}");
                let len = wire::events_response_len(
                    watch_id,
                    revision,
                    history_id,
                    batch.iter().map(|e| e.wire_parts(prev_kv)),
                );
                assert_eq!(len, buf.len(), "{expected:?}");
            }
        }
    }
    // The event's parts are stretches of its wire bytes.
    let e = &events[1];
    assert_eq!((e.key(), e.value()), (&b"key"[..], Some(&big[..])));
    assert_eq!(e.prev_value(), Some(&b"old"[..]));
}
