//! `cairn-bench [OPTIONS]`: one load run from memtier_benchmark's option names, its
//! memtier-style summary on stdout and, with `--json-out-file`, its JSON. The run fails when a
//! get did not verify (`--verify`) or when error replies pass the bar.
//!
//! ```text
//!   RunArgs ─to_config─> LoadConfig ─> load::run ─> LoadResult ─> print_result, result_json
//! ```
//!
//! Non-goals: memtier's options for clusters, TLS, authentication, and its other protocols.

use std::time::Duration;

use clap::Parser;

use crate::keys;
use crate::load::{self, LoadConfig, LoadResult, Protocol};

/// One load run (memtier_benchmark's option names).
#[derive(Debug, Parser, Clone)]
#[command(
    name = "cairn-bench",
    version,
    about = "Load generator for memcached-protocol and Redis servers"
)]
pub struct RunArgs {
    // The `///` lines are the --help text; fields without one have none, and their `//` lines
    // are for readers only.
    //
    // The server's host name or address.
    #[arg(short = 's', long, default_value = "127.0.0.1")]
    server: String,
    // The server's port.
    #[arg(short = 'p', long, default_value_t = 11211)]
    port: u16,
    /// memcache_text or redis.
    #[arg(short = 'P', long, default_value = "memcache_text")]
    protocol: String,
    // OS threads of the load generator.
    #[arg(short = 't', long, default_value_t = 4)]
    threads: u64,
    /// Connections per thread.
    #[arg(short = 'c', long, default_value_t = 50)]
    clients: u64,
    /// Value size in bytes.
    #[arg(short = 'd', long, default_value_t = 32)]
    data_size: usize,
    /// Value size range MIN-MAX (overrides --data-size).
    #[arg(long)]
    data_size_range: Option<String>,
    // Keys are `<key-prefix><n>`.
    #[arg(long, default_value = "memtier-")]
    key_prefix: String,
    /// SET:GET key patterns: P parallel, S sequential, R random, G gaussian.
    #[arg(long, default_value = "R:R")]
    key_pattern: String,
    // `n` ranges over key-minimum..=key-maximum.
    #[arg(long, default_value_t = 0)]
    key_minimum: u64,
    #[arg(long, default_value_t = 10_000_000)]
    key_maximum: u64,
    /// SET:GET ratio.
    #[arg(long, default_value = "1:10")]
    ratio: String,
    /// Requests per client.
    #[arg(short = 'n', long)]
    requests: Option<u64>,
    /// Seconds to run (instead of --requests).
    #[arg(long)]
    test_time: Option<u64>,
    /// Requests in flight per connection.
    #[arg(long, default_value_t = 1)]
    pipeline: usize,
    /// Seed of the key and size choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Give every client its own seed.
    #[arg(long)]
    distinct_client_seed: bool,
    /// Use a random seed.
    #[arg(long)]
    randomize: bool,
    /// Open loop: this many requests per second in total; latency from the intended send time.
    #[arg(long)]
    rate: Option<u64>,
    /// Percentiles to print.
    #[arg(long, default_value = "50,90,95,99,99.9")]
    print_percentiles: String,
    // Where to write the run's JSON, if anywhere.
    #[arg(long)]
    json_out_file: Option<std::path::PathBuf>,
    /// Check every get hit against the value this tool sets for that key.
    #[arg(long)]
    verify: bool,
    /// No progress line.
    #[arg(long)]
    quiet: bool,
}

impl RunArgs {
    fn to_config(&self) -> Result<LoadConfig, String> {
        let (set_pattern, get_pattern) = keys::parse_patterns(&self.key_pattern)?;
        let (data_size_min, data_size_max) = match &self.data_size_range {
            Some(r) => {
                let (a, b) = r
                    .split_once('-')
                    .ok_or("--data-size-range: expected MIN-MAX")?;
                let a: usize = a.parse().map_err(|_| "--data-size-range: bad MIN")?;
                let b: usize = b.parse().map_err(|_| "--data-size-range: bad MAX")?;
                if a > b {
                    return Err("--data-size-range: MIN > MAX".into());
                }
                (a, b)
            }
            None => (self.data_size, self.data_size),
        };
        if self.key_minimum > self.key_maximum {
            return Err("--key-minimum is above --key-maximum".into());
        }
        if self.threads == 0 || self.clients == 0 {
            return Err("--threads and --clients must be at least 1".into());
        }
        let seed = if self.randomize {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        } else {
            self.seed
        };
        Ok(LoadConfig {
            server: self.server.clone(),
            port: self.port,
            protocol: Protocol::parse(&self.protocol)?,
            threads: self.threads,
            clients: self.clients,
            data_size_min,
            data_size_max,
            key_prefix: self.key_prefix.clone(),
            set_pattern,
            get_pattern,
            key_min: self.key_minimum,
            key_max: self.key_maximum,
            ratio: keys::parse_ratio(&self.ratio)?,
            requests: match (self.requests, self.test_time) {
                (None, None) => Some(10_000),
                (r, _) => r,
            },
            test_time: self.test_time.map(Duration::from_secs),
            pipeline: self.pipeline,
            seed,
            distinct_client_seed: self.distinct_client_seed,
            rate: self.rate,
            verify: self.verify,
            quiet: self.quiet,
        })
    }
}

