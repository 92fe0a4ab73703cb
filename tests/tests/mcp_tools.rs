//! MCP tools through the gRPC API, against real MCP servers: the reference
//! server `@modelcontextprotocol/server-everything` over stdio and
//! Streamable HTTP, and a server written with the Python `mcp` package
//! (`tests/mcp/py_server.py`). Tools are listed at start (the model is told
//! their descriptions and schemas) and again on `tools/list_changed`;
//! progress becomes `ToolProgress`; `_meta` carries the idempotency key and
//! `traceparent`; cancelling the run cancels the MCP request; a server
//! that is down, or a tool that fails, is a tool error, not a failed run.

use std::time::Duration;

use baton_client::{OrchestratorClient, pb, pb::run_event::Payload};
use baton_e2e::{
    OrchestratorServer, agent_request,
    events::completed_output,
    openai::{FakeOpenAi, Reply, finish, text, tool_fragment},
    servers,
};
use serde_json::{Value, json};

fn progress(events: &[pb::RunEvent]) -> Vec<(u32, String)> {
    events
        .iter()
        .filter_map(|e| match &e.payload {
            Some(Payload::ToolProgress(p)) => Some((p.percent, p.message.clone())),
            _ => None,
        })
        .collect()
}

/// The reference server's tools, called by scripted agents; `server` is
/// the `mcp_servers` entry.
fn everything_agents(server: &str, model_url: &str) -> String {
    format!(
        r#"
providers:
  local: {{kind: openai, base_url: "{model_url}", api_key_env: ""}}
mcp_servers:
  everything:
{server}
    tools: [echo, get-sum, trigger-long-running-operation]
scripts:
  echoer:
    - calls: [{{tool: echo, args: {{message: "hello {{{{input}}}}"}}}}]
    - text: "{{{{results}}}}"
  adder:
    - calls: [{{tool: get-sum, args: {{a: 2, b: 40}}}}]
    - text: "{{{{results}}}}"
  longer:
    - calls: [{{tool: trigger-long-running-operation, args: {{duration: 0.4, steps: 4}}}}]
    - text: "{{{{results}}}}"
agents:
  echoer: {{model: "scripted:echoer", tools: [echo]}}
  adder: {{model: "scripted:adder", tools: [get-sum]}}
  longer: {{model: "scripted:longer", tools: [trigger-long-running-operation]}}
  llm: {{model: "local:m", tools: [echo, get-sum]}}
"#
    )
}

