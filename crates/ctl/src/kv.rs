//! `get`, `set`, `delete`, `touch` and `scan`: the KV service of `proto/cairn/v1/kv.proto`, one
//! call each (scan: every page), keys checked against the server's rule before sending.
//!
//! ```text
//!   cairnctl set k v --ttl 60  ──check key──> KV.Set{k, v, ttl 60} ──> "OK revision 12 cas 7"
//!   cairnctl scan user/        ──> KV.Scan{prefix, page_token} ... until next_page_token is empty
//!                                  ──> "key<TAB>value" per item (-o json: one object per item)
//! ```
//!
//! Non-goals: compares (CAS, revision), add/replace modes, batch and streaming reads: the
//! Python client and grpcurl have them.

use cairn_api::pb::{self, kv_client::KvClient};
use serde_json::json;
use tonic::transport::Channel;

use crate::encoding::Encoding;
use crate::error::{CtlError, Result};
use crate::output::Out;

/// The key as bytes, refused here (before any connection) when the server would refuse it:
/// the rule is the server's own (`cairn_proto::key_is_valid`: 1 to 250 bytes, no space,
/// newline or NUL).
pub fn checked_key(enc: Encoding, key: &str) -> Result<Vec<u8>> {
    let bytes = enc.decode("key", key)?;
    let limits = cairn_proto::Limits::default();
    if cairn_proto::key_is_valid(&bytes, &limits) {
        return Ok(bytes);
    }
    let why = if bytes.is_empty() {
        "a key cannot be empty".to_string()
    } else if bytes.len() > limits.max_key_len {
        format!(
            "the key is {} bytes: cairn's keys are at most {} bytes (memcached's limit)",
            bytes.len(),
            limits.max_key_len
        )
    } else {
        format!(
            "the key {:?} holds a space, a newline or a NUL byte, which cairn's keys cannot",
            enc.show(&bytes)
        )
    };
    Err(CtlError::BadKey(why))
}

async fn client(endpoint: &str) -> Result<KvClient<Channel>> {
    let channel = crate::grpc::connect(endpoint).await?;
    Ok(KvClient::new(channel).max_decoding_message_size(usize::MAX))
}

/// An item as one JSON object.
pub fn kv_json(enc: Encoding, kv: &pb::KeyValue) -> serde_json::Value {
    json!({
        "key": enc.show(&kv.key),
        "value": enc.show(&kv.value),
        "flags": kv.flags,
        "expires_at": kv.expires_at,
        "cas": kv.cas,
        "mod_revision": kv.mod_revision,
        "stale": kv.stale,
    })
}

pub async fn get(endpoint: &str, enc: Encoding, key: &str, out: &mut Out) -> Result<()> {
    let k = checked_key(enc, key)?;
    let r = client(endpoint)
        .await?
        .get(pb::GetRequest { key: k.into() })
        .await
        .map_err(|s| CtlError::from_status("Get", endpoint, Some(key), s))?
        .into_inner();
    let kv = r.kv.unwrap_or_default();
    if out.json_mode() {
        out.json(&kv_json(enc, &kv))
    } else if enc == Encoding::Text {
        // The value exactly as stored, as `etcdctl get --print-value-only` and redis-cli do.
        out.bytes_line(&kv.value)
    } else {
        out.line(&enc.show(&kv.value))
    }
}

pub async fn set(
    endpoint: &str,
    enc: Encoding,
    key: &str,
    value: &str,
    ttl: u32,
    flags: u32,
    out: &mut Out,
) -> Result<()> {
    let k = checked_key(enc, key)?;
    let v = enc.decode("value", value)?;
    let r = client(endpoint)
        .await?
        .set(pb::SetRequest {
            key: k.into(),
            value: v.into(),
            flags,
            ttl_seconds: ttl,
            ..Default::default()
        })
        .await
        .map_err(|s| CtlError::from_status("Set", endpoint, None, s))?
        .into_inner();
    if out.json_mode() {
        out.json(&json!({"ok": true, "revision": r.mod_revision, "cas": r.cas}))
    } else {
        out.line(&format!("OK revision {} cas {}", r.mod_revision, r.cas))
    }
}

pub async fn delete(endpoint: &str, enc: Encoding, key: &str, out: &mut Out) -> Result<()> {
    let k = checked_key(enc, key)?;
    let r = client(endpoint)
        .await?
        .delete(pb::DeleteRequest {
            key: k.into(),
            compare: None,
        })
        .await
        .map_err(|s| CtlError::from_status("Delete", endpoint, Some(key), s))?
        .into_inner();
    if out.json_mode() {
        out.json(&json!({"deleted": true, "revision": r.revision}))
    } else {
        out.line(&format!("DELETED revision {}", r.revision))
    }
}

pub async fn touch(
    endpoint: &str,
    enc: Encoding,
    key: &str,
    ttl: u32,
    out: &mut Out,
) -> Result<()> {
    let k = checked_key(enc, key)?;
    let r = client(endpoint)
        .await?
        .touch(pb::TouchRequest {
            key: k.into(),
            ttl_seconds: ttl,
            expires_at: 0,
        })
        .await
        .map_err(|s| CtlError::from_status("Touch", endpoint, Some(key), s))?
        .into_inner();
    if out.json_mode() {
        out.json(&json!({"touched": true, "revision": r.mod_revision, "expires_at": r.expires_at}))
    } else {
        out.line(&format!(
            "TOUCHED revision {} expires_at {}",
            r.mod_revision, r.expires_at
        ))
    }
}

pub async fn scan(
    endpoint: &str,
    enc: Encoding,
    prefix: &str,
    keys_only: bool,
    page_size: u32,
    out: &mut Out,
) -> Result<()> {
    let prefix: tonic::codegen::Bytes = enc.decode("prefix", prefix)?.into();
    let mut kv = client(endpoint).await?;
    let mut token = tonic::codegen::Bytes::new();
    loop {
        let r = kv
            .scan(pb::ScanRequest {
                prefix: prefix.clone(),
                limit: page_size,
                page_token: std::mem::take(&mut token),
                keys_only,
            })
            .await
            .map_err(|s| CtlError::from_status("Scan", endpoint, None, s))?
            .into_inner();
        for item in &r.kvs {
            if out.json_mode() {
                let mut j = kv_json(enc, item);
                if keys_only {
                    j.as_object_mut().map(|o| o.remove("value"));
                }
                out.json(&j)?;
            } else if keys_only {
                out.line(&enc.show(&item.key))?;
            } else {
                out.line(&format!(
                    "{}\t{}",
                    enc.show(&item.key),
                    enc.show(&item.value)
                ))?;
            }
        }
        if r.next_page_token.is_empty() {
            return Ok(());
        }
        token = r.next_page_token;
    }
}
