//! Baton's MCP server on protocol revision 2026-07-28, against the official
//! Python `mcp` SDK's high-level `Client` (`tests/mcp/client.py --mode
//! auto`: `server/discover`, no handshake, no session; the TypeScript SDK
//! does not speak this revision yet): the revision negotiated, a call with
//! progress, questions and approvals asked in rounds (`InputRequiredResult`,
//! then the retry the SDK makes), declined and unanswerable questions, the
//! client's cancellation and a server shut down mid-round, retries that are wrong in every field (each
//! refused, naming it, answering nothing), another tenant's retry, and with
//! durable runs a round asked on one replica answered on another, after
//! the first was shut down.

use baton_client::pb;
use baton_e2e::{
    OrchestratorServer, durable_runs,
    mcp_clients::{
        Output, RawSession, Sdk, all_runs, client, ended, sse_answer, start, tenant, until_running,
        url,
    },
};
use baton_orchestrator::{app::Caller, run::events::Filter};
use futures::StreamExt as _;
use serde_json::{Value, json};

const KEY_T1: &str = "t1-key-0123456789abcdef";
const KEY_T2: &str = "t2-key-fedcba9876543210";

/// The Python SDK's `Client` on `url`, picking the revision itself.
async fn modern(url: &str, args: &[&str]) -> Output {
    let mut all = vec!["--mode", "auto"];
    all.extend_from_slice(args);
    client(Sdk::Python, url, &all).await
}

/// The kinds of run `id`'s events, in order.
async fn kinds(server: &OrchestratorServer, caller: &Caller, id: &str) -> Vec<pb::EventKind> {
    let events = server
        .core
        .watch(caller, id, 0, Filter::default())
        .await
        .expect("watch");
    events
        .filter_map(|e| async move { e.ok() })
        .filter_map(|e| async move { e.payload })
        .map(|p| baton_orchestrator::run::events::kind_of(&p))
        .collect()
        .await
}

