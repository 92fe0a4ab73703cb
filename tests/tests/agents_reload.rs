//! The agents file changes while Baton runs (issue 35, item 14): a valid
//! edit is taken for new runs within a few `agents_reload` rounds, a run in
//! flight keeps the catalog it started with, a bad edit keeps the running
//! catalog and says why (`GET /v1/agents/reload`, the metric), and the A2A
//! cards and the MCP tool list follow — an open MCP session is told
//! (`notifications/tools/list_changed`). Real file edits, a real server.

use std::time::Duration;

use baton_client::pb::run_event::Payload;
use baton_e2e::{OrchestratorServer, eventually, mcp_clients::RawSession};
use futures::StreamExt;

const V1: &str = r#"
scripts:
  echo: [{text: "v1 says {{input}}"}]
  slow: [{calls: [{tool: sleep, args: {ms: 1500}}]}, {text: "slow v1"}]
agents:
  echo: {model: "scripted:echo", a2a: true, mcp: true}
  slow: {model: "scripted:slow", tools: [sleep]}
"#;

const V2: &str = r#"
scripts:
  echo: [{text: "v2 says {{input}}"}]
  slow: [{calls: [{tool: sleep, args: {ms: 1500}}]}, {text: "slow v2"}]
  fresh: [{text: "fresh"}]
agents:
  echo: {model: "scripted:echo", a2a: true, mcp: true}
  slow: {model: "scripted:slow", tools: [sleep]}
  fresh: {model: "scripted:fresh", description: "New here.", a2a: true, mcp: true}
"#;

async fn output(client: &baton_client::OrchestratorClient, agent: &str) -> String {
    let events = client
        .run_agent_to_end(baton_e2e::agent_request(agent, "x"))
        .await
        .expect("run");
    match events.last().and_then(|e| e.payload.clone()) {
        Some(Payload::RunCompleted(c)) => c.output,
        other => panic!("{other:?}"),
    }
}

/// What `GET /v1/agents/reload` says.
async fn reload_state(http: &reqwest::Client, base: &str) -> serde_json::Value {
    http.get(format!("{base}/v1/agents/reload"))
        .send()
        .await
        .expect("GET /v1/agents/reload")
        .json()
        .await
        .expect("json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_agents_file_is_taken_for_new_runs_and_a_bad_one_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("agents.yaml");
    std::fs::write(&file, V1).expect("write");
    let watched = file.clone();
    let server = OrchestratorServer::start(V1, None, move |c| {
        c.agents_file = watched;
        c.agents_reload = Duration::from_millis(200);
    })
    .await
    .expect("orchestrator");
    let client = server.client().await.expect("client");
    let http = reqwest::Client::new();
    let base = server.endpoint();
    let mcp = format!("{base}/mcp");
    assert_eq!(output(&client, "echo").await, "v1 says x");

    // An MCP session open before the edit, listening for what the server
    // tells it.
    let session = RawSession::open(&mcp, None, serde_json::json!({})).await;
    let mut told = http
        .get(&mcp)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session.id)
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .expect("GET /mcp")
        .bytes_stream();

    // A run in flight across the edit.
    let mut slow = client
        .run_agent(baton_e2e::agent_request("slow", "x"))
        .await
        .expect("slow");
    slow.next().await.expect("started").expect("event");

    std::fs::write(&file, V2).expect("edit");
    eventually("the edit is taken", || async {
        client
            .list_agents()
            .await
            .is_ok_and(|a| a.agents.iter().any(|a| a.name == "fresh"))
    })
    .await;
    assert_eq!(
        output(&client, "echo").await,
        "v2 says x",
        "new runs use it"
    );
    assert_eq!(output(&client, "fresh").await, "fresh");
    let mut last = None;
    while let Some(e) = slow.next().await {
        last = e.expect("event").payload;
    }
    match last {
        Some(Payload::RunCompleted(c)) => {
            assert_eq!(c.output, "slow v1", "the run in flight keeps its catalog")
        }
        other => panic!("{other:?}"),
    }

    // The A2A cards and the MCP tool list follow.
    let listed: serde_json::Value = http
        .get(format!("{base}/a2a"))
        .send()
        .await
        .expect("GET /a2a")
        .json()
        .await
        .expect("json");
    assert!(listed.to_string().contains("/a2a/fresh"), "{listed}");
    let card = http
        .get(format!("{base}/a2a/fresh/.well-known/agent-card.json"))
        .send()
        .await
        .expect("card");
    assert_eq!(card.status(), 200);
    let tools = session
        .post(
            &mcp,
            serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        )
        .await
        .expect("tools/list")
        .text()
        .await
        .expect("body");
    let tools = baton_e2e::mcp_clients::sse_answer(&tools, 2);
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names, ["echo", "fresh"]);
    let notified = tokio::time::timeout(Duration::from_secs(10), async {
        let mut seen = String::new();
        while let Some(chunk) = told.next().await {
            seen.push_str(&String::from_utf8_lossy(&chunk.expect("chunk")));
            if seen.contains("notifications/tools/list_changed") {
                return seen;
            }
        }
        seen
    })
    .await
    .expect("the session is told within 10 s");
    assert!(
        notified.contains("notifications/tools/list_changed"),
        "{notified}"
    );

    // A bad edit: the running catalog stays, and the server says why.
    std::fs::write(&file, "agents:\n  broken: {model: \"scripted:nowhere\"\n").expect("edit");
    eventually("the bad edit is refused", || async {
        reload_state(&http, &base).await["refused"] == 1
    })
    .await;
    let state = reload_state(&http, &base).await;
    assert_eq!(state["reloads"], 1, "{state}");
    assert!(
        !state["error"].as_str().unwrap_or_default().is_empty(),
        "{state}"
    );
    assert_eq!(
        output(&client, "echo").await,
        "v2 says x",
        "still the last good file"
    );
    // A file exposing an agent the config's a2a.agents no longer finds is
    // refused the same way (checked before it is taken): here, a valid
    // file again is taken and clears the error.
    std::fs::write(&file, V1).expect("edit");
    eventually("the good file is taken again", || async {
        output(&client, "echo").await == "v1 says x"
    })
    .await;
    let state = reload_state(&http, &base).await;
    assert_eq!(
        (state["reloads"].clone(), state["error"].clone()),
        (2.into(), "".into()),
        "{state}"
    );
    server.shutdown().await.expect("shutdown");
}
