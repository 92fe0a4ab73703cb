//! Embeds the web console (`console/`: plain HTML, CSS and JavaScript, no
//! build step) into the binary: writes `console_assets.rs` into OUT_DIR, a
//! table of every file's name and bytes, so `cargo install` needs no npm
//! and the running service reads no file.

use std::{env, fmt::Write as _, fs, path::PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?).join("console");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut names: Vec<String> = Vec::new();
    for entry in fs::read_dir(&dir)? {
        let entry = entry?;
        println!("cargo:rerun-if-changed={}", entry.path().display());
        if entry.file_type()?.is_file() {
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    names.sort();
    let mut out = String::from(
        "/// The console's files: name, bytes.\npub static ASSETS: &[(&str, &[u8])] = &[\n",
    );
    for name in &names {
        writeln!(
            out,
            "    ({name:?}, include_bytes!({:?})),",
            dir.join(name).display().to_string()
        )?;
    }
    out.push_str("];\n");
    fs::write(
        PathBuf::from(env::var("OUT_DIR")?).join("console_assets.rs"),
        out,
    )?;
    Ok(())
}