/// The run id of a result or an `InputRequiredResult`.
fn run_id(answer: &Value) -> String {
    answer["_meta"]["runId"]
        .as_str()
        .unwrap_or_else(|| panic!("no runId: {answer}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_discovers_2026_07_28_and_calls_with_progress_without_a_session() {
    let server = start(|_| {}).await;
    let out = modern(&url(&server), &["list"]).await;
    assert_eq!(out.line("initialized")["protocolVersion"], "2026-07-28");
    let tools = out.line("tools").as_array().expect("tools").clone();
    assert!(tools.iter().any(|t| t["name"] == "researcher"), "{tools:?}");

    let args = ["call", "researcher", "rust", "--progress"];
    let out = modern(&url(&server), &args).await;
    let result = out.result();
    assert_eq!(result["isError"], false, "{result}");
    assert!(out.text().starts_with("Research done."), "{}", out.text());
    let run = run_id(result);
    let messages: Vec<&str> = out
        .all("message")
        .iter()
        .filter_map(|m| m.as_str())
        .collect();
    assert!(
        messages[0].starts_with(&format!("run {run} started (trace ")),
        "{messages:?}"
    );
    for line in [
        "▶ summarizer started in root.summarizer.1",
        "sleep: 50% step 2 of 4",
        "■ summarizer done in root.summarizer.1",
    ] {
        assert!(messages.contains(&line), "{line:?} in {messages:?}");
    }
    let counts: Vec<f64> = out
        .all("progress")
        .iter()
        .filter_map(|p| p.as_f64())
        .collect();
    assert!(counts.windows(2).all(|w| w[1] > w[0]), "{counts:?}");

    // No session was made: the endpoint answers a request with no session
    // id, and `server/discover` names every revision served.
    let discovered = reqwest::Client::new()
        .post(url(&server))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "server/discover")
        .json(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            }}}),
        )
        .send()
        .await
        .expect("discover");
    assert_eq!(discovered.status(), 200);
    assert!(discovered.headers().get("mcp-session-id").is_none());
    let body = discovered.text().await.expect("body");
    assert!(
        body.contains(r#""supportedVersions":["2025-06-18","2025-11-25","2026-07-28"]"#),
        "{body}"
    );
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn questions_and_approvals_are_rounds_the_client_answers_by_retrying() {
    let server = start(|_| {}).await;
    let at = url(&server);

    // The SDK answers the round's elicitation and retries, to the end.
    let out = modern(
        &at,
        &["call", "interviewer", "a trip", "--answer", "Lisbon"],
    )
    .await;
    assert_eq!(out.text(), "Planning a trip to Lisbon.");
    let asked = out.line("elicit");
    assert_eq!(
        asked["message"],
        "interviewer (in root) asks: Which city should I plan for?"
    );
    assert_eq!(
        asked["requestedSchema"]["properties"]["answer"]["enum"],
        json!(["Paris", "Lisbon"])
    );
    let run = run_id(out.result());
    let seen = kinds(&server, &tenant(""), &run).await;
    assert!(seen.contains(&pb::EventKind::InputReceived), "{seen:?}");

    // Declined: the call fails and the run is cancelled.
    let out = modern(&at, &["call", "interviewer", "a trip", "--decline"]).await;
    let result = out.result();
    assert_eq!(result["isError"], true);
    assert_eq!(result["_meta"]["code"], "ABORTED");
    assert!(
        out.text().contains("was declined by the MCP client"),
        "{}",
        out.text()
    );
    let view = ended(&server, &tenant(""), &run_id(result)).await;
    assert_eq!(view.status, pb::RunStatus::Cancelled);

    // A client without elicitation cannot answer: the call says so.
    let out = modern(&at, &["call", "interviewer", "a trip"]).await;
    assert_eq!(out.result()["_meta"]["code"], "FAILED_PRECONDITION");
    assert!(
        out.text().contains("cannot answer questions"),
        "{}",
        out.text()
    );

    // Approvals: granted, denied, and (no elicitation) the config's mode.
    let out = modern(&at, &["call", "billing", "refund order 42", "--approve"]).await;
    assert_eq!(out.text(), "Done. wrote refunds/last at version 1");
    assert_eq!(
        out.line("elicit")["requestedSchema"]["properties"]["approve"]["type"],
        "boolean"
    );
    let out = modern(&at, &["call", "billing", "refund order 42", "--deny"]).await;
    assert_eq!(
        out.text(),
        "Done. error: write_context was denied: denied by the MCP client"
    );
    let out = modern(&at, &["call", "billing", "refund order 42"]).await;
    assert_eq!(
        out.text(),
        "Done. error: write_context was denied by the run's approval mode"
    );
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_retry_is_refused_naming_its_field_and_answers_nothing() {
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("api-keys");
    std::fs::write(&file, format!("t1 {KEY_T1}\nt2 {KEY_T2}\n")).expect("keys");
    let server = start(|c| c.auth.api_keys_file = file.clone()).await;
    let at = url(&server);
    let once =
        |key: &'static str, tool: &'static str, state: Option<String>, responses: Option<Value>| {
            let at = at.clone();
            async move {
                let mut args = vec![
                    "--key", key, "call", tool, "a trip", "--answer", "Paris", "--once",
                ];
                let state = state.unwrap_or_default();
                let responses = responses.map(|r| r.to_string()).unwrap_or_default();
                if !state.is_empty() {
                    args.extend(["--request-state", &state]);
                }
                if !responses.is_empty() {
                    args.extend(["--input-responses", &responses]);
                }
                modern(&at, &args).await
            }
        };

    let first = once(KEY_T1, "interviewer", None, None).await;
    let round = first.line("input_required").clone();
    let run = run_id(&round);
    let state = round["requestState"]
        .as_str()
        .expect("requestState")
        .to_owned();
    let requests = round["inputRequests"].as_object().expect("inputRequests");
    assert_eq!(requests.len(), 1, "{round}");
    let (key, request) = requests.iter().next().expect("one");
    assert_eq!(request["method"], "elicitation/create");
    let paris = json!({ key.as_str(): {"action": "accept", "content": {"answer": "Paris"}} });

    // (A response that is no elicitation result the SDK will not send; the
    // server's answer to one is mcp::rounds' unit test.)
    let refused = [
        (
            once(
                KEY_T1,
                "interviewer",
                Some("garbage".into()),
                Some(paris.clone()),
            )
            .await,
            "requestState: is not one this server gave",
        ),
        (
            once(KEY_T1, "interviewer", None, Some(paris.clone())).await,
            "inputResponses: come with the requestState",
        ),
        (
            once(
                KEY_T1,
                "interviewer",
                Some(state.clone()),
                Some(json!({"input:nope": {"action": "accept", "content": {"answer": "Paris"}}})),
            )
            .await,
            r#"inputResponses["input:nope"]: answers nothing this call asked"#,
        ),
        (
            once(
                KEY_T1,
                "assistant",
                Some(state.clone()),
                Some(paris.clone()),
            )
            .await,
            r#"requestState: is a round of a call of "interviewer", not of "assistant""#,
        ),
        (
            once(
                KEY_T1,
                "interviewer",
                Some(state.clone()),
                Some(json!({ key.as_str(): {"action": "accept", "content": {}} })),
            )
            .await,
            &format!(r#"inputResponses[{key:?}]: accepts without an "answer" in its content"#),
        ),
        (
            modern(
                &at,
                &[
                    "--key",
                    KEY_T1,
                    "call",
                    "interviewer",
                    "a trip",
                    "--once",
                    "--request-state",
                    &state,
                    "--input-responses",
                    &paris.to_string(),
                ],
            )
            .await,
            "requestState: a retry answers its round's elicitation requests, so it must declare the elicitation capability",
        ),
        // Another tenant cannot go on with t1's call.
        (
            once(
                KEY_T2,
                "interviewer",
                Some(state.clone()),
                Some(paris.clone()),
            )
            .await,
            &format!("requestState: names run {run:?}, which this caller has not got"),
        ),
    ];
    for (out, expected) in &refused {
        let message = out.error()["message"].as_str().unwrap_or_default();
        assert!(message.starts_with(expected), "{message:?} vs {expected:?}");
    }
    // A session of an older revision has no rounds.
    let session = RawSession::open(&at, Some(KEY_T1), json!({"elicitation": {}})).await;
    let called = session
        .post(
            &at,
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                "name": "interviewer", "arguments": {"input": "a trip"},
                "requestState": state, "inputResponses": paris}}),
        )
        .await
        .expect("tools/call");
    let message = sse_answer(&called.text().await.expect("body"), 2);
    assert_eq!(message["error"]["code"], -32602, "{message}");
    assert!(
        message["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("requestState: rounds are revision 2026-07-28's")),
        "{message}"
    );

    // Nothing was answered: the run still waits, its question open.
    let view = server.core.get(&tenant("t1"), &run).await.expect("run");
    assert_eq!(view.status, pb::RunStatus::Running);
    assert!(server.core.get(&tenant("t2"), &run).await.is_err());

    // The right retry answers it, and a repeat of it only reads the end.
    for _ in 0..2 {
        let out = once(
            KEY_T1,
            "interviewer",
            Some(state.clone()),
            Some(paris.clone()),
        )
        .await;
        assert_eq!(out.text(), "Planning a trip to Paris.");
        assert_eq!(run_id(out.result()), run);
    }
    let seen = kinds(&server, &tenant("t1"), &run).await;
    let answers = seen
        .iter()
        .filter(|k| **k == pb::EventKind::InputReceived)
        .count();
    assert_eq!(answers, 1, "{seen:?}");
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_answered_elsewhere_before_the_retry_declines_it_is_not_failed() {
    let server = start(|_| {}).await;
    let args = ["call", "interviewer", "a trip", "--decline", "--once"];
    let first = modern(&url(&server), &args).await;
    let round = first.line("input_required").clone();
    let run = run_id(&round);
    let key = round["inputRequests"]
        .as_object()
        .and_then(|r| r.keys().next().cloned())
        .expect("a question");
    // Someone answers it at the CLI (through the core) meanwhile.
    server
        .core
        .submit_input(&tenant(""), &run, &key, "Lisbon".into())
        .await
        .expect("answered");
    let declined = json!({ key: {"action": "decline"} }).to_string();
    let state = round["requestState"].as_str().expect("requestState");
    let mut retry = args.to_vec();
    retry.extend(["--request-state", state, "--input-responses", &declined]);
    let out = modern(&url(&server), &retry).await;
    assert_eq!(out.text(), "Planning a trip to Lisbon.");
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clients_cancellation_mid_round_cancels_the_run() {
    let server = start(|_| {}).await;
    let args = ["call", "slow", "x", "--cancel-after", "1.5"];
    let out = modern(&url(&server), &args).await;
    assert_eq!(out.line("cancelled"), &json!(true), "{:?}", out.lines);
    let page = server
        .core
        .list(&tenant(""), &all_runs())
        .await
        .expect("runs");
    let view = ended(&server, &tenant(""), &page.runs[0].run_id).await;
    assert_eq!(view.status, pb::RunStatus::Cancelled);
    assert!(
        view.error_message.contains("cancelled by the MCP client"),
        "{}",
        view.error_message
    );
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_shutdown_mid_round_fails_the_call_and_cancels_its_run() {
    let server = start(|_| {}).await;
    let mut call = {
        let url = url(&server);
        tokio::spawn(async move { modern(&url, &["call", "slow", "x", "--progress"]).await })
    };
    until_running(&server.core, &tenant(""), &mut call).await;
    let core = server.core.clone();
    server.shutdown().await.expect("shutdown");
    let out = call.await.expect("the call");
    assert!(out.all("result").is_empty(), "{:?}", out.lines);
    assert_eq!(out.code, 3, "{:?}\n{}", out.lines, out.stderr);
    let page = core.list(&tenant(""), &all_runs()).await.expect("runs");
    let view = &page.runs[0];
    assert_eq!(view.status, pb::RunStatus::Cancelled);
    assert!(
        view.error_message.contains("server shutting down"),
        "{}",
        view.error_message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_durable_runs_a_round_asked_on_one_replica_is_answered_on_another() {
    let redis = baton_e2e::RedisServer::start().expect("redis-server");
    let durable = durable_runs(redis.url());
    let a = start(durable.clone()).await;
    let b = start(durable).await;

    // The SDK's own retry, sent to the other replica.
    let args = [
        "call",
        "interviewer",
        "a trip",
        "--answer",
        "Lisbon",
        "--answer-at",
        &url(&b),
    ];
    let out = modern(&url(&a), &args).await;
    let round = out.line("input_required");
    assert_eq!(out.text(), "Planning a trip to Lisbon.");
    assert_eq!(run_id(out.result()), run_id(round));

    // Asked on a, which then shuts down; the retry on b answers it.
    let args = [
        "call",
        "interviewer",
        "a trip",
        "--answer",
        "Paris",
        "--once",
    ];
    let first = modern(&url(&a), &args).await;
    let round = first.line("input_required").clone();
    let run = run_id(&round);
    a.shutdown().await.expect("shutdown a");
    let key = round["inputRequests"]
        .as_object()
        .and_then(|r| r.keys().next().cloned())
        .expect("a question");
    let responses =
        json!({ key: {"action": "accept", "content": {"answer": "Paris"}} }).to_string();
    let state = round["requestState"].as_str().expect("requestState");
    let mut retry = args.to_vec();
    retry.extend(["--request-state", state, "--input-responses", &responses]);
    let out = modern(&url(&b), &retry).await;
    assert_eq!(out.text(), "Planning a trip to Paris.");
    assert_eq!(run_id(out.result()), run);
    b.shutdown().await.expect("shutdown b");
}
