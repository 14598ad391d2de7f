//! The defaults that follow the memcached port (`-p`), so that several instances on one host
//! differ by `-p` alone, as memcached's and Redis's do:
//!
//! ```text
//!   -p 11211  ──>  gRPC 127.0.0.1:50051          data folder cairn-data
//!   -p N      ──>  gRPC 127.0.0.1:N+38840        data folder cairn-data-N
//!   -p 0      ──>  gRPC 127.0.0.1:0 (OS picks)   data folder cairn-data-0 (locked: one a folder)
//!   -p N > 26695 ─> gRPC 127.0.0.1:0 (OS picks)  data folder cairn-data-N
//! ```
//!
//! A value given in the file, by a flag or by `-o` wins (`Config::from_matches` applies these
//! last, to the keys none of them set). An N whose gRPC port would pass 65535 gets a port the
//! OS picks, printed at start (`cairn grpc listening on ...`), so a memcached start line with a
//! high port still starts; `--grpc-listen` fixes it. The metrics endpoint and the flash tier are
//! off unless given, so they have no default to derive.

use std::path::PathBuf;

/// memcached's port, cairn's default.
pub const DEFAULT_PORT: u16 = 11211;

/// The gRPC port is the memcached port plus this (11211 + 38840 = 50051, gRPC's customary
/// port), as Redis's cluster bus is its port plus 10000.
pub const GRPC_PORT_OFFSET: u16 = 38840;

/// The host of the default gRPC address.
const GRPC_DEFAULT_HOST: &str = "127.0.0.1";

/// The gRPC port that goes with memcached port `port`: `port` + [`GRPC_PORT_OFFSET`], and 0
/// (the OS picks) for 0 and past 65535.
pub fn default_grpc_port(port: u16) -> u16 {
    port.checked_add(GRPC_PORT_OFFSET)
        .filter(|_| port != 0)
        .unwrap_or(0)
}

/// The default `grpc_listen` for memcached port `port`.
pub(super) fn default_grpc_listen(port: u16) -> String {
    format!("{GRPC_DEFAULT_HOST}:{}", default_grpc_port(port))
}

/// The default `data_dir` for memcached port `port`: `cairn-data` for 11211, `cairn-data-PORT`
/// for any other (`cairn-data-0` for 0).
pub fn default_data_dir(port: u16) -> PathBuf {
    match port {
        DEFAULT_PORT => PathBuf::from("cairn-data"),
        p => PathBuf::from(format!("cairn-data-{p}")),
    }
}
