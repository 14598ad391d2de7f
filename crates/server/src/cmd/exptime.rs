//! memcached's expiry rule, as every command that takes an expiration time reads it.
//!
//! ```text
//!   0 ─> never    1..=30 days ─> now + that    larger ─> that unix time    negative ─> at once
//! ```
//!
//! Non-goals: the gRPC API's rule (relative seconds or an absolute time, in separate fields).

/// memcached's expiry rule: 0 never; up to 30 days relative; larger is an absolute unix time;
/// negative (or an absolute time already past) is expired at once. Returns absolute seconds.
pub fn absolute_exptime(exptime: i64, now: u32) -> u32 {
    const MAX_RELATIVE: i64 = 60 * 60 * 24 * 30;
    match exptime {
        0 => 0,
        e if e < 0 => 1,
        e if e > MAX_RELATIVE => u32::try_from(e).unwrap_or(u32::MAX).max(1),
        e => now.saturating_add(e as u32),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exptime_rules() {
        let now = 1_700_000_000;
        assert_eq!(absolute_exptime(0, now), 0);
        assert_eq!(absolute_exptime(-5, now), 1);
        assert_eq!(absolute_exptime(10, now), now + 10);
        assert_eq!(absolute_exptime(2_592_000, now), now + 2_592_000);
        assert_eq!(absolute_exptime(2_592_001, now), 2_592_001);
        assert_eq!(absolute_exptime(1_800_000_000, now), 1_800_000_000);
    }
}
