//! The checks, over every crate of the workspace, and what they find.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt,
    path::{Path, PathBuf},
};

use crate::{
    graph::{self, Graph},
    lex,
    model::{self, Crate, ModPath, label},
    workspace,
};

/// Most lines a source file may have, its `#[cfg(test)]` modules not
/// counted.
pub const MAX_LINES: usize = 600;

/// Most cycles listed per component; past it, the shortest cycle through
/// each of its edges.
const MAX_CYCLES: usize = 12;

/// What the checks found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Findings {
    /// Each crate read, and its number of module files.
    pub crates: Vec<(String, usize)>,
    /// `crate-name: a -> b -> a` for each cycle between files, then the
    /// places of its edges, indented.
    pub file_cycles: Vec<String>,
    /// The same for each cycle between modules collapsed to their
    /// subtree, at every directory module.
    pub module_cycles: Vec<String>,
    /// `path (n lines)` for each source file over [`MAX_LINES`].
    pub long_files: Vec<String>,
}

impl Findings {
    /// Whether the workspace passes.
    pub fn is_empty(&self) -> bool {
        self.file_cycles.is_empty() && self.module_cycles.is_empty() && self.long_files.is_empty()
    }
}

impl fmt::Display for Findings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let long = format!("files over {MAX_LINES} lines (#[cfg(test)] modules not counted)");
        let sections = [
            ("import cycles between files", &self.file_cycles),
            (
                "import cycles between modules, each collapsed to its subtree (those not listed above)",
                &self.module_cycles,
            ),
            (long.as_str(), &self.long_files),
        ];
        for (title, lines) in sections {
            if !lines.is_empty() {
                let count = lines.iter().filter(|l| !l.starts_with([' ', '('])).count();
                writeln!(f, "{title}: {count}")?;
                for line in lines {
                    writeln!(f, "  {line}")?;
                }
            }
        }
        Ok(())
    }
}

/// A file's path from the workspace root.
fn shown(file: &Path, root: &Path) -> String {
    file.strip_prefix(root)
        .unwrap_or(file)
        .display()
        .to_string()
}

/// The cycles of a graph, as report lines: `crate: a -> b -> a`, and
/// under it, for each edge, `why` says where it comes from.
fn report(name: &str, graph: &Graph, why: &dyn Fn(&str, &str) -> String, out: &mut Vec<String>) {
    for component in graph::components(graph) {
        let (mut cycles, more) = graph::cycles_in(graph, &component, MAX_CYCLES);
        if more {
            out.push(format!(
                "({name}: more than {MAX_CYCLES} cycles among {{{}}}; the shortest through each edge follow)",
                component.join(", ")
            ));
            cycles = graph::covering_cycles(graph, &component);
        }
        for cycle in cycles {
            out.push(format!("{name}: {}", graph::show(&cycle)));
            for (i, from) in cycle.iter().enumerate() {
                let to = &cycle[(i + 1) % cycle.len()];
                out.push(format!("    {from} -> {to}: {}", why(from, to)));
            }
        }
    }
}

/// Each directory module (one with child module files, the root
/// included) and its children, collapsed.
fn levels(krate: &Crate) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let mut out: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
    for module in krate.modules.keys().filter(|m| !m.is_empty()) {
        for depth in 0..module.len() {
            out.entry(module[..depth].to_vec())
                .or_default()
                .insert(module[..=depth].to_vec());
        }
    }
    out
}

/// Checks one crate for cycles.
pub fn check_crate(krate: &Crate, root: &Path, findings: &mut Findings) {
    let name = &krate.name;
    let why = |from: &[String]| {
        let deps = &krate.modules[from].deps;
        move |to: &[String]| {
            deps.get(to).map_or_else(String::new, |w| {
                format!("{}:{} {}", shown(&w.file, root), w.line, w.path)
            })
        }
    };
    let by_label: BTreeMap<String, &ModPath> =
        krate.modules.keys().map(|m| (label(m), m)).collect();
    let files: Graph = krate
        .modules
        .iter()
        .map(|(m, module)| (label(m), module.deps.keys().map(|d| label(d)).collect()))
        .collect();
    let file_why = |from: &str, to: &str| why(by_label[from])(by_label[to]);
    report(name, &files, &file_why, &mut findings.file_cycles);

    for (level, children) in levels(krate) {
        let collapse = |m: &ModPath| -> Option<ModPath> {
            m.starts_with(&level)
                .then(|| m[..m.len().min(level.len() + 1)].to_vec())
        };
        let mut graph: Graph = children
            .iter()
            .map(|c| (label(c), BTreeSet::new()))
            .collect();
        graph.insert(label(&level), BTreeSet::new());
        let mut edges: BTreeMap<(String, String), Vec<(&ModPath, &ModPath)>> = BTreeMap::new();
        for (m, module) in &krate.modules {
            let Some(from) = collapse(m) else { continue };
            for dep in module.deps.keys() {
                match collapse(dep) {
                    Some(to) if to != from => {
                        graph.entry(label(&from)).or_default().insert(label(&to));
                        edges
                            .entry((label(&from), label(&to)))
                            .or_default()
                            .push((m, dep));
                    }
                    _ => {}
                }
            }
        }
        let module_why = |from: &str, to: &str| {
            let witnesses = edges
                .get(&(from.to_owned(), to.to_owned()))
                .map_or(&[][..], Vec::as_slice);
            let Some((m, dep)) = witnesses.first() else {
                return String::new();
            };
            let edge = format!("{} -> {}", label(m), label(dep));
            let mut shown = if edge == format!("{from} -> {to}") {
                why(m)(dep)
            } else {
                format!("{edge} at {}", why(m)(dep))
            };
            if witnesses.len() > 1 {
                shown.push_str(&format!(" (+{} more)", witnesses.len() - 1));
            }
            shown
        };
        let mut found = Vec::new();
        report(name, &graph, &module_why, &mut found);
        // A cycle of files that are each a child of `level` is listed once,
        // between files.
        let mut listed = false;
        for line in found {
            if !line.starts_with(' ') {
                listed = !line.starts_with('(') && findings.file_cycles.contains(&line);
            }
            if !listed {
                findings.module_cycles.push(line);
            }
        }
    }
}

/// The `.rs` files under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// Checks every crate of the workspace at `root`.
pub fn check(root: &Path) -> Findings {
    let mut findings = Findings::default();
    for member in workspace::members(root) {
        let mut test_code = Vec::new();
        for target in &member.targets {
            let krate = model::load(&target.name, &target.root);
            findings
                .crates
                .push((krate.name.clone(), krate.modules.len()));
            check_crate(&krate, root, &mut findings);
            test_code.extend(krate.test_code);
        }
        for file in rust_files(&member.dir.join("src")) {
            if test_code.iter().any(|t| file.starts_with(t)) {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            let lines = lex::parse(&text).lines;
            if lines > MAX_LINES {
                findings
                    .long_files
                    .push(format!("{} ({lines} lines)", shown(&file, root)));
            }
        }
    }
    findings
}
