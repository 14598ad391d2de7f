//! A command-log record payload into the decoder (see cairn_fuzz_checks::record_decode).
//! The check is shared with the stable tests in crates/fuzz-checks, which CI runs.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cairn_fuzz_checks::record_decode::check(data));
