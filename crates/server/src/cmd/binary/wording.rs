//! The binary protocol's wording of the one write path's refusals and failures
//! ([`cairn_engine::WriteError`]): a status and a text, as the text protocol's
//! `SERVER_ERROR` lines say them (cmd/write_error.rs).
//!
//! ```text
//!   Store(TooLarge) ─> 0x0003 Too large.       Store(OutOfMemory) ─> 0x0082 Out of memory
//!   FlashRead ──────> 0x0086 flash read not done: <why>            (nothing changed; retry)
//!   LogFailed, NotPrimary, Replication, NotSafe ─> 0x0084 <the text line's words>
//! ```

use cairn_engine::WriteError;
use cairn_proto::binary::{response, Status};
use cairn_store::StoreError;

/// Appends the error response for `e`, answering the request `opcode`/`opaque`.
pub fn refusal(out: &mut Vec<u8>, opcode: u8, opaque: u32, e: &WriteError) {
    let (status, text) = match e {
        WriteError::Store(StoreError::TooLarge) => {
            (Status::TooLarge, Status::TooLarge.text().into())
        }
        WriteError::Store(StoreError::OutOfMemory) => {
            (Status::OutOfMemory, Status::OutOfMemory.text().into())
        }
        WriteError::FlashRead(why) => (
            Status::TemporaryFailure,
            format!("flash read not done: {why}"),
        ),
        WriteError::LogFailed(_) | WriteError::NotPrimary(_) => {
            (Status::InternalError, format!("writes refused: {e}"))
        }
        WriteError::Replication(why) => (Status::InternalError, format!("replication: {why}")),
        WriteError::NotSafe(_) => (
            Status::InternalError,
            "persistence failure: the write could not be made durable".into(),
        ),
    };
    response::error(
        out,
        opcode,
        opaque,
        status,
        &text.replace(['\r', '\n'], " "),
    );
}

/// The response written when the replies in hand cannot be made safe, before the connection
/// closes: it answers no one request, so it carries opcode 0 and opaque 0.
pub fn failure(out: &mut Vec<u8>, e: &WriteError) {
    refusal(out, 0, 0, e);
}

/// The reply to writes that cannot be acknowledged, in the protocol of the requests they
/// answer: [`failure`] for binary, the text protocol's error line otherwise.
pub fn failure_in(binary: bool, out: &mut Vec<u8>, e: &WriteError) {
    if binary {
        failure(out, e);
    } else {
        crate::cmd::write_error::reply(out, e);
    }
}

/// The status of a failed store.
pub fn store_error(e: StoreError) -> Status {
    match e {
        StoreError::TooLarge => Status::TooLarge,
        StoreError::OutOfMemory => Status::OutOfMemory,
    }
}
