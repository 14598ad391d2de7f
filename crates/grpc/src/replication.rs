//! The Replication service (`proto/cairn/v1/replication.proto`): replicas report how far they
//! hold the primary's events durable. What the primary does with the reports (sync
//! replication's acknowledgements, `stats replication`) is behind [`ReplicaAcks`], which the
//! cluster layer implements; this file only carries the stream.
//!
//! ```text
//!   replica ── Follow(stream ReplicaAck) ──> ReplicaAcks::acked(replica, durable_revision)
//!           <── PrimaryInfo{log_id, revision} first, then every 100 ms while open
//!   stream ends ──> ReplicaAcks::gone(replica)
//! ```

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

use crate::pb;
use crate::Backend;

/// The primary's side of replication (crates/cluster implements it).
pub trait ReplicaAcks: Send + Sync {
    /// Why this node does not take replicas now (it is a replica itself), if it does not.
    fn refusal(&self) -> Option<String>;
    /// `replica` holds every event up to `durable_revision` durable.
    fn acked(&self, replica: &str, durable_revision: u64);
    /// `replica`'s stream ended.
    fn gone(&self, replica: &str);
}

pub(crate) struct ReplicationService {
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
        let log_id = self.b.persist.as_ref().map_or(0, |p| p.log_id());
        let hub = Arc::clone(&self.b.hub);
        let mut incoming = request.into_inner();
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            let mut name: Option<String> = None;
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            loop {
                tokio::select! {
                    m = incoming.next() => match m {
                        Some(Ok(ack)) => {
                            acks.acked(&ack.replica, ack.durable_revision);
                            name = Some(ack.replica);
                        }
                        _ => break,
                    },
                    _ = tick.tick() => {
                        let info = pb::PrimaryInfo { log_id, revision: hub.published() };
                        if tx.send(Ok(info)).await.is_err() {
                            break;
                        }
                    }
                }
            }
            if let Some(n) = name {
                acks.gone(&n);
            }
        });
        let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
        Ok(Response::new(Box::pin(stream) as InfoStream))
    }
}
