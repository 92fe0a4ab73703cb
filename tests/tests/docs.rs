//! The docs cannot drift from the code: the configuration reference
//! (`docs/configuration.md`) lists exactly the keys of both services' config
//! structs with their defaults, and every agents file shown in the docs is
//! one the orchestrator accepts.

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use serde_json::Value;

fn docs() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs")
}

/// The pages of `docs/`.
fn pages() -> Vec<PathBuf> {
    std::fs::read_dir(docs())
        .expect("docs/")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect()
}

/// Every leaf of a config as `path → value`: nested tables are walked, an
/// empty table (a map such as `quotas.tenants`) is a leaf of its own.
fn leaves(prefix: &str, v: &Value, out: &mut BTreeMap<String, Value>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, v) in m {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                leaves(&path, v, out);
            }
        }
        _ => {
            out.insert(prefix.to_owned(), v.clone());
        }
    }
}

/// A default as the reference writes it: `—` for nothing (empty, none).
fn shown(v: &Value) -> String {
    match v {
        Value::Null => "—".into(),
        Value::String(s) if s.is_empty() => "—".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The `| `key` | `default` | meaning |` rows under a `## {heading}`.
fn rows(doc: &str, heading: &str) -> BTreeMap<String, String> {
    let start = doc
        .find(&format!("\n## {heading}\n"))
        .unwrap_or_else(|| panic!("docs/configuration.md has no `## {heading}` section"));
    let body = &doc[start + heading.len() + 5..];
    let body = &body[..body.find("\n## ").unwrap_or(body.len())];
    let mut out = BTreeMap::new();
    for line in body.lines() {
        let cells: Vec<&str> = line.split(" | ").map(str::trim).collect();
        let Some(key) = cells
            .first()
            .and_then(|c| c.strip_prefix("| `"))
            .and_then(|c| c.strip_suffix('`'))
        else {
            continue;
        };
        let default = cells.get(1).copied().unwrap_or_default();
        let default = default.trim_matches('`').to_owned();
        assert!(
            out.insert(key.to_owned(), default).is_none(),
            "`{key}` is listed twice under `## {heading}`"
        );
    }
    out
}

fn check(heading: &str, config: Value) {
    let doc = std::fs::read_to_string(docs().join("configuration.md")).expect("the reference");
    let documented = rows(&doc, heading);
    let mut actual = BTreeMap::new();
    leaves("", &config, &mut actual);
    let mut problems = Vec::new();
    for (key, value) in &actual {
        match documented.get(key) {
            None => problems.push(format!("missing row: | `{key}` | `{}` | … |", shown(value))),
            Some(d) if *d != shown(value) => problems.push(format!(
                "`{key}`: the reference says {d:?}, the code's default is {:?}",
                shown(value)
            )),
            Some(_) => {}
        }
    }
    for key in documented.keys() {
        if !actual.contains_key(key) {
            problems.push(format!("`{key}` is documented but is no key of the config"));
        }
    }
    assert!(
        problems.is_empty(),
        "docs/configuration.md, `## {heading}`, is out of date:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_configuration_reference_lists_every_orchestrator_key_and_default() {
    check(
        "Orchestrator",
        serde_json::to_value(baton_orchestrator::config::Config::default()).expect("json"),
    );
}

#[test]
fn the_configuration_reference_lists_every_context_store_key_and_default() {
    check(
        "Context store",
        serde_json::to_value(baton_context_store::config::Config::default()).expect("json"),
    );
}

/// Every ```yaml block of a doc that is an agents file (it has a top-level
/// `agents:` or `providers:` key) loads as one.
#[test]
fn every_agents_file_in_the_docs_is_accepted() {
    let mut seen = 0;
    for path in pages() {
        let text = std::fs::read_to_string(&path).expect("read");
        for block in text.split("```yaml\n").skip(1) {
            let yaml = &block[..block.find("```").expect("closed block")];
            let is_agents_file = yaml
                .lines()
                .any(|l| l.starts_with("agents:") || l.starts_with("providers:"));
            if !is_agents_file {
                continue;
            }
            seen += 1;
            if let Err(e) = baton_orchestrator::catalog::Catalog::from_yaml(yaml) {
                panic!("{}: an agents file is refused: {e}\n{yaml}", path.display());
            }
        }
    }
    assert!(seen >= 3, "only {seen} agents files found in docs/");
}

/// `text` without its fenced code blocks (links and headings in code are
/// not the page's).
fn prose(text: &str) -> String {
    text.split("```").step_by(2).collect::<Vec<_>>().join("\n")
}

/// A heading's anchor as GitHub makes it: lower case, punctuation dropped,
/// spaces as dashes.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(path: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).expect("read");
    prose(&text)
        .lines()
        .filter(|l| l.starts_with('#'))
        .filter_map(|l| l.trim_start_matches('#').strip_prefix(' '))
        .map(slug)
        .collect()
}

/// Every relative link of the README and the docs names a file of the
/// repository, and every `#anchor` a heading of its page.
#[test]
fn every_link_of_the_readme_and_the_docs_resolves() {
    let mut pages = pages();
    pages.push(docs().join("../README.md"));
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in &pages {
        let text = prose(&std::fs::read_to_string(page).expect("read"));
        for link in text.split("](").skip(1) {
            let Some(link) = link.split(')').next() else {
                continue;
            };
            if link.starts_with("http") || link.contains(' ') {
                continue;
            }
            checked += 1;
            let (file, anchor) = link.split_once('#').unwrap_or((link, ""));
            let target = if file.is_empty() {
                page.clone()
            } else {
                page.parent().expect("dir").join(file)
            };
            if !target.exists() {
                broken.push(format!("{}: {link} (no such file)", page.display()));
            } else if !anchor.is_empty()
                && target.extension().is_some_and(|e| e == "md")
                && !anchors(&target).iter().any(|a| a == anchor)
            {
                broken.push(format!("{}: {link} (no such heading)", page.display()));
            }
        }
    }
    assert!(checked > 40, "only {checked} links found");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The shell blocks of `page`, in order.
fn shell_blocks(page: &str) -> Vec<String> {
    let text = std::fs::read_to_string(docs().join(page)).expect("read the page");
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```sh") => current = Some(String::new()),
            (Some(block), "```") => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            (Some(block), line) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_curl_example_of_the_http_page_runs_as_written() {
    let server = baton_e2e::OrchestratorServer::start(baton_e2e::EXAMPLE_AGENTS, None, |_| {})
        .await
        .expect("orchestrator");
    let blocks = shell_blocks("http.md");
    assert!(blocks.len() >= 12, "found only {} examples", blocks.len());
    // One shell, in order, as a reader would paste them; a block that
    // fails stops it (and names itself). A `grep -m 1` on a stream returns
    // at the next keep-alive (5 s) at most.
    let mut script = String::from("set -e\n");
    for (i, block) in blocks.iter().enumerate() {
        script.push_str(&format!("echo '>>> example {i}'\n{block}"));
    }
    let out = tokio::time::timeout(
        Duration::from_secs(90),
        tokio::process::Command::new("bash")
            .arg("-c")
            .arg(&script)
            .env("BATON", server.endpoint())
            .output(),
    )
    .await
    .expect("the examples finish within 90 s")
    .expect("bash");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for shown in [
        "researcher",
        "event: runCompleted",
        "\"RUN_STATUS_RUNNING\"",
        "Summary: no data today;",
        "\"matchedCalls\":\"5\",\"calls\":\"5\"",
        "Planning a trip to Lisbon.",
        "\"status\":\"RUN_STATUS_CANCELLED\"",
        "event: stepCompleted",
        "\"field\":\"limits.max_depth\"",
        "} HTTP 400",
        "{\"passed\":2,\"cases\":[\"line-1\",\"line-2\"]}",
        "line-1 CASE_CHANGE_KIND_SAME",
        "/v1/runs/{run_id}/events",
    ] {
        assert!(stdout.contains(shown), "no {shown:?} in\n{stdout}");
    }
}
