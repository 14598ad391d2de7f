//! The protocol limits the fuzz checks parse under.

use cairn_proto::Limits;

/// Limits small enough that short inputs reach every limit's edge.
pub const TINY: Limits = Limits {
    max_key_len: 8,
    max_value_len: 16,
    max_line_len: 32,
    max_keys_per_get: 3,
};
