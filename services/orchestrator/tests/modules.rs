//! The shape of the crate, checked: no import cycle among its modules (a
//! file is a module) and no source file over 600 lines.
//!
//! Dependencies are read from the source: every `use` tree and every
//! `crate::`, `super::` or `self::` path outside a `#[cfg(test)]` module,
//! resolved to the deepest module file it names. A `mod child;` declaration
//! is not a dependency; a `pub use child::X` is.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

/// Most lines a source file of the crate may have.
const MAX_LINES: usize = 600;

fn sources() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("read src") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut out);
    out.sort();
    out
}

/// `src/a/b.rs` and `src/a/b/mod.rs` are `a::b`; `src/lib.rs` is `crate`.
fn module_of(file: &Path) -> Vec<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let rel = file.strip_prefix(&src).expect("under src");
    let mut parts: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The code of a file without comments and without its test module.
fn code_of(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(test)]")
            && lines
                .peek()
                .is_some_and(|next| next.trim_start().starts_with("mod "))
        {
            break;
        }
        if trimmed.starts_with("//") {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Expands `a::{b, c::{d, e}}` into `a::b`, `a::c::d`, `a::c::e`.
fn expand(tree: &str) -> Vec<String> {
    let tree: String = tree.chars().filter(|c| !c.is_whitespace()).collect();
    fn go(prefix: &str, tree: &str, out: &mut Vec<String>) {
        let Some(open) = tree.find('{') else {
            out.push(format!("{prefix}{tree}"));
            return;
        };
        let head = &tree[..open];
        let inner = &tree[open + 1..tree.rfind('}').expect("balanced braces")];
        let (mut depth, mut start) = (0, 0);
        let mut items = Vec::new();
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    items.push(&inner[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        items.push(&inner[start..]);
        for item in items.into_iter().filter(|i| !i.is_empty()) {
            go(&format!("{prefix}{head}"), item, out);
        }
    }
    let mut out = Vec::new();
    go("", &tree, &mut out);
    out
}

/// Every module path the code names.
fn paths_in(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    // `use` trees (braces included).
    while let Some(at) = rest.find("use ") {
        let before_ok = at == 0
            || !rest.as_bytes()[at - 1].is_ascii_alphanumeric() && rest.as_bytes()[at - 1] != b'_';
        let tail = &rest[at + 4..];
        let Some(end) = tail.find(';') else { break };
        if before_ok {
            out.extend(expand(&tail[..end]));
        }
        rest = &tail[end..];
    }
    // Paths written inline.
    let bytes = code.as_bytes();
    for root in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(root) {
            let at = from + i;
            from = at + root.len();
            if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
                continue;
            }
            let end = code[at..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .map_or(code.len(), |e| at + e);
            out.push(code[at..end].trim_end_matches(':').to_owned());
        }
    }
    out
}

/// The module file a path names, seen from `module`.
fn resolve(path: &str, module: &[String], known: &BTreeSet<Vec<String>>) -> Option<Vec<String>> {
    let mut segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    // The module `self::` and `super::` are relative to.
    let mut base: Vec<String> = module.to_vec();
    match segments.first().copied() {
        Some("crate") => {
            base.clear();
            segments.remove(0);
        }
        Some("self") => {
            segments.remove(0);
        }
        Some("super") => {
            while segments.first() == Some(&"super") {
                segments.remove(0);
                base.pop()?;
            }
        }
        // A child module named without `self::` (as `pub use child::X`).
        Some(first) if known.contains(&[module, &[first.to_owned()]].concat()) => {}
        _ => return None, // an external crate
    }
    let mut full = base;
    full.extend(segments.iter().map(|s| (*s).to_owned()));
    (0..=full.len())
        .rev()
        .map(|n| full[..n].to_vec())
        .find(|candidate| known.contains(candidate))
}

fn graph() -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let files = sources();
    let known: BTreeSet<Vec<String>> = files.iter().map(|f| module_of(f)).collect();
    let mut graph = BTreeMap::new();
    for file in &files {
        let module = module_of(file);
        let code = code_of(&std::fs::read_to_string(file).expect("read"));
        let deps: BTreeSet<Vec<String>> = paths_in(&code)
            .iter()
            .filter_map(|p| resolve(p, &module, &known))
            // A module's own items, and `crate` itself (lib.rs's free
            // functions are the crate's entry points, used by main.rs only).
            .filter(|d| *d != module && !d.is_empty())
            .collect();
        graph.insert(module, deps);
    }
    graph
}

/// Strongly connected components with more than one module (Tarjan).
fn cycles(graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<Vec<String>> {
    struct State<'g> {
        graph: &'g BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<&'g Vec<String>, usize>,
        low: BTreeMap<&'g Vec<String>, usize>,
        stack: Vec<&'g Vec<String>>,
        on_stack: BTreeSet<&'g Vec<String>>,
        out: Vec<Vec<String>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g Vec<String>) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flatten() {
            let Some((w, _)) = s.graph.get_key_value(w) else {
                continue;
            };
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            loop {
                let w = s.stack.pop().expect("on stack");
                s.on_stack.remove(w);
                component.push(w.join("::"));
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.out.push(component);
            }
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !state.index.contains_key(v) {
            visit(&mut state, v);
        }
    }
    state.out
}

#[test]
fn no_import_cycle_among_the_modules() {
    let graph = graph();
    assert!(graph.len() > 20, "found only {} modules", graph.len());
    let found = cycles(&graph);
    let report: Vec<String> = found
        .iter()
        .map(|c| {
            let edges: Vec<String> = c
                .iter()
                .flat_map(|m| {
                    let from: Vec<String> = m.split("::").map(str::to_owned).collect();
                    graph[&from]
                        .iter()
                        .filter(|d| c.contains(&d.join("::")))
                        .map(move |d| format!("{m} -> {}", d.join("::")))
                })
                .collect();
            edges.join(", ")
        })
        .collect();
    assert!(found.is_empty(), "import cycles:\n{}", report.join("\n"));
}

#[test]
fn the_checker_sees_a_cycle() {
    let mut graph = BTreeMap::new();
    let a = vec!["a".to_owned()];
    let b = vec!["b".to_owned()];
    let c = vec!["c".to_owned()];
    graph.insert(a.clone(), BTreeSet::from([b.clone()]));
    graph.insert(b.clone(), BTreeSet::from([a.clone(), c.clone()]));
    graph.insert(c.clone(), BTreeSet::new());
    assert_eq!(cycles(&graph), vec![vec!["a".to_owned(), "b".to_owned()]]);
    assert_eq!(
        expand("crate::{a::{B, c::D}, e}"),
        ["crate::a::B", "crate::a::c::D", "crate::e"]
    );
    let known = BTreeSet::from([
        vec!["run".to_owned()],
        vec!["run".to_owned(), "log".to_owned()],
    ]);
    let here = ["run".to_owned(), "registry".to_owned()];
    assert_eq!(
        resolve("super::log::Logged", &here, &known),
        Some(vec!["run".to_owned(), "log".to_owned()])
    );
    assert_eq!(
        resolve("crate::run::Thing", &here, &known),
        Some(vec!["run".to_owned()])
    );
}

#[test]
fn no_source_file_over_600_lines() {
    let long: Vec<String> = sources()
        .iter()
        .filter_map(|f| {
            let n = std::fs::read_to_string(f).expect("read").lines().count();
            (n > MAX_LINES).then(|| format!("{} ({n} lines)", f.display()))
        })
        .collect();
    assert!(long.is_empty(), "files over {MAX_LINES} lines: {long:?}");
}
