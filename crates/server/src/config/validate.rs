//! The checks serde cannot make: ranges, and settings that only work together. A bad value
//! refuses the start with [`ConfigError::Invalid`] naming the key.

use std::net::SocketAddr;

use super::error::ConfigError;
use super::ranges::ChkptSetting;
use super::settings::Config;

impl Config {
    /// Checks ranges that serde cannot.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key, why: &str| {
            Err(ConfigError::Invalid {
                key,
                why: why.to_string(),
            })
        };
        if self.max_connections == 0 || self.max_connections > 1_000_000 {
            return invalid("max_connections", "must be between 1 and 1000000");
        }
        if self.udp_port != 0 && self.auth_file.is_some() {
            // As memcached: authentication is per connection, and UDP has none.
            return invalid(
                "udp_port",
                "must be 0 with auth_file (-Y): UDP has no authentication",
            );
        }
        if !matches!(self.io_engine.as_str(), "tokio" | "uring") {
            return invalid("io_engine", "must be tokio or uring");
        }
        if self.memory_limit_mb == 0 {
            return invalid("memory_limit_mb", "must be at least 1");
        }
        if self.item_size_max < 1024 || self.item_size_max > 128 << 20 {
            return invalid("item_size_max", "must be between 1 KiB and 128 MiB");
        }
        if self.item_size_max as u64 > (self.memory_limit_mb << 20) / 2 {
            return invalid("item_size_max", "must be at most half of memory_limit_mb");
        }
        if self.max_keys_per_get == 0 {
            return invalid("max_keys_per_get", "must be at least 1");
        }
        if self.output_buffer_max < 4096 {
            return invalid("output_buffer_max", "must be at least 4096");
        }
        if self.listen.parse::<std::net::IpAddr>().is_err() {
            return invalid("listen", "must be an IP address");
        }
        if cairn_persist::Mode::parse(&self.persistence).is_none() {
            return invalid("persistence", "must be sync, async or off");
        }
        if self.async_flush_ms == 0 || self.async_flush_ms > 60_000 {
            return invalid("async_flush_ms", "must be between 1 and 60000");
        }
        if self.log_segment_mb == 0 || self.log_segment_mb > 4096 {
            return invalid("log_segment_mb", "must be between 1 and 4096");
        }
        if (self.log_segment_mb << 20) < self.item_size_max as u64 * 2 {
            return invalid(
                "log_segment_mb",
                "must hold at least two items of item_size_max",
            );
        }
        if self.enable_ssl && (self.ssl_chain_cert.is_none() || self.ssl_key.is_none()) {
            return invalid(
                "enable_ssl",
                "needs ssl_chain_cert and ssl_key (-o ssl_chain_cert=FILE,ssl_key=FILE)",
            );
        }
        if self.grpc_listen != "off" && self.grpc_listen.parse::<SocketAddr>().is_err() {
            return invalid("grpc_listen", "must be an IP address and port, or off");
        }
        if self.grpc_tls_cert.is_some() != self.grpc_tls_key.is_some() {
            return invalid(
                "grpc_tls_cert",
                "grpc_tls_cert and grpc_tls_key go together",
            );
        }
        if self.grpc_threads > 1024 {
            return invalid("grpc_threads", "must be at most 1024 (0 = half the CPUs)");
        }
        if self.grpc_max_message_bytes != 0
            && (self.grpc_max_message_bytes < 64 << 10
                || self.grpc_max_message_bytes < self.item_size_max + 4096)
        {
            return invalid(
                "grpc_max_message_bytes",
                "must be 0 (automatic) or at least 64 KiB and item_size_max + 4 KiB",
            );
        }
        if self.watch_history_mb > self.memory_limit_mb / 2 {
            return invalid(
                "watch_history_mb",
                "must be at most half of memory_limit_mb",
            );
        }
        if self.watch_progress_notify_ms == 0 || self.watch_progress_notify_ms > 3_600_000 {
            return invalid("watch_progress_notify_ms", "must be between 1 and 3600000");
        }
        if self.watch_batch_ms > 1000 {
            return invalid("watch_batch_ms", "must be at most 1000 (0 = off)");
        }
        // The same check as the admin line `config chkpt_interval_* N`.
        ChkptSetting::PctSnapshot.check(self.chkpt_interval_pct_snapshot)?;
        ChkptSetting::MinLogsize.check(self.chkpt_interval_min_logsize)?;
        if self.flash_path.is_some() && self.flash_size == 0 {
            return invalid(
                "flash_size",
                "must be given with flash_path (e.g. --flash-size 64g)",
            );
        }
        if self.flash_write_queue == 0 || self.flash_write_queue > 1024 {
            return invalid("flash_write_queue", "must be between 1 and 1024");
        }
        match (&self.zookeeper, &self.service_code) {
            (Some(_), None) => {
                return invalid("service_code", "must be given with zookeeper (-z)");
            }
            (None, Some(_)) => return invalid("zookeeper", "must be given with service_code"),
            _ => {}
        }
        if !matches!(self.replication.as_str(), "async" | "sync") {
            return invalid("replication", "must be async or sync");
        }
        if let Some(group) = &self.replication_group {
            if self.zookeeper.is_none() {
                return invalid("replication_group", "needs zookeeper and service_code");
            }
            // ARCUS's clients drop every node of a service whose group names hold '-', ','
            // or '^' (they cut cache_list names at the first '-').
            if group.is_empty()
                || !group
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_')
            {
                return invalid(
                    "replication_group",
                    "letters, digits and '_' only (ARCUS's clients read no other)",
                );
            }
            if self.replica_of.is_some() {
                return invalid(
                    "replication_group",
                    "a group elects its primary: not with replica_of",
                );
            }
        }
        let replicated = self.replica_of.is_some()
            || self.replication == "sync"
            || self.replication_group.is_some();
        if replicated && self.mode() == cairn_persist::Mode::Off {
            return invalid(
                "replication",
                "needs persistence (a replica acknowledges only what it holds durable)",
            );
        }
        if replicated && self.grpc_listen == "off" {
            return invalid("replication", "needs the gRPC API (grpc_listen) on");
        }
        if self.replication_timeout_ms == 0 || self.replication_timeout_ms > 3_600_000 {
            return invalid("replication_timeout_ms", "must be between 1 and 3600000");
        }
        // memcached's start flags (memcached.rs): the ones that cannot be honoured refuse.
        if self.daemon {
            return invalid(
                "daemon",
                "cairn does not daemonize (-d): run it in the foreground under systemd \
                 (deploy/systemd/cairn.service) or another supervisor",
            );
        }
        if !matches!(self.protocol.as_str(), "auto" | "ascii" | "binary") {
            return invalid("protocol", "must be auto, ascii or binary (-B)");
        }
        if self.max_reqs_per_event == 0 {
            return invalid("max_reqs_per_event", "must be at least 1 (-R)");
        }
        if !(100..=300_000).contains(&self.zookeeper_session_timeout_ms) {
            return invalid(
                "zookeeper_session_timeout_ms",
                "must be between 100 and 300000",
            );
        }
        Ok(())
    }
}
