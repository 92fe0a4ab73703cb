//! Structured logs: with the JSON format, every line logged inside a run
//! carries the run's `run_id` and `trace_id` and the `span_id` of the
//! context it was logged in (one test per binary: it installs the process's
//! logger).

use std::collections::HashSet;

use baton_common::logging::{LogConfig, LogFormat};
use baton_e2e::{Captured, OrchestratorServer, agent_request};
use serde_json::Value;

const AGENTS: &str = r#"
scripts:
  outer:
    - calls: [{tool: inner, args: {task: "{{input}}"}}, {tool: sleep, args: {ms: 1}}]
    - text: "done: {{results}}"
  inner: [{text: "inner: {{input}}"}]
agents:
  outer: {model: "scripted:outer", tools: [inner, sleep]}
  inner: {model: "scripted:inner"}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_line_logged_inside_a_run_carries_its_ids() {
    let captured = Captured::default();
    let sink = captured.clone();
    let _guard = baton_common::logging::init_to(
        "test",
        &LogConfig {
            format: LogFormat::Json,
            level: "baton_orchestrator=debug".into(),
            audit: "off".into(),
        },
        move || sink.clone(),
    )
    .expect("logger");
    let server = OrchestratorServer::start(AGENTS, None, |_| {})
        .await
        .expect("orchestrator");
    let client = server.client().await.expect("connect");
    let events = client
        .run_agent_to_end(agent_request("outer", "x"))
        .await
        .expect("run");
    server.shutdown().await.expect("shutdown");

    let run_id = &events[0].run_id;
    let trace_id = &events[0].trace_id;
    let span_ids: HashSet<&str> = events.iter().map(|e| e.span_id.as_str()).collect();
    let text = String::from_utf8(captured.0.lock().expect("lock").clone()).expect("utf-8");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    // The lines of this run: logged inside one of its contexts, or about it.
    let inside: Vec<&Value> = lines
        .iter()
        .filter(|l| l["span"]["run_id"] == run_id.as_str())
        .collect();
    let messages: Vec<&str> = inside
        .iter()
        .filter_map(|l| l["message"].as_str())
        .collect();
    assert!(
        messages.contains(&"model turn") && messages.contains(&"tool call finished"),
        "{messages:?}"
    );
    for l in &inside {
        assert_eq!(l["span"]["trace_id"], Value::from(trace_id.as_str()), "{l}");
        let span_id = l["span"]["span_id"].as_str().expect("span_id");
        assert!(span_ids.contains(span_id), "{l}: a context's span");
    }
    // Both contexts logged (the nested agent's lines carry its own span).
    let logged_in: HashSet<&str> = inside
        .iter()
        .filter_map(|l| l["span"]["context"].as_str())
        .collect();
    assert_eq!(logged_in, HashSet::from(["root", "root.inner.1"]));
    // The run's start and end lines name it too.
    for message in ["run started", "run ended"] {
        let line = lines
            .iter()
            .find(|l| l["message"] == message && l["run_id"] == run_id.as_str())
            .unwrap_or_else(|| panic!("no {message:?} line"));
        assert_eq!(line["trace_id"], Value::from(trace_id.as_str()));
        assert_eq!(line["span_id"].as_str().map(str::len), Some(16));
    }
}
