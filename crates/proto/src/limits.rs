//! The limits checked before anything is allocated for a request, and the key rule.

/// Limits checked before allocating anything for a request.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Longest key in bytes (memcached: 250).
    pub max_key_len: usize,
    /// Largest data block of a storage command (memcached `-I`, default 1 MiB).
    pub max_value_len: usize,
    /// Longest command line without its data block, except retrieval lines (memcached: 2048).
    pub max_line_len: usize,
    /// Most keys one get/gets/gat/gats line may name (the line is also capped at
    /// [`MAX_RETRIEVAL_LINE`] bytes).
    pub max_keys_per_get: usize,
}

/// Longest get/gets/gat/gats line: memcached reads multi-get lines of any length; cairn holds one
/// line of up to 16 MiB in memory (hundreds of thousands of keys), then answers it key by key.
pub const MAX_RETRIEVAL_LINE: usize = 16 << 20;

/// Longest data block memcached reads: a length above `i32::MAX - 2` is a malformed command
/// (`CLIENT_ERROR bad command line format`), not an item too large.
pub const MAX_DATA_LEN: usize = i32::MAX as usize - 2;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_key_len: 250,
            max_value_len: 1 << 20,
            max_line_len: 2048,
            max_keys_per_get: 1_000_000,
        }
    }
}

impl Limits {
    /// Longest retrieval line: every key at full length plus separators, at most
    /// [`MAX_RETRIEVAL_LINE`].
    pub fn max_get_line_len(&self) -> usize {
        self.max_keys_per_get
            .saturating_mul(self.max_key_len + 1)
            .saturating_add(self.max_line_len)
            .min(MAX_RETRIEVAL_LINE)
    }
}

/// Checks a key as memcached's text protocol does: 1..=max bytes, any byte but a space (the
/// word separator), a newline (the line's end, so no text line can carry one) and NUL.
/// memcached's tokenizer splits on spaces only, so tabs, other control bytes (memaslap's keys
/// start with eight 0x10 bytes), DEL and bytes over 0x7f are key bytes; a NUL ends memcached's
/// C string, so the rest of its line is lost, and cairn refuses the key instead
/// (`CLIENT_ERROR bad command line format`, skipping a storage command's data block). gRPC
/// keys follow the same rule, so every key is reachable from both protocols.
pub fn key_is_valid(key: &[u8], limits: &Limits) -> bool {
    !key.is_empty()
        && key.len() <= limits.max_key_len
        && !key.iter().any(|&b| matches!(b, b' ' | b'\n' | 0))
}
