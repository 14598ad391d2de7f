//! The follower: a replica applies its primary's events, in revision order, with the same
//! values, flags, expiry and CAS uniques, and tells the primary how far it holds them durable.
//!
//! ```text
//!   Replication.Follow ──> ReplicaAck{position, term} first ──> PrimaryInfo{log_id, term,
//!     resume_from} first; a term other than the one ZooKeeper names ─> stop (never confirm)
//!   position: <data>/replication.position (the primary's log id and revision R), else this
//!     node's own log id and last LSN (it was the primary, or holds nothing of anyone's)
//!     resume_from = R' ─> Watch create{prefix "", start_revision R' + 1}          (resume)
//!     absent ─> remove the position (synced), note the local LSN M,
//!               create{initial_state}                                          (full copy)
//!               each item is stored over what is here; at initial_state_done every item
//!               older than M (not sent: gone on the primary) is deleted; so a copy cut
//!               short leaves the old data, overwritten in part, never an empty store
//!   each response, with every one already received after it (up to 256): apply their items
//!     and events to the store through the one write path (Engine::apply: logged locally
//!     like any write, its Ack back as a value) ─> one Engine::durable(ack) ─> position = the
//!     newest revision (written after the data is durable, so it never runs ahead of it)
//!     ─> lineage note ─> ReplicaAck{R, term} to the primary, only while this node's lease
//!     holds (group; lease.rs)
//!   canceled{compact_revision} (history passed R) ─> drop the position, full copy again
//!   stream error ─> reconnect, backing off 100 ms doubling to 2 s
//! ```
//!
//! Events carry resulting states (PUT key = item, DELETE key, FLUSH), so applying a suffix of
//! them again over a state that already holds it changes nothing: a position that lags the
//! data (the position file is written without an fsync: after a power loss it may be older,
//! never newer) only repeats some events, and so does a resume through the new primary's
//! lineage (lineage.rs).
//!
//! With a flash tier the copy empties the store first, as its items on flash cannot be
//! listed without reading the device.
//!
//! The replica's apply is no client write: it is not admitted (a replica refuses client
//! writes, not its primary's), and it waits for the fence (`Engine::durable`), not for an
//! acknowledgement. Its time is the engine's clock, the one every front end reads.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use cairn_api::pb;
use cairn_engine::{Engine, Tx};
use cairn_persist::Persistence;
use cairn_store::Store;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;

use crate::replication::Replication;

/// Where a replica follows from.
#[derive(Clone, Debug)]
pub struct FollowerConfig {
    /// The primary's gRPC address (`host:port`).
    pub primary: String,
    /// The term ZooKeeper names for that primary (0 outside a replication group: any).
    pub term: u64,
    /// This replica's name in the primary's stats: its own memcached address.
    pub name: String,
    /// The replica's data folder (the position file goes there).
    pub data_dir: PathBuf,
}

const POSITION_FILE: &str = "replication.position";

/// At most this many watch responses are applied before one durable write and one ack.
const MAX_RESPONSES_PER_DURABLE_WRITE: usize = 256;

/// The primary's log id and the revision every event up to which is durable here.
pub(crate) fn read_position(dir: &Path) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(dir.join(POSITION_FILE)).ok()?;
    let mut words = text.split_whitespace();
    if words.next()? != "cairn-replica-position-1" {
        return None;
    }
    let log_id = words.next()?.parse().ok()?;
    let revision = words.next()?.parse().ok()?;
    let check: u32 = words.next()?.parse().ok()?;
    (check == crc32c::crc32c(format!("{log_id} {revision}").as_bytes()))
        .then_some((log_id, revision))
}

/// Replaces the position file (temp file + rename; no fsync, see the module doc).
fn write_position(dir: &Path, log_id: u64, revision: u64) -> std::io::Result<()> {
    let body = format!("{log_id} {revision}");
    let text = format!(
        "cairn-replica-position-1 {body} {}\n",
        crc32c::crc32c(body.as_bytes())
    );
    let tmp = dir.join(format!("{POSITION_FILE}.tmp"));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, dir.join(POSITION_FILE))
}

/// Removes the position file for good (fsync of the folder): from here on the store may hold
/// a partial copy, which must never be resumed from.
pub(crate) fn drop_position(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(dir.join(POSITION_FILE)) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    }
    std::fs::File::open(dir)?.sync_all()
}

