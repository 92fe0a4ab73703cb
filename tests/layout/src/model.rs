//! A crate's modules (its files, found from its root through `mod name;`
//! declarations) and what each depends on.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

use crate::lex::{self, Parsed};

/// A module path under the crate root: `["run", "durable"]`; the root is
/// empty.
pub type ModPath = Vec<String>;

/// Where a dependency is written: the first place, enough to find it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Why {
    /// The file.
    pub file: PathBuf,
    /// Its line, from 1.
    pub line: usize,
    /// The path written there (a `use` tree expanded).
    pub path: String,
}

/// A module file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Module {
    /// Its file.
    pub file: PathBuf,
    /// The modules of the crate it depends on (never itself), and where.
    pub deps: BTreeMap<ModPath, Why>,
}

/// A crate: its module files from its root.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Crate {
    /// How reports name it.
    pub name: String,
    /// Its modules.
    pub modules: BTreeMap<ModPath, Module>,
    /// Files of `#[cfg(test)] mod name;` declarations, and the directories
    /// of their children: test code.
    pub test_code: Vec<PathBuf>,
}

/// How reports name a module: `run::durable`, or `crate` for the root.
pub fn label(module: &[String]) -> String {
    if module.is_empty() {
        "crate".to_owned()
    } else {
        module.join("::")
    }
}

/// The module a path names, seen from `module` (a file module, and the
/// inline modules around the path): the deepest module file among
/// `known` it goes through. `None` for another crate's path (`std::…`,
/// `baton_proto::…`) or a local item (`Self::…`, `Enum::Variant`).
pub fn resolve(path: &str, module: &[String], known: &BTreeSet<ModPath>) -> Option<ModPath> {
    let segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let (mut full, rest): (ModPath, &[&str]) = match *segments.first()? {
        "crate" => (Vec::new(), &segments[1..]),
        "self" => (module.to_vec(), &segments[1..]),
        "super" => {
            let mut base = module.to_vec();
            let ups = segments.iter().take_while(|s| **s == "super").count();
            for _ in 0..ups {
                base.pop()?;
            }
            (base, &segments[ups..])
        }
        // A child module named without `self::` (`pub use child::X`).
        first if known.contains(&[module, &[first.to_owned()]].concat()) => {
            (module.to_vec(), &segments[..])
        }
        _ => return None,
    };
    full.extend(rest.iter().map(|s| (*s).to_owned()));
    (0..=full.len())
        .rev()
        .map(|n| full[..n].to_vec())
        .find(|candidate| known.contains(candidate))
}

/// Where the files of the modules a file declares are: beside a crate
/// root or a `mod.rs`, else in the directory named as the file.
fn children_dir(file: &Path, is_root: bool) -> PathBuf {
    let dir = file.parent().unwrap_or(Path::new("")).to_path_buf();
    if is_root || file.file_name().is_some_and(|n| n == "mod.rs") {
        dir
    } else {
        dir.join(file.file_stem().unwrap_or_default())
    }
}

/// Builds a crate from the files its root declares, and their
/// dependencies from `read` (a file's text).
pub fn build(name: &str, root: &Path, read: &dyn Fn(&Path) -> Option<String>) -> Crate {
    let mut krate = Crate {
        name: name.to_owned(),
        ..Crate::default()
    };
    let mut parsed: BTreeMap<ModPath, (PathBuf, Parsed)> = BTreeMap::new();
    let mut queue: Vec<(ModPath, PathBuf, bool)> = vec![(Vec::new(), root.to_path_buf(), true)];
    while let Some((module, file, is_root)) = queue.pop() {
        if parsed.contains_key(&module) {
            continue;
        }
        let Some(text) = read(&file) else { continue };
        let found = lex::parse(&text);
        let dir = children_dir(&file, is_root);
        for decl in &found.mods {
            let dir = decl.scope.iter().fold(dir.clone(), |d, s| d.join(s));
            let candidates = [
                dir.join(format!("{}.rs", decl.name)),
                dir.join(&decl.name).join("mod.rs"),
            ];
            let Some(child) = candidates.into_iter().find(|f| read(f).is_some()) else {
                continue; // generated, or behind a `#[path]`
            };
            if decl.test {
                krate.test_code.push(children_dir(&child, false));
                krate.test_code.push(child);
                continue;
            }
            queue.push((
                [
                    module.as_slice(),
                    &decl.scope,
                    std::slice::from_ref(&decl.name),
                ]
                .concat(),
                child,
                false,
            ));
        }
        parsed.insert(module, (file, found));
    }
    let known: BTreeSet<ModPath> = parsed.keys().cloned().collect();
    for (module, (file, found)) in parsed {
        let mut deps = BTreeMap::new();
        for r in found.paths {
            let here = [module.as_slice(), &r.scope].concat();
            let Some(dep) = resolve(&r.path, &here, &known) else {
                continue;
            };
            if dep != module {
                deps.entry(dep).or_insert_with(|| Why {
                    file: file.clone(),
                    line: r.line,
                    path: r.path,
                });
            }
        }
        krate.modules.insert(module, Module { file, deps });
    }
    krate
}

/// Reads a crate from disk.
pub fn load(name: &str, root: &Path) -> Crate {
    build(name, root, &|file| std::fs::read_to_string(file).ok())
}
