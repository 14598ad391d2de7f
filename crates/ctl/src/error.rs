//! cairnctl's one error type: every failure a command can end with, each worded for the
//! operator who reads it (what failed, at which address, and what to change), and all of
//! them exit code 1.
//!
//! Non-goals: retrying (the watch decides which errors it survives, `watch.rs`).

use std::fmt;

/// Which of cairn's two ports an address is, and the flag that names another one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Port {
    /// The gRPC API (`--endpoint`).
    Grpc,
    /// The memcached protocol (`--memcached`): stats and admin lines.
    Memcached,
    /// ZooKeeper (`--zookeeper`).
    ZooKeeper,
}

impl Port {
    pub fn flag(self) -> &'static str {
        match self {
            Port::Grpc => "--endpoint",
            Port::Memcached => "--memcached",
            Port::ZooKeeper => "--zookeeper",
        }
    }

    pub fn what(self) -> &'static str {
        match self {
            Port::Grpc => "cairn's gRPC API",
            Port::Memcached => "cairn's memcached port",
            Port::ZooKeeper => "ZooKeeper",
        }
    }
}

impl fmt::Display for Port {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.what())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    /// Nothing answers at the address (refused, timed out, no such host).
    #[error("cannot reach {port} at {addr}: {why} (is the server running? {flag} HOST:PORT names another address)", flag = port.flag())]
    Unreachable {
        port: Port,
        addr: String,
        why: String,
    },
    /// The server answered with a refusal of this command (an admin line without
    /// `--enable-admin`, a write on a replica, ...): its own words.
    #[error("the server at {addr} refused: {reply}")]
    Refused { addr: String, reply: String },
    /// A key the server would refuse, caught before sending.
    #[error("{0}")]
    BadKey(String),
    /// A key that does not exist (get, delete, touch).
    #[error("no such key: {0}")]
    NotFound(String),
    /// A gRPC call failed with a status other than the ones above.
    #[error("{call} failed: {code}: {message}")]
    Status {
        call: &'static str,
        code: String,
        message: String,
    },
    /// The watch's history is gone: the server no longer holds the revision it needs.
    #[error(
        "the watch needs revision {needed}, but the server's history starts at \
         {compact_revision} now (it was compacted): rerun with --relist to list the prefix \
         again and go on, or with --from-revision {compact_revision} to accept the gap"
    )]
    Compacted { needed: u64, compact_revision: u64 },
    /// The server's history ends before what the watch has already seen (it restarted without
    /// persistence): its revisions are not the ones this watch followed.
    #[error(
        "the watch needs revision {needed}, which is in the server's future ({reason}): it lost \
         its history (a restart without persistence?); rerun with --relist to list the prefix \
         again and go on"
    )]
    FutureRevision { needed: u64, reason: String },
    /// The server ended the watch for another reason (a bad request).
    #[error("the server canceled the watch: {0}")]
    WatchCanceled(String),
    /// The watch could not reconnect within `--reconnect-deadline`.
    #[error("the watch could not reconnect to {addr} for {secs} s (--reconnect-deadline)")]
    GaveUp { addr: String, secs: f64 },
    /// A reply that is not what the protocol says.
    #[error("unexpected reply from {addr}: {reply}")]
    Protocol { addr: String, reply: String },
    /// A bad argument (hex or base64 that does not decode, ...).
    #[error("{0}")]
    Usage(String),
    /// `health` found a port that does not answer as it should.
    #[error("unhealthy: {0}")]
    Unhealthy(String),
    /// ZooKeeper answered with an error.
    #[error("ZooKeeper: {0}")]
    ZooKeeper(String),
    /// Writing the output failed (other than a closed pipe, which ends quietly).
    #[error("writing the output: {0}")]
    Output(std::io::Error),
}

impl CtlError {
    /// A gRPC status as the error of `call` at `addr`: an unreachable server, a refusal,
    /// a missing key, or the status itself.
    pub fn from_status(
        call: &'static str,
        addr: &str,
        key: Option<&str>,
        s: tonic::Status,
    ) -> Self {
        use tonic::Code;
        match s.code() {
            _ if transport_failure(&s) => CtlError::Unreachable {
                port: Port::Grpc,
                addr: addr.to_string(),
                why: s.message().to_string(),
            },
            Code::NotFound if key.is_some() => CtlError::NotFound(key.unwrap_or("").to_string()),
            Code::Unavailable | Code::FailedPrecondition | Code::AlreadyExists => {
                CtlError::Refused {
                    addr: addr.to_string(),
                    reply: format!("{:?}: {}", s.code(), s.message()),
                }
            }
            code => CtlError::Status {
                call,
                code: format!("{code:?}"),
                message: s.message().to_string(),
            },
        }
    }
}

/// Whether a status is the transport's (the connection failed or broke) rather than an answer
/// the server sent: tonic keeps the transport's error as the status's source, and a status
/// decoded from the server's reply has none.
pub fn transport_failure(s: &tonic::Status) -> bool {
    std::error::Error::source(s).is_some()
}

pub type Result<T> = std::result::Result<T, CtlError>;
