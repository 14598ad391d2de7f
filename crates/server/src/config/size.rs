//! Sizes as the flags write them (`1048576`, `512k`, `1m`, `64g`), and memcached's
//! `ext_path` value, `PATH:SIZE`.

use std::path::PathBuf;

use super::error::ConfigError;

/// Parses `1048576`, `512k`, `1m`.
pub(super) fn parse_size(s: &str) -> Result<usize, String> {
    parse_size_u64(s).and_then(|n| usize::try_from(n).map_err(|_| format!("too large: {s}")))
}

/// Parses `1048576`, `512k`, `1m`, `64g` (and memcached's `64G`).
pub(super) fn parse_size_u64(s: &str) -> Result<u64, String> {
    let (digits, mult) = match s.as_bytes().last() {
        Some(b'k' | b'K') => (&s[..s.len() - 1], 1 << 10),
        Some(b'm' | b'M') => (&s[..s.len() - 1], 1 << 20),
        Some(b'g' | b'G') => (&s[..s.len() - 1], 1 << 30),
        Some(b't' | b'T') => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("not a size: {s}"))
}

/// Splits memcached's `ext_path` value, `PATH:SIZE`.
pub(super) fn parse_ext_path(v: &str) -> Result<(PathBuf, u64), ConfigError> {
    let bad = |why: String| ConfigError::Invalid {
        key: "ext_path",
        why,
    };
    let (path, size) = v
        .rsplit_once(':')
        .ok_or_else(|| bad(format!("{v}: expected PATH:SIZE, e.g. /ssd/cairn:64G")))?;
    if path.is_empty() {
        return Err(bad(format!("{v}: the path is empty")));
    }
    Ok((PathBuf::from(path), parse_size_u64(size).map_err(bad)?))
}
