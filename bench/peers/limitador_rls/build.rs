// Compiles the repository's own RLS protos (src/service/proto: the fields sluiced reads
// or writes, with Envoy's names and numbers) into a tonic server.
fn main() {
    let proto = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../src/service/proto");
    tonic_build::configure()
        .build_client(false)
        .compile_protos(&[format!("{proto}/envoy/service/ratelimit/v3/rls.proto")], &[proto.to_string()])
        .expect("compiling the RLS protos");
    println!("cargo:rerun-if-changed={proto}");
}
