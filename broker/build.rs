//! Generates the metadata log's prost types from `src/metadata/metadata.proto`.
//!
//! Generated at build time rather than checked in, so the `.proto` is the one source of truth
//! and cannot drift from the code; `protoc-bin-vendored` supplies the compiler, so a fresh
//! machine builds with a plain `cargo build` and no system protobuf install.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    const PROTO: &str = "src/metadata/metadata.proto";
    println!("cargo:rerun-if-changed={PROTO}");
    prost_build::Config::new()
        .protoc_executable(protoc_bin_vendored::protoc_bin_path()?)
        // Configs are ordered maps in the domain types: decode straight into them.
        .btree_map(["."])
        .compile_protos(&[PROTO], &["src/metadata"])?;
    Ok(())
}
