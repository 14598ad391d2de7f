//! Skeletons made whole: with persistence the hub's history holds, per event, the key, the
//! revision and the previous item's revision, not the values (crate::hub). Before a watch
//! sends such an event, its item is taken from the store if the key's item still has the
//! event's revision, else from the event's record in the command log; its previous item, for
//! a watch with `prev_kv`, from that item's record. A step reads the records it needs
//! together, nearby ones in one run (`Persistence::read_revisions`), on a blocking thread.
//! The whole events are encoded one after the other into the step's one buffer
//! (crate::step_read): no allocation of their own.
//!
//! ```text
//!   step's read of the ring: [e1 e2 ...] ── wanted by a watch of the stream, and not whole?
//!     value: store.peek_with(key): mod_revision == revision ─> encoded under the shard's
//!            lock into the step's bytes (previous item held or not wanted) ─> done, else ─┐
//!                                  revisions to read ─────────────────┤
//!     prev (a prev_kv watch wants it): prev_revision ─> revisions ───┤
//!                                        read_revisions (blocking) ──┴─> the step's bytes
//!   ─> the read with whole events beside it; one whose record is gone stays a skeleton
//!      (crate::cursor stops a watch before it: the stream cancels it, compacted)
//! ```
//!
//! Non-goals: which events a watch takes (crate::cursor), the ring (crate::history).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use cairn_store::{ItemMeta, Mutation, PrevItem, Revision};

use crate::backend::WatchBackend;
use crate::event::{Event, EventKind};
use crate::step_read::{Made, StepRead};

/// An item as a record or the store gave it: what an event's kv or prev_kv holds.
struct Item {
    value: Vec<u8>,
    meta: ItemMeta,
}

/// What one event needs: its value, and (for a prev_kv watch) its previous item.
#[derive(Clone, Copy, Default)]
pub(crate) struct Needs {
    pub(crate) value: bool,
    pub(crate) prev: bool,
}

/// Makes whole the events of `read` that `needs` (by position) asks for, into the step's
/// bytes (crate::step_read). Events whose records are gone stay as they are (see the module
/// doc).
pub(crate) async fn resolve(b: &Arc<WatchBackend>, read: &mut StepRead, needs: &[Needs]) {
    // Another stream's step may have made the same events whole (crate::recent).
    let (first, last) = match (read.events.first(), read.events.last()) {
        (Some(a), Some(b)) => (a.revision, b.revision),
        _ => return,
    };
    let recent = b.hub.recent.get().filter(|r| r.overlaps(first, last));
    let StepRead { events, made } = read;
    let count = events.len();
    let mut items: BTreeMap<Revision, Option<Item>> = BTreeMap::new();
    let mut from_log: Vec<Revision> = Vec::new();
    for (i, (e, n)) in events.iter().zip(needs).enumerate() {
        let prev_from_log = n.prev && e.needs_prev();
        if let Some(r) = &recent {
            if (n.value && e.needs_value || prev_from_log)
                && r.position(e.revision)
                    .is_some_and(|j| made.copy(count, i, &r.made, j, n.prev))
            {
                continue;
            }
        }
        if n.value && e.needs_value {
            // The common case: the store still holds the item, made whole under its shard's
            // lock straight from the store's bytes (no copy of the value on the way).
            if !prev_from_log && from_store(b, made, count, i, e) {
                continue;
            }
            let r = e.revision;
            let held = if prev_from_log {
                b.store.peek_with(e.key(), |meta, value| {
                    (meta.mod_revision == r).then(|| Item {
                        value: value.to_vec(),
                        meta: *meta,
                    })
                })
            } else {
                None
            };
            match held.flatten() {
                Some(item) => {
                    items.insert(r, Some(item));
                }
                None => from_log.push(r),
            }
        }
        if prev_from_log {
            from_log.push(e.prev_revision);
        }
    }
    if !from_log.is_empty() {
        from_log.sort_unstable();
        from_log.dedup();
        b.stats
            .watch_values_from_log
            .fetch_add(from_log.len() as u64, Ordering::Relaxed);
        for (r, item) in read_records(b, from_log).await {
            items.insert(r, item);
        }
    }
    for (i, (e, n)) in events.iter().zip(needs).enumerate() {
        if made.has(i) || !(n.value && e.needs_value || n.prev && e.needs_prev()) {
            continue;
        }
        whole(made, count, i, e, n, &items);
    }
}

/// Makes skeleton `e` (event `i` of `count`) whole from the store, if the key's item still
/// has the event's revision (its previous item is the one the event holds, if any).
fn from_store(b: &WatchBackend, made: &mut Made, count: usize, i: usize, e: &Event) -> bool {
    let (key, revision) = (e.key(), e.revision);
    b.store
        .peek_with(key, |meta, value| {
            let m = Mutation::Stored {
                key,
                value,
                meta: *meta,
                prev: e.prev_held(),
            };
            meta.mod_revision == revision && made.put(count, i, e, &m)
        })
        .unwrap_or(false)
}

/// The records of `revisions` (sorted), read on a blocking thread: Stored ones as items, others
/// (and a failed read) as None. A revision the log no longer holds is left out.
async fn read_records(
    b: &Arc<WatchBackend>,
    revisions: Vec<Revision>,
) -> Vec<(Revision, Option<Item>)> {
    let Some(p) = b.persist.clone() else {
        return Vec::new();
    };
    let read = tokio::task::spawn_blocking(move || {
        let mut out = Vec::with_capacity(revisions.len());
        let r = p.read_revisions(&revisions, |lsn, rec| {
            let item = match rec.to_mutation(lsn) {
                Mutation::Stored { value, meta, .. } => Some(Item {
                    value: value.to_vec(),
                    meta,
                }),
                _ => None,
            };
            out.push((lsn, item));
        });
        if let Err(e) = r {
            tracing::error!("watch: reading values from the command log failed: {e}");
        }
        out
    })
    .await;
    read.unwrap_or_default()
}

/// Makes `e` (event `i` of `count`) whole with `items` (by revision); left as it is if an
/// item it needs is not there.
fn whole(
    made: &mut Made,
    count: usize,
    i: usize,
    e: &Event,
    n: &Needs,
    items: &BTreeMap<Revision, Option<Item>>,
) {
    let key = e.key();
    let prev = match e.prev_held() {
        Some(held) => Some(held),
        None if n.prev && e.prev_revision != 0 => {
            let Some(Some(i)) = items.get(&e.prev_revision) else {
                return;
            };
            Some(PrevItem {
                value: &i.value,
                meta: i.meta,
            })
        }
        None => None,
    };
    let m = match e.kind {
        EventKind::Put => {
            let (value, meta) = if e.needs_value {
                let Some(Some(item)) = items.get(&e.revision) else {
                    return;
                };
                (&item.value[..], item.meta)
            } else {
                match (e.value(), e.item.as_ref()) {
                    (Some(v), Some(item)) => (v, item.meta(e.revision)),
                    _ => return,
                }
            };
            Mutation::Stored {
                key,
                value,
                meta,
                prev,
            }
        }
        EventKind::Delete(reason) => Mutation::Deleted { key, reason, prev },
        EventKind::Flush => return,
    };
    made.put(count, i, e, &m);
}
