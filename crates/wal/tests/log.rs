//! Log tests: round trips, group commit from many threads, recovery from cut and flipped
//! files, injected faults followed by a crash or a power loss, and the three watermarks.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_testkit::{kill, power_cut, power_cut_torn, FaultyFs, Op};
use cairn_wal::{
    block_on, format, Durability, FileSystem, Log, LogOptions, Lsn, Prealloc, RealFs, RecoveryMode,
    WalError, FRAME_OUTSIDE_LOCK_BYTES,
};
use proptest::prelude::*;

fn opts(durability: Durability) -> LogOptions {
    LogOptions {
        durability,
        segment_bytes: 64 << 10,
        ..LogOptions::default()
    }
}

fn dir() -> PathBuf {
    PathBuf::from("/log")
}

fn all(log: &Log) -> Vec<(Lsn, Vec<u8>)> {
    let mut out = Vec::new();
    log.read_from::<WalError>(1, |lsn, p| {
        out.push((lsn, p.to_vec()));
        Ok(())
    })
    .unwrap();
    out
}

fn payload(i: u64) -> Vec<u8> {
    format!("record-{i}-")
        .repeat((i % 7) as usize + 1)
        .into_bytes()
}

#[test]
fn sync_round_trip_on_the_real_disk() {
    let tmp = tempfile::tempdir().unwrap();
    let fs: Arc<dyn FileSystem> = Arc::new(RealFs);
    {
        let log = Log::open(Arc::clone(&fs), tmp.path(), opts(Durability::Sync)).unwrap();
        for i in 1..=2000 {
            assert_eq!(log.commit(&payload(i)).unwrap(), i);
        }
        assert_eq!(log.durable_lsn(), 2000);
        assert!(log.stats().segments > 1, "rolled over");
    }
    let log = Log::open(fs, tmp.path(), opts(Durability::Sync)).unwrap();
    let got = all(&log);
    assert_eq!(got.len(), 2000);
    assert!(got.iter().all(|(lsn, p)| *p == payload(*lsn)));
    assert_eq!(log.commit(b"next").unwrap(), 2001, "LSNs continue");
}

#[test]
fn async_flushes_by_itself_and_on_close() {
    let fs = FaultyFs::new();
    let log = Log::open(Arc::new(fs.clone()), &dir(), opts(Durability::Async)).unwrap();
    let lsn = log.commit(b"a").unwrap();
    // The flusher makes it durable without anyone asking (poll for the condition).
    let deadline = Instant::now() + Duration::from_secs(30);
    while log.durable_lsn() < lsn {
        assert!(Instant::now() < deadline, "never flushed");
        std::thread::yield_now();
    }
    log.commit(b"b").unwrap();
    log.close().unwrap();
    fs.power_loss();
    let log = Log::open(Arc::new(fs.clone()), &dir(), opts(Durability::Async)).unwrap();
    assert_eq!(all(&log).len(), 2);
}

#[test]
fn async_power_loss_keeps_what_was_fenced() {
    let fs = FaultyFs::new();
    let log = Log::open(
        Arc::new(fs.clone()),
        &dir(),
        LogOptions {
            flush_interval: Duration::from_secs(3600),
            ..opts(Durability::Async)
        },
    )
    .unwrap();
    for i in 1..=100 {
        log.commit(&payload(i)).unwrap();
    }
    log.wait_durable(60).unwrap();
    let acked_after_fence = log.commit(&payload(101)).unwrap();
    assert_eq!(acked_after_fence, 101);
    power_cut(&fs, log);
    let log = Log::open(Arc::new(fs), &dir(), opts(Durability::Async)).unwrap();
    let got = all(&log);
    assert!(got.len() >= 100, "fenced records lost: {}", got.len());
    assert!(got
        .iter()
        .enumerate()
        .all(|(i, (lsn, p))| *lsn == i as u64 + 1 && *p == payload(*lsn)));
}

#[test]
fn a_thread_that_writes_before_sleeping_hands_its_async_batch_to_the_kernel_itself() {
    let fs = FaultyFs::new();
    let log = Log::open(
        Arc::new(fs.clone()),
        &dir(),
        LogOptions {
            flush_interval: Duration::from_secs(3600),
            ..opts(Durability::Async)
        },
    )
    .unwrap();
    // The syncer's first round after open is over once a commit returns: from then on it
    // writes only when woken.
    assert_eq!(log.commit(&payload(1)).unwrap(), 1);
    std::thread::scope(|s| {
        s.spawn(|| {
            cairn_wal::writes_before_sleeping();
            for i in 2..=50 {
                assert_eq!(log.append(&payload(i)).unwrap(), i);
            }
            // Its appends did not wake the syncer: nothing is written until it says so.
            assert_eq!(log.written_lsn(), 1);
            log.write_ready();
            // If the syncer held the writer at that moment (its own round after open), the
            // call asked it to write instead: a later call, or the syncer, writes them.
            let deadline = Instant::now() + Duration::from_secs(30);
            while log.written_lsn() < 50 && Instant::now() < deadline {
                std::thread::yield_now();
                log.write_ready();
            }
            assert_eq!(log.written_lsn(), 50, "written on this thread's call");
            assert_eq!(log.durable_lsn(), 0, "no fdatasync from a helper");
            // Records it leaves unwritten are for the next call (or the syncer's backstop).
            assert_eq!(log.append(b"left").unwrap(), 51);
        });
    });
    // Another thread's append wakes the syncer, which writes what the helper left too.
    assert_eq!(log.commit(b"other").unwrap(), 52);
    assert_eq!(log.durable_lsn(), 0);
    // A kill -9 keeps what was written (the page cache survives).
    kill(&fs, log);
    let log = Log::open(Arc::new(fs.clone()), &dir(), opts(Durability::Async)).unwrap();
    let got = all(&log);
    assert_eq!(got.len(), 52);
    assert!(got[..50].iter().all(|(lsn, p)| *p == payload(*lsn)));
    assert_eq!(got[50].1, b"left");
    // In sync mode a helper does nothing: its append woke the syncer, which makes it durable.
    log.set_durability(Durability::Sync);
    std::thread::scope(|s| {
        s.spawn(|| {
            cairn_wal::writes_before_sleeping();
            let lsn = log.append(b"sync").unwrap();
            log.write_ready();
            log.wait_durable(lsn).unwrap();
        });
    });
}

#[test]
fn the_syncer_writes_what_a_helper_never_wrote_within_the_flush_interval() {
    let fs = FaultyFs::new();
    let log = Log::open(
        Arc::new(fs.clone()),
        &dir(),
        LogOptions {
            flush_interval: Duration::from_millis(20),
            ..opts(Durability::Async)
        },
    )
    .unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            cairn_wal::writes_before_sleeping();
            let lsn = log.append(b"never helped").unwrap();
            // No write_ready, and nothing asks for an fdatasync: the syncer's backstop takes it.
            log.wait_written(lsn).unwrap();
        });
    });
    log.close().unwrap();
    fs.power_loss();
    let log = Log::open(Arc::new(fs), &dir(), opts(Durability::Async)).unwrap();
    assert_eq!(all(&log).len(), 1);
}

