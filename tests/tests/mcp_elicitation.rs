//! MCP servers that ask: a server Baton calls (`tests/mcp/py_server.py`, on
//! the Python `mcp` SDK, over stdio and Streamable HTTP) sends an
//! elicitation request during a tool call; it becomes the call's
//! `InputRequested` (the server's message, its schema, its values as
//! options), a person answers it through gRPC (`SubmitInput`) or the CLI
//! (`baton run`, on stdin), and the answer goes back as the elicitation's
//! result: accepted with the schema's fields, declined, or cancelled. The
//! server's progress around the question arrives as `ToolProgress`.

use std::{io::Write, process::Stdio, time::Duration};

use baton_client::{OrchestratorClient, pb, pb::run_event::Payload};
use baton_e2e::{
    OrchestratorServer, RedisServer, agent_request, events::completed_output, servers,
};
use futures::StreamExt;
use serde_json::Value;

fn agents(server: &str) -> String {
    format!(
        r#"
mcp_servers:
  py:
{server}
    tools: [plan, signup]
scripts:
  planner:
    - calls: [{{tool: plan, args: {{trip: "{{{{input}}}}"}}}}]
    - text: "{{{{results}}}}"
  joiner:
    - calls: [{{tool: signup}}]
    - text: "{{{{results}}}}"
  slow_planner:
    - calls: [{{tool: plan, args: {{trip: "{{{{input}}}}", pause: 3}}}}]
    - text: "{{{{results}}}}"
agents:
  planner: {{model: "scripted:planner", tools: [plan]}}
  slow_planner: {{model: "scripted:slow_planner", tools: [plan]}}
  joiner: {{model: "scripted:joiner", tools: [signup]}}
"#
    )
}

fn stdio_server() -> String {
    format!(
        "    command: \"{}\"\n    args: [\"{}\"]",
        servers::servers_python().display(),
        servers::mcp_py_server().display()
    )
}

/// Runs `agent` on `input`, answering its first question with `answer`
/// through `SubmitInput`; the question and the run's events.
async fn answered_over_grpc(
    client: &OrchestratorClient,
    agent: &str,
    input: &str,
    answer: &str,
) -> (pb::InputRequested, Vec<pb::RunEvent>) {
    let mut stream = client
        .run_agent(agent_request(agent, input))
        .await
        .expect("run");
    let mut events = Vec::new();
    let mut asked = None;
    let deadline = Duration::from_secs(30);
    while let Some(e) = tokio::time::timeout(deadline, stream.next())
        .await
        .expect("the run goes on")
    {
        let e = e.expect("event");
        if let Some(Payload::InputRequested(q)) = &e.payload {
            asked = Some(q.clone());
            client
                .submit_input(&e.run_id, &q.input_id, answer)
                .await
                .expect("submit input");
        }
        events.push(e);
    }
    (asked.expect("a question"), events)
}

fn progress(events: &[pb::RunEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.payload {
            Some(Payload::ToolProgress(p)) => Some(format!("{}% {}", p.percent, p.message)),
            _ => None,
        })
        .collect()
}

