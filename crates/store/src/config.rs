//! The store's settings, fixed at construction (the memory limit may change later, see
//! `Store::set_memory_limit`).
//!
//! Non-goals: no parsing of flags (the server's config does that).

/// Settings fixed at construction.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// Total bytes items may occupy (memcached `-m` in bytes), counting index + item memory.
    pub memory_limit_bytes: u64,
    /// true: evict to make room (default). false (`-M`): refuse with `StoreError::OutOfMemory`.
    pub evict_when_full: bool,
    /// Largest key + value + overhead accepted (memcached `-I`, default 1 MiB).
    pub item_size_max_bytes: usize,
    /// Number of independently locked shards (power of two).
    pub shard_count: usize,
    /// Seed of the key hash. None: a random one. The flash tier keeps its seed on the device,
    /// since a checkpoint records flash entries by hash bits.
    pub hash_seed: Option<u64>,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            memory_limit_bytes: 64 << 20,
            evict_when_full: true,
            item_size_max_bytes: 1 << 20,
            shard_count: 64,
            hash_seed: None,
        }
    }
}
