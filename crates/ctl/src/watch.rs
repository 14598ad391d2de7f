//! `cairnctl watch PREFIX`: one line per event, for as long as it runs, across disconnects and
//! server restarts, with no gap and no repeat: one Watch stream at a time, reopened from the
//! next revision it needs after every failure (the rules: `resume.rs`), as etcd's clientv3
//! watch and cairn's Python client do.
//!
//! ```text
//!   open stream ── create{start_revision = next} ──> cairn
//!        │   <── created, events ... ──> Resume::on_response ──> one line each (flushed)
//!        │   stream fails (kill -9, restart, network): backoff 50 ms doubling to 2 s, with
//!        │   jitter, reset once a create succeeds; then open again
//!        └── canceled{compact_revision}: the error Compacted, or with --relist a RESYNC and
//!            the items, then on
//! ```
//!
//! Text lines: `REV PUT KEY VALUE`, `REV DELETE KEY reason`, `REV FLUSH` (with `--prev-kv`,
//! ` prev=VALUE` after), and for a state (`--initial-state`, a relist) `RESYNC REV reason
//! N` then `MOD_REV ITEM KEY VALUE` per item. `-o json`: one object per line with `type`.
//! Notes on reconnects go to stderr.
//!
//! Non-goals: several prefixes on one stream, filters (the Python client has them).

use std::time::{Duration, Instant};

use cairn_api::pb::{self, watch_client::WatchClient};
use serde_json::json;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::encoding::Encoding;
use crate::error::{transport_failure, CtlError, Result};
use crate::kv::kv_json;
use crate::output::Out;
use crate::resume::{Item, Resume, Stop};

/// `cairnctl watch`'s arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct WatchArgs {
    /// Empty: every key.
    #[arg(default_value = "")]
    pub prefix: String,
    /// The first revision to show (default: from now on).
    #[arg(long, value_name = "N", conflicts_with = "initial_state")]
    pub from_revision: Option<u64>,
    /// First every item that exists, then the events after it.
    #[arg(long)]
    pub initial_state: bool,
    /// Each event with the item before it.
    #[arg(long)]
    pub prev_kv: bool,
    /// When the server's history no longer holds the next revision, list the prefix again
    /// (a RESYNC line, then the items) and go on, instead of stopping with an error.
    #[arg(long)]
    pub relist: bool,
    /// Give up after this many seconds of failed reconnects (default: never).
    #[arg(long, value_name = "SECONDS")]
    pub reconnect_deadline: Option<f64>,
}

/// The first delay before a reconnect, and the longest.
const BACKOFF_INITIAL: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// How one stream ended.
enum End {
    /// The server is there but the prefix must be listed again: reopen at once.
    Relist,
    /// The stream failed in a way a new one may not (disconnect, restart): reopen after a
    /// backoff. `connected`: the watch was created on it.
    Broken { why: String, connected: bool },
    /// The watch cannot go on.
    Failed(CtlError),
}

/// Status codes after which the stream is reopened (the Python client's list); any other ends
/// the watch with its error.
fn retryable(code: tonic::Code) -> bool {
    use tonic::Code::*;
    matches!(
        code,
        Unavailable | Unknown | Internal | Aborted | Cancelled | DeadlineExceeded
    )
}

pub async fn run(endpoint: &str, enc: Encoding, args: &WatchArgs, out: &mut Out) -> Result<()> {
    let prefix = enc.decode("prefix", &args.prefix)?;
    if let Some(0) = args.from_revision {
        return Err(CtlError::Usage(
            "--from-revision must be 1 or more (without it: from now on)".into(),
        ));
    }
    let template = pb::WatchCreateRequest {
        key: prefix.into(),
        // An empty key with prefix watches everything.
        prefix: true,
        prev_kv: args.prev_kv,
        ..Default::default()
    };
    let mut resume = Resume::new(
        template,
        args.from_revision,
        args.initial_state,
        args.relist,
    );
    let ep = crate::grpc::endpoint(endpoint)?
        .http2_keep_alive_interval(Duration::from_secs(10))
        .keep_alive_timeout(Duration::from_secs(10))
        .keep_alive_while_idle(true);
    let mut ever_connected = false;
    let mut backoff = BACKOFF_INITIAL;
    let mut failing_since: Option<Instant> = None;
    loop {
        let end = match ep.connect().await {
            Ok(channel) => one_stream(channel, &mut resume, enc, out).await,
            Err(e) if !ever_connected => {
                // Never reached: a wrong address, not a restart to wait out.
                return Err(crate::grpc::unreachable(endpoint, &e));
            }
            Err(e) => End::Broken {
                why: crate::grpc::causes(&e),
                connected: false,
            },
        };
        let why = match end {
            End::Relist => continue,
            End::Failed(e) => return Err(e),
            End::Broken { why, connected } => {
                if connected {
                    ever_connected = true;
                    failing_since = None;
                    backoff = BACKOFF_INITIAL;
                }
                why
            }
        };
        let now = Instant::now();
        let since = *failing_since.get_or_insert(now);
        if let Some(limit) = args.reconnect_deadline {
            if now.duration_since(since).as_secs_f64() > limit {
                return Err(CtlError::GaveUp {
                    addr: endpoint.to_string(),
                    secs: limit,
                });
            }
        }
        let delay = jitter(backoff);
        backoff = (backoff * 2).min(BACKOFF_MAX);
        let next = resume
            .next_revision
            .map_or("now".to_string(), |n| format!("revision {n}"));
        eprintln!("cairnctl: watch stream lost ({why}); resuming from {next} in {delay:?}");
        tokio::time::sleep(delay).await;
    }
}

