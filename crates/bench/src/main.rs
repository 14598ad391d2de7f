//! `cairn-bench`: a load generator with memtier_benchmark's option names, `cairn-bench suite
//! arcus`, which reruns the ARCUS seed's scenarios against cairn, memcached and Redis side by
//! side, `cairn-bench suite flash`, the fatcache seed's F1-F6 beside memcached's extstore and
//! fio, and `cairn-bench grpc`, unary load on cairn's gRPC API.
//!
//! ```text
//!   cairn-bench -s 127.0.0.1 -p 11211 --threads=2 --clients=25 --data-size=50 \
//!       --key-pattern=R:R --key-minimum=1 --key-maximum=1000000 --ratio=1:9 --test-time=15
//!   cairn-bench suite arcus --keys 1000000 --phase-secs 15 --out-dir bench-out
//!   cairn-bench grpc --addr 127.0.0.1:50051 --call get --concurrency 30 --test-time 10
//! ```
//!
//! The modules, each using only those below it:
//!
//! ```text
//!   cli          the subcommand from the first argument
//!   memtier      one load run from memtier_benchmark's flags: summary lines, JSON
//!   suite/       `suite arcus` (suite/arcus/) and `suite flash` (suite/flash/), their flags
//!   grpc/        `grpc`: unary gRPC load (the generated client named in grpc/api.rs alone)
//!   report/      the ARCUS run's tables: medians, ratios, goals, checkpoint dip, recovery
//!   chart        the ARCUS run's SVG charts
//!   rows         what the ARCUS run measured, as plain data (read by report, chart, JSON)
//!   servers      a free port, readiness, `stats`, installed binaries
//!   load/        the load generator: config, engine, wire, result
//!   keys         key patterns and the request mix, from a seed
//!   procstat     a process's CPU and RSS from /proc
//! ```

mod chart;
mod cli;
mod grpc;
mod keys;
mod load;
mod memtier;
mod procstat;
mod report;
mod rows;
mod servers;
mod suite;

fn main() -> std::process::ExitCode {
    cli::main()
}
