//! A request that cannot be answered normally: the reply line it gets and how the stream
//! stays in step (what to skip, whether to close).

/// What kind of error line a bad request gets.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ErrorKind {
    /// `ERROR`: a nonexistent command name.
    #[error("ERROR")]
    UnknownCommand,
    /// `CLIENT_ERROR <why>`.
    #[error("CLIENT_ERROR {0}")]
    Client(&'static str),
    /// `SERVER_ERROR object too large for cache`.
    #[error("SERVER_ERROR object too large for cache")]
    TooLarge,
    /// Another reply line memcached uses for this error (`BADCLASS invalid class id`).
    #[error("{0}")]
    Reply(&'static str),
}

/// A request that cannot be answered normally. The caller sends `kind` as a line (unless
/// `silent`), drops `consumed` bytes of its buffer, then drops `swallow` more bytes as they
/// arrive (a data block that is refused but must be skipped), removes the key `forget` names,
/// and closes the connection if `close` is set.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kind}")]
pub struct ProtocolError {
    pub kind: ErrorKind,
    /// Bytes of the current buffer that belong to the bad request.
    pub consumed: usize,
    /// Further bytes beyond `consumed` that belong to it (possibly not received yet).
    pub swallow: usize,
    /// The stream cannot be resynchronised: reply, then close.
    pub close: bool,
    /// The request asked for `noreply` and memcached stays silent for this error (or the
    /// connection closes without a word).
    pub silent: bool,
    /// A `set` refused as too large: memcached removes the key's old value rather than leave
    /// stale data behind, and so does the caller.
    pub forget: Option<Vec<u8>>,
}

impl ProtocolError {
    pub(crate) fn new(kind: ErrorKind, consumed: usize) -> Self {
        ProtocolError {
            kind,
            consumed,
            swallow: 0,
            close: false,
            silent: false,
            forget: None,
        }
    }

    pub(crate) fn client(why: &'static str, consumed: usize) -> Self {
        ProtocolError::new(ErrorKind::Client(why), consumed)
    }

    pub(crate) fn unknown(consumed: usize) -> Self {
        ProtocolError::new(ErrorKind::UnknownCommand, consumed)
    }

    /// Close the connection without a reply (a line over the limit, an HTTP request).
    pub(crate) fn hang_up(why: &'static str, consumed: usize) -> Self {
        ProtocolError {
            close: true,
            silent: true,
            ..ProtocolError::client(why, consumed)
        }
    }

    /// The same error, not answered when `noreply` is set.
    pub(crate) fn quiet_if(self, noreply: bool) -> Self {
        ProtocolError {
            silent: self.silent || noreply,
            ..self
        }
    }

    /// The line the server answers with, without `\r\n`.
    pub fn reply_line(&self) -> String {
        self.kind.to_string()
    }
}
