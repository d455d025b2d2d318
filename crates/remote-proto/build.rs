//! Compiles proto/offload.proto with protox (pure Rust: no protoc binary needed).

fn main() {
    println!("cargo:rerun-if-changed=proto/offload.proto");
    let fds = protox::compile(["proto/offload.proto"], ["proto"]).expect("proto/offload.proto compiles");
    tonic_prost_build::configure().bytes(".").compile_fds(fds).expect("generate the gRPC stubs");
}
