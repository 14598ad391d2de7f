//! What a watch looks at: the keys it covers ([`KeyRange`]) and the kinds of event it leaves
//! out ([`Filters`]).
//!
//! ```text
//!   event ── Put: !no_put && range.matches(key)
//!          ── Delete: !no_delete && range.matches(key)      ──> sent (crate::cursor)
//!          ── Flush: !no_delete (every key)
//! ```
//!
//! Non-goals: reading these from a request (the adapter, crates/grpc's watch.rs, parses them
//! and says why a request names none).

use bytes::Bytes;

/// The keys a watch covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyRange {
    /// This one key.
    Key(Bytes),
    /// Every key that starts with these bytes (every key, when empty).
    Prefix(Bytes),
    /// [start, end); None = every key >= start.
    Range(Bytes, Option<Bytes>),
}

impl KeyRange {
    /// Whether `key` is in the range.
    pub fn matches(&self, key: &[u8]) -> bool {
        match self {
            KeyRange::Key(k) => key == &k[..],
            KeyRange::Prefix(p) => key.starts_with(p),
            KeyRange::Range(start, end) => {
                key >= &start[..] && end.as_ref().is_none_or(|e| key < &e[..])
            }
        }
    }
}

/// The kinds of event a watch leaves out (etcd's NOPUT and NODELETE filters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Filters {
    /// No Put events.
    pub no_put: bool,
    /// No Delete events, and no Flush.
    pub no_delete: bool,
}
