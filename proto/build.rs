//! Compiles `proto/caesar/v1/*.proto` with protox, so no system protoc is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let fds = protox::compile(["caesar/v1/caesar.proto"], ["proto"])?;
    // Decode errors are the sender's: INVALID_ARGUMENT (`src/codec.rs`).
    // Default stubs (UNIMPLEMENTED): a Kubernetes pod's return-channel relay
    // serves only the channel's calls and Ping (issue 16); the daemon's
    // service implements every call, which its tests exercise.
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .generate_default_stubs(true)
        .codec_path("crate::codec::ArgCodec")
        .compile_fds(fds)?;
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
