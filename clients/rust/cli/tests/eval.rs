//! `baton eval` as CI runs it: the example dataset passes on the example
//! agents; a candidate that breaks a case exits 1; `baton eval compare`
//! exits 1 on the regression and writes JUnit XML that a JUnit parser
//! nobody here wrote (Python's junitparser) reads — one failure, named; a
//! comparison without regression exits 0. Lines fit 80 columns.

use std::process::{Command, Output};

fn baton(endpoint: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(args)
        .env("BATON_ENDPOINT", endpoint)
        .env("COLUMNS", "80")
        .output()
        .expect("baton")
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// What junitparser reads of `path`: tests, failures, and each failed
/// case's name and message.
fn junit(path: &std::path::Path) -> serde_json::Value {
    let script = r#"
import json, sys
from junitparser import JUnitXml, Failure
xml = JUnitXml.fromfile(sys.argv[1])
out = {"tests": 0, "failures": 0, "failed": []}
for suite in xml:
    out["tests"] += suite.tests
    out["failures"] += suite.failures
    for case in suite:
        for r in case.result:
            if isinstance(r, Failure):
                out["failed"].append({"name": case.name, "message": r.message})
print(json.dumps(out))
"#;
    let out = Command::new(baton_e2e::servers::servers_python())
        .args(["-c", script])
        .arg(path)
        .output()
        .expect("python");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_exits_non_zero_on_a_regression_and_writes_junit_a_parser_reads() {
    // The example agents, and `assistant` changed into a shouting one.
    let changed = baton_e2e::EXAMPLE_AGENTS.replace(
        "    - text: \"You said: {{input}}\"",
        "    - text: \"YOU SAID: {{input}}\"",
    );
    assert_ne!(changed, baton_e2e::EXAMPLE_AGENTS);
    let before = baton_e2e::OrchestratorServer::start(baton_e2e::EXAMPLE_AGENTS, None, |_| {})
        .await
        .expect("orchestrator");
    let dir = tempfile::tempdir().expect("dir");
    let dataset = baton_e2e::servers::repo_root().join("deploy/config/evals/examples.jsonl");
    let dataset = dataset.to_string_lossy().into_owned();
    let endpoint = before.endpoint();
    let base = tokio::task::spawn_blocking({
        let dataset = dataset.clone();
        move || baton(&endpoint, &["eval", &dataset, "--name", "main"])
    })
    .await
    .expect("join");
    let (stdout, stderr) = text(&base);
    assert!(base.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("✓ assistant-echo"), "{stdout}");
    assert!(
        stdout.contains("4 cases: 4 passed, 0 failed, 0 errors"),
        "{stdout}"
    );
    for line in stdout.lines().chain(stderr.lines()) {
        assert!(
            line.chars().count() <= 80,
            "wider than 80 columns: {line:?}"
        );
    }

    // Against the changed agents (another orchestrator): the echo case
    // fails, the run exits 1 and its JUnit names the failure.
    let after = baton_e2e::OrchestratorServer::start(&changed, None, |_| {})
        .await
        .expect("orchestrator");
    let endpoint = after.endpoint();
    let junit_run = dir.path().join("run.xml");
    let junit_compare = dir.path().join("compare.xml");
    let (jr, jc) = (junit_run.clone(), junit_compare.clone());
    let outs = tokio::task::spawn_blocking(move || {
        let b = baton(&endpoint, &["eval", &dataset, "--name", "main"]);
        let c = baton(
            &endpoint,
            &[
                "eval",
                &dataset,
                "--name",
                "pr-42",
                "--junit",
                jr.to_str().expect("path"),
            ],
        );
        (b, c)
    })
    .await
    .expect("join");
    let (main_after, candidate) = outs;
    assert_eq!(main_after.status.code(), Some(1));
    let (stdout, stderr) = text(&candidate);
    assert_eq!(candidate.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stdout.contains("✗ assistant-echo"), "{stdout}");
    assert!(
        stdout.contains("    exact: expected \"You said: hello\", got \"YOU SAID: hello\""),
        "{stdout}"
    );
    assert!(
        stderr.contains("error: 1 of 4 cases did not pass"),
        "{stderr}"
    );
    let read = junit(&junit_run);
    assert_eq!(read["tests"], 4);
    assert_eq!(read["failures"], 1);
    assert_eq!(read["failed"][0]["name"], "assistant-echo");

    // On the first orchestrator, its agents file changed (reloaded in
    // place): `pr-42` there regresses `main`'s echo case.
    before
        .core
        .reload(
            std::sync::Arc::new(
                baton_orchestrator::catalog::Catalog::from_yaml(&changed).expect("catalog"),
            ),
            &|_| None,
        )
        .expect("reload");
    let endpoint = before.endpoint();
    let jc2 = jc.clone();
    let (cand, compared, same) = tokio::task::spawn_blocking(move || {
        let dataset = baton_e2e::servers::repo_root().join("deploy/config/evals/examples.jsonl");
        let cand = baton(
            &endpoint,
            &["eval", dataset.to_str().expect("path"), "--name", "pr-42"],
        );
        let compared = baton(
            &endpoint,
            &[
                "eval",
                "compare",
                "main",
                "pr-42",
                "--junit",
                jc2.to_str().expect("path"),
            ],
        );
        let same = baton(&endpoint, &["eval", "compare", "main", "main"]);
        (cand, compared, same)
    })
    .await
    .expect("join");
    assert_eq!(cand.status.code(), Some(1));
    let (stdout, stderr) = text(&compared);
    assert_eq!(compared.status.code(), Some(1), "{stdout}\n{stderr}");
    let first = stdout.lines().nth(1).unwrap_or_default();
    assert!(
        first.starts_with("regressed      assistant-echo  1/1 → 0/1"),
        "{stdout}"
    );
    assert!(
        stderr.contains("error: 1 case regressed beyond noise"),
        "{stderr}"
    );
    for line in stdout.lines() {
        assert!(
            line.chars().count() <= 80,
            "wider than 80 columns: {line:?}"
        );
    }
    let read = junit(&junit_compare);
    assert_eq!(read["tests"], 4);
    assert_eq!(read["failures"], 1);
    assert_eq!(read["failed"][0]["name"], "assistant-echo");
    assert_eq!(read["failed"][0]["message"], "regressed: 1/1 → 0/1");
    assert!(same.status.success(), "{}", text(&same).1);

    // Listed, shown.
    let endpoint = before.endpoint();
    let (list, show) = tokio::task::spawn_blocking(move || {
        (
            baton(&endpoint, &["eval", "list"]),
            baton(&endpoint, &["eval", "show", "pr-42"]),
        )
    })
    .await
    .expect("join");
    let (stdout, _) = text(&list);
    assert_eq!(
        stdout.lines().count(),
        3,
        "a header and two experiments: {stdout}"
    );
    assert!(
        stdout.lines().nth(1).is_some_and(|l| l.ends_with("pr-42")),
        "newest first: {stdout}"
    );
    let (stdout, _) = text(&show);
    assert!(stdout.contains("✗ assistant-echo"), "{stdout}");
    for line in stdout.lines() {
        assert!(
            line.chars().count() <= 80,
            "wider than 80 columns: {line:?}"
        );
    }
    drop(after);
}
