//! The Replication service (`proto/cairn/v1/replication.proto`): replicas report how far they
//! hold the primary's events durable. What the primary does with the reports (sync
//! replication's acknowledgements, `stats replication`) is behind [`ReplicaAcks`], which the
//! cluster layer implements; this file only carries the stream.
//!
//! ```text
//!   replica ── Follow(stream ReplicaAck) ──> ReplicaAcks::acked(replica, stream, durable_revision, term)
//!           first ack's position ──> ReplicaAcks::resume_from ──> the first PrimaryInfo's
//!             resume_from (absent: a full copy)
//!           <── PrimaryInfo{log_id, revision, term} first, then every 100 ms while open
//!   stream ends ──> ReplicaAcks::gone(replica, stream)
//! ```

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cairn_api::pb;
use cairn_watch::Hub;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

use crate::backend::Backend;
/// Re-exported where it was declared before (`cairn_grpc::replication::ReplicaAcks`).
pub use crate::replica_acks::ReplicaAcks;

/// Ids of Follow streams, growing, so that the end of a replica's old stream does not
/// forget the new one it opened meanwhile.
static NEXT_STREAM: AtomicU64 = AtomicU64::new(1);

pub(crate) struct ReplicationService {
    /// The primary's hub and log (its position), and what it does with the reports.
    b: Arc<Backend>,
}

impl ReplicationService {
    pub(crate) fn new(b: Arc<Backend>) -> ReplicationService {
        ReplicationService { b }
    }
}

type InfoStream = Pin<Box<dyn Stream<Item = Result<pb::PrimaryInfo, Status>> + Send>>;

#[tonic::async_trait]
impl pb::replication_server::Replication for ReplicationService {
    type FollowStream = InfoStream;

    async fn follow(
        &self,
        request: Request<Streaming<pb::ReplicaAck>>,
    ) -> Result<Response<InfoStream>, Status> {
        let Some(acks) = self.b.replica_acks.clone() else {
            return Err(Status::failed_precondition(
                "replication is off on this node",
            ));
        };
        if let Some(why) = acks.refusal() {
            return Err(Status::failed_precondition(why));
        }
        let log_id = self.b.engine.persist().map_or(0, |p| p.log_id());
        let hub = Arc::clone(&self.b.hub);
        let mut incoming = request.into_inner();
        // The replica's first message says where its data stands: the first answer says
        // whether it may resume, and from where.
        let first = match incoming.next().await {
            Some(Ok(ack)) => ack,
            Some(Err(e)) => return Err(e),
            None => return Err(Status::cancelled("the replica closed the stream")),
        };
        let term = acks.term();
        let resume_from = acks.resume_from(
            (first.position_log_id, first.position_revision),
            (log_id, hub.published()),
        );
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let info = move |hub: &Hub, resume_from| pb::PrimaryInfo {
            log_id,
            revision: hub.published(),
            term,
            resume_from,
        };
        let _ = tx.try_send(Ok(info(&hub, resume_from)));
        let stream_id = NEXT_STREAM.fetch_add(1, Ordering::Relaxed);
        acks.acked(
            &first.replica,
            stream_id,
            first.durable_revision,
            first.term,
        );
        tokio::spawn(async move {
            let mut name = first.replica;
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            tick.tick().await;
            loop {
                tokio::select! {
                    m = incoming.next() => match m {
                        Some(Ok(ack)) => {
                            acks.acked(&ack.replica, stream_id, ack.durable_revision, ack.term);
                            name = ack.replica;
                        }
                        _ => break,
                    },
                    _ = tick.tick() => {
                        if tx.send(Ok(info(&hub, None))).await.is_err() {
                            break;
                        }
                    }
                }
            }
            acks.gone(&name, stream_id);
        });
        let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
        Ok(Response::new(Box::pin(stream) as InfoStream))
    }
}
