//! Log replay at recovery, on several threads at once.
//!
//! ```text
//!   calling thread: Log::read_from ─> decode ─> key's store shard % n ─> batch for worker k
//!                                                                        (bounded channel)
//!   worker k: decode ─> apply to the store, in log order
//!   Flushed / FlushScheduled: every worker finishes what it was sent (a fence), then the
//!   calling thread applies the record
//! ```
//!
//! Why the result is the same as replaying on one thread: records of one key go to one worker
//! (the key's shard decides) and stay in log order there, and records of different keys commute
//! (each sets or removes only its key). Only the flush records touch every key, so they wait
//! until everything before them is applied and nothing after them is sent before they are.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

use cairn_store::Store;
use cairn_wal::{Log, Lsn};

use crate::record::{self, Record};
use crate::{now_unix, PersistError};

/// Bytes of records collected for one worker before they are handed over.
const BATCH_BYTES: usize = 256 << 10;

/// What a worker is sent.
enum Work {
    /// Records back to back, each as `lsn u64 LE | len u32 LE | payload`, already decoded
    /// once.
    Batch(Vec<u8>),
    /// Answer on the channel once everything sent before is applied.
    Fence(SyncSender<()>),
}

/// What a replay did.
pub(crate) struct Replayed {
    /// The first LSN seen (None for an empty tail).
    pub first_seen: Option<Lsn>,
    /// Records replayed.
    pub records: u64,
    /// Their bytes in the log, record headers included.
    pub bytes: u64,
    /// Stored records that did not fit the store any more (see [`apply`]).
    pub dropped: u64,
}

/// Replays every durable record with LSN >= `from` into `store` on `workers` threads.
pub(crate) fn replay(
    log: &Log,
    store: &Store,
    from: Lsn,
    workers: usize,
) -> Result<Replayed, PersistError> {
    let workers = workers.max(1);
    let now = now_unix();
    let dropped = AtomicU64::new(0);
    let mut first_seen = None;
    let mut replayed = 0u64;
    let mut bytes = 0u64;
    std::thread::scope(|s| {
        let mut senders = Vec::with_capacity(workers);
        for _ in 0..workers {
            let (tx, rx) = sync_channel::<Work>(4);
            senders.push(tx);
            let dropped = &dropped;
            s.spawn(move || apply_loop(store, now, rx, dropped));
        }
        let mut batches: Vec<Vec<u8>> = (0..workers).map(|_| Vec::new()).collect();
        let send = |tx: &SyncSender<Work>, batch: &mut Vec<u8>| {
            let full = std::mem::replace(batch, Vec::with_capacity(BATCH_BYTES + 1024));
            tx.send(Work::Batch(full)).expect("a replay worker stopped");
        };
        log.read_from::<PersistError>(from, |lsn, payload| {
            first_seen.get_or_insert(lsn);
            let rec = record::decode(payload)
                .ok_or_else(|| PersistError::from(crate::Unrecoverable::BadRecord { lsn }))?;
            match rec {
                Record::Stored { key, .. } | Record::Deleted { key, .. } => {
                    let k = store.shard_of(key) % workers;
                    let batch = &mut batches[k];
                    let len = u32::try_from(payload.len()).expect("records are under 4 GiB");
                    batch.extend_from_slice(&lsn.to_le_bytes());
                    batch.extend_from_slice(&len.to_le_bytes());
                    batch.extend_from_slice(payload);
                    if batch.len() >= BATCH_BYTES {
                        send(&senders[k], batch);
                    }
                }
                Record::Flushed | Record::FlushScheduled { .. } => {
                    // A fence: everything before this record is applied first.
                    let (done_tx, done_rx) = sync_channel(workers);
                    for (tx, batch) in senders.iter().zip(batches.iter_mut()) {
                        if !batch.is_empty() {
                            send(tx, batch);
                        }
                        tx.send(Work::Fence(done_tx.clone()))
                            .expect("a replay worker stopped");
                    }
                    for _ in 0..workers {
                        done_rx.recv().expect("a replay worker stopped");
                    }
                    apply(store, now, lsn, rec);
                }
            }
            replayed += 1;
            bytes += (cairn_wal::format::RECORD_HEADER_LEN + payload.len()) as u64;
            if replayed.is_multiple_of(1_000_000) {
                tracing::info!("recovery: {replayed} log records replayed");
            }
            Ok(())
        })?;
        for (tx, batch) in senders.iter().zip(batches.iter_mut()) {
            if !batch.is_empty() {
                send(tx, batch);
            }
        }
        // Dropping the senders ends the workers; the scope joins them.
        drop(senders);
        Ok::<(), PersistError>(())
    })?;
    Ok(Replayed {
        first_seen,
        records: replayed,
        bytes,
        dropped: dropped.into_inner(),
    })
}

/// A worker: applies batches in the order they arrive until its channel closes.
fn apply_loop(store: &Store, now: u32, rx: Receiver<Work>, dropped: &AtomicU64) {
    for work in rx {
        match work {
            Work::Batch(batch) => {
                let mut rest = &batch[..];
                while let Some((lsn, tail)) = rest.split_first_chunk::<8>() {
                    let (len, tail) = tail.split_first_chunk::<4>().expect("a length follows");
                    let (payload, next) = tail.split_at(u32::from_le_bytes(*len) as usize);
                    let rec = record::decode(payload).expect("decoded before");
                    if !apply(store, now, u64::from_le_bytes(*lsn), rec) {
                        dropped.fetch_add(1, Ordering::Relaxed);
                    }
                    rest = next;
                }
            }
            Work::Fence(done) => {
                let _ = done.send(());
            }
        }
    }
}

/// Sets the store to what one record says (snapshot items are applied as Stored records),
/// with `revision` as the mod_revision of what it stores (the record's LSN, or the revision a
/// snapshot item carries). Returns false if a Stored record did not fit the store any more (a
/// smaller `-m` or `-I` than when it was written): the key is then removed, as a cache would
/// evict it, so that the value it overwrote cannot come back.
pub(crate) fn apply(store: &Store, now: u32, revision: Lsn, rec: Record<'_>) -> bool {
    crate::sink::with_replay_revision(revision, || apply_record(store, now, rec))
}

fn apply_record(store: &Store, now: u32, rec: Record<'_>) -> bool {
    match rec {
        Record::Stored {
            key,
            value,
            flags,
            exptime,
            cas,
            stale,
        } => {
            let stored = store.entry(key, now, |e| {
                let r = e.store(&[value], flags, exptime, Some(cas));
                if r.is_err() {
                    e.delete();
                } else if stale {
                    e.update_meta(|m| m.stale = true);
                }
                r
            });
            if stored.is_err() {
                // The unique was handed out once: never again.
                store.raise_cas_floor(cas);
                return false;
            }
        }
        Record::Deleted { key, .. } => {
            store.entry(key, now, |e| e.delete());
        }
        Record::Flushed => store.flush_all(),
        Record::FlushScheduled { at } => store.schedule_flush(at),
    }
    true
}
