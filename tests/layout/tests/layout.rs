//! The shape of every crate of the workspace (see the crate's docs): no
//! import cycle between files, none between modules at any level, no
//! source file over 600 lines. Then the checker's own tests.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

use baton_layout::{
    Findings, MAX_LINES, check,
    check::check_crate,
    graph::{self, Graph},
    lex::{self, ModDecl},
    model::{self, resolve},
    workspace,
};

#[test]
fn every_crate_has_no_import_cycle_and_no_long_file() {
    let findings = check(&workspace::to_check());
    assert!(findings.is_empty(), "{findings}");
}

#[test]
fn every_member_of_the_workspace_is_read() {
    let root = workspace::to_check();
    let members = workspace::members(&root);
    for dir in [
        "proto",
        "services/orchestrator",
        "clients/rust/cli",
        "tests",
        "tests/bench",
        "tests/layout",
    ] {
        let member = members.iter().find(|m| m.dir == root.join(dir));
        let member = member.unwrap_or_else(|| panic!("{dir} is not read as a member: {members:?}"));
        assert!(!member.targets.is_empty(), "{dir} has no crate");
    }
    let orchestrator = model::load(
        "baton-orchestrator",
        &root.join("services/orchestrator/src/lib.rs"),
    );
    assert!(
        orchestrator.modules.len() > 20,
        "found only {} modules",
        orchestrator.modules.len()
    );
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

fn module(path: &str) -> Vec<String> {
    path.split("::")
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_checker_sees_a_cycle() {
    let mut graph = Graph::new();
    graph.insert("a".into(), BTreeSet::from(["b".into()]));
    graph.insert("b".into(), BTreeSet::from(["a".into(), "c".into()]));
    graph.insert("c".into(), BTreeSet::new());
    let components = graph::components(&graph);
    assert_eq!(components, vec![strings(&["a", "b"])]);
    let (cycles, more) = graph::cycles_in(&graph, &components[0], 12);
    assert_eq!((cycles.clone(), more), (vec![strings(&["a", "b"])], false));
    assert_eq!(graph::show(&cycles[0]), "a -> b -> a");

    // Two cycles through `a`, each listed; past the limit, one cycle per edge.
    graph.insert("c".into(), BTreeSet::from(["a".into()]));
    let component = strings(&["a", "b", "c"]);
    assert_eq!(graph::components(&graph), vec![component.clone()]);
    let (cycles, more) = graph::cycles_in(&graph, &component, 12);
    assert_eq!(
        (cycles, more),
        (vec![strings(&["a", "b"]), strings(&["a", "b", "c"])], false)
    );
    assert!(graph::cycles_in(&graph, &component, 1).1);
    assert_eq!(
        graph::covering_cycles(&graph, &component),
        vec![strings(&["a", "b"]), strings(&["a", "b", "c"])]
    );

    assert_eq!(
        lex::expand("crate::{a::{B, c::D}, e}"),
        ["crate::a::B", "crate::a::c::D", "crate::e"]
    );
}

#[test]
fn paths_resolve_to_the_deepest_module_file_they_name() {
    let known: BTreeSet<Vec<String>> = ["", "run", "run::log", "run::registry", "services"]
        .iter()
        .map(|m| module(m))
        .collect();
    let here = module("run::registry");
    let cases = [
        ("super::log::Logged", Some("run::log")),
        ("crate::run::Thing", Some("run")),
        ("crate::run::log::Chunked::new", Some("run::log")),
        ("super::Thing", Some("run")),
        ("super::super::SERVICE_NAME", Some("")),
        ("crate::SERVICE_NAME", Some("")),
        ("self::Item", Some("run::registry")),
        ("std::sync::Arc", None),
        ("baton_proto::v1", None),
        ("Self::new", None),
        ("super::super::super::Nowhere", None),
    ];
    for (path, want) in cases {
        assert_eq!(resolve(path, &here, &known), want.map(module), "{path}");
    }
    // A child named without `self::`: from its parent only.
    assert_eq!(
        resolve("log::Logged", &module("run"), &known),
        Some(module("run::log"))
    );
    assert_eq!(
        resolve("services::Shared", &[], &known),
        Some(module("services"))
    );
    assert_eq!(resolve("log::info", &here, &known), None);
    // Inside `mod inline { … }` of `run::registry`, `super` is the file.
    assert_eq!(
        resolve("super::Item", &module("run::registry::inline"), &known),
        Some(here)
    );
}

#[test]
fn only_code_outside_test_modules_is_read() {
    let text = r##"//! Docs naming crate::doc::Link and `use crate::doc;`.
use std::sync::Arc;
use crate::{a::{B, c::D as E}, f::{self, G}};
/* block /* nested */ use crate::block; */
pub(in crate::vis) fn f<'a>(x: &'a str) -> char {
    let _ = "use crate::string; crate::string::X";
    let _ = r#"crate::raw "quoted" "#;
    let _ = '"';
    let _ = b'\'';
    let _: Vec<u8> = x.bytes().collect::<Vec<_>>();
    super::sibling::call();
    child::run();
    'x'
}
mod inline {
    use super::Local;
    mod nested;
}
mod declared;
#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod testing {
    use crate::test_only;
}
#[cfg(test)]
mod tests;
fn after() { self::helper(); }
#[cfg(test)]
mod tests_inline {
    use super::*;
    fn t() { crate::in_tests(); }
}
"##;
    let parsed = lex::parse(text);
    let paths: Vec<(String, String)> = parsed
        .paths
        .iter()
        .map(|p| (p.scope.join("::"), p.path.clone()))
        .collect();
    let want: Vec<(String, String)> = [
        ("", "std::sync::Arc"),
        ("", "crate::a::B"),
        ("", "crate::a::c::D"),
        ("", "crate::f"),
        ("", "crate::f::G"),
        ("", "super::sibling::call"),
        ("", "child::run"),
        ("inline", "super::Local"),
        ("", "self::helper"),
    ]
    .iter()
    .map(|(s, p)| ((*s).to_owned(), (*p).to_owned()))
    .collect();
    assert_eq!(paths, want);
    assert_eq!(parsed.paths[1].line, 3);
    let decl = |scope: &[&str], name: &str, test| ModDecl {
        scope: strings(scope),
        name: name.to_owned(),
        test,
    };
    assert_eq!(
        parsed.mods,
        [
            decl(&["inline"], "nested", false),
            decl(&[], "declared", false),
            decl(&[], "tests", true)
        ]
    );
    // The test modules' 5 + 2 + 5 lines are not counted.
    assert_eq!(parsed.lines, text.lines().count() - 12);
}