/// Follows the primary until `stop` turns true.
pub async fn follow(
    store: Arc<Store>,
    persist: Arc<Persistence>,
    repl: Arc<Replication>,
    config: FollowerConfig,
    mut stop: watch::Receiver<bool>,
) {
    // The one write path over this node's store and log (no flash: a write of the primary's
    // stores over, or deletes, whatever is on flash).
    let engine = Engine::new(store, Some(Arc::clone(&persist)), None, None);
    let mut backoff = Duration::from_millis(100);
    loop {
        let r = tokio::select! {
            r = follow_once(&engine, &persist, &repl, &config) => r,
            _ = stop.changed() => return,
        };
        repl.follower.connected.store(false, Ordering::Relaxed);
        match r {
            Ok(()) => backoff = Duration::from_millis(100),
            Err(e) => {
                tracing::warn!(primary = %config.primary, "replication: {e}; again in {backoff:?}")
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stop.changed() => return,
        }
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

/// Where this node's data stands: the position file, else its own log (what it wrote itself
/// as a primary, or nothing of anyone's).
pub(crate) fn position_of(persist: &Persistence, dir: &Path) -> (u64, u64) {
    read_position(dir).unwrap_or_else(|| (persist.log_id(), persist.appended_lsn()))
}

/// Deletes every item whose last change is at or before `mark` (the end of a full copy: the
/// primary sent every item it holds, each stored here after `mark`).
fn sweep_older_than(tx: &Tx<'_>, mark: u64, now: u32) -> u64 {
    let mut swept = 0;
    let store: &Store = tx.store();
    for shard in 0..store.shard_count() {
        let mut old = Vec::new();
        store.visit_shard(shard, now, |key, _, meta| {
            if meta.mod_revision <= mark {
                old.push(key.to_vec());
            }
        });
        for key in old {
            tx.entry(&key, now, |e| {
                if e.peek().is_some_and(|(m, _)| m.mod_revision <= mark) {
                    e.delete();
                    swept += 1;
                }
            });
        }
    }
    swept
}

/// Applies one item as the primary holds it.
fn apply_put(tx: &Tx<'_>, now: u32, kv: &pb::KeyValue) {
    tx.entry(&kv.key, now, |e| {
        match e.store(&[&kv.value[..]], kv.flags, kv.expires_at, Some(kv.cas)) {
            Ok(_) if kv.stale => {
                e.update_meta(|m| m.stale = true);
            }
            Ok(_) => {}
            // Too large for this replica's -I, or out of memory with -M: the old value must
            // not stay behind.
            Err(_) => {
                e.delete();
            }
        }
    });
}

fn apply_event(tx: &Tx<'_>, now: u32, ev: &pb::Event) {
    match pb::event::EventType::try_from(ev.r#type) {
        Ok(pb::event::EventType::Put) => {
            if let Some(kv) = &ev.kv {
                apply_put(tx, now, kv);
            }
        }
        Ok(pb::event::EventType::Delete) => {
            if let Some(kv) = &ev.kv {
                tx.entry(&kv.key, now, |e| e.delete());
            }
        }
        Ok(pb::event::EventType::Flush) => tx.flush_all(),
        Err(_) => tracing::warn!(revision = ev.revision, "replication: unknown event type"),
    }
}

fn event_bytes(ev: &pb::Event) -> u64 {
    ev.kv
        .as_ref()
        .map_or(0, |kv| (kv.key.len() + kv.value.len()) as u64)
}

async fn follow_once(
    engine: &Engine,
    persist: &Arc<Persistence>,
    repl: &Arc<Replication>,
    config: &FollowerConfig,
) -> Result<(), String> {
    let fig = &repl.follower;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", config.primary))
        .map_err(|e| format!("bad primary address: {e}"))?
        .connect()
        .await
        .map_err(|e| format!("cannot reach the primary: {e}"))?;
    let (position_log_id, position_revision) = position_of(persist, &config.data_dir);
    let (ack_tx, ack_rx) = mpsc::channel::<pb::ReplicaAck>(16);
    let ack = |revision: u64| pb::ReplicaAck {
        replica: config.name.clone(),
        durable_revision: revision,
        term: config.term,
        ..Default::default()
    };
    // The first message: where the data here stands, so the primary says whether it resumes.
    let _ = ack_tx.try_send(pb::ReplicaAck {
        position_log_id,
        position_revision,
        ..ack(0)
    });
    let mut infos = pb::replication_client::ReplicationClient::new(channel.clone())
        .follow(ReceiverStream::new(ack_rx))
        .await
        .map_err(|e| format!("the primary refused to be followed: {}", e.message()))?
        .into_inner();
    let first = infos
        .message()
        .await
        .map_err(|e| e.message().to_string())?
        .ok_or("the primary closed the replication stream")?;
    if config.term != 0 && first.term != config.term {
        // Never confirm a write of a term ZooKeeper does not name (a deposed primary).
        return Err(format!(
            "the primary at {} serves term {}, ZooKeeper names term {}",
            config.primary, first.term, config.term
        ));
    }
    let log_id = first.log_id;
    fig.primary_log_id.store(log_id, Ordering::Relaxed);
    fig.primary_revision
        .store(first.revision, Ordering::Relaxed);
    let create = match first.resume_from {
        Some(r) => {
            fig.applied_revision.store(r, Ordering::Relaxed);
            fig.complete.store(true, Ordering::Relaxed);
            fig.resumes.fetch_add(1, Ordering::Relaxed);
            {
                let mut lineage = repl.lineage.lock();
                lineage.follow(log_id);
                lineage.note(r, persist.durable_lsn());
            }
            // Acknowledged only through the lease check below, with the first batch.
            tracing::info!(primary = %config.primary, revision = r, "replication: resuming");
            pb::WatchCreateRequest {
                prefix: true,
                start_revision: r + 1,
                ..Default::default()
            }
        }
        None => {
            fig.complete.store(false, Ordering::Relaxed);
            repl.lineage.lock().clear();
            drop_position(&config.data_dir).map_err(|e| format!("position file: {e}"))?;
            fig.applied_revision.store(0, Ordering::Relaxed);
            fig.full_syncs.fetch_add(1, Ordering::Relaxed);
            tracing::info!(primary = %config.primary, "replication: taking a full copy");
            if engine.store().has_flash() {
                let ((), ack) = engine.apply(|tx| tx.flush_all());
                engine
                    .durable(ack)
                    .await
                    .map_err(|e| format!("local log: {e}"))?;
            }
            pb::WatchCreateRequest {
                prefix: true,
                initial_state: true,
                ..Default::default()
            }
        }
    };
    // Items older than this are not the primary's once its initial state is all here.
    let copy_mark = first
        .resume_from
        .is_none()
        .then(|| engine.store().newest_revision());
    let (req_tx, req_rx) = mpsc::channel(4);
    req_tx
        .send(pb::WatchRequest {
            request_union: Some(pb::watch_request::RequestUnion::CreateRequest(create)),
        })
        .await
        .map_err(|_| "watch request")?;
    let mut responses = pb::watch_client::WatchClient::new(channel)
        .max_decoding_message_size(usize::MAX)
        .watch(ReceiverStream::new(req_rx))
        .await
        .map_err(|e| format!("watch: {}", e.message()))?
        .into_inner();
    fig.connected.store(true, Ordering::Relaxed);
    // Whether the state here is complete up to `applied` (false during a full copy until
    // initial_state_done).
    let mut complete = first.resume_from.is_some();
    // The newest revision held durable here, and whether the primary was told.
    let mut held = first.resume_from.unwrap_or(0);
    let mut told = false;
    // Confirms `held` to the primary, if this node may (its lease holds: group.rs).
    let confirm = |held: u64, told: &mut bool| {
        if *told || !complete_and_leased(repl, held) {
            return Ok(());
        }
        match ack_tx.try_send(ack(held)) {
            Ok(()) => {
                *told = true;
                Ok(())
            }
            Err(mpsc::error::TrySendError::Full(_)) => Ok(()),
            Err(mpsc::error::TrySendError::Closed(_)) => Err("ack stream closed".to_string()),
        }
    };
    if complete {
        confirm(held, &mut told)?;
    }
    loop {
        let first = tokio::select! {
            r = responses.message() => match r {
                Ok(Some(r)) => r,
                Ok(None) => return Err("the primary ended the watch".into()),
                Err(e) => return Err(format!("watch: {}", e.message())),
            },
            i = infos.message() => match i {
                Ok(Some(i)) => {
                    fig.primary_revision.store(i.revision, Ordering::Relaxed);
                    if complete {
                        // Each of the primary's ticks is answered with what is held: what
                        // could not be confirmed earlier (the lease lapsed) is now, and a
                        // primary that lost count of this replica (an old stream of ours
                        // ended after this one began) counts it again.
                        told = false;
                        confirm(held, &mut told)?;
                    }
                    continue;
                }
                _ => return Err("the primary ended the replication stream".into()),
            },
        };
        // Every response that has already arrived joins this one, so that one durable write,
        // one position and one ack cover them all (a durable write per response bounded
        // --replication sync at about one fdatasync per primary group commit).
        let mut batch = vec![first];
        let mut ended = None;
        while batch.len() < MAX_RESPONSES_PER_DURABLE_WRITE {
            // Polls the stream once: a response already here, or nothing (no timer: a zero
            // timeout would wait for the timer's next tick, about a millisecond).
            let mut next = std::pin::pin!(responses.message());
            let polled = std::future::poll_fn(|cx| Poll::Ready(next.as_mut().poll(cx))).await;
            match polled {
                Poll::Ready(Ok(Some(r))) => batch.push(r),
                Poll::Ready(Ok(None)) => {
                    ended = Some("the primary ended the watch".to_string());
                    break;
                }
                Poll::Ready(Err(e)) => {
                    ended = Some(format!("watch: {}", e.message()));
                    break;
                }
                Poll::Pending => break,
            }
        }
        if let Some(resp) = batch.iter().find(|r| r.canceled) {
            fig.complete.store(false, Ordering::Relaxed);
            repl.lineage.lock().clear();
            drop_position(&config.data_dir).map_err(|e| format!("position file: {e}"))?;
            return Err(format!(
                "the primary's history no longer holds our revision (compacted to {}): {}; \
                 taking a full copy",
                resp.compact_revision, resp.cancel_reason
            ));
        }
        let now = engine.now();
        let mut bytes = 0u64;
        let done = batch.iter().position(|r| r.initial_state_done);
        let ((), ack) = engine.apply(|tx| {
            for (i, resp) in batch.iter().enumerate() {
                for kv in &resp.initial_items {
                    bytes += (kv.key.len() + kv.value.len()) as u64;
                    apply_put(tx, now, kv);
                }
                if Some(i) == done {
                    if let Some(mark) = copy_mark {
                        let swept = sweep_older_than(tx, mark, now);
                        tracing::info!(
                            swept,
                            "replication: items the primary does not hold removed"
                        );
                    }
                }
                for ev in &resp.events {
                    bytes += event_bytes(ev);
                    apply_event(tx, now, ev);
                }
            }
        });
        fig.received_bytes.fetch_add(bytes, Ordering::Relaxed);
        fig.pending_bytes.fetch_add(bytes, Ordering::Relaxed);
        engine
            .durable(ack)
            .await
            .map_err(|e| format!("local log: {e}"))?;
        fig.pending_bytes.fetch_sub(bytes, Ordering::Relaxed);
        if let Some(i) = done {
            complete = true;
            tracing::info!(revision = ?batch[i].header.as_ref().map(|h| h.revision), "replication: full copy done");
            repl.lineage.lock().follow(log_id);
        }
        if complete {
            fig.complete.store(true, Ordering::Relaxed);
            let revision = batch
                .iter()
                .map(|resp| {
                    let header = resp.header.as_ref().map_or(0, |h| h.revision);
                    resp.events
                        .last()
                        .map_or(header, |ev| header.max(ev.revision))
                })
                .max()
                .unwrap_or(0);
            // The end of a full copy is always a position in the primary's log, even of one
            // that holds nothing yet (revision 0): so a member of a new group may be elected.
            if revision > held || done.is_some() {
                held = revision;
                told = false;
                fig.applied_revision.store(revision, Ordering::Relaxed);
                write_position(&config.data_dir, log_id, revision)
                    .map_err(|e| format!("position file: {e}"))?;
                repl.lineage.lock().note(revision, persist.durable_lsn());
            }
            confirm(held, &mut told)?;
        }
        if let Some(why) = ended {
            return Err(why);
        }
    }
}

/// Whether this replica may confirm `held` now: in a group only while its lease holds (a
/// replica cut off from ZooKeeper stops confirming, see lease.rs).
fn complete_and_leased(repl: &Replication, held: u64) -> bool {
    held > 0 && (!repl.in_group() || repl.lease.valid())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_position_file_round_trips_and_a_damaged_one_is_none() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_position(dir.path()), None);
        write_position(dir.path(), 7, 42).unwrap();
        assert_eq!(read_position(dir.path()), Some((7, 42)));
        let path = dir.path().join(POSITION_FILE);
        let text = std::fs::read_to_string(&path).unwrap().replace("42", "43");
        std::fs::write(&path, text).unwrap();
        assert_eq!(read_position(dir.path()), None);
        drop_position(dir.path()).unwrap();
        assert!(!path.exists());
    }
}
