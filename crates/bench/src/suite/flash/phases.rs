//! The phases of the flash scenarios on one server with a flash tier (cairn or memcached's
//! extstore), and what they measured ([`Figures`]): the insert in two parts (F1, and F4 from
//! the RSS growth per item sent to flash), uniform gets from every client (F2) and from one
//! (F3), and the 9:1 mix with hot gets (F6's write amplification).
//!
//! ```text
//!   insert 1/4 ─> stats, RSS ─> insert the rest ─> stats, RSS       (F1, F4)
//!   ─> gets R:R from threads x clients (F2) ─> gets from one client (F3)
//!   ─> 9:1 mix (warm-up) ─> stats ─> 9:1 mix ─> stats               (F6)
//! ```
//!
//! Non-goals: starting the servers (servers.rs), fio (fio.rs), the crash check (f5.rs).

use std::collections::HashMap;
use std::time::Duration;

use super::servers::Proc;
use crate::keys::Pattern;
use crate::load::{self, LoadConfig, LoadResult, Protocol};
use crate::procstat::{proc_cpu_secs, rss_bytes};
use crate::suite::SuiteArgs;

/// The load of one phase.
fn load_cfg(args: &SuiteArgs, port: u16, ratio: (u32, u32), pattern: Pattern) -> LoadConfig {
    LoadConfig {
        server: "127.0.0.1".into(),
        port,
        protocol: Protocol::MemcacheText,
        threads: args.threads,
        clients: args.clients,
        data_size_min: args.data_size,
        data_size_max: args.data_size,
        key_prefix: "memtier-".into(),
        set_pattern: pattern,
        get_pattern: pattern,
        key_min: 1,
        key_max: args.keys,
        ratio,
        requests: None,
        test_time: Some(Duration::from_secs(args.phase_secs)),
        pipeline: 1,
        seed: 1,
        distinct_client_seed: true,
        rate: None,
        verify: false,
        quiet: args.quiet,
    }
}

/// Sets every key once.
pub(super) fn insert(args: &SuiteArgs, port: u16) -> Result<LoadResult, String> {
    insert_range(args, port, 1, args.keys)
}

/// Requests per client that set every key of a range of `span` keys with the parallel
/// pattern (see [`insert_range`]).
fn insert_requests(span: u64, clients: u64) -> u64 {
    span / clients + span % clients
}

/// Sets every key of `min..=max` (a few twice when the clients do not divide the range).
pub(super) fn insert_range(
    args: &SuiteArgs,
    port: u16,
    min: u64,
    max: u64,
) -> Result<LoadResult, String> {
    let clients = args.threads * args.clients;
    let span = max - min + 1;
    load::run(&LoadConfig {
        // The parallel pattern gives each client span / clients keys and the last one the
        // rest too: enough requests for the last one's range (the others wrap around). With
        // span.div_ceil(clients), the last client left up to `clients - 1` keys unset: F5
        // in 3 parts of 10M keys counted those 97 never-set keys as lost (2026-11-27).
        requests: Some(insert_requests(span, clients)),
        test_time: None,
        key_min: min,
        key_max: max,
        ..load_cfg(args, port, (1, 0), Pattern::Parallel)
    })
}

