//! The flags of `cairn-bench grpc`. The `///` lines are the `--help` text.
//!
//! Non-goals: checking them against one another (run.rs refuses what it cannot run).

use clap::Parser;

/// `cairn-bench grpc ...`
#[derive(Debug, Parser, Clone)]
#[command(name = "cairn-bench grpc", about = "Unary load on cairn's gRPC API")]
pub struct GrpcArgs {
    /// host:port of the gRPC listener.
    #[arg(long, default_value = "127.0.0.1:50051")]
    pub addr: String,
    /// get (cairn.v1.KV/Get), set (cairn.v1.KV/Set) or health (grpc.health.v1.Health/Check).
    #[arg(long, default_value = "get")]
    pub call: String,
    /// Workers, each with one call in flight.
    #[arg(short = 'c', long, default_value_t = 30)]
    pub concurrency: u64,
    /// HTTP/2 connections the workers share.
    #[arg(long, default_value_t = 10)]
    pub connections: u64,
    /// Runtime threads of this load generator.
    #[arg(short = 't', long, default_value_t = 1)]
    pub threads: usize,
    /// Keys `<key-prefix>0` .. `<key-prefix><keys - 1>`, chosen uniformly at random.
    #[arg(long, default_value_t = 1000)]
    pub keys: u64,
    // Keys are `<key_prefix><n>` (no `///`: clap would print it in --help).
    #[arg(long, default_value = "memtier-")]
    pub key_prefix: String,
    /// Value size in bytes (set, preload).
    #[arg(short = 'd', long, default_value_t = 32)]
    pub data_size: usize,
    /// Set every key once before the measured run (so that gets hit).
    #[arg(long)]
    pub preload: bool,
    /// Calls per worker.
    #[arg(short = 'n', long)]
    pub requests: Option<u64>,
    /// Seconds to run (instead of --requests).
    #[arg(long)]
    pub test_time: Option<u64>,
    /// Open loop: this many calls per second in total; latency from the intended send time.
    #[arg(long)]
    pub rate: Option<u64>,
    /// The server's PID: its CPU time over the run is read from /proc (CPU per operation).
    #[arg(long)]
    pub server_pid: Option<u32>,
    // Seed of the key choices (each worker derives its own).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    // Where to write the run's JSON, if anywhere.
    #[arg(long)]
    pub json_out_file: Option<std::path::PathBuf>,
}
