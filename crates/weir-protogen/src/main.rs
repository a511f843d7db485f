//! `cargo run -p weir-protogen`: writes the generated gRPC code into `crates/weir/src`.

fn main() -> anyhow::Result<()> {
    let tmp = std::env::temp_dir().join(format!("weir-protogen-{}", std::process::id()));
    std::fs::create_dir_all(&tmp)?;
    weir_protogen::generate(&tmp)?;
    for p in weir_protogen::PROTOS {
        let to = weir_protogen::weir_crate().join(p.generated);
        if let Some(dir) = to.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::copy(tmp.join(format!("{}.rs", p.package)), &to)?;
        println!("wrote {}", to.display());
    }
    std::fs::remove_dir_all(&tmp)?;
    Ok(())
}
