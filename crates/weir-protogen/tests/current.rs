//! The committed gRPC code is what the `.proto` files generate: fails, naming the stale file
//! and the command that regenerates it, when someone edited a `.proto` and forgot.

#[test]
fn the_committed_generated_code_is_current() {
    let out = tempfile::tempdir().unwrap();
    weir_protogen::generate(out.path()).unwrap();
    for p in weir_protogen::PROTOS {
        let fresh = std::fs::read_to_string(out.path().join(format!("{}.rs", p.package))).unwrap();
        let committed_path = weir_protogen::weir_crate().join(p.generated);
        let committed = std::fs::read_to_string(&committed_path).unwrap_or_default();
        assert!(
            fresh == committed,
            "{} is not what {} generates: run `cargo run -p weir-protogen` and commit the result",
            committed_path.display(),
            p.proto
        );
    }
}
