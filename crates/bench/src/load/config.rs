//! What one load run does: the server and its protocol, the connections, the keys and values,
//! the request mix, and how long it lasts. Built by the memtier-style command line
//! (`memtier.rs`) and by the suites, read by [`crate::load::run`].
//!
//! Non-goals: checking the figures against one another (the command line does that).

use std::time::Duration;

use crate::keys::Pattern;

/// Which wire protocol to speak.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    MemcacheText,
    Redis,
}

impl Protocol {
    pub fn parse(s: &str) -> Result<Protocol, String> {
        match s {
            "memcache_text" => Ok(Protocol::MemcacheText),
            "redis" => Ok(Protocol::Redis),
            _ => Err(format!("protocol {s:?}: use memcache_text or redis")),
        }
    }
}

/// Everything one run needs.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    /// The server's host name or address.
    pub server: String,
    /// The server's port.
    pub port: u16,
    /// The wire protocol the requests are written in.
    pub protocol: Protocol,
    /// OS threads, each a single-threaded tokio runtime.
    pub threads: u64,
    /// Connections per thread.
    pub clients: u64,
    /// Value sizes are drawn uniformly from `data_size_min..=data_size_max` bytes.
    pub data_size_min: usize,
    pub data_size_max: usize,
    /// Keys are `<key_prefix><n>`.
    pub key_prefix: String,
    /// How sets and gets choose `n` (memtier's P, S, R, G).
    pub set_pattern: Pattern,
    pub get_pattern: Pattern,
    /// `n` ranges over `key_min..=key_max`.
    pub key_min: u64,
    pub key_max: u64,
    /// SET:GET, as many sets as the first number for as many gets as the second.
    pub ratio: (u32, u32),
    /// Requests per client (memtier's meaning), or run for `test_time`.
    pub requests: Option<u64>,
    /// Seconds to run, when `requests` is None.
    pub test_time: Option<Duration>,
    /// Requests in flight per connection (closed loop).
    pub pipeline: usize,
    /// Seed of the key and size choices.
    pub seed: u64,
    /// Give every client its own seed (derived from `seed` and its index).
    pub distinct_client_seed: bool,
    /// Open loop: total requests per second over all clients.
    pub rate: Option<u64>,
    /// Check every get hit against the value this tool sets for that key.
    pub verify: bool,
    /// No progress line.
    pub quiet: bool,
}
