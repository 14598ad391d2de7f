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
//!
//! With a flash tier, a worker holds back each shard's newest records, up to the RAM the
//! shard has for items (its *window*), and applies a record only when newer ones push it out of the window, or at
//! a fence, or at the end. A stored record pushed out while its shard's RAM is full goes
//! straight to flash ([`Store::replay_to_flash`]): replayed in order, it would have been
//! stored in RAM and moved to flash by the eviction the newer records cause, so it ends in
//! the same place for half the work (a log tail much longer than RAM is mostly such records:
//! 895K records of a 4.98 s restart at 10M items). Per shard, records still apply in log
//! order, so the state is the same; only the RAM/flash placement can differ, when the window
//! is capped below a shard's RAM ([`WINDOWS_MAX_BYTES`]) and the tail is longer than RAM.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

use cairn_store::{ItemMeta, Mutation, Store};
use cairn_wal::{Log, Lsn};

use crate::error::{PersistError, Unrecoverable};
use crate::record::{self, Record};
use cairn_store::now_unix;

/// Bytes of records collected for one worker before they are handed over.
const BATCH_BYTES: usize = 256 << 10;

/// The most bytes all windows hold together (each shard's window is a shard's RAM, or less
/// past this): recovery's extra memory stays bounded with a large `-m`.
pub(crate) const WINDOWS_MAX_BYTES: usize = 256 << 20;

/// Replay workers at least, with a flash tier: a replayed store of a key that shares its
/// hash tag with a flash entry of its shard reads that entry's item from the device, under
/// the shard lock, to tell whether it is the key's own copy (`FlashTier::key_at`; one store
/// in ~500 at 9M flash items in 16 shards). With one worker per core those reads were made
/// one after another, and the cores idled meanwhile; more workers keep several in flight.
pub(crate) const WORKERS_WITH_FLASH: usize = 8;

/// What a worker is sent.
enum Work {
    /// Records back to back, each as `lsn u64 LE | shard u32 LE | len u32 LE | payload`,
    /// already decoded once.
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
    /// Stored records put straight on flash (see the module doc).
    pub to_flash: u64,
}