async fn check_everything(server: &str) {
    let fake = FakeOpenAi::start(vec![Reply::Stream(vec![text("ok"), finish("stop")])])
        .await
        .expect("fake");
    let orchestrator =
        OrchestratorServer::start(&everything_agents(server, &fake.base_url()), None, |_| {})
            .await
            .expect("orchestrator");
    let client = OrchestratorClient::connect(orchestrator.endpoint())
        .await
        .expect("connect");
    let events = client
        .run_agent_to_end(agent_request("echoer", "mcp"))
        .await
        .expect("run");
    assert_eq!(completed_output(&events), "Echo: hello mcp");
    let events = client
        .run_agent_to_end(agent_request("adder", "x"))
        .await
        .expect("run");
    assert_eq!(completed_output(&events), "The sum of 2 and 40 is 42.");
    let events = client
        .run_agent_to_end(agent_request("longer", "x"))
        .await
        .expect("run");
    assert!(completed_output(&events).contains("Long running operation completed"));
    let percents: Vec<u32> = progress(&events).into_iter().map(|(p, _)| p).collect();
    assert_eq!(percents, [25, 50, 75, 100], "one ToolProgress per step");
    // The model is told the tools as the server lists them.
    client
        .run_agent_to_end(agent_request("llm", "x"))
        .await
        .expect("run");
    let tools = &fake.requests()[0].body["tools"];
    let echo = tools
        .as_array()
        .and_then(|t| t.iter().find(|t| t["function"]["name"] == "echo"))
        .expect("echo offered");
    assert!(
        echo["function"]["description"]
            .as_str()
            .is_some_and(|d| !d.is_empty()),
        "{echo}"
    );
    assert_eq!(
        echo["function"]["parameters"]["properties"]["message"]["type"],
        "string"
    );
    orchestrator.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_over_stdio() {
    let script = servers::mcp_everything();
    check_everything(&format!(
        "    command: node\n    args: [\"{}\", stdio]",
        script.display()
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_over_streamable_http() {
    let server = servers::mcp_everything_http().expect("server-everything over HTTP");
    check_everything(&format!("    url: \"http://{}/mcp\"", server.addr)).await;
}

fn python_agents(server: &str, model_url: &str) -> String {
    format!(
        r#"
providers:
  local: {{kind: openai, base_url: "{model_url}", api_key_env: ""}}
mcp_servers:
  py:
{server}
    tools: [count, whoami, grow, fresh, hang, broken]
scripts:
  counter:
    - calls: [{{tool: count, args: {{n: 3}}}}]
    - text: "{{{{results}}}}"
  who:
    - calls: [{{tool: whoami}}]
    - text: "{{{{results}}}}"
  hanger:
    - calls: [{{tool: hang, args: {{marker: "{{{{input}}}}"}}}}]
    - text: "{{{{results}}}}"
  breaker:
    - calls: [{{tool: broken}}]
    - text: "{{{{results}}}}"
agents:
  counter: {{model: "scripted:counter", tools: [count]}}
  who: {{model: "scripted:who", tools: [whoami]}}
  hanger: {{model: "scripted:hanger", tools: [hang]}}
  breaker: {{model: "scripted:breaker", tools: [broken]}}
  grower: {{model: "local:m", tools: [grow, fresh, count]}}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_mcp_server_progress_meta_list_changed_cancel_and_errors() {
    let call = |id: &str, name: &str, args: &str| {
        Reply::Stream(vec![
            tool_fragment(0, Some(id), Some(name), args),
            finish("tool_calls"),
        ])
    };
    let fake = FakeOpenAi::start(vec![
        call("c1", "grow", "{}"),
        call("c2", "count", "{\"n\": 5}"),
        call("c3", "fresh", "{}"),
        Reply::Stream(vec![text("grown and fresh"), finish("stop")]),
    ])
    .await
    .expect("fake");
    let server = format!(
        "    command: \"{}\"\n    args: [\"{}\"]",
        servers::servers_python().display(),
        servers::mcp_py_server().display()
    );
    let orchestrator =
        OrchestratorServer::start(&python_agents(&server, &fake.base_url()), None, |_| {})
            .await
            .expect("orchestrator");
    let client = OrchestratorClient::connect(orchestrator.endpoint())
        .await
        .expect("connect");

    // Progress with messages.
    let events = client
        .run_agent_to_end(agent_request("counter", "x"))
        .await
        .expect("run");
    assert_eq!(completed_output(&events), "counted to 3");
    assert_eq!(
        progress(&events),
        [
            (33, "counted 1".to_owned()),
            (66, "counted 2".to_owned()),
            (100, "counted 3".to_owned())
        ]
    );

    // `_meta`: the idempotency key (run, context, call) and traceparent.
    let events = client
        .run_agent_to_end(agent_request("who", "x"))
        .await
        .expect("run");
    let meta: Value = serde_json::from_str(&completed_output(&events))
        .unwrap_or_else(|e| panic!("{e}: {}", completed_output(&events)));
    let started = events
        .iter()
        .find_map(|e| match &e.payload {
            Some(Payload::ToolCallStarted(s)) => {
                Some((e.run_id.clone(), e.context_id.clone(), s.call_id.clone()))
            }
            _ => None,
        })
        .expect("call");
    assert_eq!(
        meta["baton/idempotency_key"],
        json!(format!("{}/{}/{}", started.0, started.1, started.2))
    );
    let traceparent = meta["traceparent"].as_str().expect("traceparent");
    assert!(
        traceparent.contains(&events[0].trace_id),
        "{traceparent} carries the run's trace"
    );

    // A tool error is the model's to read; the run goes on.
    let events = client
        .run_agent_to_end(agent_request("breaker", "x"))
        .await
        .expect("run");
    assert!(
        completed_output(&events).contains("broken on purpose"),
        "{}",
        completed_output(&events)
    );

    // tools/list_changed: `fresh` appears, described, and can be called.
    let events = client
        .run_agent_to_end(agent_request("grower", "x"))
        .await
        .expect("run");
    assert_eq!(completed_output(&events), "grown and fresh");
    let sent = fake.requests();
    let offered = |i: usize, name: &str| -> Value {
        sent[i].body["tools"]
            .as_array()
            .and_then(|t| t.iter().find(|t| t["function"]["name"] == name))
            .cloned()
            .unwrap_or(Value::Null)
    };
    assert_eq!(
        offered(0, "count")["function"]["description"],
        "Counts to n, reporting progress at each step."
    );
    assert_eq!(offered(0, "fresh")["function"]["description"], "");
    assert_eq!(
        offered(2, "fresh")["function"]["description"],
        "A tool added while the server ran."
    );
    let completed: Vec<pb::ToolCallCompleted> = events
        .iter()
        .filter_map(|e| match &e.payload {
            Some(Payload::ToolCallCompleted(c)) => Some(c.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        completed.last().map(|c| c.result.as_str()),
        Some("fresh and new")
    );

    // Cancelling the run cancels the MCP request.
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = dir.path().join("cancelled");
    let mut stream = client
        .run_agent(agent_request("hanger", &marker.display().to_string()))
        .await
        .expect("run");
    let mut run_id = String::new();
    while let Some(e) = futures::StreamExt::next(&mut stream).await {
        let e = e.expect("event");
        if matches!(e.payload, Some(Payload::ToolCallStarted(_))) {
            run_id = e.run_id;
            break;
        }
    }
    // Give the request time to reach the server, then cancel the run.
    tokio::time::sleep(Duration::from_millis(300)).await;
    client.cancel(&run_id, "test").await.expect("cancel");
    let began = std::time::Instant::now();
    while !marker.exists() {
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "the MCP server never saw the cancellation"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    orchestrator.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_mcp_server_over_http_and_a_server_that_is_down() {
    let py = servers::mcp_py_http().expect("python MCP server over HTTP");
    let down = baton_e2e::free_addr().expect("port");
    let agents = format!(
        r#"
mcp_servers:
  py:
    url: "http://{}/mcp"
    tools: [count]
  gone:
    url: "http://{down}/mcp"
    connect_timeout: 2s
    tools: [nowhere]
scripts:
  counter:
    - calls: [{{tool: count, args: {{n: 2}}}}]
    - text: "{{{{results}}}}"
  lost:
    - calls: [{{tool: nowhere}}]
    - text: "the model read: {{{{results}}}}"
agents:
  counter: {{model: "scripted:counter", tools: [count]}}
  lost: {{model: "scripted:lost", tools: [nowhere]}}
"#,
        py.addr
    );
    let orchestrator = OrchestratorServer::start(&agents, None, |_| {})
        .await
        .expect("orchestrator");
    let client = OrchestratorClient::connect(orchestrator.endpoint())
        .await
        .expect("connect");
    let events = client
        .run_agent_to_end(agent_request("counter", "x"))
        .await
        .expect("run");
    assert_eq!(completed_output(&events), "counted to 2");
    assert_eq!(progress(&events).len(), 2);
    let events = client
        .run_agent_to_end(agent_request("lost", "x"))
        .await
        .expect("run");
    let out = completed_output(&events);
    assert!(
        out.starts_with("the model read: error: MCP server gone") && out.contains("unavailable"),
        "{out}"
    );
    orchestrator.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_server_entries_are_checked_at_start() {
    let refused = |yaml: &'static str| async move {
        OrchestratorServer::start(yaml, None, |_| {})
            .await
            .err()
            .map(|e| e.to_string())
            .expect("refused")
    };
    let e = refused("mcp_servers: {m: {tools: [a]}}").await;
    assert!(
        e.contains("mcp_servers.m: set exactly one of command"),
        "{e}"
    );
    let e = refused("mcp_servers: {m: {command: x, url: 'http://h:1/mcp', tools: [a]}}").await;
    assert!(e.contains("exactly one"), "{e}");
    let e = refused("mcp_servers: {m: {url: 'ftp://h/mcp', tools: [a]}}").await;
    assert!(e.contains("mcp_servers.m.url"), "{e}");
    let e = refused("mcp_servers: {m: {command: x}}").await;
    assert!(e.contains("mcp_servers.m.tools"), "{e}");
    let e = refused("mcp_servers: {m: {command: x, tools: [read_context]}}").await;
    assert!(e.contains("not a free tool name"), "{e}");
    let e = refused("mcp_servers: {m: {command: x, tools: ['has space']}}").await;
    assert!(e.contains("not a free tool name"), "{e}");
    let e = refused(
        "mcp_servers: {m: {url: 'http://h:1/mcp', bearer_token_env: NO_SUCH_VAR_X, tools: [a]}}",
    )
    .await;
    assert!(e.contains("NO_SUCH_VAR_X is not set"), "{e}");
    let e = refused("agents: {a: {tools: [ghost]}}").await;
    assert!(e.contains("unknown tool"), "{e}");
}
