//! The memcached wording of the one write path's refusals and failures
//! ([`cairn_engine::WriteError`]): the lines clients and tests match on.
//!
//! ```text
//!   LogFailed, NotPrimary ─> SERVER_ERROR writes refused: <why>        (nothing changed)
//!   FlashRead ────────────> SERVER_ERROR flash read not done: <why>    (nothing changed)
//!   Store ────────────────> SERVER_ERROR object too large for cache | out of memory storing object
//!   Replication ──────────> SERVER_ERROR replication: <why>            (then the connection closes)
//!   NotSafe ──────────────> SERVER_ERROR persistence failure: the write could not be made
//!                           durable                                    (then it closes)
//! ```
//!
//! Non-goals: the gRPC wording (crates/grpc's kv.rs).

use cairn_engine::WriteError;

/// The reply when writes cannot be made safe; the connection is closed after it.
pub const NOT_SAFE: &[u8] =
    b"SERVER_ERROR persistence failure: the write could not be made durable\r\n";

/// Appends the reply line for `e`.
pub fn reply(out: &mut Vec<u8>, e: &WriteError) {
    match e {
        WriteError::LogFailed(_) | WriteError::NotPrimary(_) => {
            server_error(out, "writes refused: ", &e.to_string())
        }
        // The item may still be on flash: the command must not run as if its key were
        // absent. Nothing changed; the client may retry.
        WriteError::FlashRead(why) => server_error(out, "flash read not done: ", &why.to_string()),
        WriteError::Store(cairn_store::StoreError::TooLarge) => {
            out.extend_from_slice(super::storage::TOO_LARGE)
        }
        WriteError::Store(cairn_store::StoreError::OutOfMemory) => {
            out.extend_from_slice(super::storage::NO_MEMORY)
        }
        // Safe here, but sync replication found no replica holding it in time.
        WriteError::Replication(why) => server_error(out, "replication: ", why),
        WriteError::NotSafe(_) => out.extend_from_slice(NOT_SAFE),
    }
}

/// Appends `SERVER_ERROR <head><why>`, `why` kept to one line.
fn server_error(out: &mut Vec<u8>, head: &str, why: &str) {
    out.extend_from_slice(b"SERVER_ERROR ");
    out.extend_from_slice(head.as_bytes());
    out.extend_from_slice(why.replace(['\r', '\n'], " ").as_bytes());
    out.extend_from_slice(b"\r\n");
}
