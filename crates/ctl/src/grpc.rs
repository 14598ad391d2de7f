//! The gRPC channel to `--endpoint`, opened eagerly so that a server that is not there is
//! reported at once, naming the address and the flag, rather than as the first call's status.
//!
//! Non-goals: TLS (cairnctl speaks plaintext gRPC, as `grpcurl -plaintext` does).

use std::time::Duration;

use tonic::transport::{Channel, Endpoint};

use crate::error::{CtlError, Port, Result};

/// How long a connection may take before the server counts as unreachable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a unary call may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The endpoint for `addr` (`HOST:PORT`, or a URI with its scheme).
pub fn endpoint(addr: &str) -> Result<Endpoint> {
    let uri = if addr.contains("://") {
        addr.to_string()
    } else {
        format!("http://{addr}")
    };
    Endpoint::from_shared(uri)
        .map(|e| e.connect_timeout(CONNECT_TIMEOUT).tcp_nodelay(true))
        .map_err(|e| CtlError::Usage(format!("--endpoint {addr:?} is not an address: {e}")))
}

/// A connected channel, or [`CtlError::Unreachable`].
pub async fn connect(addr: &str) -> Result<Channel> {
    endpoint(addr)?
        .timeout(CALL_TIMEOUT)
        .connect()
        .await
        .map_err(|e| unreachable(addr, &e))
}

/// The transport error of a failed connection, with its causes (tonic's own message is only
/// "transport error").
pub fn unreachable(addr: &str, e: &(dyn std::error::Error + 'static)) -> CtlError {
    CtlError::Unreachable {
        port: Port::Grpc,
        addr: addr.to_string(),
        why: causes(e),
    }
}

/// An error and its causes, each said once.
pub fn causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut why = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        // hyper and tonic repeat their cause's words: keep each once.
        if !why.contains(&text) {
            why.push_str(": ");
            why.push_str(&text);
        }
        source = s.source();
    }
    why
}
