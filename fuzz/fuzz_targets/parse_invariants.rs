//! Invariants of every request the parser accepts (see cairn_fuzz_checks::parse_invariants).
//! The check is shared with the stable tests in crates/fuzz-checks, which CI runs.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cairn_fuzz_checks::parse_invariants::check(data));
