//! What the connection does after a request ([`Flow`]), and the end of a connection that a
//! command found ([`Closed`]).
//!
//! Non-goals: the connection's loop (crate::connection).

/// What the connection does after a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// `quit`: flush what is buffered and close.
    Close,
    /// The request was refused before it ran (a write the engine did not admit, or whose
    /// item could not be read from flash): answered, not timed, and the connection goes on.
    Refused,
}

/// The connection is gone: its socket failed, or replies could not be made safe and the
/// connection was closed after saying so.
#[derive(Debug)]
pub struct Closed;
