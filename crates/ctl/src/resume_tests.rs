//! The resume rules, one response at a time (no server): each test says what breaking its rule
//! looks like.

use super::*;

fn template() -> pb::WatchCreateRequest {
    pb::WatchCreateRequest {
        key: b"p/".to_vec().into(),
        prefix: true,
        ..Default::default()
    }
}

fn header(revision: u64) -> Option<pb::ResponseHeader> {
    Some(pb::ResponseHeader {
        revision,
        history_id: 0,
    })
}

fn created(revision: u64) -> pb::WatchResponse {
    pb::WatchResponse {
        header: header(revision),
        watch_id: WATCH_ID,
        created: true,
        ..Default::default()
    }
}

/// The response that ends an initial state.
fn state_done(header: Option<pb::ResponseHeader>) -> pb::WatchResponse {
    pb::WatchResponse {
        header,
        watch_id: WATCH_ID,
        initial_state_done: true,
        ..Default::default()
    }
}

fn put(revision: u64) -> pb::Event {
    pb::Event {
        revision,
        kv: Some(pb::KeyValue {
            key: format!("p/{revision}").into_bytes().into(),
            mod_revision: revision,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn events(header_revision: u64, revisions: &[u64]) -> pb::WatchResponse {
    pb::WatchResponse {
        header: header(header_revision),
        watch_id: WATCH_ID,
        events: revisions.iter().map(|&r| put(r)).collect(),
        ..Default::default()
    }
}

fn start_of(r: &mut Resume) -> (u64, bool) {
    match r.create_request().request_union {
        Some(pb::watch_request::RequestUnion::CreateRequest(c)) => {
            (c.start_revision, c.initial_state)
        }
        other => panic!("not a create request: {other:?}"),
    }
}

fn revisions(items: &[Item]) -> Vec<u64> {
    items.iter().map(Item::revision).collect()
}

/// Broken: taking the created header of a start-revision watch as a resume point (the server
/// puts its newest revision there) would resume at 101 after a disconnect, skipping 5..=100.
#[test]
fn the_created_header_of_a_watch_from_a_revision_is_not_a_resume_point() {
    let mut r = Resume::new(template(), Some(5), false, false);
    assert_eq!(start_of(&mut r), (5, false));
    assert!(r.on_response(created(100)).unwrap().is_empty());
    assert_eq!(r.next_revision, Some(5));
    let got = r.on_response(events(7, &[5, 7])).unwrap();
    assert_eq!(revisions(&got), vec![5, 7]);
    // The stream breaks: the next one starts right after the last event shown.
    assert_eq!(start_of(&mut r), (8, false));
}

/// A watch "from now on" starts where the created response says now is.
#[test]
fn a_watch_from_now_resumes_after_the_created_header() {
    let mut r = Resume::new(template(), None, false, false);
    assert_eq!(start_of(&mut r), (0, false));
    r.on_response(created(40)).unwrap();
    assert_eq!(r.next_revision, Some(41));
    // A disconnect before any event: resume from 41, not "from now" again (which would miss
    // what was written meanwhile).
    assert_eq!(start_of(&mut r), (41, false));
}

/// Broken: resuming from the last revision shown (not + 1) shows it twice; the duplicate guard
/// drops what a server sends twice.
#[test]
fn each_revision_is_shown_once_and_the_header_moves_the_cursor() {
    let mut r = Resume::new(template(), Some(1), false, false);
    r.on_response(created(3)).unwrap();
    assert_eq!(
        revisions(&r.on_response(events(3, &[1, 3])).unwrap()),
        vec![1, 3]
    );
    // Events older than the cursor are dropped and counted.
    assert_eq!(
        revisions(&r.on_response(events(9, &[3, 9])).unwrap()),
        vec![9]
    );
    assert_eq!(r.duplicates_dropped, 1);
    // A response's header says every event up to it was sent.
    r.on_response(events(20, &[12])).unwrap();
    assert_eq!(r.next_revision, Some(21));
    // A progress notification moves it too.
    let progress = pb::WatchResponse {
        header: header(30),
        watch_id: WATCH_ID,
        progress_notify: true,
        ..Default::default()
    };
    assert!(r.on_response(progress).unwrap().is_empty());
    assert_eq!(start_of(&mut r), (31, false));
}

#[test]
fn an_initial_state_is_shown_whole_or_asked_for_again() {
    let mut r = Resume::new(template(), None, true, false);
    assert_eq!(start_of(&mut r), (0, true));
    r.on_response(created(50)).unwrap();
    let part = pb::WatchResponse {
        watch_id: WATCH_ID,
        initial_items: vec![pb::KeyValue::default()],
        ..Default::default()
    };
    assert!(r.on_response(part.clone()).unwrap().is_empty());
    // The stream breaks mid-state: the state is asked for again, from the start.
    assert_eq!(start_of(&mut r), (0, true));
    r.on_response(created(50)).unwrap();
    r.on_response(part).unwrap();
    let done = state_done(header(52));
    let got = r.on_response(done).unwrap();
    match &got[..] {
        [Item::Resync {
            revision: 52,
            items,
            reason: ResyncReason::Initial,
            ..
        }] => assert_eq!(items.len(), 1, "the first stream's half state is not kept"),
        other => panic!("{other:?}"),
    }
    assert_eq!(start_of(&mut r), (53, false));
}

#[test]
fn a_compacted_history_stops_the_watch_or_lists_again() {
    let compacted = pb::WatchResponse {
        watch_id: WATCH_ID,
        canceled: true,
        compact_revision: 90,
        ..Default::default()
    };
    let mut r = Resume::new(template(), Some(10), false, false);
    match r.on_response(compacted.clone()) {
        Err(Stop::Failed(CtlError::Compacted {
            needed: 10,
            compact_revision: 90,
        })) => {}
        other => panic!("{other:?}"),
    }
    let mut r = Resume::new(template(), Some(10), false, true);
    assert!(matches!(r.on_response(compacted), Err(Stop::Relist)));
    assert_eq!(start_of(&mut r), (0, true));
    let done = state_done(header(95));
    match &r.on_response(done).unwrap()[..] {
        [Item::Resync {
            reason: ResyncReason::Compacted,
            compact_revision: 90,
            ..
        }] => {}
        other => panic!("{other:?}"),
    }
    let future = pb::WatchResponse {
        watch_id: WATCH_ID,
        canceled: true,
        cancel_reason: "start_revision 99 is in the future: the newest revision is 4".into(),
        ..Default::default()
    };
    assert!(matches!(
        Resume::new(template(), Some(99), false, false).on_response(future),
        Err(Stop::Failed(CtlError::FutureRevision { needed: 99, .. }))
    ));
}

/// Broken: resuming without the history id (or reading the server's cancel as a plain
/// compaction) would relist as "compacted", or, with a history that happened to reach the
/// cursor, show another history's events under revisions already shown.
#[test]
fn a_resume_names_its_history_and_another_history_is_a_lost_one() {
    let in_history = |revision, history_id| {
        Some(pb::ResponseHeader {
            revision,
            history_id,
        })
    };
    let mut r = Resume::new(template(), None, false, true);
    let mut from_now = created(40);
    from_now.header = in_history(40, 7);
    r.on_response(from_now).unwrap();
    let mut more = events(42, &[41, 42]);
    more.header = in_history(42, 7);
    assert_eq!(revisions(&r.on_response(more).unwrap()), vec![41, 42]);
    match r.create_request().request_union {
        Some(pb::watch_request::RequestUnion::CreateRequest(c)) => {
            assert_eq!((c.start_revision, c.history_id), (43, 7))
        }
        other => panic!("not a create request: {other:?}"),
    }
    // The server restarted without persistence: history 9 cancels the watch, compacted.
    let other_history = pb::WatchResponse {
        header: in_history(0, 9),
        watch_id: WATCH_ID,
        canceled: true,
        compact_revision: 1,
        cancel_reason: "history_id 7 is not this server's history (9)".into(),
        ..Default::default()
    };
    assert!(matches!(
        r.on_response(other_history.clone()),
        Err(Stop::Relist)
    ));
    assert_eq!(start_of(&mut r), (0, true));
    let done = state_done(in_history(3, 9));
    match &r.on_response(done).unwrap()[..] {
        [Item::Resync {
            reason: ResyncReason::HistoryLost,
            revision: 3,
            ..
        }] => {}
        other => panic!("{other:?}"),
    }
    // Without --relist the watch stops, saying the history was lost.
    let mut r = Resume::new(template(), None, false, false);
    let mut from_now = created(40);
    from_now.header = in_history(40, 7);
    r.on_response(from_now).unwrap();
    assert!(matches!(
        r.on_response(other_history),
        Err(Stop::Failed(CtlError::FutureRevision { needed: 41, .. }))
    ));
}