fn percentiles(s: &str) -> Result<Vec<f64>, String> {
    s.split(',')
        .map(|p| {
            p.trim()
                .parse::<f64>()
                .map_err(|_| format!("bad percentile {p:?}"))
        })
        .collect()
}

/// memtier-style summary of one run.
pub fn print_result(r: &LoadResult, pcts: &[f64]) {
    let ms = |us: u64| us as f64 / 1000.0;
    print!(
        "{:<8} {:>12} {:>12} {:>12} {:>10} {:>12}",
        "Type", "Ops/sec", "Hits/sec", "Misses/sec", "Errors", "Avg. ms"
    );
    for p in pcts {
        print!(" {:>10}", format!("p{p} ms"));
    }
    println!();
    let rows = [
        ("Sets", r.sets, &r.set_latency, 0, 0, r.set_errors),
        (
            "Gets",
            r.gets,
            &r.get_latency,
            r.hits,
            r.misses,
            r.get_errors,
        ),
        (
            "Totals",
            r.ops(),
            &r.all_latency,
            r.hits,
            r.misses,
            r.errors(),
        ),
    ];
    for (name, n, h, hits, misses, errors) in rows {
        print!(
            "{:<8} {:>12.0} {:>12.0} {:>12.0} {:>10} {:>12.3}",
            name,
            n as f64 / r.secs,
            hits as f64 / r.secs,
            misses as f64 / r.secs,
            errors,
            h.mean() / 1000.0
        );
        for p in pcts {
            print!(" {:>10.3}", ms(h.value_at_percentile(*p)));
        }
        println!();
    }
    println!(
        "errors {} ({:.3}% of replies) verify_failures {}; {:.1} s; load generator CPU {:.2} s ({:.0}% of one core)",
        r.errors(),
        r.error_rate() * 100.0,
        r.verify_failures,
        r.secs,
        r.cpu_secs,
        100.0 * r.cpu_secs / r.secs
    );
}

/// The JSON of one run.
pub fn result_json(r: &LoadResult, pcts: &[f64]) -> serde_json::Value {
    let hist = |h: &hdrhistogram::Histogram<u64>| {
        let mut m = serde_json::Map::new();
        m.insert("avg_ms".into(), (h.mean() / 1000.0).into());
        for p in pcts {
            m.insert(
                format!("p{p}_ms"),
                (h.value_at_percentile(*p) as f64 / 1000.0).into(),
            );
        }
        m.insert("max_ms".into(), (h.max() as f64 / 1000.0).into());
        serde_json::Value::Object(m)
    };
    serde_json::json!({
        "seconds": r.secs,
        "ops_per_sec": r.ops_per_sec(),
        "sets": r.sets, "gets": r.gets, "hits": r.hits, "misses": r.misses,
        "errors": r.errors(), "set_errors": r.set_errors, "get_errors": r.get_errors,
        "error_rate": r.error_rate(), "verify_failures": r.verify_failures,
        "latency": { "sets": hist(&r.set_latency), "gets": hist(&r.get_latency), "all": hist(&r.all_latency) },
        "load_generator_cpu_seconds": r.cpu_secs,
        "timeline": r.timeline.iter().map(|s| serde_json::json!({
            "ops": s.ops,
            "avg_ms": if s.ops > 0 { s.latency_us_sum as f64 / s.ops as f64 / 1000.0 } else { 0.0 },
            "max_ms": s.latency_us_max as f64 / 1000.0,
        })).collect::<Vec<_>>(),
    })
}

/// Runs the load `a` describes, prints its summary and writes its JSON.
pub fn main(a: &RunArgs) -> Result<(), String> {
    a.to_config().and_then(|cfg| {
        let pcts = percentiles(&a.print_percentiles)?;
        let r = load::run(&cfg)?;
        print_result(&r, &pcts);
        if let Some(path) = &a.json_out_file {
            let text =
                serde_json::to_string_pretty(&result_json(&r, &pcts)).map_err(|e| e.to_string())?;
            std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        if r.verify_failures > 0 {
            return Err(format!("{} values did not verify", r.verify_failures));
        }
        r.check_errors()
    })
}
