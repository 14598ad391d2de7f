//! The KV service: Get, BatchGet, Set, Delete, Touch, Scan and the StreamGet streaming read.
//!
//! ```text
//!   request ─ check keys/limits (INVALID_ARGUMENT)
//!     ─ reads: Store::get, or Flash::get when the flash tier is on (as memcached's get)
//!     ─ writes: the one write path, cairn-engine's, as memcached writes take it:
//!       Engine::write(key, |tx| tx.entry(key, |e| compare, mode, store)): admitted (refused:
//!       UNAVAILABLE), the key's item back from flash, applied, and acknowledged before the
//!       reply (sync mode: durable; async mode: handed to the kernel; sync replication: held
//!       by a replica) ─ status per outcome ─ response
//!   time: the engine's clock, the ticked one every front end reads
//! ```

use std::collections::BinaryHeap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use cairn_engine::{put, Compare, Mismatch, Put, PutMode, Tx, WriteError};
use cairn_flash::Promotion;
use cairn_store::{Item, ItemMeta, ReadOutcome, StoreError};
use cairn_watch::key_value;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

use cairn_api::pb::{self, compare::Target, kv_server::Kv};

use crate::backend::Backend;
use crate::stats::Method;
use crate::status::request_error;

/// Scan page size when the request gives none, and the most it may ask for.
const SCAN_DEFAULT_LIMIT: usize = 100;
const SCAN_MAX_LIMIT: usize = 10_000;
/// Room left in a message for everything but the items (headers, tags).
const MESSAGE_SLACK_BYTES: usize = 4096;
/// Bytes a KeyValue adds to a message beyond its key and value (tags, lengths, numbers).
const KV_OVERHEAD_BYTES: usize = 48;
/// StreamGet answers buffered per stream before the server stops reading its requests.
const STREAM_QUEUE: usize = 16;

pub struct KvService {
    b: Arc<Backend>,
}

impl KvService {
    pub fn new(b: Arc<Backend>) -> KvService {
        KvService { b }
    }
}

fn header(b: &Backend) -> Option<pb::ResponseHeader> {
    header_after(b, 0)
}

/// The header of a write's response: at least the write's own revision, which is safe once
/// the write is acknowledged even if the hub has not published it to watchers yet.
fn header_after(b: &Backend, revision: u64) -> Option<pb::ResponseHeader> {
    Some(pb::ResponseHeader {
        revision: b.hub.published().max(revision),
        history_id: b.hub.history_id(),
    })
}

/// The key as the memcached front end accepts it, or INVALID_ARGUMENT saying why not.
fn check_key(key: &[u8]) -> Result<(), Status> {
    if key.is_empty() {
        return Err(Status::invalid_argument("the key is empty"));
    }
    let limits = cairn_proto::Limits::default();
    if key.len() > limits.max_key_len {
        return Err(Status::invalid_argument(format!(
            "the key is {} bytes, over the limit of {}",
            key.len(),
            limits.max_key_len
        )));
    }
    if !cairn_proto::key_is_valid(key, &limits) {
        return Err(Status::invalid_argument(
            "the key holds a space, a newline or a NUL byte (whitespace and bytes no memcached key holds)",
        ));
    }
    Ok(())
}

fn check_keys(b: &Backend, keys: &[Bytes]) -> Result<(), Status> {
    let max = b.config.max_keys_per_request;
    if keys.len() > max {
        return Err(Status::invalid_argument(format!(
            "{} keys in one request, over the limit of {max}",
            keys.len()
        )));
    }
    keys.iter().try_for_each(|k| check_key(k))
}

fn item_kv(key: &Bytes, item: Item) -> pb::KeyValue {
    key_value(key.clone(), Bytes::from(item.value), &item.meta)
}

/// Reads `key` as memcached's get does: from RAM, or from flash when the tier is on.
async fn read(b: &Backend, key: &[u8], now: u32) -> ReadOutcome {
    let store = b.engine.store();
    match b.engine.flash() {
        Some(flash) => flash.get(store, key, now, Promotion::IfHot).await,
        None => store.get(key, now),
    }
}

