//! cairnctl's command line (clap): the global options, each command with its arguments, and
//! the dispatch to the module that runs it.
//!
//! ```text
//!   cairnctl [--endpoint A] [--memcached A] [-o text|json] [--hex|--base64] COMMAND ...
//!     get/set/delete/touch/scan ─> kv.rs       (gRPC, --endpoint)
//!     watch                     ─> watch.rs    (gRPC, resumes itself)
//!     stats/top                 ─> stats.rs, top.rs   (memcached port, --memcached)
//!     health/checkpoint         ─> admin.rs    (both ports)
//!     cluster status            ─> cluster/    (ZooKeeper, then each node's memcached port)
//! ```

use clap::{Args, Parser, Subcommand};

use crate::encoding::Encoding;
use crate::error::Result;
use crate::output::{Format, Out};
use crate::stats::StatsGroup;
use crate::watch::WatchArgs;

/// cairn's command line: keys and values over the gRPC API, a watch that survives restarts,
/// stats, a live view, cluster status, health and checkpoints.
#[derive(Parser, Debug)]
#[command(name = "cairnctl", version, about, long_about = None, args_override_self = true)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Args, Debug, Clone)]
pub struct Global {
    /// cairn's gRPC address (the server's --grpc-listen).
    #[arg(
        long,
        global = true,
        value_name = "HOST:PORT",
        default_value = "127.0.0.1:50051"
    )]
    pub endpoint: String,
    /// cairn's memcached address, for stats and admin lines.
    #[arg(
        long,
        global = true,
        value_name = "HOST:PORT",
        default_value = "127.0.0.1:11211"
    )]
    pub memcached: String,
    /// Output: text for people, json for programs (one object per line).
    #[arg(short = 'o', long = "output", global = true, value_enum, default_value_t = Format::Text)]
    pub output: Format,
    /// Keys and values (arguments and output) in hex.
    #[arg(long, global = true, conflicts_with = "base64")]
    pub hex: bool,
    /// Keys and values (arguments and output) in base64.
    #[arg(long, global = true)]
    pub base64: bool,
}

impl Global {
    pub fn encoding(&self) -> Encoding {
        if self.hex {
            Encoding::Hex
        } else if self.base64 {
            Encoding::Base64
        } else {
            Encoding::Text
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Reads a key: its value (text), or the whole item (-o json).
    Get { key: String },
    /// Writes a key.
    Set {
        key: String,
        value: String,
        /// Seconds until it expires (0: never).
        #[arg(long, default_value_t = 0)]
        ttl: u32,
        /// memcached's client flags.
        #[arg(long, default_value_t = 0)]
        flags: u32,
    },
    /// Deletes a key.
    Delete { key: String },
    /// Gives a key a new time to live (seconds; 0: never expires).
    Touch { key: String, ttl: u32 },
    /// Lists the keys that start with PREFIX (every page), in key order.
    Scan {
        /// Empty: every key.
        #[arg(default_value = "")]
        prefix: String,
        /// Keys and metadata only.
        #[arg(long)]
        keys_only: bool,
        /// Items per page asked of the server.
        #[arg(long, default_value_t = 1000)]
        page_size: u32,
    },
    /// Follows the keys that start with PREFIX: one line per event, resuming by itself after
    /// a disconnect or a server restart, with no gap and no repeat.
    Watch(WatchArgs),
    /// The server's stats over the memcached port, as a table.
    Stats {
        #[arg(value_enum)]
        group: Option<StatsGroup>,
    },
    /// A live view refreshed every second: ops/s, hit ratio, memory, log latency,
    /// replication, watch streams.
    Top {
        /// Stop after this many refreshes (default: until interrupted).
        #[arg(long)]
        count: Option<u64>,
        /// Seconds between refreshes.
        #[arg(long, default_value_t = 1.0)]
        interval: f64,
    },
    /// Replication groups and members as ZooKeeper and the nodes see them.
    Cluster {
        #[command(subcommand)]
        command: ClusterCommand,
    },
    /// Asks the server for a checkpoint now (an admin line: the server needs --enable-admin).
    Checkpoint,
    /// Whether the server answers: gRPC health and memcached's version.
    Health,
}

#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// Every group of a service (ARCUS's /arcus_repl layout), or its nodes
    /// (/arcus/cache_list) when it has no groups, with each node's `stats replication`.
    Status {
        /// ZooKeeper's connect string (host:port[,host:port...][/chroot]).
        #[arg(long, value_name = "HOSTS")]
        zookeeper: String,
        /// The service code the nodes registered under (--service-code).
        #[arg(long, value_name = "SERVICE")]
        service_code: String,
    },
}

/// Runs the command line's command.
pub async fn run(cli: Cli) -> Result<()> {
    let g = cli.global;
    let mut out = Out::new(g.output);
    let enc = g.encoding();
    match cli.command {
        Command::Get { key } => crate::kv::get(&g.endpoint, enc, &key, &mut out).await,
        Command::Set {
            key,
            value,
            ttl,
            flags,
        } => crate::kv::set(&g.endpoint, enc, &key, &value, ttl, flags, &mut out).await,
        Command::Delete { key } => crate::kv::delete(&g.endpoint, enc, &key, &mut out).await,
        Command::Touch { key, ttl } => {
            crate::kv::touch(&g.endpoint, enc, &key, ttl, &mut out).await
        }
        Command::Scan {
            prefix,
            keys_only,
            page_size,
        } => crate::kv::scan(&g.endpoint, enc, &prefix, keys_only, page_size, &mut out).await,
        Command::Watch(args) => crate::watch::run(&g.endpoint, enc, &args, &mut out).await,
        Command::Stats { group } => crate::stats::run(&g.memcached, group, &mut out).await,
        Command::Top { count, interval } => {
            crate::top::run(&g.memcached, count, interval, &mut out).await
        }
        Command::Cluster {
            command:
                ClusterCommand::Status {
                    zookeeper,
                    service_code,
                },
        } => crate::cluster::status(&zookeeper, &service_code, &mut out).await,
        Command::Checkpoint => crate::admin::checkpoint(&g.memcached, &mut out).await,
        Command::Health => crate::admin::health(&g.endpoint, &g.memcached, &mut out).await,
    }
}
