//! memcached's start flags and `-o` options that deploy scripts pass and that change nothing
//! in cairn: accepted, each with one line in the start log ([`Config::notes`]), so that a
//! memcached command line starts cairn. The flags themselves are [`Config`] fields (`-C`,
//! `-R`, `-B`, `-e`, `-u`, `-d`); the one that cannot be honoured without a surprise (`-d`)
//! refuses to start in `validate.rs`.

use super::settings::Config;

/// memcached 1.6's `-o` tuning knobs (its slab allocator, LRU threads, hash table, buffers and
/// sandbox): cairn has none of these parts, so they are accepted and ignored, whatever their
/// value. `ext_*` (extstore tuning) is matched by its prefix, `ext_path` aside (the flash tier).
/// Options that change what a client sees (`idle_timeout`, `ssl_verify_mode`, `ssl_ca_cert`,
/// `meta_response_old`, `proxy_*` ...) are not here: they refuse to start.
const IGNORED_OPTIONS: &[&str] = &[
    "maxconns_fast",
    "no_maxconns_fast",
    "hashpower",
    "hash_algorithm",
    "no_hashexpand",
    "tail_repair_time",
    "lru_crawler",
    "no_lru_crawler",
    "lru_crawler_sleep",
    "lru_crawler_tocrawl",
    "lru_maintainer",
    "no_lru_maintainer",
    "lru_segmented",
    "no_lru_segmented",
    "hot_lru_pct",
    "warm_lru_pct",
    "hot_max_factor",
    "warm_max_factor",
    "temporary_ttl",
    "read_buf_mem_limit",
    "slab_reassign",
    "no_slab_reassign",
    "slab_automove",
    "slab_automove_ratio",
    "slab_automove_window",
    "slab_automove_freeratio",
    "slab_chunk_max",
    "no_chunked_items",
    "watcher_logbuf_size",
    "worker_logbuf_size",
    "track_sizes",
    "modern",
    "no_modern",
    "inline_ascii_response",
    "no_inline_ascii_response",
    "relaxed_privileges",
    "no_relaxed_privileges",
    "drop_privileges",
    "no_drop_privileges",
];

/// Whether `-o name` is one of memcached's tuning knobs that cairn ignores.
pub(super) fn is_ignored_option(name: &str) -> bool {
    (name.starts_with("ext_") && name != "ext_path") || IGNORED_OPTIONS.contains(&name)
}

impl Config {
    /// The start-log notes of the memcached flags that `given(key)` says were set (each one
    /// accepted, changing nothing here).
    pub(super) fn note_memcached_flags(&mut self, given: impl Fn(&str) -> bool) {
        if given("disable_cas") && self.disable_cas {
            self.notes.push(
                "-C: accepted, and CAS stays on: gets answers each item's CAS unique and cas \
                 compares it, as without -C"
                    .into(),
            );
        }
        if given("max_reqs_per_event") {
            self.notes.push(format!(
                "-R {}: ignored (each connection thread already takes its connections in turn)",
                self.max_reqs_per_event
            ));
        }
        if given("protocol") {
            self.notes.push(format!(
                "-B {}: each connection's protocol is told by its first byte (binary for 0x80, \
                 text and meta otherwise)",
                self.protocol
            ));
        }
        if let Some(f) = self.memory_file.as_ref().filter(|_| given("memory_file")) {
            self.notes.push(format!(
                "-e {}: ignored (the data folder keeps the cache across restarts)",
                f.display()
            ));
        }
    }
}