/// One lookup of a batch.
async fn lookup(b: &Backend, key: &Bytes, now: u32) -> pb::Lookup {
    match read(b, key, now).await {
        ReadOutcome::Hit(item) => pb::Lookup {
            found: true,
            kv: Some(item_kv(key, item)),
        },
        ReadOutcome::Miss | ReadOutcome::Expired => pb::Lookup {
            found: false,
            kv: Some(pb::KeyValue {
                key: key.clone(),
                ..Default::default()
            }),
        },
    }
}

/// Looks up every key, refusing with RESOURCE_EXHAUSTED a reply that would pass the message
/// size limit.
async fn lookups(b: &Backend, keys: &[Bytes]) -> Result<Vec<pb::Lookup>, Status> {
    let now = b.engine.now();
    let max = b
        .config
        .max_message_bytes
        .saturating_sub(MESSAGE_SLACK_BYTES);
    let mut bytes = 0usize;
    let mut out = Vec::with_capacity(keys.len());
    for k in keys {
        let l = lookup(b, k, now).await;
        bytes += KV_OVERHEAD_BYTES + k.len() + l.kv.as_ref().map_or(0, |kv| kv.value.len());
        if bytes > max {
            return Err(Status::resource_exhausted(format!(
                "the answer would pass the message size limit of {} bytes: ask for fewer keys",
                b.config.max_message_bytes
            )));
        }
        out.push(l);
    }
    Ok(out)
}

/// [`check_keys`] then [`lookups`].
async fn checked_lookups(b: &Backend, keys: &[Bytes]) -> Result<Vec<pb::Lookup>, Status> {
    check_keys(b, keys)?;
    lookups(b, keys).await
}

/// The expiry a request asks for: absolute when given, else relative seconds (0 = never).
fn expiry(ttl_seconds: u32, expires_at: u32, now: u32) -> u32 {
    match (expires_at, ttl_seconds) {
        (0, 0) => 0,
        (0, ttl) => now.saturating_add(ttl),
        (at, _) => at,
    }
}

/// Checks a compare against the current item (None = there is none): the engine's compare,
/// as memcached's `cas` and meta `C`.
fn compare(c: &Option<pb::Compare>, current: Option<&ItemMeta>) -> Result<(), Status> {
    let Some(target) = c.as_ref().and_then(|c| c.target) else {
        return Ok(());
    };
    let (expected, what, want) = match target {
        Target::Cas(cas) => (Compare::Cas(cas), "the CAS unique", cas),
        Target::ModRevision(rev) => (Compare::ModRevision(rev), "the mod_revision", rev),
    };
    cairn_engine::compare(expected, current).map_err(|m| match m {
        Mismatch::Absent => Status::not_found("the key does not exist (compare given)"),
        Mismatch::Differs(actual) => {
            Status::failed_precondition(format!("compare failed: {what} is {actual}, not {want}"))
        }
    })
}

/// The gRPC wording of the one write path's refusals and failures (memcached words the
/// same [`WriteError`]s its own way, in cairn-server's cmd/write_error.rs).
fn write_error(b: &Backend, e: WriteError) -> Status {
    match e {
        WriteError::LogFailed(_) | WriteError::NotPrimary(_) => {
            Status::unavailable(format!("writes refused: {e}"))
        }
        // Not done, the item may still be on flash: the write must not run as if the key
        // were absent. Nothing changed; the client may retry.
        WriteError::FlashRead(e) => Status::unavailable(format!("flash read not done: {e}")),
        WriteError::Store(StoreError::TooLarge) => Status::resource_exhausted(format!(
            "object too large for cache (the item size limit is {} bytes)",
            b.engine.store().config().item_size_max_bytes
        )),
        WriteError::Store(StoreError::OutOfMemory) => {
            Status::resource_exhausted("out of memory storing object")
        }
        WriteError::NotSafe(e) => Status::unavailable(format!(
            "persistence failure: the write could not be made safe: {e}"
        )),
        WriteError::Replication(why) => Status::unavailable(format!(
            "persistence failure: the write could not be made safe: replication: {why}"
        )),
    }
}

