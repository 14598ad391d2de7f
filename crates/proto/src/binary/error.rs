//! A binary request that cannot be answered normally: the error response it gets and how the
//! stream stays in step (what to skip, whether to close).

use super::response::Status;

/// A bad binary request. The caller answers `status` with `text` as the value (echoing
/// `opcode` and `opaque`), drops `consumed` bytes, then `swallow` more as they arrive,
/// removes the key `forget` names (a set refused as too large leaves no stale value), and
/// closes the connection if `close` is set.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("binary protocol: {text} (status {status:?}, opcode 0x{opcode:02x})")]
pub struct BinError<'a> {
    pub opcode: u8,
    pub opaque: u32,
    pub status: Status,
    pub text: &'static str,
    /// Bytes of the buffer that belong to the bad request.
    pub consumed: usize,
    /// Further bytes beyond `consumed` that belong to it (a refused value, perhaps not
    /// received yet).
    pub swallow: usize,
    /// The stream cannot be resynchronised (or memcached closes here): answer, then close.
    pub close: bool,
    pub forget: Option<&'a [u8]>,
}

impl<'a> BinError<'a> {
    /// An error with memcached's text for `status`, answered and stepped over.
    pub(crate) fn new(opcode: u8, opaque: u32, status: Status, consumed: usize) -> Self {
        BinError {
            opcode,
            opaque,
            status,
            text: status.text(),
            consumed,
            swallow: 0,
            close: false,
            forget: None,
        }
    }

    /// The same error with its own text.
    pub(crate) fn saying(self, text: &'static str) -> Self {
        BinError { text, ..self }
    }

    /// The same error, after which the connection closes.
    pub(crate) fn closing(self) -> Self {
        BinError {
            close: true,
            ..self
        }
    }
}