/// A delay between half of `d` and `d`, so that many watchers of one restarted server do
/// not come back at the same instant.
fn jitter(d: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |t| t.subsec_nanos());
    d / 2 + d.mul_f64(f64::from(nanos % 1000) / 2000.0)
}

/// Runs one stream until it ends, printing what it brings.
async fn one_stream(
    channel: tonic::transport::Channel,
    resume: &mut Resume,
    enc: Encoding,
    out: &mut Out,
) -> End {
    let (tx, rx) = mpsc::channel(4);
    // The request side stays open (tx alive) for as long as the stream runs.
    if tx.send(resume.create_request()).await.is_err() {
        unreachable!("the receiver is alive");
    }
    let mut client = WatchClient::new(channel).max_decoding_message_size(usize::MAX);
    let mut stream = match client.watch(ReceiverStream::new(rx)).await {
        Ok(r) => r.into_inner(),
        Err(s) => return status_end(s, false),
    };
    let mut connected = false;
    loop {
        match stream.message().await {
            Ok(Some(r)) => {
                let items = match resume.on_response(r) {
                    Ok(items) => items,
                    Err(Stop::Relist) => return End::Relist,
                    Err(Stop::Failed(e)) => return End::Failed(e),
                };
                connected |= resume.created();
                for item in &items {
                    if let Err(e) = show(item, enc, out) {
                        return End::Failed(e);
                    }
                }
            }
            Ok(None) => {
                return End::Broken {
                    why: "the server ended the stream".into(),
                    connected,
                }
            }
            Err(s) => return status_end(s, connected),
        }
    }
}

fn status_end(s: tonic::Status, connected: bool) -> End {
    if retryable(s.code()) || transport_failure(&s) {
        End::Broken {
            why: format!("{:?}: {}", s.code(), s.message()),
            connected,
        }
    } else {
        End::Failed(CtlError::Status {
            call: "Watch",
            code: format!("{:?}", s.code()),
            message: s.message().to_string(),
        })
    }
}

/// An event type's and a delete reason's names, as watch.proto spells them.
fn names(e: &pb::Event) -> (&'static str, &'static str) {
    let kind = match pb::event::EventType::try_from(e.r#type) {
        Ok(pb::event::EventType::Put) => "PUT",
        Ok(pb::event::EventType::Delete) => "DELETE",
        Ok(pb::event::EventType::Flush) => "FLUSH",
        Err(_) => "UNKNOWN",
    };
    let reason = match pb::event::DeleteReason::try_from(e.reason) {
        Ok(pb::event::DeleteReason::None) => "",
        Ok(pb::event::DeleteReason::Client) => "client",
        Ok(pb::event::DeleteReason::Expired) => "expired",
        Ok(pb::event::DeleteReason::Evicted) => "evicted",
        Ok(pb::event::DeleteReason::Flushed) => "flushed",
        Err(_) => "unknown",
    };
    (kind, reason)
}

/// One item as its line(s).
fn show(item: &Item, enc: Encoding, out: &mut Out) -> Result<()> {
    match item {
        Item::Event(e) => {
            let (kind, reason) = names(e);
            let kv = e.kv.clone().unwrap_or_default();
            if out.json_mode() {
                let mut j = json!({"type": kind, "revision": e.revision});
                let o = j.as_object_mut().expect("an object");
                if kind != "FLUSH" {
                    o.insert("key".into(), enc.show(&kv.key).into());
                }
                if kind == "PUT" {
                    o.insert("value".into(), enc.show(&kv.value).into());
                    o.insert("flags".into(), kv.flags.into());
                    o.insert("expires_at".into(), kv.expires_at.into());
                    o.insert("cas".into(), kv.cas.into());
                } else if !reason.is_empty() {
                    o.insert("reason".into(), reason.into());
                }
                if let Some(prev) = &e.prev_kv {
                    o.insert("prev".into(), kv_json(enc, prev));
                }
                return out.json(&j);
            }
            let mut line = format!("{} {kind}", e.revision);
            match kind {
                "PUT" => line.push_str(&format!(" {} {}", enc.show(&kv.key), enc.show(&kv.value))),
                "FLUSH" => {}
                _ => line.push_str(&format!(" {} {reason}", enc.show(&kv.key))),
            }
            if let Some(prev) = &e.prev_kv {
                line.push_str(&format!(" prev={}", enc.show(&prev.value)));
            }
            out.line(&line)
        }
        Item::Resync {
            revision,
            items,
            reason,
            compact_revision,
        } => {
            if out.json_mode() {
                out.json(&json!({
                    "type": "RESYNC",
                    "revision": revision,
                    "reason": reason.name(),
                    "compact_revision": compact_revision,
                    "items": items.len(),
                }))?;
            } else {
                out.line(&format!(
                    "RESYNC {revision} {} {}",
                    reason.name(),
                    items.len()
                ))?;
            }
            for kv in items {
                if out.json_mode() {
                    let mut j = kv_json(enc, kv);
                    j.as_object_mut()
                        .expect("an object")
                        .insert("type".into(), "ITEM".into());
                    out.json(&j)?;
                } else {
                    out.line(&format!(
                        "{} ITEM {} {}",
                        kv.mod_revision,
                        enc.show(&kv.key),
                        enc.show(&kv.value)
                    ))?;
                }
            }
            Ok(())
        }
    }
}
