//! The audit log: one JSON line per call that starts, answers or cancels a
//! run or writes the store, in a destination of its own (`log.audit`),
//! whatever the log level, never among the other lines (one test: it
//! installs the process's logger).

use baton_common::logging::{LogConfig, LogFormat};
use baton_e2e::{
    Captured, OrchestratorServer, StoreServer, agent_request,
    mcp_clients::{RawSession, sse_answer},
};
use futures::StreamExt;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audited_calls_are_one_json_line_each_in_their_own_file() {
    let dir = tempfile::tempdir().expect("dir");
    let audit = dir.path().join("audit.jsonl");
    let captured = Captured::default();
    let sink = captured.clone();
    let _guard = baton_common::logging::init_to(
        "test",
        &LogConfig {
            format: LogFormat::Json,
            // Audit lines do not depend on the level.
            level: "error".into(),
            audit: audit.display().to_string(),
        },
        move || sink.clone(),
    )
    .expect("logger");
    let server = OrchestratorServer::start(
        "scripts:\n  hi: [{text: hi}]\nagents:\n  hi: {model: \"scripted:hi\", a2a: true, mcp: true}\n",
        None,
        |_| {},
    )
    .await
    .expect("orchestrator");
    let client = server.client().await.expect("client");
    let events: Vec<_> = client
        .run_agent(agent_request("hi", "x"))
        .await
        .expect("run")
        .map(|e| e.expect("event"))
        .collect()
        .await;
    let (run_id, trace_id) = (events[0].run_id.clone(), events[0].trace_id.clone());
    client
        .run_agent(agent_request("nobody", "x"))
        .await
        .err()
        .expect("unknown agent");
    client.cancel(&run_id, "late").await.expect("cancel");
    client
        .resolve_approval(&run_id, "approval:none", true, "")
        .await
        .expect_err("no such approval");

    // The HTTP face audits through the same core, under the same names.
    let http = reqwest::Client::new();
    let started: Value = http
        .post(format!("{}/v1/runs", server.endpoint()))
        .body(r#"{"agent": "hi", "input": "x"}"#)
        .send()
        .await
        .expect("HTTP run")
        .json()
        .await
        .expect("json");
    let (http_run, http_trace) = (
        started["runId"].as_str().expect("runId").to_owned(),
        started["traceId"].as_str().expect("traceId").to_owned(),
    );
    let refused = http
        .post(format!("{}/v1/runs", server.endpoint()))
        .body(r#"{"agent": "nobody", "input": "x"}"#)
        .send()
        .await
        .expect("HTTP refusal");
    assert_eq!(refused.status(), reqwest::StatusCode::BAD_REQUEST);

    // So does the A2A face: a task is a run, started by RunAgent.
    let task: Value = http
        .post(format!("{}/a2a/hi", server.endpoint()))
        .header("A2A-Version", "1.0")
        .json(&serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
            "params": {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "x"}]}}}))
        .send()
        .await
        .expect("A2A send")
        .json()
        .await
        .expect("json");
    let a2a_run = task["result"]["task"]["id"]
        .as_str()
        .expect("task id")
        .to_owned();
    let a2a_trace = task["result"]["task"]["contextId"]
        .as_str()
        .expect("context id")
        .to_owned();

    // And the MCP face: a tools/call is a run, started by RunAgent.
    let mcp = format!("{}/mcp", server.endpoint());
    let session = RawSession::open(&mcp, None, serde_json::json!({})).await;
    let answer = session
        .post(
            &mcp,
            serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "hi", "arguments": {"input": "x"}}}),
        )
        .await
        .expect("MCP tools/call")
        .text()
        .await
        .expect("MCP answer");
    let result = sse_answer(&answer, 2);
    let meta = &result["result"]["_meta"];
    let (mcp_run, mcp_trace) = (
        meta["runId"].as_str().expect("runId").to_owned(),
        meta["traceId"].as_str().expect("traceId").to_owned(),
    );

    // The store records the tenant its caller's key names.
    let keys = dir.path().join("api-keys");
    std::fs::write(&keys, "acme acme-key-0123456789\n").expect("keys");
    let mut config = StoreServer::config(baton_context_store::config::Backend::Memory, None);
    config.auth.mode = baton_context_store::auth::AuthMode::Keys;
    config.auth.api_keys_file = keys;
    let store = StoreServer::start(config).await.expect("store");
    let slots = baton_client::StoreClient::connect(store.endpoint())
        .await
        .expect("store client")
        .with_api_key("acme-key-0123456789")
        .expect("ascii");
    slots
        .put(&trace_id, "notes/a", b"v".to_vec())
        .await
        .expect("put");
    slots.clear(&trace_id).await.expect("clear");

    let text = std::fs::read_to_string(&audit).expect("audit file");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    let seen: Vec<(String, String, String, String)> = lines
        .iter()
        .map(|l| {
            assert_eq!(l["target"], "baton::audit", "{l}");
            let field = |k: &str| l[k].as_str().unwrap_or_default().to_owned();
            (
                field("rpc"),
                field("run_id"),
                field("trace_id"),
                field("outcome"),
            )
        })
        .collect();
    let expected = [
        ("RunAgent", run_id.as_str(), trace_id.as_str(), "OK"),
        ("RunAgent", "", "", "InvalidArgument"),
        ("CancelRun", run_id.as_str(), "", "OK"),
        ("ResolveApproval", run_id.as_str(), "", "NotFound"),
        ("RunAgent", http_run.as_str(), http_trace.as_str(), "OK"),
        ("RunAgent", "", "", "InvalidArgument"),
        ("RunAgent", a2a_run.as_str(), a2a_trace.as_str(), "OK"),
        ("RunAgent", mcp_run.as_str(), mcp_trace.as_str(), "OK"),
        ("Put", "", trace_id.as_str(), "OK"),
        ("Clear", "", trace_id.as_str(), "OK"),
    ];
    let expected: Vec<(String, String, String, String)> = expected
        .iter()
        .map(|(a, b, c, d)| (a.to_string(), b.to_string(), c.to_string(), d.to_string()))
        .collect();
    assert_eq!(seen, expected);
    for l in &lines {
        let store_call = matches!(l["rpc"].as_str(), Some("Put" | "Clear"));
        let want = if store_call { "acme" } else { "" };
        assert_eq!(l["tenant"], want, "{l}");
    }
    // None of it among the other lines.
    let other = String::from_utf8_lossy(&captured.0.lock().expect("lock")).into_owned();
    assert!(!other.contains("baton::audit"), "{other}");
}