/// Appends `per_thread` records from each of `threads` threads (`body(t, i)`); thread `t`
/// waits for each record to be durable when `waits(t)`, else only appends. Returns every
/// (LSN, body), sorted, once it checked that the LSNs are unique and gap-free.
fn append_from_threads(
    log: &Arc<Log>,
    threads: u64,
    per_thread: u64,
    body: fn(u64, u64) -> Vec<u8>,
    waits: fn(u64) -> bool,
) -> Vec<(Lsn, Vec<u8>)> {
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let log = Arc::clone(log);
            std::thread::spawn(move || {
                (0..per_thread)
                    .map(|i| {
                        let body = body(t, i);
                        let lsn = if waits(t) {
                            let lsn = log.commit(&body).unwrap();
                            assert!(log.durable_lsn() >= lsn, "acknowledged before durable");
                            lsn
                        } else {
                            log.append(&body).unwrap()
                        };
                        (lsn, body)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut acked: Vec<(Lsn, Vec<u8>)> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    acked.sort();
    assert!(
        acked
            .iter()
            .enumerate()
            .all(|(i, (lsn, _))| *lsn == i as u64 + 1),
        "unique and gap-free"
    );
    acked
}

#[test]
fn many_threads_get_unique_gap_free_durable_lsns() {
    let tmp = tempfile::tempdir().unwrap();
    let fs: Arc<dyn FileSystem> = Arc::new(RealFs);
    let log = Arc::new(Log::open(Arc::clone(&fs), tmp.path(), opts(Durability::Sync)).unwrap());
    let acked = append_from_threads(
        &log,
        8,
        200,
        |t, i| format!("t{t}-{i}").into_bytes(),
        |_| true,
    );
    let stats = log.stats();
    drop(log);
    let log = Log::open(fs, tmp.path(), opts(Durability::Sync)).unwrap();
    assert_eq!(all(&log), acked);
    assert!(stats.fdatasync.count > 0);
}

#[test]
fn truncate_before_drops_whole_old_segments_only() {
    let fs = FaultyFs::new();
    let log = Log::open(Arc::new(fs.clone()), &dir(), opts(Durability::Sync)).unwrap();
    for i in 1..=3000 {
        log.commit(&payload(i)).unwrap();
    }
    let before = log.stats().segments;
    let removed = log.truncate_before(1500).unwrap();
    assert!(removed > 0 && log.stats().segments == before - removed);
    let mut first = None;
    log.read_from::<WalError>(1500, |lsn, _| {
        first.get_or_insert(lsn);
        Ok(())
    })
    .unwrap();
    assert_eq!(first, Some(1500), "records from the cut on are kept");
    drop(log);
    let log = Log::open(Arc::new(fs), &dir(), opts(Durability::Sync)).unwrap();
    assert_eq!(log.appended_lsn(), 3000);
    assert!(log.truncate_before(u64::MAX).unwrap() > 0);
    assert_eq!(log.stats().segments, 1, "the newest segment stays");
}

#[test]
fn failed_fdatasync_poisons_and_loses_nothing_acknowledged() {
    let fs = FaultyFs::new();
    let log = Log::open(Arc::new(fs.clone()), &dir(), opts(Durability::Sync)).unwrap();
    for i in 1..=10 {
        log.commit(&payload(i)).unwrap();
    }
    fs.fail_after(Op::Sync, 0, libc::EIO);
    let err = log.commit(&payload(11)).unwrap_err();
    assert!(matches!(err, WalError::Poisoned { .. }), "{err:?}");
    assert!(
        matches!(log.commit(b"more"), Err(WalError::Poisoned { .. })),
        "never retried"
    );
    assert!(log.stats().poisoned.is_some());
    power_cut(&fs, log);
    let log = Log::open(Arc::new(fs), &dir(), opts(Durability::Sync)).unwrap();
    let got = all(&log);
    assert!(got.len() >= 10 && got[..10].iter().all(|(l, p)| *p == payload(*l)));
}

#[test]
fn enospc_and_failed_directory_sync_are_clean_errors() {
    for (op, errno) in [
        (None, libc::ENOSPC),
        (Some(Op::SyncDir), libc::EIO),
        (Some(Op::Write), libc::EIO),
    ] {
        let fs = FaultyFs::new();
        let log = Log::open(Arc::new(fs.clone()), &dir(), opts(Durability::Sync)).unwrap();
        match op {
            None => fs.set_space_left(Some(0)),
            Some(op) => fs.fail_after(op, 0, errno),
        }
        let mut acked = 0;
        let err = loop {
            match log.commit(&payload(acked + 1)) {
                Ok(_) => acked += 1,
                Err(e) => break e,
            }
            assert!(acked < 10_000, "{op:?} never failed");
        };
        if op.is_none() {
            assert!(err.to_string().contains("no space"), "{err}");
        }
        power_cut(&fs, log);
        let log = Log::open(Arc::new(fs), &dir(), opts(Durability::Sync)).unwrap();
        let got = all(&log);
        assert!(got.len() as u64 >= acked, "{op:?}: {} < {acked}", got.len());
    }
}

#[test]
fn corruption_in_the_middle_is_reported_not_cut() {
    let fs = FaultyFs::new();
    let log = Log::open(Arc::new(fs.clone()), &dir(), opts(Durability::Sync)).unwrap();
    for i in 1..=50 {
        log.commit(&payload(i)).unwrap();
    }
    drop(log);
    let seg = dir().join(format::segment_name(1));
    fs.corrupt(&seg, |b| b[format::HEADER_LEN + 100] ^= 0x10);
    let err = Log::open(Arc::new(fs.clone()), &dir(), opts(Durability::Sync))
        .err()
        .expect("refused");
    assert!(matches!(err, WalError::Corrupt { .. }), "{err}");
    assert!(
        err.to_string().contains("00000000000000000001.wal"),
        "{err}"
    );
    let strict = LogOptions {
        recovery: RecoveryMode::Strict,
        ..opts(Durability::Sync)
    };
    assert!(Log::open(Arc::new(fs.clone()), &dir(), strict).is_err());
    let salvage = LogOptions {
        recovery: RecoveryMode::Salvage,
        ..opts(Durability::Sync)
    };
    let log = Log::open(Arc::new(fs), &dir(), salvage).unwrap();
    let got = all(&log);
    assert!(
        got.len() < 50 && got.iter().all(|(l, p)| *p == payload(*l)),
        "a valid prefix"
    );
}

/// Cuts the newest segment at `cut` bytes: what a crash mid-write leaves.
fn cut_at(fs: &FaultyFs, seg: &Path, cut: usize, garbage: bool) {
    fs.corrupt(seg, |b| {
        for (i, x) in b.iter_mut().enumerate().skip(cut) {
            *x = if garbage {
                (i as u8).wrapping_mul(31) | 1
            } else {
                0
            };
        }
    });
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Random records and sync points, then the file is cut at a random offset (zeros or
    /// garbage after it): recovery gives exactly a prefix holding every record that ended
    /// before the cut.
    #[test]
    fn recovery_after_a_cut_is_a_prefix(
        sizes in proptest::collection::vec(0usize..300, 1..60),
        cut_fraction in 0.0f64..1.0,
        garbage in any::<bool>(),
    ) {
        let fs = FaultyFs::new();
        let big = LogOptions { segment_bytes: 1 << 20, ..opts(Durability::Sync) };
        let log = Log::open(Arc::new(fs.clone()), &dir(), big.clone()).unwrap();
        let mut ends = Vec::new();
        let mut offset = format::HEADER_LEN;
        for (i, size) in sizes.iter().enumerate() {
            // Never zero, so a zeroed-out payload cannot pass for the original.
            let body = vec![i as u8 + 1; *size];
            log.commit(&body).unwrap();
            offset += format::RECORD_HEADER_LEN + size;
            ends.push(offset);
        }
        drop(log);
        let cut = format::HEADER_LEN + ((offset - format::HEADER_LEN) as f64 * cut_fraction) as usize;
        let seg = dir().join(format::segment_name(1));
        cut_at(&fs, &seg, cut, garbage);
        let log = Log::open(Arc::new(fs.clone()), &dir(), big).unwrap();
        let got = all(&log);
        let whole = ends.iter().filter(|&&e| e <= cut).count();
        prop_assert_eq!(got.len(), whole);
        for (lsn, body) in &got {
            prop_assert_eq!(body, &vec![*lsn as u8; sizes[(*lsn - 1) as usize]]);
        }
        // The log goes on from there.
        prop_assert_eq!(log.commit(b"after").unwrap(), whole as u64 + 1);
    }

    /// Power loss at a random point of a run with random sync points: every record that a
    /// sync covered survives, and what survives is a prefix.
    #[test]
    fn power_loss_keeps_every_synced_record(
        ops in proptest::collection::vec((0usize..2000, any::<bool>()), 1..80),
        direct_io in any::<bool>(),
    ) {
        let fs = FaultyFs::new();
        let log = Log::open(Arc::new(fs.clone()), &dir(), LogOptions {
            flush_interval: Duration::from_secs(3600),
            segment_bytes: 16 << 10,
            direct_io,
            ..opts(Durability::Async)
        }).unwrap();
        let mut synced = 0;
        for (i, (size, sync)) in ops.iter().enumerate() {
            log.commit(&vec![i as u8; *size]).unwrap();
            if *sync {
                log.sync().unwrap();
                synced = i + 1;
            }
        }
        power_cut(&fs, log);
        let log = Log::open(Arc::new(fs), &dir(), opts(Durability::Async)).unwrap();
        let got = all(&log);
        prop_assert!(got.len() >= synced);
        for (lsn, body) in &got {
            prop_assert_eq!(body, &vec![(*lsn - 1) as u8; ops[(*lsn - 1) as usize].0]);
        }
    }
}

/// Appends never wait, even on a disk that does not keep up; a caller that asks for room
/// (`wait_room`) waits while `max_pending_bytes` are buffered, and the buffer stays within it.
#[test]
fn room_waits_when_the_buffer_is_full_and_appends_never_do() {
    let fs = FaultyFs::new();
    let limit = 4096;
    let log = Arc::new(
        Log::open(
            Arc::new(fs.clone()),
            &dir(),
            LogOptions {
                flush_bytes: 1024,
                max_pending_bytes: limit,
                flush_interval: Duration::from_secs(3600),
                ..opts(Durability::Async)
            },
        )
        .unwrap(),
    );
    // A disk that does not keep up: the syncer blocks in its first fdatasync.
    fs.hold_syncs(true);
    let appender = {
        let log = Arc::clone(&log);
        std::thread::spawn(move || {
            for _ in 0..200 {
                log.wait_room().unwrap();
                log.append(&[7u8; 100]).unwrap();
            }
        })
    };
    // Without backpressure the appender finishes with 23 KB buffered; with it, it waits.
    while log.stats().backpressure_waits == 0 && !appender.is_finished() {
        std::thread::yield_now();
    }
    let stats = log.stats();
    assert!(stats.backpressure_waits > 0, "never waited: {stats:?}");
    // Not yet written: the buffer and the batch being written, each within the bound.
    assert!(
        stats.pending_bytes <= 2 * (limit + 116) as u64,
        "buffer over its bound: {stats:?}"
    );
    // An append that does not ask for room goes through at once, past the bound.
    let before = log.appended_lsn();
    for _ in 0..100 {
        log.append(&[8u8; 100]).unwrap();
    }
    assert!(log.appended_lsn() >= before + 100);
    assert!(log.stats().pending_bytes > limit as u64);
    fs.hold_syncs(false);
    appender.join().unwrap();
    log.sync().unwrap();
    assert_eq!(all(&log).len(), 300);
}

/// Sync mode, the disk's fdatasync stuck: thousands of appends from one thread all return
/// (each takes the lock for a copy); none becomes durable, and each becomes so once the disk
/// comes back. This is what lets the store append under its shard locks.
#[test]
fn appends_return_while_the_disk_is_stuck() {
    let fs = FaultyFs::new();
    let log = Log::open(Arc::new(fs.clone()), &dir(), opts(Durability::Sync)).unwrap();
    log.commit(b"first").unwrap();
    fs.hold_syncs(true);
    let lsn = log.append(b"second").unwrap();
    while fs.syncs_held() == 0 {
        std::thread::yield_now();
    }
    for i in 0..5000u64 {
        log.append(&payload(i)).unwrap();
    }
    assert_eq!(
        log.durable_lsn(),
        1,
        "nothing durable past the stuck fdatasync"
    );
    assert!(log.stats().pending_bytes > 0);
    fs.hold_syncs(false);
    log.wait_durable(lsn + 5000).unwrap();
}

/// Async mode: `commit` returns once the record is written to the kernel, before any
/// fdatasync. A kill -9 (the page cache survives) keeps every committed record; a power cut
/// keeps those an fdatasync covered.
#[test]
fn async_commits_survive_a_kill_and_synced_ones_a_power_cut() {
    let o = LogOptions {
        flush_interval: Duration::from_secs(3600),
        ..opts(Durability::Async)
    };
    for power in [false, true] {
        let fs = FaultyFs::new();
        let log = Log::open(Arc::new(fs.clone()), &dir(), o.clone()).unwrap();
        for i in 1..=20 {
            log.commit(&payload(i)).unwrap();
        }
        log.sync().unwrap();
        fs.hold_syncs(true);
        for i in 21..=40 {
            log.commit(&payload(i)).unwrap();
        }
        assert_eq!(log.written_lsn(), 40);
        assert_eq!(log.durable_lsn(), 20, "committed, not synced");
        if power {
            power_cut(&fs, log);
        } else {
            kill(&fs, log);
        }
        let log = Log::open(Arc::new(fs.clone()), &dir(), o.clone()).unwrap();
        let got = all(&log);
        let want = if power { 20 } else { 40 };
        assert_eq!(got.len(), want, "power cut: {power}");
        assert!(got.iter().all(|(l, p)| *p == payload(*l)));
    }
}

/// Switching from async to sync: the first durable batch after the switch covers what async
/// mode wrote and did not sync, so the durable mark never passes an unsynced record.
#[test]
fn a_switch_to_sync_makes_earlier_async_writes_durable_first() {
    for direct_io in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let fs = FaultyFs::new();
        let o = LogOptions {
            flush_interval: Duration::from_secs(3600),
            direct_io,
            ..opts(Durability::Async)
        };
        let log = Log::open(Arc::new(fs.clone()), tmp.path(), o.clone()).unwrap();
        for i in 1..=30 {
            log.commit(&payload(i)).unwrap();
        }
        assert_eq!(log.durable_lsn(), 0);
        log.set_durability(Durability::Sync);
        let lsn = log.commit(&payload(31)).unwrap();
        assert_eq!(log.durable_lsn(), lsn);
        power_cut(&fs, log);
        let log = Log::open(Arc::new(fs.clone()), tmp.path(), o).unwrap();
        assert_eq!(all(&log).len(), 31, "direct_io {direct_io}");
    }
}

/// The marks and their futures, awaited by many async-style waiters on one thread (as the
/// server's connection tasks are), polled by hand: each resolves once its own record is safe.
#[test]
fn written_and_durable_futures_resolve_in_order() {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};
    let fs = FaultyFs::new();
    let log = Log::open(Arc::new(fs.clone()), &dir(), opts(Durability::Sync)).unwrap();
    log.commit(b"0").unwrap();
    fs.hold_syncs(true);
    let first = log.append(b"1").unwrap();
    while fs.syncs_held() == 0 {
        std::thread::yield_now();
    }
    let lsns: Vec<Lsn> = (0..50).map(|i| log.append(&payload(i)).unwrap()).collect();
    let mut cx = Context::from_waker(Waker::noop());
    let mut waits: Vec<_> = lsns.iter().map(|&l| Box::pin(log.durable(l))).collect();
    assert!(waits
        .iter_mut()
        .all(|w| w.as_mut().poll(&mut cx).is_pending()));
    fs.hold_syncs(false);
    block_on(log.durable(first)).unwrap();
    for w in waits {
        block_on(w).unwrap();
    }
    assert!(log.durable_lsn() >= *lsns.last().unwrap());
    assert!(matches!(
        Box::pin(log.written(1)).as_mut().poll(&mut cx),
        Poll::Ready(Ok(()))
    ));
}

/// Options under which exactly 64 records of 1000 bytes fit the first segment.
fn rotating_opts() -> LogOptions {
    LogOptions {
        prealloc: Prealloc::ZeroFill,
        ..opts(Durability::Sync)
    }
}

const FIT: u64 = 64;

#[test]
fn a_failure_at_a_segment_switch_acknowledges_nothing_and_recovers() {
    for op in [Op::Write, Op::Sync, Op::SyncDir] {
        let fs = FaultyFs::new();
        let log = Log::open(Arc::new(fs.clone()), &dir(), rotating_opts()).unwrap();
        for i in 1..=FIT {
            log.commit(&[i as u8; 1000]).unwrap();
        }
        assert_eq!(
            log.stats().segments,
            1,
            "{op:?}: the first segment holds {FIT}"
        );
        fs.fail_after(op, 0, libc::EIO);
        let err = log.commit(&[0xee; 1000]).unwrap_err();
        assert!(matches!(err, WalError::Poisoned { .. }), "{op:?}: {err}");
        power_cut(&fs, log);
        let log = Log::open(Arc::new(fs.clone()), &dir(), rotating_opts()).unwrap();
        let got = all(&log);
        assert_eq!(got.len() as u64, FIT, "{op:?}");
        assert!(
            got.iter().all(|(l, p)| *p == vec![*l as u8; 1000]),
            "{op:?}"
        );
        // The log goes on, across a segment switch.
        for i in FIT + 1..=2 * FIT + 1 {
            assert_eq!(log.commit(&[i as u8; 1000]).unwrap(), i, "{op:?}");
        }
        assert_eq!(log.stats().segments, 3, "{op:?}");
        drop(log);
        let log = Log::open(Arc::new(fs), &dir(), rotating_opts()).unwrap();
        assert_eq!(all(&log).len() as u64, 2 * FIT + 1, "{op:?}");
    }
}

#[test]
fn a_failed_spare_poisons_the_log_when_it_is_needed() {
    for op in [Op::Create, Op::Write, Op::Sync] {
        let fs = FaultyFs::new();
        // Armed before open, so the spare thread's first attempt fails, whatever its timing.
        fs.fail_spare_after(op, 0, libc::EIO);
        let log = Log::open(Arc::new(fs.clone()), &dir(), rotating_opts()).unwrap();
        for i in 1..=FIT {
            log.commit(&[i as u8; 1000]).unwrap();
        }
        let err = log.commit(&[0xee; 1000]).unwrap_err();
        assert!(err.to_string().contains(".spare"), "{op:?}: {err}");
        assert!(log.commit(b"more").is_err(), "{op:?}: poisoned");
        power_cut(&fs, log);
        let log = Log::open(Arc::new(fs), &dir(), rotating_opts()).unwrap();
        assert_eq!(all(&log).len() as u64, FIT, "{op:?}");
    }
}

#[test]
fn leftover_spares_are_removed_and_never_read() {
    let fs = FaultyFs::new();
    let log = Log::open(Arc::new(fs.clone()), &dir(), rotating_opts()).unwrap();
    for i in 1..=FIT + 1 {
        log.commit(&[i as u8; 1000]).unwrap();
    }
    drop(log);
    // Spares a crash may leave: a zeroed one, a half-written one, and one that holds a copy
    // of a real segment of this log (its header and records would pass every check).
    let real = dir().join(format::segment_name(1));
    let copy = {
        let f = fs.open(&real).unwrap();
        let mut b = vec![0u8; f.size().unwrap() as usize];
        f.read_at(0, &mut b).unwrap();
        b
    };
    for (i, bytes) in [vec![0u8; 4096], vec![0xab; 100], copy]
        .into_iter()
        .enumerate()
    {
        let path = dir().join(format::spare_name(99, i as u64));
        fs.create(&path).unwrap().write_at(0, &bytes).unwrap();
    }
    fs.sync_dir(&dir()).unwrap();
    let log = Log::open(Arc::new(fs.clone()), &dir(), rotating_opts()).unwrap();
    assert!(
        !fs.list(&dir())
            .unwrap()
            .iter()
            .any(|p| p.to_str().unwrap().contains("next-0000000000000063")),
        "planted spares removed"
    );
    let got = all(&log);
    assert_eq!(got.len() as u64, FIT + 1);
    assert!(got.iter().all(|(l, p)| *p == vec![*l as u8; 1000]));
    assert_eq!(log.commit(b"next").unwrap(), FIT + 2);
}

#[test]
fn direct_io_round_trip_on_the_real_disk() {
    let tmp = tempfile::tempdir().unwrap();
    let fs: Arc<dyn FileSystem> = Arc::new(RealFs);
    let o = LogOptions {
        direct_io: true,
        prealloc: Prealloc::ZeroFill,
        ..opts(Durability::Sync)
    };
    let body = |i: u64| vec![(i % 251) as u8 + 1; (i as usize * 37) % 5000];
    let mut n = 0;
    // Three opens, so the partial last block is picked up from the file after a reopen.
    for round in 0..3 {
        let log = Log::open(Arc::clone(&fs), tmp.path(), o.clone()).unwrap();
        assert_eq!(log.appended_lsn(), n, "round {round}");
        for _ in 0..150 {
            n += 1;
            assert_eq!(log.commit(&body(n)).unwrap(), n);
        }
        let got = all(&log);
        assert_eq!(got.len() as u64, n, "round {round}");
        assert!(got.iter().all(|(l, p)| *p == body(*l)), "round {round}");
    }
    let log = Log::open(fs, tmp.path(), o).unwrap();
    assert!(log.stats().segments > 3, "rolled over");
    assert!(all(&log).iter().all(|(l, p)| *p == body(*l)));
}

/// O_DIRECT writes go from the pending buffer itself, laid out for the block offset where its
/// records land: records that straddle block ends, large records framed outside the lock, many
/// threads (batches of many records) and new segments (where the layout misses and the batch
/// is staged) all read back exactly, and only a few writes were staged.
#[test]
fn direct_writes_from_the_pending_buffer_straddle_blocks_and_read_back() {
    let tmp = tempfile::tempdir().unwrap();
    let fs: Arc<dyn FileSystem> = Arc::new(RealFs);
    let o = LogOptions {
        direct_io: true,
        segment_bytes: 256 << 10,
        ..opts(Durability::Sync)
    };
    // 1..6000 bytes (most cross a 4 KiB block end), and every 50th one past the
    // frame-outside-the-lock size.
    let body = |i: u64| {
        let len = if i.is_multiple_of(50) {
            FRAME_OUTSIDE_LOCK_BYTES + (i as usize % 4096)
        } else {
            1 + (i as usize * 4099) % 6000
        };
        vec![(i % 251) as u8 + 1; len]
    };
    let log = Arc::new(Log::open(Arc::clone(&fs), tmp.path(), o.clone()).unwrap());
    // One writer: one chunk per write, laid out in place except after a new segment.
    for i in 1..=200 {
        assert_eq!(log.commit(&body(i)).unwrap(), i);
    }
    let s = log.stats();
    assert!(s.segments > 2, "rolled over: {} segments", s.segments);
    assert!(
        s.staged_writes <= s.segments as u64,
        "only a batch opening a segment is staged: {} of {} writes staged, {} segments",
        s.staged_writes,
        s.dsync_write.count,
        s.segments
    );
    // Four writers at once: group commit, many records per write.
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                (0..150)
                    .map(|_| {
                        log.wait_room().unwrap();
                        let lsn = log.append(&[0u8; 1]).unwrap();
                        log.wait_durable(lsn).unwrap();
                        lsn
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let lsns: Vec<Lsn> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    assert_eq!(lsns.len(), 600);
    drop(log);
    let log = Log::open(fs, tmp.path(), o).unwrap();
    let got = all(&log);
    assert_eq!(got.len(), 800);
    for (lsn, p) in &got {
        if *lsn <= 200 {
            assert_eq!(*p, body(*lsn), "record {lsn}");
        } else {
            assert_eq!(*p, vec![0u8; 1], "record {lsn}");
        }
    }
}

/// Bodies of varying sizes, so the records of a reused file do not line up with new ones.
fn varied(i: u64) -> Vec<u8> {
    vec![(i % 251) as u8 + 1; 300 + (i as usize * 37) % 900]
}

/// The spare files in the log directory.
fn spares(fs: &FaultyFs) -> Vec<PathBuf> {
    fs.list(&dir())
        .unwrap()
        .into_iter()
        .filter(|p| format::is_spare_name(p.file_name().unwrap().to_str().unwrap()))
        .collect()
}

/// Options that keep one truncated segment for reuse.
fn reusing_opts() -> LogOptions {
    LogOptions {
        reuse_segments: 1,
        ..rotating_opts()
    }
}

/// A log (opened with [`reusing_opts`]) filled until its third segment holds one record;
/// returns it with its last LSN.
fn log_with_three_segments(fs: &FaultyFs) -> (Log, Lsn) {
    let log = Log::open(Arc::new(fs.clone()), &dir(), reusing_opts()).unwrap();
    let mut n = 0;
    while log.stats().segments < 3 {
        n += 1;
        log.commit(&varied(n)).unwrap();
    }
    (log, n)
}

/// A log whose newest segment reuses the file of a truncated one, holding a few records.
/// Returns the fs, the reused file's bytes before reuse, the tail's path, the offsets where
/// the tail's records end, and the last LSN.
fn log_with_a_reused_tail() -> (FaultyFs, Vec<u8>, PathBuf, Vec<usize>, Lsn) {
    let fs = FaultyFs::new();
    let (log, mut n) = log_with_three_segments(&fs);
    // Drop the first segment: it becomes the one reusable spare.
    let second = log.segments()[1].0;
    assert_eq!(log.truncate_before(second).unwrap(), 1);
    let spare = spares(&fs);
    assert_eq!(spare.len(), 1, "the truncated segment is kept as a spare");
    let old = {
        let f = fs.open(&spare[0]).unwrap();
        let mut b = vec![0u8; f.size().unwrap() as usize];
        f.read_at(0, &mut b).unwrap();
        b
    };
    assert!(
        old[..format::HEADER_LEN].iter().all(|&b| b == 0),
        "header zeroed"
    );
    assert!(
        old[format::HEADER_LEN..].iter().any(|&b| b != 0),
        "old records kept"
    );
    // Fill the tail until the next segment is the reused file, then a few records into it.
    let mut ends = Vec::new();
    let mut offset = format::HEADER_LEN;
    let mut switched = false;
    while !switched || ends.len() < 5 {
        n += 1;
        let before = log.stats().segments;
        log.commit(&varied(n)).unwrap();
        if log.stats().segments > before {
            switched = true;
            ends.clear();
            offset = format::HEADER_LEN;
        }
        offset += format::RECORD_HEADER_LEN + varied(n).len();
        ends.push(offset);
    }
    assert_eq!(log.stats().segments_reused, 1);
    assert!(spares(&fs).is_empty(), "the spare became the tail");
    let tail = log.segments().last().unwrap().1.clone();
    drop(log);
    (fs, old, tail, ends, n)
}

#[test]
fn a_reused_segment_reopens_strictly_with_exactly_its_new_records() {
    let (fs, _, _, _, n) = log_with_a_reused_tail();
    let strict = LogOptions {
        recovery: RecoveryMode::Strict,
        ..rotating_opts()
    };
    let log = Log::open(Arc::new(fs), &dir(), strict).unwrap();
    assert_eq!(log.appended_lsn(), n);
    let got = all(&log);
    assert_eq!(got.last().unwrap().0, n);
    assert!(got.iter().all(|(l, p)| *p == varied(*l)));
    assert!(got.windows(2).all(|w| w[1].0 == w[0].0 + 1), "gap free");
    assert_eq!(log.commit(b"next").unwrap(), n + 1);
}

/// A crash while writing into a reused file leaves its old bytes past whatever landed: the
/// records wholly before the cut come back, nothing else (no old record among them).
#[test]
fn a_crash_in_a_reused_segment_recovers_a_prefix_and_no_old_record() {
    let (_, _, _, ends, _) = log_with_a_reused_tail();
    let last_end = *ends.last().unwrap();
    for cut in (format::HEADER_LEN..last_end + 40).step_by(97) {
        let (fs, old, tail, ends, n) = log_with_a_reused_tail();
        fs.corrupt(&tail, |b| b[cut..].copy_from_slice(&old[cut..]));
        let log = Log::open(Arc::new(fs), &dir(), rotating_opts()).unwrap();
        let whole = ends.iter().filter(|&&e| e <= cut).count() as u64;
        let lost = ends.len() as u64 - whole;
        assert_eq!(log.appended_lsn(), n - lost, "cut at {cut}");
        let got = all(&log);
        assert!(got.iter().all(|(l, p)| *p == varied(*l)), "cut at {cut}");
        assert_eq!(log.commit(b"next").unwrap(), n - lost + 1, "cut at {cut}");
    }
}

#[test]
fn reused_segments_on_the_real_disk_with_direct_io() {
    let tmp = tempfile::tempdir().unwrap();
    let fs: Arc<dyn FileSystem> = Arc::new(RealFs);
    let o = LogOptions {
        direct_io: true,
        reuse_segments: 2,
        prealloc: Prealloc::ZeroFill,
        ..opts(Durability::Sync)
    };
    let mut n = 0;
    let mut kept_from = 1;
    for round in 0..2 {
        let log = Log::open(Arc::clone(&fs), tmp.path(), o.clone()).unwrap();
        for _ in 0..600 {
            n += 1;
            assert_eq!(log.commit(&varied(n)).unwrap(), n);
            if n % 50 == 0 {
                log.truncate_before(n.saturating_sub(60)).unwrap();
            }
        }
        assert!(log.stats().segments_reused > 0, "round {round}");
        let got = all(&log);
        kept_from = got[0].0;
        assert_eq!(got.last().unwrap().0, n, "round {round}");
        assert!(got.iter().all(|(l, p)| *p == varied(*l)), "round {round}");
    }
    let strict = LogOptions {
        recovery: RecoveryMode::Strict,
        ..o
    };
    let log = Log::open(fs, tmp.path(), strict).unwrap();
    let got = all(&log);
    assert_eq!((got[0].0, got.len() as u64), (kept_from, n - kept_from + 1));
    assert!(got.iter().all(|(l, p)| *p == varied(*l)));
}

/// The default open scans only the newest segment's records (an older one is sealed): damage
/// in an older segment does not stop the open, but reading its records reports it, whether a
/// record is bad or the segment ends before the next one begins (records missing, never
/// skipped); a read from a later segment on is unaffected, and `Strict` still refuses the
/// open. A headerless newest segment is dropped and the one before it scanned for the end, so
/// appends go on after its last record.
#[test]
fn an_older_segment_is_checked_when_its_records_are_read() {
    type Damage = fn(&mut Vec<u8>);
    let damages: [(&str, Damage); 2] = [
        ("a flipped byte", |b| b[format::HEADER_LEN + 10] ^= 0x10),
        ("records gone", |b| b[format::HEADER_LEN..].fill(0)),
    ];
    for (what, damage) in damages {
        let fs = FaultyFs::new();
        let (log, n) = log_with_three_segments(&fs);
        let segments = log.segments();
        drop(log);
        fs.corrupt(&segments[0].1, damage);
        let log = Log::open(Arc::new(fs.clone()), &dir(), reusing_opts()).unwrap();
        assert_eq!(log.appended_lsn(), n, "{what}: the end is found");
        let err = log.read_from::<WalError>(1, |_, _| Ok(())).err();
        assert!(
            matches!(&err, Some(WalError::Corrupt { path, .. }) if *path == segments[0].1),
            "{what}: {err:?}"
        );
        let mut from_second = Vec::new();
        log.read_from::<WalError>(segments[1].0, |lsn, p| {
            from_second.push((lsn, p.to_vec()));
            Ok(())
        })
        .unwrap();
        assert_eq!(from_second.len() as u64, n - segments[1].0 + 1, "{what}");
        assert!(from_second.iter().all(|(l, p)| *p == varied(*l)));
        drop(log);
        let strict = LogOptions {
            recovery: RecoveryMode::Strict,
            ..reusing_opts()
        };
        assert!(Log::open(Arc::new(fs), &dir(), strict).is_err(), "{what}");
    }

    let fs = FaultyFs::new();
    let (log, n) = log_with_three_segments(&fs);
    drop(log);
    let headerless = dir().join(format::segment_name(n + 1));
    fs.create(&headerless).unwrap();
    let log = Log::open(Arc::new(fs.clone()), &dir(), reusing_opts()).unwrap();
    assert_eq!(log.appended_lsn(), n);
    assert_eq!(log.commit(&varied(n + 1)).unwrap(), n + 1);
    drop(log);
    let log = Log::open(Arc::new(fs), &dir(), reusing_opts()).unwrap();
    let got = all(&log);
    assert_eq!((got.first().unwrap().0, got.len() as u64), (1, n + 1));
    assert!(got.iter().all(|(l, p)| *p == varied(*l)));
}

/// A crash after a kept file was renamed to become the next segment, before its first batch
/// was durable: the file is the newest segment with no valid header, which recovery drops.
#[test]
fn a_reused_file_renamed_but_never_written_is_dropped() {
    let fs = FaultyFs::new();
    let (log, n) = log_with_three_segments(&fs);
    let second = log.segments()[1].0;
    log.truncate_before(second).unwrap();
    let spare = spares(&fs).pop().unwrap();
    fs.rename(&spare, &dir().join(format::segment_name(n + 1)))
        .unwrap();
    fs.sync_dir(&dir()).unwrap();
    power_cut(&fs, log);
    let log = Log::open(Arc::new(fs), &dir(), reusing_opts()).unwrap();
    assert_eq!(log.appended_lsn(), n);
    let got = all(&log);
    assert_eq!(got.first().unwrap().0, second);
    assert!(got.iter().all(|(l, p)| *p == varied(*l)));
}

/// A crash can leave later pages of an unacknowledged write on disk without its first ones:
/// valid records past the clean end, with LSNs the log hands out again. Recovery clears them,
/// so a later torn tail is not mistaken for corruption in the middle.
#[test]
fn records_past_a_clean_end_are_cleared_on_open() {
    let fs = FaultyFs::new();
    let seg = dir().join(format::segment_name(1));
    let log = Log::open(Arc::new(fs.clone()), &dir(), rotating_opts()).unwrap();
    let mut end = format::HEADER_LEN;
    for i in 1..=10 {
        log.commit(&varied(i)).unwrap();
        end += format::RECORD_HEADER_LEN + varied(i).len();
    }
    let log_id = log.log_id();
    drop(log);
    // What a torn write of records 11-13 may leave: only record 13, well past the end.
    let mut planted = Vec::new();
    format::encode_record(&mut planted, log_id, 13, &varied(13));
    let at = end + 3000;
    fs.corrupt(&seg, |b| {
        b[at..at + planted.len()].copy_from_slice(&planted)
    });

    let log = Log::open(Arc::new(fs.clone()), &dir(), rotating_opts()).unwrap();
    assert_eq!(log.appended_lsn(), 10);
    log.commit(&varied(11)).unwrap();
    end += format::RECORD_HEADER_LEN + varied(11).len();
    drop(log);
    // Now a torn write right after record 11.
    fs.corrupt(&seg, |b| b[end..end + 20].fill(0x5a));
    let log = Log::open(Arc::new(fs), &dir(), rotating_opts()).unwrap();
    assert_eq!(log.appended_lsn(), 11, "a torn tail, not corruption");
    assert!(all(&log).iter().all(|(l, p)| *p == varied(*l)));
}

/// A failure at each step of keeping a truncated segment for reuse (rename, directory sync,
/// zeroing its header, syncing that), then a power loss: the log reopens with every record
/// from where it starts now to the end; the truncation took effect or it did not.
#[test]
fn a_failure_while_keeping_a_segment_for_reuse_loses_nothing() {
    for (op, on_spare) in [
        (Op::Rename, false),
        (Op::SyncDir, false),
        (Op::Write, true),
        (Op::Sync, true),
    ] {
        let fs = FaultyFs::new();
        let (log, n) = log_with_three_segments(&fs);
        // The spare thread must be done, so that the armed fault hits the truncation.
        while log.stats().spare_preparing {
            std::thread::yield_now();
        }
        if on_spare {
            fs.fail_spare_after(op, 0, libc::EIO);
        } else {
            fs.fail_after(op, 0, libc::EIO);
        }
        let second = log.segments()[1].0;
        assert!(log.truncate_before(second).is_err(), "{op:?}");
        power_cut(&fs, log);
        let log = Log::open(Arc::new(fs), &dir(), reusing_opts()).unwrap();
        assert_eq!(log.appended_lsn(), n, "{op:?}");
        let got = all(&log);
        let first = got[0].0;
        assert!(first == 1 || first == second, "{op:?}: starts at {first}");
        assert_eq!(got.len() as u64, n - first + 1, "{op:?}");
        assert!(got.iter().all(|(l, p)| *p == varied(*l)), "{op:?}");
        assert_eq!(log.commit(b"next").unwrap(), n + 1, "{op:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Appends, sync points and truncations (so segment files get reused), then a power loss
    /// that keeps a random subset of the pages of the last, unsynced write. The default mode
    /// opens the log (a torn write is cut, whichever of its pages persisted) and every synced
    /// record is there.
    #[test]
    fn a_torn_power_loss_keeps_every_synced_record(
        ops in proptest::collection::vec((0usize..3000, any::<bool>(), any::<bool>()), 1..60),
        seed in any::<u64>(),
        direct_io in any::<bool>(),
    ) {
        let fs = FaultyFs::new();
        let o = LogOptions {
            flush_interval: Duration::from_secs(3600),
            segment_bytes: 16 << 10,
            reuse_segments: 2,
            direct_io,
            ..opts(Durability::Async)
        };
        let log = Log::open(Arc::new(fs.clone()), &dir(), o.clone()).unwrap();
        let body = |lsn: u64| vec![(lsn % 251) as u8 + 1; ops[(lsn - 1) as usize % ops.len()].0];
        let mut synced = 0;
        for (i, (_, sync, truncate)) in ops.iter().enumerate() {
            let lsn = i as u64 + 1;
            log.commit(&body(lsn)).unwrap();
            if *sync {
                log.sync().unwrap();
                synced = lsn;
            }
            if *truncate && synced > 0 {
                log.truncate_before(synced).unwrap();
            }
        }
        // The oldest record a reader may still ask for: truncation keeps it.
        let oldest_needed = synced.max(1);
        // A last batch that is written but whose fdatasync never returns: the torn write.
        let extra = ops.len() as u64 / 3;
        for lsn in ops.len() as u64 + 1..=ops.len() as u64 + extra {
            log.commit(&body(lsn)).unwrap();
        }
        fs.hold_syncs(true);
        let target = log.appended_lsn();
        log.request_durable(target);
        while extra > 0 && fs.syncs_held() == 0 {
            prop_assert!(log.durable_lsn() < target, "durable without an fdatasync");
            std::thread::yield_now();
        }
        // The power goes while that fdatasync is held: it never returns to the dead process.
        power_cut_torn(&fs, log, seed);
        let log = Log::open(Arc::new(fs), &dir(), o).unwrap();
        let got = all(&log);
        prop_assert!(log.appended_lsn() >= synced);
        prop_assert!(got.first().map_or(synced == 0, |r| r.0 <= oldest_needed));
        prop_assert!(got.windows(2).all(|w| w[1].0 == w[0].0 + 1), "gap free");
        for (lsn, p) in &got {
            prop_assert_eq!(p, &body(*lsn));
        }
    }
}

/// Records 1-10 written one write each, 11 alone (its fdatasync held meanwhile), then 12-41
/// in one write; returns the fs, the segment and the offset of every record.
fn ten_writes_then_one_of_thirty() -> (FaultyFs, PathBuf, Vec<usize>) {
    let fs = FaultyFs::new();
    let o = LogOptions {
        segment_bytes: 1 << 20,
        ..opts(Durability::Sync)
    };
    let log = Log::open(Arc::new(fs.clone()), &dir(), o).unwrap();
    let mut at = vec![0; 42];
    let mut offset = format::HEADER_LEN;
    for lsn in 1..=41u64 {
        at[lsn as usize] = offset;
        offset += format::RECORD_HEADER_LEN + varied(lsn).len();
        if lsn <= 10 {
            log.commit(&varied(lsn)).unwrap();
            continue;
        }
        // Hold the fdatasync before 11 is appended: holding it after could come too late (the
        // syncer may already have synced 11 alone), and the wait below would never end.
        if lsn == 11 {
            fs.hold_syncs(true);
        }
        log.append(&varied(lsn)).unwrap();
        if lsn == 11 {
            while fs.syncs_held() == 0 {
                std::thread::yield_now();
            }
        }
    }
    fs.hold_syncs(false);
    log.sync().unwrap();
    assert_eq!(log.stats().write.count, 12, "twelve writes");
    drop(log);
    (fs, dir().join(format::segment_name(1)), at)
}

/// Damage at the start of the last write, with the rest of that write intact: what a power
/// loss leaves when a later page of an unsynced write persisted and its first did not. The
/// default mode cuts it there; damage in an earlier, synced write (a later write follows it)
/// is still refused, and so is the same torn write in a version 1 segment, which has no
/// write-start flags to tell the two apart.
#[test]
fn a_torn_last_write_is_cut_but_damage_before_a_later_write_is_refused() {
    let garble = |b: &mut Vec<u8>, at: usize| b[at..at + 8].fill(0x5a);

    let (fs, seg, at) = ten_writes_then_one_of_thirty();
    fs.corrupt(&seg, |b| garble(b, at[12]));
    let log = Log::open(Arc::new(fs), &dir(), rotating_opts()).unwrap();
    assert_eq!(log.appended_lsn(), 11, "the torn write is cut");
    assert!(all(&log).iter().all(|(l, p)| *p == varied(*l)));

    let (fs, seg, at) = ten_writes_then_one_of_thirty();
    fs.corrupt(&seg, |b| garble(b, at[5]));
    let err = Log::open(Arc::new(fs), &dir(), rotating_opts()).err();
    assert!(matches!(err, Some(WalError::Corrupt { offset, .. }) if offset == at[5] as u64));

    let (fs, seg, at) = ten_writes_then_one_of_thirty();
    let v1 = format::SegmentHeader {
        log_id: {
            let f = fs.open(&seg).unwrap();
            let mut h = [0u8; format::HEADER_LEN];
            f.read_at(0, &mut h).unwrap();
            format::SegmentHeader::decode(&h).unwrap().log_id
        },
        first_lsn: 1,
        version: 1,
    }
    .encode();
    fs.corrupt(&seg, |b| {
        b[..format::HEADER_LEN].copy_from_slice(&v1);
        garble(b, at[12]);
    });
    let err = Log::open(Arc::new(fs), &dir(), rotating_opts()).err();
    assert!(
        matches!(err, Some(WalError::Corrupt { .. })),
        "version 1: {err:?}"
    );
}

/// Records of `FRAME_OUTSIDE_LOCK_BYTES` and more are framed outside the lock, in slots the
/// syncer must not pass while they are empty: mixed with small records from many threads, on
/// the real disk (one pwritev per batch) and with O_DIRECT, every record comes back under its
/// own LSN, with no gap.
#[test]
fn large_records_framed_outside_the_lock_keep_their_place() {
    for direct_io in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let fs: Arc<dyn FileSystem> = Arc::new(RealFs);
        let o = LogOptions {
            segment_bytes: 2 << 20,
            direct_io,
            ..opts(Durability::Sync)
        };
        let log = Arc::new(Log::open(Arc::clone(&fs), tmp.path(), o.clone()).unwrap());
        // Every third record is large; half the threads wait per record, half only at the end.
        let body = |t: u64, i: u64| {
            let len = if (t + i).is_multiple_of(3) {
                FRAME_OUTSIDE_LOCK_BYTES + (i as usize * 997) % 100_000
            } else {
                10 + i as usize
            };
            vec![(t * 40 + i) as u8; len]
        };
        let acked = append_from_threads(&log, 6, 40, body, |t| t.is_multiple_of(2));
        log.sync().unwrap();
        assert!(
            log.stats().segments > 1,
            "rolled over (direct_io {direct_io})"
        );
        drop(log);
        let log = Log::open(
            fs,
            tmp.path(),
            LogOptions {
                recovery: RecoveryMode::Strict,
                ..o
            },
        )
        .unwrap();
        assert!(all(&log) == acked, "records differ (direct_io {direct_io})");
    }
}

/// The real disk's pwritev: more parts than one call takes (IOV_MAX), empty ones among them.
#[test]
fn a_vectored_write_writes_every_part_in_order() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("f");
    let file = RealFs.create(&path).unwrap();
    let parts: Vec<Vec<u8>> = (0..3000u32)
        .map(|i| vec![(i % 251) as u8; (i % 5) as usize])
        .collect();
    let slices: Vec<&[u8]> = parts.iter().map(|p| p.as_slice()).collect();
    file.write_vectored_at(7, &slices).unwrap();
    let want = slices.concat();
    let mut got = vec![0u8; want.len() + 7];
    assert_eq!(file.read_at(0, &mut got).unwrap(), got.len());
    assert_eq!(&got[..7], &[0u8; 7]);
    assert!(got[7..] == want[..], "bytes differ");
}

/// The format's record length has 32 bits: a log that would accept more is refused at open,
/// so no append can take an LSN and then fail to frame its record.
#[test]
fn open_refuses_a_record_limit_the_format_cannot_hold() {
    let o = LogOptions {
        max_record_bytes: u32::MAX as usize + 1,
        ..opts(Durability::Sync)
    };
    let err = Log::open(Arc::new(FaultyFs::new()), &dir(), o)
        .err()
        .unwrap();
    assert!(matches!(err, WalError::RecordLimit { .. }), "{err}");
    let o = LogOptions {
        max_record_bytes: u32::MAX as usize,
        ..opts(Durability::Sync)
    };
    assert!(Log::open(Arc::new(FaultyFs::new()), &dir(), o).is_ok());
}

/// With `syncer_batch_sched` the syncer thread runs under SCHED_BATCH (no other test in this
/// binary asks for it, so a SCHED_BATCH syncer is this log's).
#[test]
fn the_syncer_can_run_under_sched_batch() {
    let batch_syncers = || {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|t| {
                let t = t.ok()?.path();
                let comm = std::fs::read_to_string(t.join("comm")).ok()?;
                let tid: i32 = t.file_name()?.to_str()?.parse().ok()?;
                // SAFETY: sched_getscheduler only reads the policy of a thread id.
                let policy = unsafe { libc::sched_getscheduler(tid) };
                (comm.trim() == "cairn-wal-sync" && policy == libc::SCHED_BATCH).then_some(tid)
            })
            .count()
    };
    let o = LogOptions {
        syncer_batch_sched: true,
        ..opts(Durability::Sync)
    };
    let log = Log::open(Arc::new(FaultyFs::new()), &dir(), o).unwrap();
    // The syncer sets its policy when it starts: poll for it.
    let deadline = Instant::now() + Duration::from_secs(30);
    while batch_syncers() == 0 {
        assert!(Instant::now() < deadline, "no syncer under SCHED_BATCH");
        std::thread::yield_now();
    }
    log.commit(b"still works").unwrap();
}

/// A log with one 100-byte record written, its fdatasync blocked (`hold_syncs`).
fn one_record_with_its_fdatasync_held(fs: &FaultyFs, d: Durability) -> (Log, Lsn) {
    let log = Log::open(Arc::new(fs.clone()), &dir(), opts(d)).unwrap();
    fs.hold_syncs(true);
    let lsn = log.append(&[7u8; 100]).unwrap();
    log.request_durable(lsn);
    while fs.syncs_held() == 0 {
        std::thread::yield_now();
    }
    (log, lsn)
}

#[test]
fn pending_bytes_count_the_batch_being_written() {
    let fs = FaultyFs::new();
    // Sync mode without O_DIRECT: the batch is written, then fdatasync'd, in one round.
    let (log, lsn) = one_record_with_its_fdatasync_held(&fs, Durability::Sync);
    let held = log.stats();
    fs.hold_syncs(false);
    log.wait_durable(lsn).unwrap();
    assert_eq!(
        held.pending_bytes,
        (format::RECORD_HEADER_LEN + 100) as u64,
        "not durable yet: {held:?}"
    );
    assert_eq!(log.stats().pending_bytes, 0);
}

#[test]
fn records_recovered_after_a_kill_are_made_durable_at_open() {
    let fs = FaultyFs::new();
    let (log, lsn) = one_record_with_its_fdatasync_held(&fs, Durability::Async);
    // kill -9 between the write and its fdatasync: the write stays in the page cache.
    kill(&fs, log);
    let log = Log::open(Arc::new(fs.clone()), &dir(), opts(Durability::Async)).unwrap();
    assert_eq!(log.durable_lsn(), lsn, "recovered records count as durable");
    // So they must survive a power loss now.
    power_cut(&fs, log);
    let log = Log::open(Arc::new(fs.clone()), &dir(), opts(Durability::Async)).unwrap();
    assert_eq!(log.appended_lsn(), lsn, "a record called durable was lost");
}

/// In async mode the syncer's fdatasync does not hold up writes: while one is held (a slow
/// disk), a thread that writes before it sleeps still hands its records to the kernel, so
/// they are acknowledged (written) though not durable yet. Before, the syncer held the writer
/// lock through each fdatasync, and every async acknowledgement waited for the disk's flush.
#[test]
fn async_writes_go_on_while_an_fdatasync_runs() {
    let fs = FaultyFs::new();
    let o = LogOptions {
        flush_interval: Duration::from_secs(60),
        ..opts(Durability::Async)
    };
    let log = Arc::new(Log::open(Arc::new(fs.clone()), &dir(), o).unwrap());
    let first = log.commit(b"one").unwrap();
    fs.hold_syncs(true);
    log.request_durable(first);
    while fs.syncs_held() == 0 {
        std::thread::yield_now();
    }
    let helper = {
        let log = Arc::clone(&log);
        std::thread::spawn(move || {
            cairn_wal::writes_before_sleeping();
            let lsn = log.append(b"two").unwrap();
            log.write_ready();
            (lsn, log.written_lsn())
        })
    };
    let (lsn, written) = helper.join().unwrap();
    let (held, durable) = (fs.syncs_held(), log.durable_lsn());
    // Let the fdatasync go before asserting: a failed test must not leave the log stuck.
    fs.hold_syncs(false);
    assert!(
        written >= lsn,
        "record {lsn} not written while an fdatasync was held (written up to {written})"
    );
    assert_eq!(held, 1, "the fdatasync was still held");
    assert!(durable < lsn, "durable without its fdatasync");
    log.wait_durable(lsn).unwrap();
    drop(log);
    let log = Log::open(Arc::new(fs), &dir(), opts(Durability::Async)).unwrap();
    assert_eq!(all(&log), vec![(1, b"one".to_vec()), (2, b"two".to_vec())]);
}

/// On an O_DIRECT tail, async mode's writes through the page cache are whole 4 KiB blocks
/// (from the block holding the tail's end to the block's end past the end marker), and the
/// tail's cached pages are dropped whenever a file becomes the tail (at open, and at each new
/// segment): the kernel then puts those writes into pages the size of the writes, without
/// reading the file, instead of walking the large folios a zero fill leaves (`Tail::drop_cache`).
/// Records of every size still read back.
#[test]
fn async_writes_on_a_direct_tail_are_whole_blocks_after_the_cache_is_dropped() {
    let fs = FaultyFs::new();
    let o = LogOptions {
        direct_io: true,
        segment_bytes: 32 << 10,
        ..opts(Durability::Async)
    };
    let log = Arc::new(Log::open(Arc::new(fs.clone()), &dir(), o.clone()).unwrap());
    let writes_before = fs.writes().len();
    assert_eq!(
        fs.cache_drops().len(),
        1,
        "the tail's cache is dropped at open"
    );
    let body = |i: u64| vec![(i % 251) as u8 + 1; 1 + (i as usize * 97) % 1500];
    let helper = {
        let log = Arc::clone(&log);
        std::thread::spawn(move || {
            cairn_wal::writes_before_sleeping();
            for i in 1..=300u64 {
                assert_eq!(log.append(&body(i)).unwrap(), i);
                log.write_ready();
            }
            log.write_ready();
        })
    };
    helper.join().unwrap();
    log.sync().unwrap();
    let segments = log.stats().segments;
    drop(log);
    // 300 records of 1-1500 bytes fill more than one 32 KiB segment, however they batch.
    assert!(segments >= 2, "rolled over: {segments} segments");
    let writes = fs.writes();
    let async_writes = &writes[writes_before..];
    // How many depends on how the appends batched, which depends on the scheduling (under
    // the full test suite's load 10 or fewer were seen once): at least one a segment.
    assert!(async_writes.len() >= 2, "{} writes", async_writes.len());
    for (path, offset, len) in async_writes {
        assert!(
            offset % 4096 == 0 && len % 4096 == 0,
            "a write of {len} bytes at {offset} in {} is not whole blocks",
            path.display()
        );
    }
    assert!(
        fs.cache_drops().len() >= segments,
        "{} cache drops for {segments} segments",
        fs.cache_drops().len()
    );
    let log = Log::open(Arc::new(fs), &dir(), o).unwrap();
    let got = all(&log);
    assert_eq!(got.len(), 300);
    assert!(got.iter().all(|(l, p)| *p == body(*l)));
}
