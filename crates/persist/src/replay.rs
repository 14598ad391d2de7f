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

use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

use cairn_store::Store;
use cairn_wal::{Log, Lsn};

use crate::record::{self, Record};
use crate::{now_unix, PersistError};

/// Bytes of records collected for one worker before they are handed over.
const BATCH_BYTES: usize = 256 << 10;

/// What a worker is sent.
enum Work {
    /// Records back to back, each as `len u32 LE | payload`, already decoded once.
    Batch(Vec<u8>),
    /// Answer on the channel once everything sent before is applied.
    Fence(SyncSender<()>),
}

/// Replays every durable record with LSN >= `from` into `store` on `workers` threads.
/// Returns the first LSN seen (None for an empty tail) and how many records were replayed.
pub(crate) fn replay(
    log: &Log,
    store: &Store,
    from: Lsn,
    workers: usize,
) -> Result<(Option<Lsn>, u64), PersistError> {
    let workers = workers.max(1);
    let now = now_unix();
    std::thread::scope(|s| {
        let mut senders = Vec::with_capacity(workers);
        for _ in 0..workers {
            let (tx, rx) = sync_channel::<Work>(4);
            senders.push(tx);
            s.spawn(move || apply_loop(store, now, rx));
        }
        let mut batches: Vec<Vec<u8>> = (0..workers).map(|_| Vec::new()).collect();
        let send = |tx: &SyncSender<Work>, batch: &mut Vec<u8>| {
            let full = std::mem::replace(batch, Vec::with_capacity(BATCH_BYTES + 1024));
            tx.send(Work::Batch(full)).expect("a replay worker stopped");
        };
        let mut first_seen = None;
        let mut replayed = 0u64;
        log.read_from::<PersistError>(from, |lsn, payload| {
            first_seen.get_or_insert(lsn);
            let rec = record::decode(payload).ok_or_else(|| {
                PersistError::Unrecoverable(format!("log record {lsn} does not decode"))
            })?;
            match rec {
                Record::Stored { key, .. } | Record::Deleted { key } => {
                    let k = store.shard_of(key) % workers;
                    let batch = &mut batches[k];
                    let len = u32::try_from(payload.len()).expect("records are under 4 GiB");
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
                    apply(store, now, rec);
                }
            }
            replayed += 1;
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
        Ok((first_seen, replayed))
    })
}

/// A worker: applies batches in the order they arrive until its channel closes.
fn apply_loop(store: &Store, now: u32, rx: Receiver<Work>) {
    for work in rx {
        match work {
            Work::Batch(batch) => {
                let mut rest = &batch[..];
                while let Some((len, tail)) = rest.split_first_chunk::<4>() {
                    let (payload, next) = tail.split_at(u32::from_le_bytes(*len) as usize);
                    apply(store, now, record::decode(payload).expect("decoded before"));
                    rest = next;
                }
            }
            Work::Fence(done) => {
                let _ = done.send(());
            }
        }
    }
}

/// Sets the store to what one record says (snapshot items are applied as Stored records).
pub(crate) fn apply(store: &Store, now: u32, rec: Record<'_>) {
    match rec {
        Record::Stored {
            key,
            value,
            flags,
            exptime,
            cas,
            stale,
        } => {
            // An item that does not fit any more (a smaller -m than before) is left out, as a
            // cache would evict it.
            let _ = store.entry(key, now, |e| {
                let r = e.store(&[value], flags, exptime, Some(cas));
                if stale {
                    e.update_meta(|m| m.stale = true);
                }
                r
            });
        }
        Record::Deleted { key } => {
            store.entry(key, now, |e| e.delete());
        }
        Record::Flushed => store.flush_all(),
        Record::FlushScheduled { at } => store.schedule_flush(at),
    }
}
