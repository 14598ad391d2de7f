//! The engine's rules, on a real store and a log on the fault-injecting file system: what an
//! [`Ack`] covers, what is refused, and what is never acknowledged.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use cairn_persist::{Mode, PersistConfig, Persistence, ReplicationGate, DEFAULT_MAX_PENDING_BYTES};
use cairn_store::{Store, StoreConfig};
use cairn_testkit::{FaultyFs, Op};
use cairn_wal::Lsn;

use super::*;

fn block_on<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// A sync-mode engine whose log is on `fs`.
fn logged(fs: &FaultyFs) -> Engine {
    let p = Persistence::open(
        PersistConfig {
            mode: Mode::Sync,
            data_path: PathBuf::from("/e/data"),
            logs_path: PathBuf::from("/e/log"),
            async_flush_ms: 100,
            chkpt_interval_pct_snapshot: 100,
            chkpt_interval_min_logsize_mb: 256,
            checkpoint_rate_mb_s: 0,
            segment_bytes: 64 << 10,
            direct_io: false,
            syncer_batch_sched: false,
            max_pending_bytes: DEFAULT_MAX_PENDING_BYTES,
            fs: Arc::new(fs.clone()),
            flash: None,
        },
        StoreConfig::default(),
    )
    .expect("open");
    let p = Arc::new(p);
    Engine::new(p.store(), Some(p), None, None)
}

fn set(tx: &Tx<'_>, key: &str, now: u32) -> bool {
    tx.entry(key.as_bytes(), now, |e| {
        e.store(&[b"v"], 0, 0, None).is_ok()
    })
}

#[test]
fn without_a_log_nothing_is_waited_for() {
    let engine = Engine::new(
        Arc::new(Store::new(StoreConfig::default(), None)),
        None,
        None,
        None,
    );
    let now = engine.now();
    let (stored, ack) = engine.apply(|tx| set(tx, "k", now));
    assert!(stored);
    assert!(ack.is_empty());
    assert!(engine.refusal().is_none());
    block_on(async {
        engine.admit().await.unwrap();
        engine.acknowledged(ack).await.unwrap();
        engine.durable(ack).await.unwrap();
    });
}

#[test]
fn an_ack_covers_the_writes_own_changes_only() {
    let fs = FaultyFs::new();
    let engine = logged(&fs);
    let now = engine.now();
    let (_, first) = engine.apply(|tx| set(tx, "a", now));
    assert!(!first.is_empty());
    let (_, both) = engine.apply(|tx| {
        set(tx, "b", now);
        tx.entry(b"a", now, |e| e.delete())
    });
    assert!(both.merge(first) == both, "the newer ack covers the older");
    // Nothing changed: nothing to wait for.
    let (deleted, none) = engine.apply(|tx| tx.entry(b"missing", now, |e| e.delete()));
    assert!(!deleted);
    assert!(none.is_empty());
    // An item that expired is removed when found, and logged, but that is no change of the
    // reader's: it waits for nothing.
    engine.apply(|tx| tx.entry(b"old", now, |e| e.store(&[b"v"], 0, now - 1, None).is_ok()));
    let (found, expiry) = engine.apply(|tx| tx.entry(b"old", now, |e| e.peek().is_some()));
    assert!(!found);
    assert!(expiry.is_empty());
    let (_, flush) = engine.apply(|tx| tx.flush_all());
    assert!(flush.merge(both) == flush);
    block_on(async {
        engine.acknowledged(flush).await.unwrap();
        engine.durable(flush).await.unwrap();
    });
    assert!(engine.persist().unwrap().durable_lsn() > 0);
}