/// A crate from files in memory.
fn crate_of(files: &[(&str, &str)]) -> model::Crate {
    let files: BTreeMap<PathBuf, String> = files
        .iter()
        .map(|(p, t)| (PathBuf::from(p), (*t).to_owned()))
        .collect();
    model::build("demo", Path::new("src/lib.rs"), &|f: &Path| {
        files.get(f).cloned()
    })
}

fn cycle_lines(lines: &[String]) -> Vec<&str> {
    lines
        .iter()
        .filter(|l| !l.starts_with([' ', '(']))
        .map(String::as_str)
        .collect()
}

#[test]
fn modules_collapse_to_their_subtree_at_every_level() {
    let krate = crate_of(&[
        (
            "src/lib.rs",
            "mod agent; mod catalog; mod model; mod pipeline; mod run; mod services; mod store; mod tools;\n\
             pub const SERVICE_NAME: &str = \"demo\";\n\
             use crate::services::Services;",
        ),
        (
            "src/services.rs",
            "pub fn name() -> &'static str { crate::SERVICE_NAME }",
        ),
        // agent <-> pipeline through their children only: no file cycle.
        ("src/agent/mod.rs", "pub mod frame;\npub struct Policy;"),
        ("src/agent/frame.rs", "use crate::pipeline::run::Step;"),
        ("src/pipeline/mod.rs", "pub mod plan;\npub mod run;"),
        ("src/pipeline/run.rs", "use super::plan::Plan;"),
        ("src/pipeline/plan.rs", "use crate::agent::Policy;"),
        // catalog -> model -> tools -> catalog.
        (
            "src/catalog/mod.rs",
            "pub mod names;\nuse crate::model::settings::Settings;",
        ),
        ("src/catalog/names.rs", "pub const NAME: &str = \"n\";"),
        ("src/model/mod.rs", "pub mod settings;"),
        ("src/model/settings.rs", "use crate::tools::Tool;"),
        ("src/tools.rs", "use crate::catalog::names::NAME;"),
        // Inside run/: a file cycle, and one with the parent.
        (
            "src/run/mod.rs",
            "pub mod durable;\npub mod leases;\npub use durable::D;\npub struct R;",
        ),
        ("src/run/durable.rs", "use super::{leases::Lease, R};"),
        ("src/run/leases.rs", "use super::durable::D;"),
        // Inside store/: a <-> b through a's child.
        ("src/store/mod.rs", "mod a;\nmod b;"),
        ("src/store/a/mod.rs", "mod x;\npub struct A;"),
        ("src/store/a/x.rs", "use crate::store::b::B;"),
        ("src/store/b.rs", "use super::a::A;"),
    ]);
    assert_eq!(krate.modules.len(), 19);
    let mut findings = Findings::default();
    check_crate(&krate, Path::new(""), &mut findings);
    assert_eq!(
        cycle_lines(&findings.file_cycles),
        [
            "demo: crate -> services -> crate",
            "demo: run -> run::durable -> run",
            "demo: run::durable -> run::leases -> run::durable",
        ]
    );
    assert_eq!(
        findings.file_cycles[1..3],
        [
            "    crate -> services: src/lib.rs:3 crate::services::Services",
            "    services -> crate: src/services.rs:1 crate::SERVICE_NAME",
        ]
    );
    // The cycles of files that are each a child of one module are not
    // listed again.
    assert_eq!(
        cycle_lines(&findings.module_cycles),
        [
            "demo: agent -> pipeline -> agent",
            "demo: catalog -> model -> tools -> catalog",
            "demo: store::a -> store::b -> store::a",
        ]
    );
    assert_eq!(
        findings.module_cycles[1..3],
        [
            "    agent -> pipeline: agent::frame -> pipeline::run at src/agent/frame.rs:1 crate::pipeline::run::Step",
            "    pipeline -> agent: pipeline::plan -> agent at src/pipeline/plan.rs:1 crate::agent::Policy",
        ]
    );
}

