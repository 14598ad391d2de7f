//! The generated messages and services of `cairn.v1` (build.rs), and the encoded descriptors
//! of the .proto files.

tonic::include_proto!("cairn.v1");

/// The encoded descriptors of the .proto files, for server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/cairn_descriptor.bin"));
