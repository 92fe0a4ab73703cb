//! Baton as an MCP server (`/mcp`), against the official SDKs' clients,
//! nothing here a mock: the Python `mcp` SDK (`tests/mcp/client.py`,
//! streamable_http_client + ClientSession, from `.tools/servers-venv`) and
//! the TypeScript `@modelcontextprotocol/sdk` (`tests/mcp/client.mjs`,
//! Client + StreamableHTTPClientTransport, from `.tools/node_modules`),
//! both installed by `./tests/run` and driven alike (the same command line,
//! the same JSON lines): the tools listed, a call with progress, a question
//! answered and one declined through elicitation, approvals, a call the
//! client cancels, API keys (a wrong key, two tenants), a tenant's run
//! quota, and the protocol revisions `initialize` negotiates; over plain
//! HTTP, a session ended (`DELETE`) mid-call; a server shut down mid-call,
//! in memory and with durable runs (two replicas on one `redis-server`),
//! where a session also goes on on any replica, after its first is gone.
//! Revision 2026-07-28, which has no sessions: `mcp_rounds.rs`.

use baton_client::pb;
use baton_e2e::{
    durable_runs, eventually,
    mcp_clients::{
        RawSession, SDKS, Sdk, all_runs, client, ended, sse_answer, start, tenant, until_running,
        url,
    },
};
use baton_orchestrator::config::McpConfig;
use serde_json::{Value, json};

