//! The words of a line and the numbers and data blocks in them, shared by the text, meta and
//! ARCUS parsers.

use crate::error::{ErrorKind, ProtocolError};
use crate::limits::MAX_DATA_LEN;

/// Splits one line into words on spaces (memcached's tokenizer), ignoring empty words.
pub(crate) fn words(line: &[u8]) -> impl Iterator<Item = &[u8]> {
    line.split(|&b| b == b' ').filter(|w| !w.is_empty())
}

/// Finds the end of the first line: (line without `\r\n`, bytes including the terminator).
pub(crate) fn find_line(buf: &[u8]) -> Option<(&[u8], usize)> {
    let nl = buf.iter().position(|&b| b == b'\n')?;
    let line = if nl > 0 && buf[nl - 1] == b'\r' {
        &buf[..nl - 1]
    } else {
        &buf[..nl]
    };
    Some((line, nl + 1))
}

/// Decimal digits only (leading zeros allowed, as C's strtoul reads them); None past 64 bits.
pub(crate) fn digits_u64(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &d| {
        if !d.is_ascii_digit() {
            return None;
        }
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// An unsigned decimal as memcached's `safe_strtoull` reads a word: digits, with an optional
/// `+` (`incr k +1`, `set k +5 0 1` are memcached's too).
pub(crate) fn parse_u64(word: &[u8]) -> Option<u64> {
    digits_u64(word.strip_prefix(b"+").unwrap_or(word))
}

pub(crate) fn parse_u32(word: &[u8]) -> Option<u32> {
    parse_u64(word).and_then(|v| u32::try_from(v).ok())
}

/// A signed decimal as memcached's `safe_strtol` reads it (32-bit range).
pub(crate) fn parse_i64(word: &[u8]) -> Option<i64> {
    let (neg, digits) = match word.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, word),
    };
    let v = digits_u64(digits)?;
    let v = i64::try_from(v).ok()?;
    let v = if neg { -v } else { v };
    (i64::from(i32::MIN)..=i64::from(i32::MAX))
        .contains(&v)
        .then_some(v)
}

/// The data length of a storage command: 0..=[`MAX_DATA_LEN`], as memcached reads it.
pub(crate) fn data_len(word: &[u8]) -> Option<usize> {
    let len = usize::try_from(parse_i64(word)?).ok()?;
    (len <= MAX_DATA_LEN).then_some(len)
}

/// Checks that a data block of `len` bytes plus `\r\n` follows the line, or asks for more.
/// Returns the value and the total bytes consumed.
pub(crate) fn data_block(
    buf: &[u8],
    line_len: usize,
    len: usize,
) -> Result<Option<(&[u8], usize)>, ProtocolError> {
    let total = line_len + len + 2;
    if buf.len() < total {
        return Ok(None);
    }
    if &buf[line_len + len..total] != b"\r\n" {
        return Err(ProtocolError::client("bad data chunk", total));
    }
    Ok(Some((&buf[line_len..line_len + len], total)))
}

/// The error for a data block that is refused before it is read: skip it as it arrives.
pub(crate) fn refuse_block(kind: ErrorKind, line_len: usize, len: usize) -> ProtocolError {
    ProtocolError {
        swallow: len + 2,
        ..ProtocolError::new(kind, line_len)
    }
}
