//! [`Ctx::open`]: the shared state built from the settings, recovering the store from disk
//! unless persistence is off. Blocking: call it before serving.
//!
//! ```text
//!   Config ──> access first (-Y auth file, -Z certificate: a bad one refuses the start)
//!          ──> flash::open (the tier, if configured)
//!          ──> off: Store (the hub is its sink when gRPC is on)
//!              logged: Persistence::open (recovery) ─> Hub::attach (gRPC on)
//!          ──> replication state (cluster.rs) ─> Engine::new ─> Ctx
//! ```
//!
//! Non-goals: what the parts do (their crates); serving (server.rs).

use std::sync::atomic::{AtomicU64, AtomicU8};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use cairn_engine::Engine;
use cairn_persist::{Mode, PersistConfig, Persistence};
use cairn_store::Store;

use crate::config::Config;
use crate::ctx::Ctx;
use crate::meters::{Counters, Latency};

/// Store shards for `-m` MiB: 64, or enough that one holds at most 32 MiB (up to 4,096). A
/// checkpoint copies one shard at a time under that shard's lock, so this bounds how long it
/// holds one; still smaller shards would evict in coarser steps (a shard evicts whole 1 MiB
/// segments).
fn shard_count(memory_limit_mb: u64) -> usize {
    (memory_limit_mb / 32).clamp(64, 4096).next_power_of_two() as usize
}

impl Ctx {
    /// Builds the shared state from settings, recovering the store from disk unless
    /// persistence is off. Blocking: call it before serving. Built with the `test-hooks`
    /// feature, the log's disk may be made slow by a test switch
    /// (`test_hooks::open_log_disk`).
    pub fn open(config: Config) -> Result<Arc<Ctx>, String> {
        cairn_engine::start_clock().map_err(|e| format!("refusing to start: {e}"))?;
        #[cfg(feature = "test-hooks")]
        let ctx =
            crate::test_hooks::open_log_disk(|fs, pending| Ctx::open_with(config, fs, pending));
        #[cfg(not(feature = "test-hooks"))]
        let ctx = Ctx::open_with(
            config,
            Arc::new(cairn_wal::RealFs),
            cairn_persist::DEFAULT_MAX_PENDING_BYTES,
        );
        ctx
    }

    /// [`Ctx::open`] with the snapshots and the log on `fs` (a fault-injecting one in tests).
    pub fn open_on(config: Config, fs: Arc<dyn cairn_wal::FileSystem>) -> Result<Arc<Ctx>, String> {
        Ctx::open_with(config, fs, cairn_persist::DEFAULT_MAX_PENDING_BYTES)
    }

    fn open_with(
        config: Config,
        fs: Arc<dyn cairn_wal::FileSystem>,
        max_pending_bytes: usize,
    ) -> Result<Arc<Ctx>, String> {
        // Access first: a bad auth file or certificate refuses the start before recovery.
        let refuse = |e| format!("refusing to start: {e}");
        let auth = match &config.auth_file {
            Some(path) => Some(crate::access::AuthFile::load(path).map_err(refuse)?),
            None => None,
        };
        let tls = match (&config.ssl_chain_cert, &config.ssl_key) {
            (Some(chain), Some(key)) if config.enable_ssl => {
                Some(crate::access::tls_acceptor(chain, key).map_err(refuse)?)
            }
            _ => None,
        };
        let flash = match config.flash() {
            Some(f) => Some(crate::flash::open(f, config.mode() != Mode::Off)?),
            None => None,
        };
        let store_config = cairn_store::StoreConfig {
            // -m less the watch history's part (docs/CONFIGURATION.md, watch_history_mb).
            memory_limit_bytes: config.store_memory_bytes(),
            evict_when_full: !config.disable_evictions,
            item_size_max_bytes: config.item_size_max,
            shard_count: shard_count(config.memory_limit_mb),
            // Flash entries are recorded by hash bits, so the seed is the device's.
            hash_seed: flash.as_ref().map(|f| f.hash_seed()),
        };
        let history_bytes = config.watch_history_bytes();
        let grpc_on = config.grpc_addr().is_some();
        let mut hub = None;
        let (store, persist) = match config.mode() {
            Mode::Off => {
                // Without a log the hub numbers mutations itself: it is the store's sink.
                let sink = grpc_on.then(|| {
                    let h = cairn_grpc::Hub::counting(history_bytes);
                    hub = Some(Arc::clone(&h));
                    h as Arc<dyn cairn_store::MutationSink>
                });
                (
                    Arc::new(Store::with_flash(
                        store_config,
                        sink,
                        flash.clone().map(|f| f as Arc<dyn cairn_store::FlashTier>),
                    )),
                    None,
                )
            }
            mode => {
                let p = Persistence::open(
                    PersistConfig {
                        mode,
                        data_path: config.snapshot_dir(),
                        logs_path: config.log_dir(),
                        async_flush_ms: config.async_flush_ms,
                        chkpt_interval_pct_snapshot: config.chkpt_interval_pct_snapshot,
                        chkpt_interval_min_logsize_mb: config.chkpt_interval_min_logsize,
                        checkpoint_rate_mb_s: config.checkpoint_rate_mb_s,
                        segment_bytes: config.log_segment_mb << 20,
                        direct_io: config.log_direct_io,
                        syncer_batch_sched: config.log_batch_sched,
                        max_pending_bytes,
                        fs,
                        flash: flash.clone(),
                    },
                    store_config,
                )
                .map_err(|e| format!("refusing to start: recovery failed: {e}"))?;
                let p = Arc::new(p);
                if grpc_on {
                    // The log feeds the hub: revisions are LSNs, published once safe.
                    let h = cairn_grpc::Hub::attach(&p, history_bytes)
                        .map_err(|e| format!("refusing to start: {e}"))?;
                    hub = Some(h);
                }
                (p.store(), Some(p))
            }
        };
        if let Some(f) = &flash {
            f.start(&store);
        }
        let replication = persist
            .as_ref()
            .map(|p| crate::cluster::replication(&config, p));
        let limits = cairn_proto::Limits {
            max_value_len: config.item_size_max,
            max_keys_per_get: config.max_keys_per_get,
            ..cairn_proto::Limits::default()
        };
        Ok(Arc::new(Ctx {
            engine: Arc::new(Engine::new(store, persist, flash, hub)),
            limits,
            counters: Counters::default(),
            latency: Latency::default(),
            curr_connections: AtomicU64::new(0),
            verbosity: AtomicU8::new(config.verbosity),
            started: Instant::now(),
            auth,
            tls,
            log_level: OnceLock::new(),
            conns: crate::conns::Registry::default(),
            shutdown: tokio::sync::Notify::new(),
            grpc_stats: Arc::new(cairn_grpc::GrpcStats::default()),
            replication,
            io_engine: OnceLock::new(),
            config,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_hold_at_most_32_mib_past_64_of_them() {
        assert_eq!(shard_count(64), 64);
        assert_eq!(shard_count(1024), 64);
        assert_eq!(shard_count(2048), 64);
        assert_eq!(shard_count(12_000), 512);
        assert_eq!(shard_count(1 << 20), 4096);
    }
}
