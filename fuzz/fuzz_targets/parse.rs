//! Bytes from a client, parsed the way a connection does (see cairn_fuzz_checks::parse).
//! The check is shared with the stable tests in crates/fuzz-checks, which CI runs.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cairn_fuzz_checks::parse::check(data));
