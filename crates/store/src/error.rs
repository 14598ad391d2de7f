//! The store's one error enum: what a client's store can fail with.
//!
//! Non-goals: a broken invariant is a panic, not an error.

/// Errors of store operations that clients can cause.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StoreError {
    #[error("object too large for cache")]
    TooLarge,
    #[error("out of memory storing object")]
    OutOfMemory,
}
