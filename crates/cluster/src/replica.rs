//! The follower: a replica applies its primary's events, in revision order, with the same
//! values, flags, expiry and CAS uniques, and tells the primary how far it holds them durable.
//!
//! ```text
//!   Replication.Follow ──> PrimaryInfo{log_id} first
//!   position file (<data>/replication.position: the primary's log id and revision R)
//!     same log id ─> Watch create{prefix "", start_revision R + 1}           (resume)
//!     else / none ─> remove it (synced), local flush_all, create{initial_state}  (full copy)
//!   each response, with every one already received after it (up to 256): apply their items
//!     and events to the store (logged locally like any write) ─> one
//!     Persistence::durable(ticket) ─> position = the newest revision (written after the data
//!     is durable, so it never runs ahead of it) ─> ReplicaAck{R} to the primary
//!   canceled{compact_revision} (history passed R) ─> drop the position, full copy again
//!   stream error ─> reconnect, backing off 100 ms doubling to 2 s
//! ```
//!
//! Events carry resulting states (PUT key = item, DELETE key, FLUSH), so applying a suffix of
//! them again over a state that already holds it changes nothing: a position that lags the
//! data (the position file is written without an fsync: after a power loss it may be older,
//! never newer) only repeats some events.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use cairn_grpc::pb;
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
    let mut backoff = Duration::from_millis(100);
    loop {
        let r = tokio::select! {
            r = follow_once(&store, &persist, &repl, &config) => r,
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

fn now_unix() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as u32)
}

/// Applies one item as the primary holds it.
fn apply_put(store: &Store, now: u32, kv: &pb::KeyValue) {
    store.entry(&kv.key, now, |e| {
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

fn apply_event(store: &Store, now: u32, ev: &pb::Event) {
    match pb::event::EventType::try_from(ev.r#type) {
        Ok(pb::event::EventType::Put) => {
            if let Some(kv) = &ev.kv {
                apply_put(store, now, kv);
            }
        }
        Ok(pb::event::EventType::Delete) => {
            if let Some(kv) = &ev.kv {
                store.entry(&kv.key, now, |e| e.delete());
            }
        }
        Ok(pb::event::EventType::Flush) => store.flush_all(),
        Err(_) => tracing::warn!(revision = ev.revision, "replication: unknown event type"),
    }
}

fn event_bytes(ev: &pb::Event) -> u64 {
    ev.kv
        .as_ref()
        .map_or(0, |kv| (kv.key.len() + kv.value.len()) as u64)
}

async fn follow_once(
    store: &Arc<Store>,
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
    let position = read_position(&config.data_dir);
    let (ack_tx, ack_rx) = mpsc::channel::<pb::ReplicaAck>(16);
    let ack = |revision: u64| pb::ReplicaAck {
        replica: config.name.clone(),
        durable_revision: revision,
    };
    // Revision 0 until the primary's log id says whether our position counts for it.
    let _ = ack_tx.try_send(ack(0));
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
    let log_id = first.log_id;
    fig.primary_log_id.store(log_id, Ordering::Relaxed);
    fig.primary_revision
        .store(first.revision, Ordering::Relaxed);
    let resume_from = match position {
        Some((id, r)) if id == log_id && r > 0 => Some(r),
        _ => None,
    };
    let create = match resume_from {
        Some(r) => {
            fig.applied_revision.store(r, Ordering::Relaxed);
            fig.complete.store(true, Ordering::Relaxed);
            fig.resumes.fetch_add(1, Ordering::Relaxed);
            ack_tx.send(ack(r)).await.map_err(|_| "ack stream closed")?;
            tracing::info!(primary = %config.primary, revision = r, "replication: resuming");
            pb::WatchCreateRequest {
                prefix: true,
                start_revision: r + 1,
                ..Default::default()
            }
        }
        None => {
            // A full copy: whatever this node held is discarded first.
            fig.complete.store(false, Ordering::Relaxed);
            drop_position(&config.data_dir).map_err(|e| format!("position file: {e}"))?;
            let ((), ticket) = cairn_persist::capture(|| store.flush_all());
            persist
                .durable(ticket)
                .await
                .map_err(|e| format!("local log: {e}"))?;
            fig.applied_revision.store(0, Ordering::Relaxed);
            fig.full_syncs.fetch_add(1, Ordering::Relaxed);
            tracing::info!(primary = %config.primary, "replication: taking a full copy");
            pb::WatchCreateRequest {
                prefix: true,
                initial_state: true,
                ..Default::default()
            }
        }
    };
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
    let mut complete = resume_from.is_some();
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
            drop_position(&config.data_dir).map_err(|e| format!("position file: {e}"))?;
            return Err(format!(
                "the primary's history no longer holds our revision (compacted to {}): {}; \
                 taking a full copy",
                resp.compact_revision, resp.cancel_reason
            ));
        }
        let now = now_unix();
        let mut bytes = 0u64;
        let ((), ticket) = cairn_persist::capture(|| {
            for resp in &batch {
                for kv in &resp.initial_items {
                    bytes += (kv.key.len() + kv.value.len()) as u64;
                    apply_put(store, now, kv);
                }
                for ev in &resp.events {
                    bytes += event_bytes(ev);
                    apply_event(store, now, ev);
                }
            }
        });
        fig.received_bytes.fetch_add(bytes, Ordering::Relaxed);
        fig.pending_bytes.fetch_add(bytes, Ordering::Relaxed);
        persist
            .durable(ticket)
            .await
            .map_err(|e| format!("local log: {e}"))?;
        fig.pending_bytes.fetch_sub(bytes, Ordering::Relaxed);
        if let Some(done) = batch.iter().find(|r| r.initial_state_done) {
            complete = true;
            tracing::info!(revision = ?done.header.as_ref().map(|h| h.revision), "replication: full copy done");
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
            if revision > fig.applied_revision.load(Ordering::Relaxed) {
                fig.applied_revision.store(revision, Ordering::Relaxed);
                write_position(&config.data_dir, log_id, revision)
                    .map_err(|e| format!("position file: {e}"))?;
                ack_tx
                    .send(ack(revision))
                    .await
                    .map_err(|_| "ack stream closed")?;
            }
        }
        if let Some(why) = ended {
            return Err(why);
        }
    }
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
