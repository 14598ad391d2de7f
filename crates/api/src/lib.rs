//! cairn-api: cairn's gRPC API as generated code, and nothing else: the prost messages, the
//! tonic clients and service traits of `proto/cairn/v1/*.proto` (compiled in build.rs by
//! protox, pure Rust, no protoc), and the encoded descriptors for server reflection.
//!
//! ```text
//!   proto/cairn/v1/{kv,watch,replication}.proto ── build.rs (protox + tonic-prost-build)
//!       └──> pb: messages, kv_client / watch_client / replication_client, kv_server / ...
//!            pb::FILE_DESCRIPTOR_SET
//!   users: crates/grpc (the services), crates/watch (the event bytes it pre-encodes),
//!          crates/cluster (a replica's watch and replication clients), crates/bench and the
//!          tests (clients)
//! ```
//!
//! Non-goals: no cairn crate below it, no server code, no transport set-up: a client needs
//! only this crate (and tonic) to speak to cairn.

pub mod pb;