const KEY_T1: &str = "t1-key-0123456789abcdef";
const KEY_T2: &str = "t2-key-fedcba9876543210";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_names_each_exposed_agent_with_its_description_and_input_schema() {
    let server = start(|c| c.mcp.agents = vec!["support".into()]).await;
    for sdk in SDKS {
        let out = client(sdk, &url(&server), &["list"]).await;
        let init = out.line("initialized");
        assert_eq!(init["protocolVersion"], "2025-11-25", "{sdk:?}");
        assert_eq!(init["serverInfo"]["name"], "baton", "{sdk:?}");
        let tools = out.line("tools").as_array().expect("tools").clone();
        let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
        // The four example agents marked `mcp: true`, `slow`, and the group
        // the config names; nothing else of the agents file.
        assert_eq!(
            names,
            [
                "assistant",
                "billing",
                "interviewer",
                "researcher",
                "slow",
                "support"
            ],
            "{sdk:?}"
        );
        let assistant = &tools[0];
        assert_eq!(assistant["description"], "Echoes what it is told.");
        let schema = &assistant["inputSchema"];
        assert_eq!(schema["required"], json!(["input"]), "{sdk:?}");
        assert_eq!(schema["properties"]["input"]["type"], "string");
        assert_eq!(schema["properties"]["context"]["type"], "object");
        assert_eq!(
            tools[5]["description"],
            "Customer support (triage, then billing)."
        );

        // A tool that is not served is a protocol error naming it.
        let out = client(sdk, &url(&server), &["call", "summarizer", "x"]).await;
        let error = out.error();
        assert!(
            error["type"]
                .as_str()
                .unwrap_or_default()
                .eq_ignore_ascii_case("McpError"),
            "{sdk:?}: {error}"
        );
        let message = error["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("no tool \"summarizer\""),
            "{sdk:?}: {error}"
        );
    }
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_reports_progress_and_answers_with_the_output_and_the_run_ids() {
    let server = start(|_| {}).await;
    for sdk in SDKS {
        let out = client(
            sdk,
            &url(&server),
            &["call", "researcher", "the history of Rust", "--progress"],
        )
        .await;
        let result = out.result();
        assert_eq!(result["isError"], false, "{sdk:?}");
        assert!(
            out.text().starts_with("Research done. Summary: Checked:"),
            "{sdk:?}: {}",
            out.text()
        );
        let run_id = result["_meta"]["runId"].as_str().expect("runId").to_owned();
        let view = ended(&server, &tenant(""), &run_id).await;
        assert_eq!(view.status, pb::RunStatus::Completed);
        assert_eq!(result["_meta"]["traceId"], view.trace_id.as_str());

        // Text as it arrives, the slow tool's progress, the sub-agents
        // starting and ending; a counter that goes up by one.
        let counters: Vec<f64> = out
            .all("progress")
            .iter()
            .filter_map(|p| p.as_f64())
            .collect();
        assert!(counters.len() > 10, "{sdk:?}: {counters:?}");
        assert!(
            counters.windows(2).all(|w| w[1] == w[0] + 1.0),
            "{sdk:?}: {counters:?}"
        );
        let messages: Vec<&str> = out
            .lines
            .iter()
            .filter(|l| l.get("progress").is_some())
            .filter_map(|l| l["message"].as_str())
            .collect();
        assert_eq!(
            messages.first().copied(),
            Some(format!("run {run_id} started (trace {})", view.trace_id).as_str()),
            "{sdk:?}"
        );
        for wanted in [
            "Let ",
            "▶ summarizer started in root.summarizer.1",
            "▶ fact_checker started in root.summarizer.1.fact_checker.1",
            "■ summarizer done in root.summarizer.1",
            "sleep: 50% step 2 of 4",
        ] {
            assert!(
                messages.contains(&wanted),
                "{sdk:?}: no {wanted:?} in {messages:?}"
            );
        }

        // The context argument is the run context.
        let out = client(
            sdk,
            &url(&server),
            &[
                "call",
                "assistant",
                "hello",
                "--context",
                r#"{"customer": "c-7"}"#,
            ],
        )
        .await;
        assert_eq!(out.text(), "You said: hello", "{sdk:?}");
        let run_id = out.result()["_meta"]["runId"]
            .as_str()
            .expect("runId")
            .to_owned();
        let view = ended(&server, &tenant(""), &run_id).await;
        assert!(
            view.run_context_json.contains("c-7"),
            "{}",
            view.run_context_json
        );
        // Without a progress token there are no progress notifications.
        assert!(out.all("progress").is_empty(), "{sdk:?}: {:?}", out.lines);
    }
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_is_an_elicitation_answered_or_declined_by_the_client() {
    let server = start(|_| {}).await;
    for sdk in SDKS {
        let args = ["call", "interviewer", "a trip", "--answer", "Lisbon"];
        let out = client(sdk, &url(&server), &args).await;
        assert_eq!(out.text(), "Planning a trip to Lisbon.", "{sdk:?}");
        let asked = out.line("elicit");
        assert_eq!(
            asked["message"],
            "interviewer (in root) asks: Which city should I plan for?"
        );
        assert_eq!(
            asked["requestedSchema"]["properties"]["answer"]["enum"],
            json!(["Paris", "Lisbon"])
        );

        // Declined: the call fails saying so, and the run is cancelled.
        let args = ["call", "interviewer", "a trip", "--decline"];
        let out = client(sdk, &url(&server), &args).await;
        let result = out.result();
        assert_eq!(result["isError"], true, "{sdk:?}");
        assert_eq!(result["_meta"]["code"], "ABORTED");
        assert!(
            out.text().contains("was declined by the MCP client"),
            "{sdk:?}: {}",
            out.text()
        );
        let run_id = result["_meta"]["runId"].as_str().expect("runId").to_owned();
        let view = ended(&server, &tenant(""), &run_id).await;
        assert_eq!(view.status, pb::RunStatus::Cancelled);

        // A client without elicitation cannot answer: the call fails
        // saying so.
        let out = client(sdk, &url(&server), &["call", "interviewer", "a trip"]).await;
        let result = out.result();
        assert_eq!(result["isError"], true, "{sdk:?}");
        assert_eq!(result["_meta"]["code"], "FAILED_PRECONDITION");
        assert!(
            out.text().contains("cannot answer questions"),
            "{sdk:?}: {}",
            out.text()
        );
        assert!(out.all("elicit").is_empty());
    }
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_are_elicited_when_the_client_can_answer_and_follow_the_config_when_not() {
    let server = start(|_| {}).await;
    let auto = start(|c| {
        c.mcp.approval_mode = baton_orchestrator::config::McpApprovalMode::AutoApprove;
    })
    .await;
    for sdk in SDKS {
        let args = ["call", "billing", "order 42", "--approve"];
        let out = client(sdk, &url(&server), &args).await;
        assert_eq!(
            out.text(),
            "Done. wrote refunds/last at version 1",
            "{sdk:?}"
        );
        let asked = out.line("elicit");
        let schema = &asked["requestedSchema"];
        assert_eq!(schema["properties"]["approve"]["type"], "boolean");
        assert_eq!(schema["required"], json!(["approve"]));
        let message = asked["message"].as_str().unwrap_or_default();
        assert!(message.contains("write_context"), "{message}");

        let args = ["call", "billing", "order 42", "--deny"];
        let out = client(sdk, &url(&server), &args).await;
        assert!(
            out.text().contains("denied by the MCP client"),
            "{sdk:?}: {}",
            out.text()
        );

        // No elicitation: `mcp.approval_mode`, auto_deny by default.
        let out = client(sdk, &url(&server), &["call", "billing", "order 42"]).await;
        assert!(
            out.text().contains("denied by the run's approval mode"),
            "{sdk:?}: {}",
            out.text()
        );
        let out = client(sdk, &url(&auto), &["call", "billing", "order 42"]).await;
        assert_eq!(
            out.text(),
            "Done. wrote refunds/last at version 1",
            "{sdk:?}"
        );
    }
    server.shutdown().await.expect("shutdown");
    auto.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clients_cancellation_cancels_the_run() {
    let server = start(|_| {}).await;
    let mut seen = Vec::new();
    for sdk in SDKS {
        let args = ["call", "slow", "the report", "--cancel-after", "1.5"];
        let out = client(sdk, &url(&server), &args).await;
        assert_eq!(
            out.line("cancelled"),
            &json!(true),
            "{sdk:?}: {:?}",
            out.lines
        );
        let page = server
            .core
            .list(&tenant(""), &all_runs())
            .await
            .expect("runs");
        let slow = page
            .runs
            .iter()
            .find(|r| r.target == "slow" && !seen.contains(&r.run_id))
            .expect("the slow run")
            .run_id
            .clone();
        seen.push(slow.clone());
        let view = ended(&server, &tenant(""), &slow).await;
        assert_eq!(view.status, pb::RunStatus::Cancelled, "{sdk:?}");
        assert!(
            view.error_message.contains("cancelled by the MCP client"),
            "{sdk:?}: {}",
            view.error_message
        );
    }
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_api_keys_a_wrong_key_is_refused_and_a_tenant_sees_only_its_runs() {
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("api-keys");
    std::fs::write(&file, format!("t1 {KEY_T1}\nt2 {KEY_T2}\n")).expect("keys");
    let server = start(|c| c.auth.api_keys_file = file.clone()).await;

    // What the SDKs' errors hide: 401, saying what to send.
    let answer = reqwest::Client::new()
        .post(url(&server))
        .header("authorization", "Bearer wrong")
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .expect("post");
    assert_eq!(answer.status(), 401);
    let body: Value = answer.json().await.expect("json");
    assert_eq!(body["code"], "UNAUTHENTICATED");

    let core = server.core.clone();
    for (n, sdk) in SDKS.into_iter().enumerate() {
        for key in [Some("wrong"), None] {
            let mut args = vec![];
            if let Some(key) = key {
                args.extend(["--key", key]);
            }
            args.push("list");
            let out = client(sdk, &url(&server), &args).await;
            let error = out.error();
            assert!(
                out.all("initialized").is_empty(),
                "{sdk:?} {key:?}: {error}"
            );
        }

        let args = ["--key", KEY_T1, "call", "assistant", "mine"];
        let out = client(sdk, &url(&server), &args).await;
        assert_eq!(out.text(), "You said: mine", "{sdk:?}");
        let run_id = out.result()["_meta"]["runId"]
            .as_str()
            .expect("runId")
            .to_owned();
        let view = ended(&server, &tenant("t1"), &run_id).await;
        assert_eq!(view.status, pb::RunStatus::Completed);
        assert!(
            matches!(
                core.get(&tenant("t2"), &run_id).await,
                Err(baton_orchestrator::error::Error::NotFound { .. })
            ),
            "t2 sees t1's run"
        );
        let t2_runs = core.list(&tenant("t2"), &all_runs()).await.expect("runs");
        assert_eq!(t2_runs.runs.len(), n, "{sdk:?}");
        let args = ["--key", KEY_T2, "call", "assistant", "theirs"];
        let out = client(sdk, &url(&server), &args).await;
        assert_eq!(out.text(), "You said: theirs", "{sdk:?}");
        let t1_runs = core.list(&tenant("t1"), &all_runs()).await.expect("runs");
        assert_eq!(t1_runs.runs.len(), n + 1, "{sdk:?}");
    }
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_run_quota_refuses_a_call_over_it_as_a_tool_error() {
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("api-keys");
    std::fs::write(&file, format!("t1 {KEY_T1}\nt2 {KEY_T2}\n")).expect("keys");
    let server = start(|c| {
        c.auth.api_keys_file = file.clone();
        c.quotas.default = baton_orchestrator::config::RunQuota {
            concurrent_runs: Some(1),
            parked_runs: None,
            model_tokens_per_hour: None,
            ..Default::default()
        };
    })
    .await;
    for sdk in SDKS {
        // t1's one run, in the background while the next call is refused.
        let mut busy = {
            let url = url(&server);
            tokio::spawn(async move {
                let args = ["--key", KEY_T1, "call", "slow", "x", "--cancel-after", "4"];
                client(sdk, &url, &args).await
            })
        };
        until_running(&server.core, &tenant("t1"), &mut busy).await;
        let args = ["--key", KEY_T1, "call", "assistant", "one more"];
        let out = client(sdk, &url(&server), &args).await;
        let result = out.result();
        assert_eq!(result["isError"], true, "{sdk:?}");
        assert_eq!(result["_meta"]["code"], "RESOURCE_EXHAUSTED", "{sdk:?}");
        assert!(out.text().contains("concurrent_runs"), "{}", out.text());
        // Another tenant's quota is its own.
        let args = ["--key", KEY_T2, "call", "assistant", "mine"];
        assert_eq!(
            client(sdk, &url(&server), &args).await.text(),
            "You said: mine"
        );
        let busy = busy.await.expect("the slow call");
        assert_eq!(busy.line("cancelled"), &json!(true), "{sdk:?}");
        eventually("t1's slow run ends", || async {
            server
                .core
                .list(&tenant("t1"), &all_runs())
                .await
                .is_ok_and(|p| p.runs.iter().all(|r| r.status != pb::RunStatus::Running))
        })
        .await;
    }
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_on_2025_11_25_and_2025_06_18_work_end_to_end_and_unknown_agents_are_refused() {
    let server = start(|_| {}).await;
    let http = reqwest::Client::new();
    for (asked, answered) in [
        ("2025-06-18", "2025-06-18"),
        ("2025-11-25", "2025-11-25"),
        ("2025-03-26", "2025-11-25"),
        // 2026-07-28 has no handshake: an `initialize` asking for it gets
        // the newest revision that has one (mcp_rounds.rs speaks it).
        ("2026-07-28", "2025-11-25"),
    ] {
        let answer = http
            .post(url(&server))
            .header("accept", "application/json, text/event-stream")
            .json(&json!({
                "jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {
                    "protocolVersion": asked,
                    "capabilities": {},
                    "clientInfo": {"name": "test", "version": "0"},
                },
            }))
            .send()
            .await
            .expect("post");
        assert_eq!(answer.status(), 200, "{asked}");
        let session = answer
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_else(|| panic!("{asked}: no session id"))
            .to_owned();
        let message = sse_answer(&answer.text().await.expect("body"), 1);
        assert_eq!(
            message["result"]["protocolVersion"], answered,
            "{asked}: {message}"
        );

        // The whole session on the negotiated revision: initialized, a call,
        // its end.
        let in_session = |request: reqwest::RequestBuilder| {
            request
                .header("accept", "application/json, text/event-stream")
                .header("mcp-session-id", &session)
                .header("mcp-protocol-version", answered)
        };
        let initialized = in_session(http.post(url(&server)))
            .json(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .send()
            .await
            .expect("initialized");
        assert_eq!(initialized.status(), 202, "{asked}");
        let called = in_session(http.post(url(&server)))
            .json(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "assistant", "arguments": {"input": answered}}}))
            .send()
            .await
            .expect("tools/call");
        assert_eq!(called.status(), 200, "{asked}");
        let message = sse_answer(&called.text().await.expect("body"), 2);
        assert_eq!(
            message["result"]["content"][0]["text"],
            format!("You said: {answered}"),
            "{asked}: {message}"
        );
        let ended = in_session(http.delete(url(&server)))
            .send()
            .await
            .expect("DELETE");
        assert_eq!(ended.status(), 204, "{asked}");
        let after = in_session(http.post(url(&server)))
            .json(&json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}))
            .send()
            .await
            .expect("tools/list");
        assert_eq!(after.status(), 404, "{asked}: a session ended is gone");
    }

    let refused = baton_orchestrator::mcp::Mcp::new(
        server.core.clone(),
        &McpConfig {
            agents: vec!["nobody".into()],
            ..Default::default()
        },
        None,
        tokio_util::sync::CancellationToken::new(),
    );
    let message = refused.err().expect("refused").to_string();
    assert_eq!(
        message,
        "mcp.agents: \"nobody\" is not an agent or group of the agents file"
    );
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ending_the_session_mid_call_cancels_the_run() {
    let server = start(|_| {}).await;
    let session = RawSession::open(&url(&server), None, json!({})).await;
    // The call's response stream stays open while the run runs.
    let call = session
        .post(
            &url(&server),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "slow", "arguments": {"input": "x"}}}),
        )
        .await
        .expect("tools/call");
    assert_eq!(call.status(), 200);
    eventually("the slow run runs", || async {
        server
            .core
            .list(&tenant(""), &all_runs())
            .await
            .is_ok_and(|p| p.runs.iter().any(|r| r.status == pb::RunStatus::Running))
    })
    .await;
    let ended_session = session.delete(&url(&server)).await;
    assert_eq!(ended_session.status(), 204);
    // rmcp lets the session's calls finish for 5 s, then cancels them.
    let page = server
        .core
        .list(&tenant(""), &all_runs())
        .await
        .expect("runs");
    let run_id = page.runs[0].run_id.clone();
    let view = ended(&server, &tenant(""), &run_id).await;
    assert_eq!(view.status, pb::RunStatus::Cancelled);
    assert!(
        view.error_message.contains("cancelled by the MCP client"),
        "{}",
        view.error_message
    );
    drop(call);
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_shutdown_mid_call_fails_the_call_and_cancels_its_run() {
    let server = start(|_| {}).await;
    let core = server.core.clone();
    let mut call = {
        let url = url(&server);
        tokio::spawn(async move {
            let args = ["call", "slow", "x", "--progress"];
            client(Sdk::Python, &url, &args).await
        })
    };
    until_running(&core, &tenant(""), &mut call).await;
    server.shutdown().await.expect("shutdown");
    let out = call.await.expect("the call");
    // The client had the run's ids from the first progress line; the call
    // itself fails (its session is gone).
    let first = out.lines.iter().find_map(|l| l["message"].as_str());
    let run_id = first
        .and_then(|m| m.strip_prefix("run "))
        .and_then(|m| m.split_whitespace().next())
        .unwrap_or_else(|| panic!("no run line: {:?}", out.lines))
        .to_owned();
    assert!(out.all("result").is_empty(), "{:?}", out.lines);
    assert_eq!(out.code, 3, "{:?}\n{}", out.lines, out.stderr);
    let view = core.get(&tenant(""), &run_id).await.expect("the run");
    assert_eq!(view.status, pb::RunStatus::Cancelled);
    assert!(
        view.error_message.contains("server shutting down"),
        "{}",
        view.error_message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_durable_runs_a_replica_shut_down_mid_call_cancels_the_calls_run_everywhere() {
    let redis = baton_e2e::RedisServer::start().expect("redis-server");
    let durable = durable_runs(redis.url());
    let a = start(durable.clone()).await;
    let b = start(durable).await;
    let mut call = {
        let url = url(&a);
        tokio::spawn(async move {
            let args = ["call", "slow", "x", "--progress"];
            client(Sdk::Python, &url, &args).await
        })
    };
    // Seen from the other replica: the run is in the run store.
    until_running(&b.core, &tenant(""), &mut call).await;
    a.shutdown().await.expect("shutdown");
    let out = call.await.expect("the call");
    assert_eq!(out.code, 3, "{:?}\n{}", out.lines, out.stderr);
    let run_id = b
        .core
        .list(&tenant(""), &all_runs())
        .await
        .expect("runs")
        .runs[0]
        .run_id
        .clone();
    // Another replica answers for the run, which ended: nobody could have
    // had its answer.
    let view = ended(&b, &tenant(""), &run_id).await;
    assert_eq!(view.status, pb::RunStatus::Cancelled);
    assert!(
        view.error_message
            .contains("the MCP session ended: server shutting down"),
        "{}",
        view.error_message
    );
    b.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_durable_runs_a_session_goes_on_on_any_replica_and_outlives_its_first() {
    let redis = baton_e2e::RedisServer::start().expect("redis-server");
    let durable = durable_runs(redis.url());
    let a = start(durable.clone()).await;
    let b = start(durable.clone()).await;
    let session = RawSession::open(&url(&a), None, json!({})).await;
    let call = |to: String, id: u64, input: &str| {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "assistant", "arguments": {"input": input}}});
        let answer = session.post(&to, body);
        async move {
            let answer = answer.await.expect("tools/call");
            assert_eq!(answer.status(), 200, "call {id}");
            let message = sse_answer(&answer.text().await.expect("body"), id);
            message["result"]["content"][0]["text"].clone()
        }
    };
    // The session, opened on a, on b; then on b alone once a is gone.
    assert_eq!(call(url(&b), 2, "on b").await, "You said: on b");
    assert_eq!(call(url(&a), 3, "on a").await, "You said: on a");
    a.shutdown().await.expect("shutdown a");
    assert_eq!(call(url(&b), 4, "after a").await, "You said: after a");
    // Ended by the client: gone from the store, so a replica that does not
    // hold it answers 404.
    assert_eq!(session.delete(&url(&b)).await.status(), 204);
    let c = start(durable).await;
    let after = session
        .post(
            &url(&c),
            json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}),
        )
        .await
        .expect("tools/list");
    assert_eq!(after.status(), 404);
    b.shutdown().await.expect("shutdown b");
    c.shutdown().await.expect("shutdown c");
}
