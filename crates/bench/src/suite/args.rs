//! The flags of `cairn-bench suite`, one struct for every scenario set (arcus reads the
//! common ones, flash some more of its own). The `///` lines are the `--help` text.
//!
//! Non-goals: checking the flags against one another (each scenario set does).

use std::path::PathBuf;

use clap::Parser;

// No doc line on the struct: clap would print it as the subcommand's about text. The same for
// the fields: their `///` lines are the --help text, and a `//` line is for readers only.
#[derive(Clone, Debug, Parser)]
pub struct SuiteArgs {
    /// The scenario set: `arcus`, or `flash` (the fatcache seed's F1-F6, see flash.rs).
    #[arg(default_value = "arcus")]
    pub scenario: String,
    /// Keys inserted and then read (memtier-1 .. memtier-N).
    #[arg(long, default_value_t = 1_000_000)]
    pub keys: u64,
    /// Seconds per timed phase.
    #[arg(long, default_value_t = 15)]
    pub phase_secs: u64,
    // Load generator threads, and connections per thread (memtier's --threads, --clients).
    #[arg(long, default_value_t = 2)]
    pub threads: u64,
    #[arg(long, default_value_t = 25)]
    pub clients: u64,
    // Value size in bytes.
    #[arg(long, default_value_t = 50)]
    pub data_size: usize,
    /// The cairn binary to start.
    #[arg(long, default_value = "target/release/cairn")]
    pub cairn_bin: PathBuf,
    /// Another cairn build to measure beside it, as LABEL=PATH (repeatable): each of
    /// `--cairn-modes` also runs on it, named `cairn MODE [LABEL]` (A/B of a change).
    #[arg(long, value_parser = parse_alt)]
    pub cairn_alt: Vec<(String, PathBuf)>,
    /// Requests in flight per connection (memtier's --pipeline).
    #[arg(long, default_value_t = 1)]
    pub pipeline: usize,
    /// cairn modes to measure (comma separated: off, async, sync; empty for none).
    #[arg(long, default_value = "off,async,sync")]
    pub cairn_modes: String,
    /// Redis AOF modes to measure (none, everysec, always; empty for none).
    #[arg(long, default_value = "none,everysec,always")]
    pub redis_modes: String,
    /// Skip memcached.
    #[arg(long)]
    pub no_memcached: bool,
    /// A server this suite does not start: HOST:PORT:PROTOCOL (repeatable).
    #[arg(long)]
    pub target: Vec<String>,
    /// Where the table, JSON and charts go.
    #[arg(long, default_value = "bench-out")]
    pub out_dir: PathBuf,
    /// Run every target this many times, alternating, and report medians.
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// Checkpoint cairn (async/sync) in the middle of the mixed 1:9 phase.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub checkpoint_mid_phase: bool,
    /// After the last phase, kill cairn (async/sync) with SIGKILL, start it again on the same
    /// data directory and report how long recovery took.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub recovery: bool,
    // No progress lines.
    #[arg(long)]
    pub quiet: bool,
    /// `flash`: the RAM limit (-m, MiB) of cairn with flash and of memcached with extstore.
    #[arg(long, default_value_t = 256)]
    pub ram_mb: u64,
    /// `flash`: where the flash files go (default: the output folder); not tmpfs.
    #[arg(long)]
    pub flash_dir: Option<PathBuf>,
    /// `flash`: `all` (F1-F6 side by side), `reads` (F2 and F3 alone, cairn beside
    /// extstore and fio: flash-reads-results.{md,json}), or `f5` (the
    /// kill -9 check alone, for work on recovery: its table and JSON go to
    /// flash-f5-results.{md,json}), or `reads-ab` (F2 and F3 of `--cairn-bin` against each
    /// `--cairn-alt` build, `--repeat` alternating rounds with fio in each, medians:
    /// flash-reads-ab-results.{md,json}).
    #[arg(long, default_value = "all")]
    pub flash_phases: String,
    /// `flash`, F5: insert the keys in this many parts, each in a hold of `--lock-file` of
    /// its own (the server idles between them), so that a large F5 never holds the bench
    /// lock for long; the kill, restart and check of every key are one more hold.
    #[arg(long, default_value_t = 1)]
    pub f5_insert_holds: u64,
    /// `flash`, F5: a lock file (the one every benchmark on the machine takes) taken with
    /// flock for each part of F5 (see `--f5-insert-holds`) instead of around the whole run.
    #[arg(long)]
    pub lock_file: Option<PathBuf>,
}

fn parse_alt(s: &str) -> Result<(String, PathBuf), String> {
    let (label, path) = s
        .split_once('=')
        .ok_or_else(|| format!("--cairn-alt {s:?}: expected LABEL=PATH"))?;
    Ok((label.to_string(), PathBuf::from(path)))
}
