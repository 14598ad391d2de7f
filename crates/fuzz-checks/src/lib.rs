//! cairn-fuzz-checks: what each fuzz target checks, as plain functions of the input bytes.
//!
//! ```text
//!   fuzz/fuzz_targets/<target>.rs  ── libFuzzer (nightly flags, cargo fuzz) ──┐
//!                                                                             ├─> <target>::check(&[u8])
//!   tests/corpus.rs (stable, cargo test): fuzz/seeds/<target>/*,              │   panics on a broken
//!     then a bounded random run of mutated seeds ──────────────────────────────┘   invariant
//! ```
//!
//! The targets and the checks are the same code, so CI exercises every invariant on every run
//! without nightly or libFuzzer; the long runs stay with `cargo fuzz` (fuzz/README.md).

mod limits;
pub mod parse;
pub mod parse_invariants;
pub mod record_decode;

pub use limits::TINY;

/// A fuzz target: its name (`fuzz/fuzz_targets/<name>.rs`), its seed corpus
/// (`fuzz/seeds/<seeds>`), whether the protocol dictionary (`fuzz/proto.dict`) suits it, and its
/// check.
pub struct Target {
    pub name: &'static str,
    pub seeds: &'static str,
    pub protocol_dict: bool,
    pub check: fn(&[u8]),
}

/// Every fuzz target.
pub const TARGETS: &[Target] = &[
    Target {
        name: "parse",
        seeds: "parse",
        protocol_dict: true,
        check: parse::check,
    },
    Target {
        name: "parse_invariants",
        seeds: "parse",
        protocol_dict: true,
        check: parse_invariants::check,
    },
    Target {
        name: "record_decode",
        seeds: "record_decode",
        protocol_dict: false,
        check: record_decode::check,
    },
];
