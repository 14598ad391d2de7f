//! The generated gRPC clients `cairn-bench grpc` speaks: cairn.v1.KV (from
//! `proto/cairn/v1/kv.proto`) and grpc.health.v1.Health. This is the only file that names the
//! crate providing cairn's generated client, so moving to another crate (the generated API on
//! its own, without the server stack) is the first `pub use` line here and Cargo.toml.
//!
//! Non-goals: wrapping the clients; the rest of grpc/ calls them as generated.

pub use cairn_grpc::pb::{kv_client::KvClient, GetRequest, SetRequest};
pub use tonic_health::pb::{health_client::HealthClient, HealthCheckRequest};
