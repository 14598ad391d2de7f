//! cairnctl: the operator's and developer's command line for cairn, as etcdctl is for etcd and
//! redis-cli for Redis. It speaks cairn's wire protocols only: the gRPC API through the
//! generated client (`cairn-api`), the memcached text protocol for stats and admin lines, and
//! ZooKeeper for cluster status; never the server's own crates.
//!
//! ```text
//!   cairnctl ──gRPC (--endpoint, 127.0.0.1:50051)──> KV: get set delete touch scan
//!            │                                       Watch: watch (resumes itself)
//!            │                                       grpc.health.v1: health
//!            ├─memcached text (--memcached, 127.0.0.1:11211)─> stats, top, version, checkpoint
//!            └─ZooKeeper (--zookeeper)─> cluster status, then each node's stats replication
//! ```
//!
//! Modules: `cli` (the command line and dispatch), one per command family (`kv`, `watch` with
//! its resume rules in `resume`, `stats`, `top`, `admin`, `cluster` with the znode formats in
//! `layout`), and what they share (`grpc`, `memcached`, `encoding`, `output`, `error`).
//! Every failure is an exit code 1 with one line on stderr that says what to change.

mod admin;
mod cli;
mod cluster;
mod encoding;
mod error;
mod grpc;
mod kv;
mod layout;
mod memcached;
mod output;
mod resume;
mod stats;
mod top;
mod watch;

use clap::Parser;

fn main() {
    let cli = cli::Cli::parse();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    if let Err(e) = runtime.block_on(cli::run(cli)) {
        eprintln!("cairnctl: {e}");
        std::process::exit(1);
    }
}