/// What one server did in the phases both servers run.
#[derive(Default, Debug, Clone, serde::Serialize)]
pub(super) struct Figures {
    /// F1: sets per second over the whole insert.
    pub(super) insert_ops_per_sec: f64,
    /// F2: gets per second, uniform over every key.
    pub(super) get_ops_per_sec: f64,
    /// F2: hits over gets.
    pub(super) get_hit_ratio: f64,
    /// Share of the get hits served from flash.
    pub(super) get_from_flash: f64,
    /// F2, cairn: device and buffered reads per get served from flash (1 wanted).
    pub(super) reads_per_flash_hit: f64,
    /// F2, cairn: device reads per miss (a miss should not read the device).
    pub(super) device_reads_per_miss: f64,
    /// F3: one client's get latency, p50 and p99, us.
    pub(super) qd1_get_p50_us: f64,
    pub(super) qd1_get_p99_us: f64,
    /// F2's CPU per get: the server's (all its threads) and the load generator's, us.
    pub(super) f2_server_cpu_us_per_get: f64,
    pub(super) f2_client_cpu_us_per_get: f64,
    /// F6: bytes written to the device over the key and value bytes set.
    pub(super) write_amplification: f64,
    /// Resident memory after the insert, MiB.
    pub(super) rss_after_insert_mib: f64,
    /// Items on flash after the insert.
    pub(super) flash_items: f64,
    /// F4, cairn: RAM index bytes per item on flash (its stats).
    pub(super) index_bytes_per_flash_item: f64,
    /// F4: RSS growth over the second part of the insert per item that went to flash meanwhile.
    pub(super) rss_bytes_per_flash_item: f64,
}

/// How much the stat `k` grew from `a` to `b`.
pub(super) fn delta(a: &HashMap<String, f64>, b: &HashMap<String, f64>, k: &str) -> f64 {
    b.get(k).copied().unwrap_or(0.0) - a.get(k).copied().unwrap_or(0.0)
}

/// a / b, 0 when b is not positive.
pub(super) fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

/// The key+value bytes of one set of the load (keys are `memtier-<n>`).
pub(super) fn item_bytes(args: &SuiteArgs) -> f64 {
    ("memtier-".len() + (args.keys / 2).to_string().len() + args.data_size) as f64
}

/// Runs the flash phases on a server with a flash tier: `cairn` says which stats names to use.
pub(super) fn phases(args: &SuiteArgs, p: &Proc, cairn: bool) -> Result<Figures, String> {
    let mut f = read_phases(args, p, cairn)?;
    // F6: steady state, 9 sets to 1 get, the gets on a hot part of the keys (gaussian); a
    // first phase reaches steady state, the second is measured.
    let mixed = load_cfg(args, p.port, (9, 1), Pattern::Gaussian);
    let mixed = LoadConfig {
        set_pattern: Pattern::Random,
        ..mixed
    };
    load::run(&mixed)?;
    let s4 = p.stats()?;
    let m = load::run(&mixed)?;
    let s5 = p.stats()?;
    let device = delta(&s4, &s5, "extstore_bytes_written");
    f.write_amplification = ratio(device, m.sets as f64 * item_bytes(args));
    Ok(f)
}

/// F1 to F4 (the insert, uniform gets, one client's gets).
pub(super) fn read_phases(args: &SuiteArgs, p: &Proc, cairn: bool) -> Result<Figures, String> {
    let mut f = Figures::default();
    // F1 + F4: a quarter of the keys first (RAM is full by then), then the rest: the RSS
    // growth over the second part, per item that went to flash meanwhile, is what an item on
    // flash costs in RAM. (cairn counts its index in -m, so it takes RAM from items instead
    // of growing the RSS; the index bytes from its stats show that cost.)
    let first = args.keys / 4;
    let a = insert_range(args, p.port, 1, first)?;
    let s0 = p.stats()?;
    let rss0 = rss_bytes(&p.pid());
    let b = insert_range(args, p.port, first + 1, args.keys)?;
    f.insert_ops_per_sec = (a.sets + b.sets) as f64 / (a.secs + b.secs);
    let s1 = p.stats()?;
    let rss1 = rss_bytes(&p.pid());
    f.rss_after_insert_mib = rss1 as f64 / (1 << 20) as f64;
    f.flash_items = if cairn {
        s1.get("flash_items").copied().unwrap_or(0.0)
    } else {
        s1.get("extstore_objects_used").copied().unwrap_or(0.0)
    };
    if cairn {
        f.index_bytes_per_flash_item = ratio(
            s1.get("flash_index_bytes").copied().unwrap_or(0.0),
            f.flash_items,
        );
    }
    let flash_key = if cairn {
        "flash_items"
    } else {
        "extstore_objects_used"
    };
    f.rss_bytes_per_flash_item =
        ratio(rss1.saturating_sub(rss0) as f64, delta(&s0, &s1, flash_key));
    get_phases(args, p, cairn, &mut f)?;
    Ok(f)
}

