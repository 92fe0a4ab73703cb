//! What `cargo install --path clients/rust/cli` ships (issue 30, item 12):
//! the workspace's release profile strips debug info (symbols kept, so
//! panics stay readable), and a release `baton`, when one was built, has
//! no `.debug_*` sections.

use std::path::Path;
use std::process::Command;

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(3)
        .expect("the workspace root")
}

#[test]
fn release_binaries_ship_without_debug_sections() {
    let manifest = std::fs::read_to_string(workspace().join("Cargo.toml")).expect("Cargo.toml");
    let release = manifest
        .split("\n[")
        .find(|t| t.starts_with("profile.release]"))
        .expect("[profile.release]");
    assert!(
        release
            .lines()
            .any(|l| l.split('#').next().unwrap_or_default().trim() == r#"strip = "debuginfo""#),
        "[profile.release] strips debug info:\n{release}"
    );
    let binary = workspace().join("target/release/baton");
    if !binary.exists() {
        return;
    }
    let sections = Command::new("readelf")
        .args(["-S", "--wide"])
        .arg(&binary)
        .output()
        .expect("readelf (binutils)");
    let sections = String::from_utf8_lossy(&sections.stdout);
    assert!(
        !sections.contains(".debug_info"),
        "{} has debug sections:\n{sections}",
        binary.display()
    );
    assert!(sections.contains(".symtab"), "symbols are kept");
}