async fn check_grpc(server: &str) {
    let orchestrator = OrchestratorServer::start(&agents(server), None, |_| {})
        .await
        .expect("orchestrator");
    let client = OrchestratorClient::connect(orchestrator.endpoint())
        .await
        .expect("connect");

    // Accepted: the answer is the schema's one field.
    let (q, events) = answered_over_grpc(&client, "planner", "a weekend", "Lisbon").await;
    assert_eq!(q.prompt, "Which city for a weekend?");
    assert_eq!(q.options, ["Paris", "Lisbon", "Oslo", "decline"]);
    assert_eq!(q.tool, "plan");
    let schema: Value = serde_json::from_str(&q.schema_json).expect("schema json");
    assert_eq!(schema["properties"]["city"]["enum"][1], "Lisbon");
    assert_eq!(schema["required"][0], "city");
    assert!(q.input_id.starts_with("input:"), "{}", q.input_id);
    // The question is the tool call's, in the calling agent's context.
    let call = events
        .iter()
        .find_map(|e| match &e.payload {
            Some(Payload::ToolCallStarted(s)) => Some((s.call_id.clone(), e.context_id.clone())),
            _ => None,
        })
        .expect("call");
    let asked_in = events
        .iter()
        .find(|e| matches!(e.payload, Some(Payload::InputRequested(_))))
        .map(|e| e.context_id.clone());
    assert_eq!(q.call_id, call.0);
    assert_eq!(asked_in, Some(call.1));
    assert!(
        events
            .iter()
            .any(|e| matches!(&e.payload, Some(Payload::InputReceived(i)) if i.input == "Lisbon"))
    );
    assert_eq!(completed_output(&events), "a weekend in Lisbon");
    // All of it (rmcp hands notifications to tasks of their own, so two
    // close together may arrive in either order).
    let mut seen = progress(&events);
    seen.sort();
    assert_eq!(
        seen,
        [
            "100% planned",
            "33% looking at cities",
            "66% answered: accept"
        ]
    );

    // Declined, and cancelled.
    let (_, events) = answered_over_grpc(&client, "planner", "a weekend", "decline").await;
    assert_eq!(completed_output(&events), "no city (decline)");
    assert!(progress(&events).contains(&"66% answered: decline".to_owned()));
    let (_, events) = answered_over_grpc(&client, "planner", "a weekend", "cancel").await;
    assert_eq!(completed_output(&events), "no city (cancel)");

    // Two fields: a JSON object answers both (the age as text is typed).
    let (q, events) =
        answered_over_grpc(&client, "joiner", "me", r#"{"name": "Ada", "age": "36"}"#).await;
    assert!(
        q.prompt.starts_with(
            "Who are you?\n(answer with a JSON object of age (integer), name (string)"
        ),
        "{}",
        q.prompt
    );
    assert!(q.options.is_empty());
    assert_eq!(completed_output(&events), "signed up Ada, 36");
    orchestrator.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elicitation_over_stdio_answered_declined_and_cancelled_through_grpc() {
    check_grpc(&stdio_server()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elicitation_over_streamable_http_answered_through_grpc() {
    let py = servers::mcp_py_http().expect("python MCP server over HTTP");
    check_grpc(&format!("    url: \"http://{}/mcp\"", py.addr)).await;
}

/// `baton run agent input` with `stdin`: its stdout and stderr.
async fn baton_run(endpoint: &str, args: &[&str], stdin: &[u8]) -> (String, String) {
    let mut child = std::process::Command::new(servers::baton_cli())
        .arg("run")
        .args(args)
        .env("BATON_ENDPOINT", endpoint)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn baton");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin)
        .expect("write stdin");
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .expect("join")
        .expect("baton output");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    (stdout, stderr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elicitation_answered_and_declined_in_the_cli() {
    let orchestrator = OrchestratorServer::start(&agents(&stdio_server()), None, |_| {})
        .await
        .expect("orchestrator");
    let endpoint = orchestrator.endpoint();
    let (stdout, stderr) = baton_run(&endpoint, &["planner", "a weekend"], b"oslo\n").await;
    // The question on stderr with its options, the answer read for it.
    assert!(
        stderr.contains("Which city for a weekend? [Paris/Lisbon/Oslo/decline] oslo"),
        "{stderr}"
    );
    assert!(stdout.contains("a weekend in Oslo"), "{stdout}");
    assert!(stdout.ends_with("\ncompleted\n"), "{stdout}");

    let (stdout, _) = baton_run(&endpoint, &["planner", "a weekend"], b"decline\n").await;
    assert!(stdout.contains("no city (decline)"), "{stdout}");

    let (stdout, stderr) = baton_run(
        &endpoint,
        &["joiner", "x"],
        b"{\"name\": \"Grace\", \"age\": 85}\n",
    )
    .await;
    assert!(stderr.contains("Who are you?"), "{stderr}");
    assert!(stdout.contains("signed up Grace, 85"), "{stdout}");
    orchestrator.shutdown().await.expect("shutdown");
}

/// A replica keeping runs in `redis`, with a short lease.
async fn durable_replica(redis: &RedisServer) -> OrchestratorServer {
    let durable = baton_e2e::durable_runs(redis.url());
    OrchestratorServer::start(&agents(&stdio_server()), None, move |c| {
        durable(c);
        c.runs.lease = Duration::from_secs(1);
    })
    .await
    .expect("replica")
}

/// Durable runs: the question answered on replica a, a goes away while the
/// tool call still runs; b resumes the run, calls the tool again, the
/// server asks again, and b answers with the journaled answer — nobody is
/// asked twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_durable_run_does_not_ask_an_answered_elicitation_again() {
    let redis = RedisServer::start().expect("redis-server");
    let a = durable_replica(&redis).await;
    let b = durable_replica(&redis).await;
    let on_a = a.client().await.expect("client a");
    let mut stream = on_a
        .run_agent(agent_request("slow_planner", "a weekend"))
        .await
        .expect("run on a");
    let mut run_id = String::new();
    while let Some(e) = tokio::time::timeout(Duration::from_secs(20), stream.next())
        .await
        .expect("the run goes on")
    {
        let e = e.expect("event");
        match &e.payload {
            Some(Payload::InputRequested(q)) => {
                run_id = e.run_id.clone();
                on_a.submit_input(&e.run_id, &q.input_id, "Oslo")
                    .await
                    .expect("submit input");
            }
            Some(Payload::InputReceived(_)) => break,
            _ => {}
        }
    }
    assert!(!run_id.is_empty(), "asked on a");
    // The server now pauses 3 s: a goes away mid-call, handing the run over.
    tokio::time::timeout(Duration::from_secs(20), a.shutdown())
        .await
        .expect("a stops in time")
        .expect("a stops");
    drop(stream);

    let on_b = b.client().await.expect("client b");
    let mut watch = on_b.watch_run(&run_id, 0, None).await.expect("watch on b");
    let mut events = Vec::new();
    while let Some(e) = tokio::time::timeout(Duration::from_secs(30), watch.next())
        .await
        .expect("the run goes on on b")
    {
        events.push(e.expect("event"));
    }
    let position = |f: fn(&Payload) -> bool| {
        events
            .iter()
            .position(|e| e.payload.as_ref().is_some_and(f))
    };
    let resumed = position(|p| matches!(p, Payload::RunResumed(_))).expect("b resumed the run");
    let done = position(|p| matches!(p, Payload::ToolCallCompleted(_))).expect("the call ended");
    assert!(resumed < done, "b called the tool again");
    let asked = events
        .iter()
        .filter(|e| matches!(e.payload, Some(Payload::InputRequested(_))))
        .count();
    assert_eq!(asked, 1, "asked once, on a");
    assert_eq!(completed_output(&events), "a weekend in Oslo");
    b.shutdown().await.expect("b");
}
