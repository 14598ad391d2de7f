//! A watch's initial state: the items of its range as of revision R, scanned from the store
//! on a blocking thread and handed to the stream in chunks, before the watch's events after
//! R.
//!
//! ```text
//!   create (initial_state) ── R = published, cursor = R + 1 ──> spawn_blocking(scan_initial)
//!   scan: shard by shard, under its lock: items with mod_revision <= R in the range
//!     ──> chunks of ≤ MAX_ITEMS_PER_CHUNK / MAX_BYTES_PER_RESPONSE ── queue of INITIAL_QUEUE
//!     ──> stream: initial_items ... then (id, None): initial_state_done{R}
//! ```
//!
//! Initial state without races: the watch's cursor is set to R + 1 before the scan starts,
//! where R is the newest published revision. The scan sends an item only if its mod_revision
//! is <= R; an item changed after R shows a larger revision (the store sets it under the
//! shard lock the scan also takes), so it is left out and its events (all > R) follow the
//! initial state. So initial state + events after R, applied in order, give the server's
//! contents, with no write lost or doubled.
//!
//! Non-goals: flash-resident items (the flash index keeps no keys; RAM only, as Scan).

use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use cairn_api::pb;
use cairn_store::{now_unix, ItemMeta, Revision};
use tokio::sync::mpsc;

use crate::filter::KeyRange;
use crate::limits::{MAX_BYTES_PER_RESPONSE, MAX_ITEMS_PER_CHUNK};

/// A chunk of a watch's initial state (None: the scan is done).
pub(crate) type InitialChunk = (i64, Option<Vec<pb::KeyValue>>);

/// An item as `cairn.v1.KeyValue`: what the initial state sends, and what the KV service
/// answers with.
pub fn key_value(key: Bytes, value: Bytes, meta: &ItemMeta) -> pb::KeyValue {
    pb::KeyValue {
        key,
        value,
        flags: meta.flags,
        expires_at: meta.exptime,
        cas: meta.cas,
        mod_revision: meta.mod_revision,
        stale: meta.stale,
    }
}

/// Scans the store for a watch's initial state at revision `r` and sends it in chunks, then
/// the end mark. Runs on a blocking thread; stops early when `stop` is set.
pub(crate) fn scan_initial(
    store: &cairn_store::Store,
    range: &KeyRange,
    r: Revision,
    id: i64,
    tx: &mpsc::Sender<InitialChunk>,
    stop: &AtomicBool,
) {
    let now = now_unix();
    let mut chunk: Vec<pb::KeyValue> = Vec::new();
    let mut chunk_bytes = 0usize;
    for shard in 0..store.shard_count() {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        // One buffer per shard for every key and value it contributes; items slice it.
        let mut arena = Vec::new();
        let mut found = Vec::new();
        store.visit_shard(shard, now, |key, value, meta| {
            if meta.mod_revision <= r && range.matches(key) {
                let at = arena.len();
                arena.extend_from_slice(key);
                arena.extend_from_slice(value);
                found.push((at, key.len(), value.len(), *meta));
            }
        });
        let arena = Bytes::from(arena);
        for (at, klen, vlen, meta) in found {
            let key = arena.slice(at..at + klen);
            let value = arena.slice(at + klen..at + klen + vlen);
            chunk_bytes += klen + vlen + 48;
            chunk.push(key_value(key, value, &meta));
            if chunk.len() >= MAX_ITEMS_PER_CHUNK || chunk_bytes >= MAX_BYTES_PER_RESPONSE {
                if tx
                    .blocking_send((id, Some(std::mem::take(&mut chunk))))
                    .is_err()
                {
                    return;
                }
                chunk_bytes = 0;
            }
        }
    }
    if !chunk.is_empty() && tx.blocking_send((id, Some(chunk))).is_err() {
        return;
    }
    let _ = tx.blocking_send((id, None));
}
