//! Why a cluster operation failed (one error enum for the crate).

/// Why a cluster operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// ZooKeeper refused or failed an operation (`what` names it, with the path).
    #[error("ZooKeeper: {what}: {source}")]
    ZooKeeper {
        what: String,
        source: zookeeper_client::Error,
    },
    /// The node's `cache_server_mapping` entry names another service than the one configured.
    #[error(
        "{path} maps this node to service {found:?}, not {wanted:?}: fix the mapping or \
         --service-code"
    )]
    MappedElsewhere {
        path: String,
        found: String,
        wanted: String,
    },
    /// A setting that cannot work (an empty service code, one with '/' ...).
    #[error("{0}")]
    Invalid(String),
}

impl ClusterError {
    pub(crate) fn zk(what: impl Into<String>) -> impl FnOnce(zookeeper_client::Error) -> Self {
        let what = what.into();
        move |source| ClusterError::ZooKeeper { what, source }
    }
}
