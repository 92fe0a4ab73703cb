//! The crates of the workspace, read from its `Cargo.toml` files: the
//! members the root lists (a trailing `/*` globs), and each member's crate
//! roots (its library and its binaries).

use std::path::{Path, PathBuf};

/// A crate of a member: a library or a binary, and its root file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// How reports name it: the package, and `(bin name)` for a binary of
    /// a package with more than one crate.
    pub name: String,
    /// `src/lib.rs`, `src/main.rs`, `src/bin/name.rs`…
    pub root: PathBuf,
}

/// A member of the workspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Its directory.
    pub dir: PathBuf,
    /// Its package name.
    pub package: String,
    /// Its crates.
    pub targets: Vec<Target>,
}

/// The directory of the workspace `start` is in: the nearest one up with a
/// `Cargo.toml` that has a `[workspace]` table.
pub fn root_of(start: &Path) -> PathBuf {
    start
        .ancestors()
        .find(|dir| {
            std::fs::read_to_string(dir.join("Cargo.toml"))
                .is_ok_and(|toml| toml.lines().any(|l| l.trim() == "[workspace]"))
        })
        .unwrap_or(start)
        .to_path_buf()
}

/// The workspace to check: `BATON_LAYOUT_ROOT` if set (another checkout,
/// or this one when the crate is built outside it), else the one this
/// crate is in.
pub fn to_check() -> PathBuf {
    std::env::var_os("BATON_LAYOUT_ROOT").map_or_else(
        || root_of(Path::new(env!("CARGO_MANIFEST_DIR"))),
        PathBuf::from,
    )
}

/// A line without its comment.
fn uncommented(line: &str) -> &str {
    let mut quoted = false;
    for (i, c) in line.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '#' if !quoted => return &line[..i],
            _ => {}
        }
    }
    line
}

/// The lines of the table `[name]` (or of each `[[name]]`, one list per
/// entry), comments dropped.
fn tables(toml: &str, name: &str) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = Vec::new();
    let mut inside = false;
    for line in toml.lines().map(uncommented) {
        let trimmed = line.trim();
        if trimmed.starts_with('[') && !inside_array(&out, inside) {
            inside = trimmed == format!("[{name}]") || trimmed == format!("[[{name}]]");
            if inside {
                out.push(Vec::new());
            }
            continue;
        }
        if inside && let Some(table) = out.last_mut() {
            table.push(line.to_owned());
        }
    }
    out
}

/// Whether the table being read is in the middle of a multi-line array.
fn inside_array(out: &[Vec<String>], inside: bool) -> bool {
    inside
        && out.last().is_some_and(|table| {
            let text = table.join("\n");
            text.matches('[').count() > text.matches(']').count()
        })
}

/// The value of `key` in a table's lines: the strings of an array, or a
/// lone string.
fn strings(table: &[String], key: &str) -> Vec<String> {
    let text = table.join("\n");
    let mut at = 0;
    while let Some(i) = text[at..].find(key) {
        let start = at + i;
        at = start + key.len();
        let line_start = text[..start].rfind('\n').map_or(0, |n| n + 1);
        if !text[line_start..start].trim().is_empty() || !text[at..].trim_start().starts_with('=') {
            continue;
        }
        let value = text[at..].trim_start()[1..].trim_start();
        let value = if value.starts_with('[') {
            &value[..value.find(']').unwrap_or(value.len())]
        } else {
            value.lines().next().unwrap_or("")
        };
        return value
            .split('"')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect();
    }
    Vec::new()
}

/// The member directories `Cargo.toml` (the root's) lists, globs
/// expanded, exclusions left out.
pub fn member_dirs(root: &Path, toml: &str) -> Vec<PathBuf> {
    let workspace = tables(toml, "workspace")
        .into_iter()
        .next()
        .unwrap_or_default();
    let excluded: Vec<PathBuf> = strings(&workspace, "exclude")
        .iter()
        .map(|e| root.join(e))
        .collect();
    let mut out = Vec::new();
    for member in strings(&workspace, "members") {
        if let Some(parent) = member.strip_suffix("/*") {
            let mut found: Vec<PathBuf> = std::fs::read_dir(root.join(parent))
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .filter(|d| d.join("Cargo.toml").is_file())
                .collect();
            found.sort();
            out.extend(found);
        } else {
            out.push(root.join(member));
        }
    }
    out.retain(|dir| !excluded.contains(dir));
    out
}

/// A member's crates: the `[lib]` and `[[bin]]` its manifest names, and
/// those Cargo finds by convention (`src/lib.rs`, `src/main.rs`,
/// `src/bin/*.rs`, `src/bin/*/main.rs`).
pub fn member(dir: &Path) -> Member {
    let toml = std::fs::read_to_string(dir.join("Cargo.toml"))
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.join("Cargo.toml").display()));
    let package_table = tables(&toml, "package")
        .into_iter()
        .next()
        .unwrap_or_default();
    let package = strings(&package_table, "name")
        .into_iter()
        .next()
        .unwrap_or_else(|| {
            dir.file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
        });
    let first = |table: &[String], key: &str| strings(table, key).into_iter().next();
    let mut libs = Vec::new();
    for table in tables(&toml, "lib") {
        libs.push(dir.join(first(&table, "path").unwrap_or_else(|| "src/lib.rs".into())));
    }
    if libs.is_empty() && dir.join("src/lib.rs").is_file() {
        libs.push(dir.join("src/lib.rs"));
    }
    let mut bins: Vec<(String, PathBuf)> = Vec::new();
    for table in tables(&toml, "bin") {
        let name = first(&table, "name").unwrap_or_else(|| package.clone());
        let path = first(&table, "path").map_or_else(
            || {
                if name == package {
                    dir.join("src/main.rs")
                } else {
                    dir.join("src/bin").join(format!("{name}.rs"))
                }
            },
            |p| dir.join(p),
        );
        bins.push((name, path));
    }
    let mut found = vec![(package.clone(), dir.join("src/main.rs"))];
    let mut in_bin: Vec<PathBuf> = std::fs::read_dir(dir.join("src/bin"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect();
    in_bin.sort();
    for path in in_bin {
        let stem = path
            .file_stem()
            .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
        if path.extension().is_some_and(|e| e == "rs") {
            found.push((stem, path));
        } else if path.join("main.rs").is_file() {
            found.push((stem, path.join("main.rs")));
        }
    }
    for (name, path) in found {
        if path.is_file() && !bins.iter().any(|(_, p)| *p == path) && !libs.contains(&path) {
            bins.push((name, path));
        }
    }
    let single = libs.len() + bins.len() == 1;
    let mut targets: Vec<Target> = libs
        .into_iter()
        .map(|root| Target {
            name: package.clone(),
            root,
        })
        .collect();
    targets.extend(
        bins.into_iter()
            .filter(|(_, p)| p.is_file())
            .map(|(name, root)| Target {
                name: if single {
                    package.clone()
                } else {
                    format!("{package} (bin {name})")
                },
                root,
            }),
    );
    Member {
        dir: dir.to_path_buf(),
        package,
        targets,
    }
}

/// The members of the workspace at `root`.
pub fn members(root: &Path) -> Vec<Member> {
    let toml = std::fs::read_to_string(root.join("Cargo.toml"))
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", root.join("Cargo.toml").display()));
    member_dirs(root, &toml)
        .iter()
        .map(|dir| member(dir))
        .collect()
}
