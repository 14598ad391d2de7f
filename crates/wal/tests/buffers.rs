//! The log's buffers after a burst: handed back to the operating system once the log is
//! quiet, and the log goes on as before.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_wal::{Durability, FileSystem, Log, LogOptions, RealFs, WalError};

fn body(i: u64) -> Vec<u8> {
    vec![(i % 251) as u8 + 1; 1 + (i as usize * 4099) % 6000]
}

/// Waits, with a deadline, for the log's `buffer_releases` to reach `n`.
fn releases_reach(log: &Log, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while log.stats().buffer_releases < n {
        assert!(
            Instant::now() < deadline,
            "no release of the buffers after a quiet spell"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Bursts from several threads (group commit: several chunks, so buffers are kept for reuse),
/// each followed by a quiet spell: every record reads back after a reopen. The O_DIRECT
/// staging buffer starts anew at each release and must carry the file's partly written last
/// block over, or the next write zeroes the records before it in that block.
#[test]
fn buffers_go_back_when_the_log_is_quiet_and_records_stay_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let fs: Arc<dyn FileSystem> = Arc::new(RealFs);
    let o = LogOptions {
        durability: Durability::Sync,
        direct_io: true,
        segment_bytes: 1 << 20,
        release_after: Duration::from_millis(20),
        ..LogOptions::default()
    };
    let log = Arc::new(Log::open(Arc::clone(&fs), tmp.path(), o.clone()).unwrap());
    let mut written = BTreeMap::new();
    for round in 1..=3u64 {
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let log = Arc::clone(&log);
                std::thread::spawn(move || {
                    (0..100u64)
                        .map(|i| {
                            let b = body(round * 1000 + t * 100 + i);
                            (log.commit(&b).unwrap(), b)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for t in threads {
            written.extend(t.join().unwrap());
        }
        releases_reach(&log, round);
    }
    drop(log);
    let log = Log::open(fs, tmp.path(), o).unwrap();
    let mut read = BTreeMap::new();
    log.read_from::<WalError>(1, |lsn, p| {
        read.insert(lsn, p.to_vec());
        Ok(())
    })
    .unwrap();
    assert_eq!(read.len(), written.len());
    assert!(
        read == written,
        "a record changed after a release of the buffers"
    );
}
