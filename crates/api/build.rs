//! Compiles `proto/cairn/v1/*.proto` with protox (pure Rust, no protoc) and generates the
//! tonic services and prost messages. The encoded descriptor set is kept in OUT_DIR for
//! gRPC reflection.

use std::path::PathBuf;

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let files = [
        "cairn/v1/kv.proto",
        "cairn/v1/watch.proto",
        "cairn/v1/replication.proto",
    ];
    for f in files {
        println!("cargo:rerun-if-changed={}", root.join(f).display());
    }
    let fds = protox::compile(files, [&root])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("cairn_descriptor.bin"), fds.encode_to_vec())?;
    tonic_prost_build::configure()
        .bytes(".")
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