/// Replays every durable record with LSN >= `from` into `store` on `workers` threads. With
/// `flash` (the store has a flash tier), each worker holds back its shards' newest records in
/// windows (see the module doc).
pub(crate) fn replay(
    log: &Log,
    store: &Store,
    from: Lsn,
    workers: usize,
    flash: bool,
) -> Result<Replayed, PersistError> {
    let workers = workers.max(1);
    let now = now_unix();
    // Each shard's window: the RAM its items have (after the snapshot restored the flash
    // index, which takes its share of the budget), so that what the window holds at the end
    // is about what RAM keeps.
    let window_bytes: Vec<usize> = (0..store.shard_count())
        .map(|i| {
            if flash {
                store
                    .item_room_bytes(i)
                    .min(WINDOWS_MAX_BYTES / store.shard_count().max(1))
            } else {
                0
            }
        })
        .collect();
    let window_bytes = &window_bytes;
    let dropped = AtomicU64::new(0);
    let to_flash = AtomicU64::new(0);
    let mut first_seen = None;
    let mut replayed = 0u64;
    let mut bytes = 0u64;
    std::thread::scope(|s| {
        let mut senders = Vec::with_capacity(workers);
        for _ in 0..workers {
            let (tx, rx) = sync_channel::<Work>(4);
            senders.push(tx);
            let (dropped, to_flash) = (&dropped, &to_flash);
            s.spawn(move || apply_loop(store, now, rx, dropped, to_flash, window_bytes));
        }
        let mut batches: Vec<Vec<u8>> = (0..workers).map(|_| Vec::new()).collect();
        let send = |tx: &SyncSender<Work>, batch: &mut Vec<u8>| {
            let full = std::mem::replace(batch, Vec::with_capacity(BATCH_BYTES + 1024));
            tx.send(Work::Batch(full)).expect("a replay worker stopped");
        };
        log.read_from::<PersistError>(from, |lsn, payload| {
            first_seen.get_or_insert(lsn);
            let rec = record::decode(payload)
                .ok_or_else(|| PersistError::from(Unrecoverable::BadRecord { lsn }))?;
            match rec {
                Record::Stored { key, .. } | Record::Deleted { key, .. } => {
                    let shard = store.shard_of(key);
                    let k = shard % workers;
                    let batch = &mut batches[k];
                    let len = u32::try_from(payload.len()).expect("records are under 4 GiB");
                    batch.extend_from_slice(&lsn.to_le_bytes());
                    batch.extend_from_slice(&(shard as u32).to_le_bytes());
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
        to_flash: to_flash.into_inner(),
    })
}

/// A worker: applies batches in the order they arrive until its channel closes, through
/// its shards' windows (`window_bytes`, by shard; 0: none).
fn apply_loop(
    store: &Store,
    now: u32,
    rx: Receiver<Work>,
    dropped: &AtomicU64,
    to_flash: &AtomicU64,
    window_bytes: &[usize],
) {
    let mut windows = Windows {
        store,
        now,
        dropped,
        to_flash: 0,
        shards: window_bytes
            .iter()
            .map(|&budget| Window {
                budget,
                ..Window::default()
            })
            .collect(),
        max_cas: 0,
    };
    for work in rx {
        match work {
            Work::Batch(batch) => {
                let mut rest = &batch[..];
                while let Some((lsn, tail)) = rest.split_first_chunk::<8>() {
                    let (shard, tail) = tail.split_first_chunk::<4>().expect("a shard follows");
                    let (len, tail) = tail.split_first_chunk::<4>().expect("a length follows");
                    let (payload, next) = tail.split_at(u32::from_le_bytes(*len) as usize);
                    windows.push(
                        u32::from_le_bytes(*shard) as usize,
                        u64::from_le_bytes(*lsn),
                        payload,
                    );
                    rest = next;
                }
                windows.raise_cas_floor();
            }
            Work::Fence(done) => {
                windows.drain();
                let _ = done.send(());
            }
        }
    }
    windows.drain();
    to_flash.fetch_add(windows.to_flash, Ordering::Relaxed);
}

/// One shard's held-back records, oldest first: `lsn u64 LE | len u32 LE | payload` from
/// the first of `starts` on (the bytes before it were applied).
#[derive(Default)]
struct Window {
    /// Payload bytes it holds at most (0: no window, every record applied at once).
    budget: usize,
    bytes: Vec<u8>,
    /// Payload bytes held (the measure of the window, comparable to the items' RAM).
    held: usize,
    /// Offsets of the records (for the pop of the oldest).
    starts: VecDeque<usize>,
}

/// A worker's windows (see the module doc).
struct Windows<'a> {
    store: &'a Store,
    now: u32,
    dropped: &'a AtomicU64,
    /// Records put straight on flash.
    to_flash: u64,
    shards: Vec<Window>,
    /// The largest CAS unique put straight on flash since the floor was last raised.
    max_cas: u64,
}

impl Windows<'_> {
    /// Takes a record of `shard`; applies what it pushes out of the window.
    fn push(&mut self, shard: usize, lsn: Lsn, payload: &[u8]) {
        let w = &mut self.shards[shard];
        if w.budget == 0 {
            self.apply(lsn, payload, false);
            return;
        }
        w.starts.push_back(w.bytes.len());
        w.bytes.extend_from_slice(&lsn.to_le_bytes());
        w.bytes.extend_from_slice(
            &u32::try_from(payload.len())
                .expect("records are under 4 GiB")
                .to_le_bytes(),
        );
        w.bytes.extend_from_slice(payload);
        w.held += payload.len();
        while self.shards[shard].held > self.shards[shard].budget
            && self.shards[shard].starts.len() > 1
        {
            self.pop(shard, true);
        }
    }

    /// Applies the oldest record of `shard`'s window; `pushed_out`: newer records of the
    /// shard follow it, at least a window of them, so it may go straight to flash.
    fn pop(&mut self, shard: usize, pushed_out: bool) {
        let w = &mut self.shards[shard];
        let Some(at) = w.starts.pop_front() else {
            return;
        };
        let bytes = std::mem::take(&mut w.bytes);
        let lsn = u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        let len = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().expect("4 bytes")) as usize;
        let payload = &bytes[at + 12..at + 12 + len];
        self.apply(lsn, payload, pushed_out);
        let w = &mut self.shards[shard];
        w.bytes = bytes;
        w.held -= len;
        // Where the records still held begin.
        let head = at + 12 + len;
        if w.starts.is_empty() {
            w.bytes.clear();
        } else if head >= 64 << 10 && head * 2 >= w.bytes.len() {
            // Reclaim the applied front now and then (amortized: at most one copy of what
            // is held per half a window applied).
            w.bytes.drain(..head);
            for s in &mut w.starts {
                *s -= head;
            }
        }
    }

    /// Applies every held record, shard by shard, oldest first (the usual path: the newest
    /// records of each shard end in RAM, as a replay in order leaves them).
    fn drain(&mut self) {
        for shard in 0..self.shards.len() {
            while !self.shards[shard].starts.is_empty() {
                self.pop(shard, false);
            }
        }
        self.raise_cas_floor();
    }

    fn apply(&mut self, lsn: Lsn, payload: &[u8], pushed_out: bool) {
        let rec = record::decode(payload).expect("decoded before");
        if let (
            true,
            Mutation::Stored {
                key, value, meta, ..
            },
        ) = (pushed_out, rec.to_mutation(lsn))
        {
            let meta = ItemMeta {
                last_access: self.now,
                ..meta
            };
            if self.store.replay_to_flash(key, value, &meta, self.now) {
                self.max_cas = self.max_cas.max(meta.cas);
                self.to_flash += 1;
                return;
            }
        }
        if !apply(self.store, self.now, lsn, rec) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn raise_cas_floor(&mut self) {
        if self.max_cas > 0 {
            self.store.raise_cas_floor(self.max_cas);
            self.max_cas = 0;
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