#[test]
fn a_failed_log_refuses_writes_and_acknowledges_nothing_pending() {
    let fs = FaultyFs::new();
    let engine = logged(&fs);
    let now = engine.now();
    fs.fail_after(Op::Sync, 0, 5);
    let (_, ack) = engine.apply(|tx| set(tx, "k", now));
    let e = block_on(engine.acknowledged(ack)).unwrap_err();
    assert!(matches!(e, WriteError::NotSafe(_)), "{e:?}");
    assert!(!e.refused());
    let e = block_on(engine.admit()).unwrap_err();
    assert!(matches!(e, WriteError::LogFailed(_)), "{e:?}");
    assert!(e.refused());
    let e = block_on(engine.write(b"k", |tx| set(tx, "k", now))).unwrap_err();
    assert!(matches!(e, WriteError::LogFailed(_)), "{e:?}");
}

/// A gate that refuses client writes while `replica`, and withholds every acknowledgement.
struct Gate {
    replica: AtomicBool,
}

impl ReplicationGate for Gate {
    fn refusal(&self) -> Option<String> {
        self.replica
            .load(Ordering::Relaxed)
            .then(|| "a replica".to_string())
    }

    fn reached(
        &self,
        _lsn: Lsn,
    ) -> Option<Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>>> {
        Some(Box::pin(std::future::ready(Err("no replica".to_string()))))
    }
}

#[test]
fn the_replication_gate_refuses_and_withholds() {
    let fs = FaultyFs::new();
    let engine = logged(&fs);
    let gate = Arc::new(Gate {
        replica: AtomicBool::new(true),
    });
    engine
        .persist()
        .unwrap()
        .set_replication_gate(Arc::clone(&gate) as Arc<dyn ReplicationGate>);
    let now = engine.now();
    let e = block_on(engine.write(b"k", |tx| set(tx, "k", now))).unwrap_err();
    assert!(
        matches!(&e, WriteError::NotPrimary(why) if why == "a replica"),
        "{e:?}"
    );
    gate.replica.store(false, Ordering::Relaxed);
    let e = block_on(engine.write(b"k", |tx| set(tx, "k", now))).unwrap_err();
    assert!(
        matches!(&e, WriteError::Replication(why) if why == "no replica"),
        "{e:?}"
    );
    // Durable here all the same: the fence does not ask the gate.
    let (_, ack) = engine.apply(|tx| set(tx, "k2", now));
    block_on(engine.durable(ack)).unwrap();
}

#[test]
fn put_by_mode_and_compare_as_every_front_end_means_them() {
    let store = Store::new(
        StoreConfig {
            item_size_max_bytes: 1 << 10,
            ..StoreConfig::default()
        },
        None,
    );
    let now = 1_000;
    let at = |mode, value: &[u8]| store.entry(b"k", now, |e| put(e, mode, &[value], 0, 0, None));
    assert_eq!(at(PutMode::Replace, b"v"), Ok(Put::NotStored));
    let Ok(Put::Stored(first)) = at(PutMode::Add, b"v") else {
        panic!("add of a missing key stores")
    };
    assert_eq!(at(PutMode::Add, b"w"), Ok(Put::NotStored));
    assert!(matches!(at(PutMode::Replace, b"w"), Ok(Put::Stored(_))));
    // Too large: an add or a replace leaves the old value, a set removes it.
    let big = vec![b'x'; 2 << 10];
    assert_eq!(
        at(PutMode::Replace, &big),
        Err(cairn_store::StoreError::TooLarge)
    );
    assert!(store.entry(b"k", now, |e| e.peek().is_some()));
    assert_eq!(
        at(PutMode::Set, &big),
        Err(cairn_store::StoreError::TooLarge)
    );
    assert!(store.entry(b"k", now, |e| e.peek().is_none()));

    assert_eq!(compare(Compare::Cas(1), None), Err(Mismatch::Absent));
    assert_eq!(compare(Compare::Cas(first.cas), Some(&first)), Ok(()));
    assert_eq!(
        compare(Compare::Cas(first.cas + 1), Some(&first)),
        Err(Mismatch::Differs(first.cas))
    );
    assert_eq!(
        compare(Compare::ModRevision(first.mod_revision), Some(&first)),
        Ok(())
    );
    assert_eq!(
        compare(Compare::ModRevision(first.mod_revision + 7), Some(&first)),
        Err(Mismatch::Differs(first.mod_revision))
    );
}