fn write(root: &Path, files: &[(&str, String)]) {
    for (path, text) in files {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("create the directory");
        std::fs::write(&path, text).expect("write");
    }
}

#[test]
fn a_workspace_is_checked_whole() {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("layout-workspace");
    let _ = std::fs::remove_dir_all(&root);
    let lines = |n: usize| "fn f() {}\n".repeat(n);
    write(
        &root,
        &[
            (
                "Cargo.toml",
                "[workspace]\nmembers = [\n    \"one\", # the first\n    \"many/*\",\n]\nexclude = [\"many/skipped\"]\n\n\
                 [workspace.package]\nversion = \"0.1.0\"\n"
                    .into(),
            ),
            ("one/Cargo.toml", "[package]\nname = \"one\"\n\n[[bin]]\nname = \"tool\"\npath = \"src/main.rs\"\n".into()),
            ("one/src/lib.rs", "mod helper;\nmod long;\n#[cfg(test)]\nmod tests;\n".into()),
            ("one/src/long.rs", lines(MAX_LINES + 1)),
            ("one/src/helper.rs", format!("{}#[cfg(test)]\nmod tests {{\n{}}}\n", lines(590), lines(50))),
            ("one/src/tests.rs", lines(700)),
            ("one/src/main.rs", "use cli::run;\nmod cli;\npub const X: u8 = 1;\nfn main() { run() }\n".into()),
            ("one/src/cli.rs", "use crate::X;\npub fn run() {}\n".into()),
            ("many/two/Cargo.toml", "[package]\nname = \"two\"\n".into()),
            ("many/two/src/lib.rs", "pub mod x;\n".into()),
            ("many/two/src/x.rs", "pub fn x() {}\n".into()),
            ("many/two/src/bin/extra.rs", "fn main() {}\n".into()),
            ("many/skipped/Cargo.toml", "[package]\nname = \"skipped\"\n".into()),
            ("many/skipped/src/lib.rs", lines(700)),
        ],
    );
    let findings = check(&root);
    let crates: Vec<(&str, usize)> = findings
        .crates
        .iter()
        .map(|(n, c)| (n.as_str(), *c))
        .collect();
    assert_eq!(
        crates,
        [
            ("one", 3),
            ("one (bin tool)", 2),
            ("two", 2),
            ("two (bin extra)", 1)
        ]
    );
    assert_eq!(
        findings.file_cycles,
        [
            "one (bin tool): cli -> crate -> cli",
            "    cli -> crate: one/src/cli.rs:1 crate::X",
            "    crate -> cli: one/src/main.rs:1 cli::run",
        ]
    );
    assert!(findings.module_cycles.is_empty(), "{findings}");
    assert_eq!(
        findings.long_files,
        [format!("one/src/long.rs ({} lines)", MAX_LINES + 1)]
    );
    let report = findings.to_string();
    assert!(
        report.contains("import cycles between files: 1\n  one (bin tool): cli -> crate -> cli\n"),
        "{report}"
    );
}
