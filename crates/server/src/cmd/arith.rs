//! incr and decr: the value is a decimal u64; incr wraps at 2^64, decr stops at 0.
//!
//! ARCUS's form `incr|decr <key> <delta> <flags> <exptime> <initial>` creates a missing key
//! holding `<initial>` with those flags and expiration time, and answers `<initial>` (the
//! delta is not applied to it), as arcus-memcached's `item_arithmetic` does; an existing key
//! is changed as by the plain form, keeping its own flags and expiration time.

use cairn_engine::Tx;
use cairn_proto::{encode, ArithCreate};

use super::exptime::absolute_exptime;
use crate::stats::bump;
use crate::Ctx;

/// Why an arithmetic command did not produce a number.
#[derive(Debug, PartialEq, Eq)]
pub enum ArithError {
    NotFound,
    NonNumeric,
    Store(cairn_store::StoreError),
}

/// Parses an item's value as memcached does (`safe_strtoull` over the item's data, which ends in
/// `\r\n`): optional leading whitespace, an optional sign, decimal digits that fit in 64 bits,
/// then the end, whitespace or NUL. So `" 9"`, `"+5"`, `"05"` and the space-padded `"9  "` a
/// decr leaves in memcached are numbers; `"1a"`, `"-5"` and `""` are not (`"-0"` is 0, as in C).
pub fn parse_counter(value: &[u8]) -> Option<u64> {
    let is_space = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r');
    let start = value.iter().position(|&b| !is_space(b))?;
    let (negative, rest) = match value[start..].split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, &value[start..]),
    };
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || rest.get(digits).is_some_and(|&b| !is_space(b) && b != 0) {
        return None;
    }
    let n = rest[..digits].iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })?;
    if !negative {
        return Some(n);
    }
    // strtoull negates; memcached refuses the result only when it looks negative as signed.
    let n = n.wrapping_neg();
    (i64::try_from(n).is_ok()).then_some(n)
}

/// Applies `delta` to a counter value.
pub fn apply(current: u64, incr: bool, delta: u64) -> u64 {
    if incr {
        current.wrapping_add(delta)
    } else {
        current.saturating_sub(delta)
    }
}

/// incr/decr on the text protocol: appends the new value or the error line. With `create`
/// (ARCUS's form) a missing key is created holding its initial value, counted as a hit (as
/// ARCUS counts it).
#[allow(clippy::too_many_arguments)]
pub fn arith(
    ctx: &Ctx,
    tx: &Tx<'_>,
    incr: bool,
    key: &[u8],
    delta: u64,
    create: Option<ArithCreate>,
    now: u32,
    out: &mut Vec<u8>,
) {
    let c = &ctx.counters;
    let result = tx.entry(key, now, |e| {
        let Some(item) = e.item() else {
            let Some(create) = create else {
                return Err(ArithError::NotFound);
            };
            let mut text = Vec::with_capacity(20);
            encode::decimal(&mut text, create.initial);
            let exptime = absolute_exptime(create.exptime, now);
            e.store(&[&text], create.flags, exptime, None)
                .map_err(ArithError::Store)?;
            return Ok(create.initial);
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
        // memcached 1.6.18, side by side: what its safe_strtoull reads as a number.
        for (value, n) in [
            (&b" 9"[..], 9),
            (b"+5", 5),
            (b"05", 5),
            (b"\t7\n", 7),
            (b"5 x", 5),
            (b"-0", 0),
            (b"000000000000000000000000005", 5),
            (b"18446744073709551615", u64::MAX),
        ] {
            assert_eq!(parse_counter(value), Some(n), "{value:?}");
        }
        for value in [
            &b"-5"[..],
            b"1a",
            b"  ",
            b"+",
            b"- 5",
            b"184467440737095516150",
        ] {
            assert_eq!(parse_counter(value), None, "{value:?}");
        }
        assert_eq!(apply(u64::MAX, true, 2), 1);
        assert_eq!(apply(3, false, 5), 0);
    }
}
