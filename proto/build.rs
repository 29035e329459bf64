//! Compiles `proto/caesar/v1/*.proto` with protox, so no system protoc is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let fds = protox::compile(["caesar/v1/caesar.proto"], ["proto"])?;
    // Decode errors are the sender's: INVALID_ARGUMENT (`src/codec.rs`).
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .codec_path("crate::codec::ArgCodec")
        .compile_fds(fds)?;
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
