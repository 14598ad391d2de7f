//! The subcommand from the first argument: `suite` (then the scenario set by name), `grpc`, or
//! else one memtier-style run; each parses the rest of the command line with its own flags and
//! any error it returns ends the process with status 1, after `cairn-bench[ SUBCOMMAND]: why`.
//!
//! ```text
//!   argv[1] = suite ─> SuiteArgs ─> suite::arcus::run | suite::flash::run
//!           = grpc  ─> GrpcArgs  ─> grpc::main
//!           else    ─> RunArgs   ─> memtier::main
//! ```
//!
//! Non-goals: clap subcommands; the memtier-style flags stay at the top level, as
//! memtier_benchmark has them.

use std::process::ExitCode;

use clap::Parser;

use crate::grpc;
use crate::memtier::{self, RunArgs};
use crate::suite;

/// Runs the command line's subcommand and returns the process's exit status.
pub fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("suite") {
        let suite_args = suite::SuiteArgs::parse_from(
            std::iter::once("cairn-bench suite".to_string()).chain(args.into_iter().skip(2)),
        );
        let run = match suite_args.scenario.as_str() {
            "flash" => suite::flash::run,
            "arcus" => suite::arcus::run,
            other => {
                eprintln!("cairn-bench suite: unknown scenario set {other:?} (try arcus or flash)");
                return ExitCode::from(1);
            }
        };
        return match run(&suite_args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("cairn-bench suite: {e}");
                ExitCode::from(1)
            }
        };
    }
    if args.get(1).map(String::as_str) == Some("grpc") {
        let grpc_args = grpc::GrpcArgs::parse_from(
            std::iter::once("cairn-bench grpc".to_string()).chain(args.into_iter().skip(2)),
        );
        return match grpc::main(&grpc_args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("cairn-bench grpc: {e}");
                ExitCode::from(1)
            }
        };
    }
    let a = RunArgs::parse();
    let result = memtier::main(&a);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cairn-bench: {e}");
            ExitCode::from(1)
        }
    }
}