/// F2 (uniform random gets over the whole set, from `--threads` x `--clients`) and F3 (one
/// client, one request at a time) into `f`.
pub(super) fn get_phases(
    args: &SuiteArgs,
    p: &Proc,
    cairn: bool,
    f: &mut Figures,
) -> Result<(), String> {
    // F2: uniform random gets over the whole set.
    let s2 = p.stats()?;
    let cpu0 = proc_cpu_secs(&p.pid()).unwrap_or(0.0);
    let g = load::run(&load_cfg(args, p.port, (0, 1), Pattern::Random))?;
    let cpu1 = proc_cpu_secs(&p.pid()).unwrap_or(0.0);
    let s3 = p.stats()?;
    f.get_ops_per_sec = g.ops_per_sec();
    f.f2_server_cpu_us_per_get = ratio((cpu1 - cpu0) * 1e6, g.gets as f64);
    f.f2_client_cpu_us_per_get = ratio(g.cpu_secs * 1e6, g.gets as f64);
    f.get_hit_ratio = ratio(g.hits as f64, g.gets as f64);
    let hits = delta(&s2, &s3, "get_hits");
    let misses = delta(&s2, &s3, "get_misses");
    let flash_hits = delta(&s2, &s3, "get_extstore");
    f.get_from_flash = ratio(flash_hits, hits);
    if cairn {
        let reads = delta(&s2, &s3, "flash_device_reads") + delta(&s2, &s3, "flash_buffered_reads");
        f.reads_per_flash_hit = ratio(reads - delta(&s2, &s3, "miss_from_extstore"), flash_hits);
        f.device_reads_per_miss = ratio(delta(&s2, &s3, "miss_from_extstore"), misses);
    }
    // F3: one client, one request at a time.
    let one = load::run(&LoadConfig {
        threads: 1,
        clients: 1,
        ..load_cfg(args, p.port, (0, 1), Pattern::Random)
    })?;
    f.qd1_get_p50_us = one.get_latency.value_at_percentile(50.0) as f64;
    f.qd1_get_p99_us = one.get_latency.value_at_percentile(99.0) as f64;
    Ok(())
}

/// The one-client get p50 of a server holding every key in RAM, us (the request path's own
/// cost, without a device read).
pub(super) fn ram_qd1_p50(args: &SuiteArgs, p: &Proc) -> Result<f64, String> {
    insert(args, p.port)?;
    let one = load::run(&LoadConfig {
        threads: 1,
        clients: 1,
        ..load_cfg(args, p.port, (0, 1), Pattern::Random)
    })?;
    Ok(one.get_latency.value_at_percentile(50.0) as f64)
}

#[cfg(test)]
mod tests {
    use super::insert_requests;
    use crate::keys::{KeyGen, Pattern, Rng};

    #[test]
    fn an_insert_in_parts_sets_every_key() {
        // The parts F5 inserts 10M keys in (3 holds) and small ranges around the client count.
        for (min, max) in [
            (1, 3_333_333),
            (3_333_334, 6_666_666),
            (6_666_667, 10_000_000),
            (1, 49),
            (1, 50),
            (1, 51),
            (5, 5),
        ] {
            let clients = 50;
            let span = max - min + 1;
            let mut seen = vec![false; span as usize];
            let mut rng = Rng::new(1);
            for c in 0..clients {
                let mut g = KeyGen::new(Pattern::Parallel, min, max, c, clients);
                for _ in 0..insert_requests(span, clients) {
                    seen[(g.next(&mut rng) - min) as usize] = true;
                }
            }
            assert!(seen.iter().all(|&s| s), "keys {min}..={max} left unset");
        }
    }
}