fn store_error(b: &Backend, e: StoreError) -> Status {
    write_error(b, WriteError::Store(e))
}

impl KvService {
    /// Runs one write of `key` through the one write path (`Engine::write`): refused as
    /// client writes are (the log failed, a replica), waits for room in the log first (and
    /// brings the key's item back from flash, so that the write sees it), and returns only
    /// once what it wrote is safe in the mode in force.
    async fn write<T>(
        &self,
        key: &[u8],
        f: impl FnOnce(&Tx<'_>) -> Result<T, Status>,
    ) -> Result<T, Status> {
        self.b
            .engine
            .write(key, f)
            .await
            .map_err(|e| write_error(&self.b, e))?
    }

    fn finish<T>(
        &self,
        m: Method,
        started: Instant,
        r: Result<T, Status>,
    ) -> Result<Response<T>, Status> {
        self.b.stats.record(m, started, r.is_ok());
        r.map(Response::new)
    }
}

type StreamGetStream = Pin<Box<dyn Stream<Item = Result<pb::StreamGetResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Kv for KvService {
    async fn get(&self, req: Request<pb::GetRequest>) -> Result<Response<pb::GetResponse>, Status> {
        let started = Instant::now();
        let key = req.into_inner().key;
        let r = match check_key(&key) {
            Err(e) => Err(e),
            Ok(()) => match read(&self.b, &key, self.b.engine.now()).await {
                ReadOutcome::Hit(item) => Ok(pb::GetResponse {
                    header: header(&self.b),
                    kv: Some(item_kv(&key, item)),
                }),
                ReadOutcome::Miss | ReadOutcome::Expired => Err(Status::not_found("no such key")),
            },
        };
        self.finish(Method::Get, started, r)
    }

    async fn batch_get(
        &self,
        req: Request<pb::BatchGetRequest>,
    ) -> Result<Response<pb::BatchGetResponse>, Status> {
        let started = Instant::now();
        let keys = req.into_inner().keys;
        let r = checked_lookups(&self.b, &keys)
            .await
            .map(|results| pb::BatchGetResponse {
                header: header(&self.b),
                results,
            });
        self.finish(Method::BatchGet, started, r)
    }

    async fn set(&self, req: Request<pb::SetRequest>) -> Result<Response<pb::SetResponse>, Status> {
        let started = Instant::now();
        let r = self.set_inner(req.into_inner()).await;
        self.finish(Method::Set, started, r)
    }

    async fn delete(
        &self,
        req: Request<pb::DeleteRequest>,
    ) -> Result<Response<pb::DeleteResponse>, Status> {
        let started = Instant::now();
        let req = req.into_inner();
        let r = match check_key(&req.key) {
            Err(e) => Err(e),
            Ok(()) => {
                self.write(&req.key, |tx| {
                    tx.entry(&req.key, self.b.engine.now(), |e| {
                        let current = e.peek().map(|(m, _)| m);
                        compare(&req.compare, current.as_ref())?;
                        match e.delete_revision() {
                            (_, Some(revision)) => Ok(revision),
                            (_, None) => Err(Status::not_found("no such key")),
                        }
                    })
                })
                .await
            }
        };
        let r = r.map(|revision| pb::DeleteResponse {
            header: header_after(&self.b, revision),
            revision,
        });
        self.finish(Method::Delete, started, r)
    }

    async fn touch(
        &self,
        req: Request<pb::TouchRequest>,
    ) -> Result<Response<pb::TouchResponse>, Status> {
        let started = Instant::now();
        let req = req.into_inner();
        let r = match check_key(&req.key) {
            Err(e) => Err(e),
            Ok(()) => {
                self.write(&req.key, |tx| {
                    let now = self.b.engine.now();
                    let exptime = expiry(req.ttl_seconds, req.expires_at, now);
                    tx.entry(&req.key, now, |e| {
                        if !e.update_meta(|m| m.exptime = exptime) {
                            return Err(Status::not_found("no such key"));
                        }
                        let (meta, _) = e.peek().expect("just touched");
                        Ok(meta)
                    })
                })
                .await
            }
        };
        let r = r.map(|meta| pb::TouchResponse {
            header: header_after(&self.b, meta.mod_revision),
            mod_revision: meta.mod_revision,
            expires_at: meta.exptime,
        });
        self.finish(Method::Touch, started, r)
    }

    async fn scan(
        &self,
        req: Request<pb::ScanRequest>,
    ) -> Result<Response<pb::ScanResponse>, Status> {
        let started = Instant::now();
        let b = Arc::clone(&self.b);
        let req = req.into_inner();
        // A page visits every shard: off the async workers.
        let r = tokio::task::spawn_blocking(move || scan_page(&b, &req))
            .await
            .unwrap_or_else(|e| Err(Status::internal(format!("scan failed: {e}"))));
        self.finish(Method::Scan, started, r)
    }

    type StreamGetStream = StreamGetStream;

    async fn stream_get(
        &self,
        req: Request<Streaming<pb::StreamGetRequest>>,
    ) -> Result<Response<Self::StreamGetStream>, Status> {
        let mut requests = req.into_inner();
        let (tx, rx) = mpsc::channel(STREAM_QUEUE);
        let b = Arc::clone(&self.b);
        tokio::spawn(async move {
            loop {
                let msg = match requests.message().await {
                    Ok(Some(m)) => m,
                    Ok(None) => return,
                    Err(status) => {
                        let _ = tx.send(Err(request_error(status))).await;
                        return;
                    }
                };
                let started = Instant::now();
                let answer = checked_lookups(&b, &msg.keys).await;
                b.stats.record(Method::StreamGet, started, answer.is_ok());
                let reply = match answer {
                    Ok(results) => pb::StreamGetResponse {
                        request_id: msg.request_id,
                        results,
                        error: String::new(),
                    },
                    Err(status) => pb::StreamGetResponse {
                        request_id: msg.request_id,
                        results: Vec::new(),
                        error: status.message().to_string(),
                    },
                };
                // A full queue stops the reading: the client must read its answers.
                if tx.send(Ok(reply)).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

impl KvService {
    async fn set_inner(&self, req: pb::SetRequest) -> Result<pb::SetResponse, Status> {
        check_key(&req.key)?;
        let mode = pb::SetMode::try_from(req.mode)
            .map_err(|_| Status::invalid_argument(format!("unknown set mode {}", req.mode)))?;
        let meta = self
            .write(&req.key, |tx| {
                let now = self.b.engine.now();
                let exptime = expiry(req.ttl_seconds, req.expires_at, now);
                tx.entry(&req.key, now, |e| {
                    let current = e.peek().map(|(m, _)| m);
                    compare(&req.compare, current.as_ref())?;
                    // The engine's rule, memcached's set/add/replace: add only when absent,
                    // replace only when there, and a set refused as too large leaves no
                    // stale value behind.
                    let put_mode = match mode {
                        pb::SetMode::Set => PutMode::Set,
                        pb::SetMode::Add => PutMode::Add,
                        pb::SetMode::Replace => PutMode::Replace,
                    };
                    match put(e, put_mode, &[&req.value], req.flags, exptime, None) {
                        Ok(Put::Stored(meta)) => Ok(meta),
                        Ok(Put::NotStored) if mode == pb::SetMode::Add => {
                            Err(Status::already_exists("the key exists (mode ADD)"))
                        }
                        Ok(Put::NotStored) => Err(Status::not_found("no such key (mode REPLACE)")),
                        Err(err) => Err(store_error(&self.b, err)),
                    }
                })
            })
            .await?;
        Ok(pb::SetResponse {
            header: header_after(&self.b, meta.mod_revision),
            cas: meta.cas,
            mod_revision: meta.mod_revision,
        })
    }
}

/// One page of a scan: the `limit` smallest keys with the prefix after the page token,
/// collected shard by shard (each under its lock for the time of one pass over it).
fn scan_page(b: &Backend, req: &pb::ScanRequest) -> Result<pb::ScanResponse, Status> {
    let limit = match req.limit as usize {
        0 => SCAN_DEFAULT_LIMIT,
        n if n > SCAN_MAX_LIMIT => {
            return Err(Status::invalid_argument(format!(
                "limit {n} is over the most a page holds, {SCAN_MAX_LIMIT}"
            )))
        }
        n => n,
    };
    let after: &[u8] = &req.page_token;
    let prefix: &[u8] = &req.prefix;
    if !after.is_empty() && !after.starts_with(prefix) {
        return Err(Status::invalid_argument(
            "the page token does not belong to this prefix",
        ));
    }
    let store = b.engine.store();
    let now = b.engine.now();
    // The limit + 1 smallest keys seen (a max-heap: the largest is dropped first); one more
    // than the page tells whether another page follows.
    let mut best: BinaryHeap<Candidate> = BinaryHeap::with_capacity(limit + 2);
    for shard in 0..store.shard_count() {
        store.visit_shard(shard, now, |key, value, meta| {
            if !key.starts_with(prefix) || key <= after {
                return;
            }
            if best.len() > limit && best.peek().is_some_and(|c| key >= &c.key[..]) {
                return;
            }
            best.push(Candidate {
                key: Bytes::copy_from_slice(key),
                value: if req.keys_only {
                    Bytes::new()
                } else {
                    Bytes::copy_from_slice(value)
                },
                meta: *meta,
            });
            if best.len() > limit + 1 {
                best.pop();
            }
        });
    }
    let mut items = best.into_sorted_vec();
    let mut more = items.len() > limit;
    items.truncate(limit);
    let budget = b
        .config
        .max_message_bytes
        .saturating_sub(MESSAGE_SLACK_BYTES);
    let mut bytes = 0usize;
    let mut kvs = Vec::with_capacity(items.len());
    for c in items {
        bytes += KV_OVERHEAD_BYTES + c.key.len() + c.value.len();
        if bytes > budget && !kvs.is_empty() {
            more = true;
            break;
        }
        kvs.push(key_value(c.key, c.value, &c.meta));
    }
    let next_page_token = if more {
        kvs.last().map(|kv| kv.key.clone()).unwrap_or_default()
    } else {
        Bytes::new()
    };
    Ok(pb::ScanResponse {
        header: header(b),
        kvs,
        next_page_token,
    })
}

/// An item kept for a scan page, ordered by key.
struct Candidate {
    key: Bytes,
    value: Bytes,
    meta: ItemMeta,
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}
impl Eq for Candidate {}
impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key.cmp(&other.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_is_absolute_when_given_else_relative() {
        assert_eq!(expiry(0, 0, 1000), 0);
        assert_eq!(expiry(10, 0, 1000), 1010);
        assert_eq!(expiry(10, 5000, 1000), 5000);
    }

    #[test]
    fn keys_are_checked_as_memcached_does() {
        assert!(check_key(b"ok-key").is_ok());
        // memcached's tokenizer takes any byte but a space; a NUL ends its line.
        assert!(check_key(b"ctl\x01\t\x7f").is_ok());
        for bad in [&b""[..], b"has space", b"new\nline", b"nul\0", &[b'k'; 251]] {
            let e = check_key(bad).unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{bad:?}");
        }
    }

    #[test]
    fn compares_name_what_differs() {
        let meta = ItemMeta {
            flags: 0,
            exptime: 0,
            cas: 5,
            last_access: 0,
            fetched: false,
            stale: false,
            win_sent: false,
            mod_revision: 9,
        };
        let c = |t| Some(pb::Compare { target: Some(t) });
        assert!(compare(&None, None).is_ok());
        assert!(compare(&c(Target::Cas(5)), Some(&meta)).is_ok());
        assert!(compare(&c(Target::ModRevision(9)), Some(&meta)).is_ok());
        let e = compare(&c(Target::ModRevision(8)), Some(&meta)).unwrap_err();
        assert_eq!(e.code(), tonic::Code::FailedPrecondition);
        assert!(e.message().contains("is 9, not 8"), "{}", e.message());
        let e = compare(&c(Target::Cas(5)), None).unwrap_err();
        assert_eq!(e.code(), tonic::Code::NotFound);
    }
}
