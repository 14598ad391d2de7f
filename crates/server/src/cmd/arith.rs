//! incr and decr: the value is a decimal u64; incr wraps at 2^64, decr stops at 0.

use cairn_proto::encode;

use crate::stats::bump;
use crate::Ctx;

/// Why an arithmetic command did not produce a number.
#[derive(Debug, PartialEq, Eq)]
pub enum ArithError {
    NotFound,
    NonNumeric,
    Store(cairn_store::StoreError),
}

/// Parses an item's value as memcached does: digits, optionally space-padded after a decr.
pub fn parse_counter(value: &[u8]) -> Option<u64> {
    let digits = value.strip_suffix(b" ").map_or(value, |_| {
        let end = value.iter().rposition(|&b| b != b' ').map_or(0, |i| i + 1);
        &value[..end]
    });
    if digits.is_empty() || digits.len() > 20 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// Applies `delta` to a counter value.
pub fn apply(current: u64, incr: bool, delta: u64) -> u64 {
    if incr {
        current.wrapping_add(delta)
    } else {
        current.saturating_sub(delta)
    }
}

/// incr/decr on the text protocol: appends the new value or the error line.
pub fn arith(ctx: &Ctx, incr: bool, key: &[u8], delta: u64, now: u32, out: &mut Vec<u8>) {
    let c = &ctx.counters;
    let result = ctx.store.entry(key, now, |e| {
        let Some(item) = e.item() else {
            return Err(ArithError::NotFound);
        };
        let current = parse_counter(&item.value).ok_or(ArithError::NonNumeric)?;
        let next = apply(current, incr, delta);
        let mut text = Vec::with_capacity(20);
        encode::decimal(&mut text, next);
        e.store(&[&text], item.meta.flags, item.meta.exptime, None)
            .map_err(ArithError::Store)?;
        Ok(next)
    });
    match result {
        Ok(n) => {
            bump(if incr { &c.incr_hits } else { &c.decr_hits });
            encode::decimal(out, n);
            out.extend_from_slice(b"\r\n");
        }
        Err(ArithError::NotFound) => {
            bump(if incr { &c.incr_misses } else { &c.decr_misses });
            out.extend_from_slice(b"NOT_FOUND\r\n");
        }
        Err(ArithError::NonNumeric) => out
            .extend_from_slice(b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"),
        Err(ArithError::Store(e)) => out.extend_from_slice(super::storage::store_error(ctx, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_rules() {
        assert_eq!(parse_counter(b"42"), Some(42));
        assert_eq!(parse_counter(b"9  "), Some(9));
        assert_eq!(parse_counter(b"x1"), None);
        assert_eq!(parse_counter(b""), None);
        assert_eq!(parse_counter(b"18446744073709551616"), None);
        assert_eq!(apply(u64::MAX, true, 2), 1);
        assert_eq!(apply(3, false, 5), 0);
    }
}
