//! Skeletons made whole: with persistence the hub's history holds, per event, the key, the
//! revision and the previous item's revision, not the values (crate::hub). Before a watch
//! sends such an event, its item is taken from the store if the key's item still has the
//! event's revision, else from the event's record in the command log; its previous item, for
//! a watch with `prev_kv`, from that item's record. A step reads the records it needs
//! together, nearby ones in one run (`Persistence::read_revisions`), on a blocking thread.
//!
//! ```text
//!   step's read of the ring: [e1 e2 ...] ── wanted by a watch of the stream, and not whole?
//!     value: store.peek_with(key): mod_revision == revision ─> the event made whole under
//!            the shard's lock (previous item held or not wanted) ─> done, else copy ──┐
//!                                  else ─> revisions to read ─────────┤
//!     prev (a prev_kv watch wants it): prev_revision ─> revisions ───┤
//!                                        read_revisions (blocking) ──┴─> Event::from_mutation
//!   ─> the read with whole events in place; one whose record is gone stays a skeleton
//!      (crate::cursor stops a watch before it: the stream cancels it, compacted)
//! ```
//!
//! Non-goals: which events a watch takes (crate::cursor), the ring (crate::history).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use cairn_persist::record::Record;
use cairn_store::{ItemMeta, Mutation, PrevItem, Revision};

use crate::backend::WatchBackend;
use crate::event::{Event, EventKind};

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

/// Makes whole, in place, the events of `read` that `needs` (by position) asks for.
/// Events whose records are gone stay as they are (see the module doc).
pub(crate) async fn resolve(b: &Arc<WatchBackend>, read: &mut [Arc<Event>], needs: &[Needs]) {
    let mut items: BTreeMap<Revision, Option<Item>> = BTreeMap::new();
    let mut from_log: Vec<Revision> = Vec::new();
    for (e, n) in read.iter_mut().zip(needs) {
        let prev_from_log = n.prev && e.prev.is_none() && e.prev_revision != 0;
        if n.value && e.needs_value && !prev_from_log {
            // The common case: the store still holds the item, made whole under its shard's
            // lock straight from the store's bytes (no copy of the value on the way).
            if let Some(whole) = from_store(b, e) {
                *e = Arc::new(whole);
                continue;
            }
        }
        if n.value && e.needs_value {
            let r = e.revision;
            let held = b.store.peek_with(e.key(), |meta, value| {
                (meta.mod_revision == r).then(|| Item {
                    value: value.to_vec(),
                    meta: *meta,
                })
            });
            match held.flatten() {
                Some(item) => {
                    items.insert(r, Some(item));
                }
                None => from_log.push(r),
            }
        }
        if n.prev && e.prev.is_none() && e.prev_revision != 0 {
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
    for (e, n) in read.iter_mut().zip(needs) {
        if !(n.value && e.needs_value || n.prev && e.prev.is_none() && e.prev_revision != 0) {
            continue;
        }
        if let Some(whole) = whole(e, n, &items) {
            *e = Arc::new(whole);
        }
    }
}

/// Skeleton `e` made whole from the store, if the key's item still has the event's revision
/// (its previous item is the one the event holds, if any).
fn from_store(b: &WatchBackend, e: &Event) -> Option<Event> {
    let (key, revision) = (e.key(), e.revision);
    let whole = b.store.peek_with(key, |meta, value| {
        if meta.mod_revision != revision {
            return None;
        }
        let m = Mutation::Stored {
            key,
            value,
            meta: *meta,
            prev: e.prev_held(),
        };
        Event::from_mutation(&m, revision)
    })??;
    let mut whole = whole;
    whole.prev_revision = e.prev_revision;
    Some(whole)
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
            let item = match rec {
                Record::Stored {
                    value,
                    flags,
                    exptime,
                    cas,
                    stale,
                    ..
                } => Some(Item {
                    value: value.to_vec(),
                    meta: ItemMeta {
                        flags,
                        exptime,
                        cas,
                        last_access: 0,
                        fetched: false,
                        stale,
                        win_sent: false,
                        mod_revision: lsn,
                    },
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

/// `e` made whole with `items` (by revision), or None if an item it needs is not there.
fn whole(e: &Event, n: &Needs, items: &BTreeMap<Revision, Option<Item>>) -> Option<Event> {
    let key = e.key();
    let prev = match e.prev_held() {
        Some(held) => Some(held),
        None if n.prev && e.prev_revision != 0 => {
            let i = items.get(&e.prev_revision)?.as_ref()?;
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
                let item = items.get(&e.revision)?.as_ref()?;
                (&item.value[..], item.meta)
            } else {
                (e.value()?, e.item.as_ref()?.meta(e.revision))
            };
            Mutation::Stored {
                key,
                value,
                meta,
                prev,
            }
        }
        EventKind::Delete(reason) => Mutation::Deleted { key, reason, prev },
        EventKind::Flush => return None,
    };
    let mut whole = Event::from_mutation(&m, e.revision)?;
    whole.prev_revision = e.prev_revision;
    Some(whole)
}
