//! Baton over the Agent2Agent protocol 1.0, against real peers built on the
//! official `a2a-sdk` 1.3.0 (`tests/a2a/`; nothing here is a mock):
//!
//! - the SDK's client (`client.py`) against Baton's A2A face, over each
//!   binding (JSON-RPC, HTTP+JSON, gRPC): send, stream (with Baton's context
//!   extension), get with a history length, list by context, cancel,
//!   subscribe, a question and an approval answered on the task, versions
//!   it does not speak, bad input naming the field, agents not exposed;
//!   with API keys: a wrong key refused, a tenant's tasks its own;
//! - an SDK server (`remote_agent.py`) as a `remote_agents` entry of a
//!   Baton agent: the call in its own child context, its question answered
//!   through `SubmitInput`, a cancelled run cancelling the remote task, an
//!   unreachable card and a refused key as tool errors;
//! - Baton calling Baton over A2A with one tenant's key;
//! - a durable run whose calling replica goes away mid-call: the replica
//!   that resumes it follows the same remote task, sent once.

use std::time::Duration;

use baton_client::{
    OrchestratorClient,
    pb::{self, run_event::Payload},
};
use baton_e2e::{
    EXAMPLE_AGENTS, OrchestratorServer, RedisServer,
    a2a::{EXTENSION, RemoteAgent, SdkClient, raw, state, text},
    agent_request, eventually, free_port, wait_for,
};
use baton_proto::a2a::v1::{self as lf, a2a_service_client::A2aServiceClient};
use futures::StreamExt as _;
use serde_json::{Value, json};

/// The example agents, plus `slow` (exposed over A2A) that takes 30 s to
/// answer.
fn example_agents() -> String {
    EXAMPLE_AGENTS
        .replacen(
            "\nscripts:\n",
            "\nscripts:\n  slow:\n    - text: \"worked on {{input}}\"\n      delay: 30s\n",
            1,
        )
        .replacen(
            "\nagents:\n",
            "\nagents:\n  slow:\n    description: Takes its time.\n    model: scripted:slow\n    a2a: true\n",
            1,
        )
}

/// A gRPC `lf.a2a.v1.A2AService` client of `server` (for what the SDK's
/// client cannot send: a version alone, a message without parts).
async fn a2a_grpc(server: &OrchestratorServer) -> A2aServiceClient<tonic::transport::Channel> {
    A2aServiceClient::new(
        baton_client::channel(server.endpoint())
            .await
            .expect("channel"),
    )
}

fn versioned<T>(message: T, version: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request
        .metadata_mut()
        .insert("a2a-version", version.parse().expect("ascii"));
    request
}

/// `google.rpc.Status`, as gRPC's `grpc-status-details-bin` carries it.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
    #[prost(message, repeated, tag = "3")]
    details: Vec<prost_types::Any>,
}

/// `google.rpc.ErrorInfo`.
#[derive(Clone, PartialEq, prost::Message)]
struct ErrorInfo {
    #[prost(string, tag = "1")]
    reason: String,
    #[prost(string, tag = "2")]
    domain: String,
}

/// The A2A error a gRPC status names (its `ErrorInfo`'s reason, in the
/// domain `a2a-protocol.org`: what A2A clients map errors by).
fn reason(status: &tonic::Status) -> Option<String> {
    use prost::Message as _;
    let details = RpcStatus::decode(status.details()).ok()?;
    details.details.iter().find_map(|any| {
        if any.type_url != "type.googleapis.com/google.rpc.ErrorInfo" {
            return None;
        }
        let info = ErrorInfo::decode(any.value.as_slice()).ok()?;
        (info.domain == "a2a-protocol.org").then_some(info.reason)
    })
}

fn user_message(text: &str) -> lf::Message {
    lf::Message {
        message_id: uuid::Uuid::new_v4().to_string(),
        role: lf::Role::User as i32,
        parts: vec![lf::Part {
            content: Some(lf::part::Content::Text(text.into())),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn str_of<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no string at {pointer} in {v}"))
}

/// The ids of a `ListTasksResponse`'s tasks, in order.
fn listed(list: &Value) -> Vec<String> {
    list["tasks"]
        .as_array()
        .map(|tasks| {
            tasks
                .iter()
                .map(|t| t["id"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The field a JSON error's `google.rpc.BadRequest` detail names.
fn bad_field(details: &Value) -> Option<&str> {
    details.as_array()?.iter().find_map(|d| {
        d["fieldViolations"]
            .as_array()?
            .first()?
            .get("field")?
            .as_str()
    })
}

/// What the SDK's client sees of one Baton agent over `binding`.
async fn sdk_client_over(binding: &str) {
    let began = std::time::Instant::now();
    let server = OrchestratorServer::start(&example_agents(), None, |_| {})
        .await
        .expect("orchestrator");
    let base = format!("{}/a2a", server.endpoint());
    let agent = |name: &str| SdkClient::new(format!("{base}/{name}")).binding(binding);
    let baton = server.client().await.expect("client");
    let assistant = agent("assistant");

    // SendMessage, blocking: the run's end, its output the artifact
    // `output`; the task is the run.
    let sent = assistant.run(&["send", "hello"]).await;
    let task = &sent.one()["task"];
    assert_eq!(state(task), "TASK_STATE_COMPLETED", "{task}");
    assert_eq!(str_of(task, "/artifacts/0/artifactId"), "output");
    assert_eq!(text(&task["artifacts"][0]), "You said: hello");
    let first = str_of(task, "/id").to_owned();
    let context = str_of(task, "/contextId").to_owned();
    let run = baton.get_run(&first).await.expect("the task is a run");
    assert_eq!(
        (run.status(), run.output.as_str(), run.trace_id.as_str()),
        (
            pb::RunStatus::Completed,
            "You said: hello",
            context.as_str()
        )
    );

    // SendStreamingMessage in the same context: the task first, then
    // WORKING updates with Baton's extension, the output, COMPLETED last.
    let streamed = assistant
        .run(&["stream", "hi there", "--context", &context])
        .await;
    let lines = streamed.ok();
    let opening = lines[0].get("task").expect("a task first");
    assert_eq!(str_of(opening, "/contextId"), context);
    let second = str_of(opening, "/id").to_owned();
    assert_ne!(second, first);
    let (last, updates) = lines[1..].split_last().expect("updates");
    assert_eq!(state(last), "TASK_STATE_COMPLETED", "{last}");
    let mut said = String::new();
    for update in updates {
        let inner = update
            .get("statusUpdate")
            .or_else(|| update.get("artifactUpdate"))
            .unwrap_or_else(|| panic!("an update: {update}"));
        assert_eq!(str_of(inner, "/taskId"), second);
        let ext = &inner["metadata"][EXTENSION];
        assert_eq!(ext["contextId"], "root", "{update}");
        assert_eq!(ext["depth"].as_f64(), Some(0.0), "{update}");
        if let Some(status) = update.get("statusUpdate") {
            assert_eq!(state(update), "TASK_STATE_WORKING", "{update}");
            if ext["kind"] == "TEXT_DELTA" {
                assert_eq!(ext["agent"], "assistant");
                said.push_str(&text(&status["status"]["message"]));
            }
        }
    }
    assert_eq!(said, "You said: hi there", "the text as it streamed");
    let output = updates
        .iter()
        .find_map(|u| u.get("artifactUpdate"))
        .expect("the output artifact");
    assert_eq!(str_of(output, "/artifact/artifactId"), "output");
    assert_eq!(text(&output["artifact"]), "You said: hi there");

    // ListTasks: by context, newest first; unfiltered, both.
    let in_context = assistant.run(&["list", "--context", &context]).await;
    assert_eq!(listed(in_context.one()), [second.clone(), first.clone()]);
    let everything = assistant.run(&["list"]).await;
    let all = listed(everything.one());
    assert!(all.contains(&first) && all.contains(&second), "{all:?}");
    let elsewhere = assistant
        .run(&["list", "--context", "0123456789abcdef0123456789abcdef"])
        .await;
    assert!(listed(elsewhere.one()).is_empty());

    // A question: the stream ends at INPUT_REQUIRED; the answer, sent on
    // the task, completes it.
    let interviewer = agent("interviewer");
    let asked = interviewer.run(&["stream", "a weekend away"]).await;
    let lines = asked.ok();
    let waiting = lines.last().expect("lines");
    assert_eq!(state(waiting), "TASK_STATE_INPUT_REQUIRED", "{waiting}");
    assert_eq!(
        text(&waiting["statusUpdate"]["status"]["message"]),
        "Which city should I plan for? [Paris/Lisbon]"
    );
    let question_task = str_of(&lines[0], "/task/id").to_owned();
    let answered = interviewer.run(&["answer", &question_task, "Lisbon"]).await;
    let task = &answered.one()["task"];
    assert_eq!(state(task), "TASK_STATE_COMPLETED", "{task}");
    assert_eq!(text(&task["artifacts"][0]), "Planning a trip to Lisbon.");

    // GetTask with a history length: the last N messages.
    let whole = interviewer.run(&["get", &question_task]).await;
    let history: Vec<String> = whole.one()["history"]
        .as_array()
        .expect("history")
        .iter()
        .map(text)
        .collect();
    assert_eq!(
        history,
        [
            "a weekend away",
            "Which city should I plan for? [Paris/Lisbon]",
            "Lisbon"
        ]
    );
    let last_one = interviewer
        .run(&["get", &question_task, "--history", "1"])
        .await;
    let task = last_one.one();
    assert_eq!(state(task), "TASK_STATE_COMPLETED");
    let history = task["history"].as_array().expect("history");
    assert_eq!(history.len(), 1, "{task}");
    assert_eq!(text(&history[0]), "Lisbon");

    // An approval: the blocking send returns at INPUT_REQUIRED; "approve"
    // on the task lets the call run.
    let billing = agent("billing");
    let pending = billing.run(&["send", "refund order 12"]).await;
    let task = &pending.one()["task"];
    assert_eq!(state(task), "TASK_STATE_INPUT_REQUIRED", "{task}");
    let asking = text(&task["status"]["message"]);
    assert!(
        asking.starts_with("Approve the call of tool `write_context`"),
        "{asking}"
    );
    let approval_task = str_of(task, "/id").to_owned();
    let approved = billing.run(&["answer", &approval_task, "approve"]).await;
    let task = &approved.one()["task"];
    assert_eq!(state(task), "TASK_STATE_COMPLETED", "{task}");
    let done = text(&task["artifacts"][0]);
    assert!(
        done.starts_with("Done.") && done.contains("refunds/last"),
        "{done}"
    );

    // CancelTask of a slow task while a subscription follows it: both see
    // it CANCELED, and the run is cancelled.
    let slow = agent("slow");
    let started = slow.run(&["send-nowait", "the long way"]).await;
    let slow_task = str_of(&started.one()["task"], "/id").to_owned();
    let mut subscription = slow.spawn(&["subscribe", &slow_task]);
    let now = subscription.next().await.expect("the task first");
    assert_eq!(str_of(&now, "/task/id"), slow_task);
    assert!(
        ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"].contains(&state(&now)),
        "{now}"
    );
    let cancelled = slow.run(&["cancel", &slow_task]).await;
    assert_eq!(state(cancelled.one()), "TASK_STATE_CANCELED");
    let (rest, code) = subscription.finish().await;
    assert_eq!(code, 0, "{rest:?}");
    assert_eq!(
        rest.last().map(state),
        Some("TASK_STATE_CANCELED"),
        "{rest:?}"
    );
    assert_eq!(
        baton.get_run(&slow_task).await.expect("run").status(),
        pb::RunStatus::Cancelled
    );
    let again = slow.run(&["cancel", &slow_task]).await;
    assert_eq!(again.error_type(), "TaskNotCancelableError");
    let ended = slow.run(&["subscribe", &slow_task]).await;
    assert_eq!(ended.error_type(), "UnsupportedOperationError");

    // Tasks of other agents, and unknown ones, are not found.
    let missing = assistant
        .run(&["get", "0190f5a2-7b3c-7d4e-8f10-1a2b3c4d5e6f"])
        .await;
    assert_eq!(missing.error_type(), "TaskNotFoundError");
    let other = interviewer.run(&["get", &first]).await;
    assert_eq!(other.error_type(), "TaskNotFoundError");

    // An agent that is not exposed has no card; the binding says not found.
    let hidden = agent("summarizer").run(&["card"]).await;
    assert_eq!(hidden.error_type(), "AgentCardResolutionError");
    assert!(hidden.error_message().contains("404"), "{hidden:?}");

    // Binding by binding: a version it does not speak, a message without
    // parts (the error names the field), and the agent not exposed.
    let unversioned = r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x"}}"#;
    match binding {
        "JSONRPC" => {
            let old = assistant.clone().version("0.3").run(&["send", "hi"]).await;
            assert_eq!(old.error_type(), "VersionNotSupportedError", "{old:?}");
            let (status, body) = raw(
                "POST",
                &format!("{base}/assistant"),
                Some(unversioned),
                Some("none"),
            )
            .await;
            assert_eq!((status, &body["error"]["code"]), (200, &json!(-32009)));
            let no_parts = json!({"jsonrpc": "2.0", "id": 2, "method": "SendMessage",
                "params": {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": []}}});
            let (status, body) = raw(
                "POST",
                &format!("{base}/assistant"),
                Some(&no_parts.to_string()),
                None,
            )
            .await;
            assert_eq!((status, &body["error"]["code"]), (200, &json!(-32602)));
            assert_eq!(bad_field(&body["error"]["data"]), Some("message.parts"));
            assert!(
                str_of(&body, "/error/message").contains("message.parts"),
                "{body}"
            );
            let (status, body) = raw(
                "POST",
                &format!("{base}/summarizer"),
                Some(unversioned),
                None,
            )
            .await;
            assert_eq!((status, &body["error"]["code"]), (200, &json!(-32601)));
            assert!(
                str_of(&body, "/error/message").contains("\"summarizer\""),
                "{body}"
            );
        }
        "HTTP+JSON" => {
            let old = assistant.clone().version("0.3").run(&["send", "hi"]).await;
            assert_eq!(old.error_type(), "VersionNotSupportedError", "{old:?}");
            let none = assistant.clone().version("none").run(&["list"]).await;
            assert_eq!(none.error_type(), "VersionNotSupportedError", "{none:?}");
            let no_parts =
                json!({"message": {"messageId": "m1", "role": "ROLE_USER", "parts": []}});
            let (status, body) = raw(
                "POST",
                &format!("{base}/assistant/message:send"),
                Some(&no_parts.to_string()),
                None,
            )
            .await;
            assert_eq!(
                (status, str_of(&body, "/error/status")),
                (400, "INVALID_ARGUMENT")
            );
            assert_eq!(bad_field(&body["error"]["details"]), Some("message.parts"));
            let (status, body) =
                raw("GET", &format!("{base}/summarizer/tasks/x"), None, None).await;
            assert_eq!((status, str_of(&body, "/error/status")), (404, "NOT_FOUND"));
            assert!(
                str_of(&body, "/error/message").contains("\"summarizer\""),
                "{body}"
            );
        }
        "GRPC" => {
            // The SDK always sends `a2a-version: 1.0` over gRPC (an
            // override is a second value): the version alone, by hand.
            let mut grpc = a2a_grpc(&server).await;
            let get = |tenant: &str| lf::GetTaskRequest {
                tenant: tenant.into(),
                id: first.clone(),
                history_length: None,
            };
            let old = grpc
                .get_task(versioned(get("assistant"), "0.3"))
                .await
                .expect_err("0.3");
            // A2A 1.0.0 says UNIMPLEMENTED, 1.0.1 FAILED_PRECONDITION; the
            // reason is what clients go by.
            assert!(
                matches!(
                    old.code(),
                    tonic::Code::Unimplemented | tonic::Code::FailedPrecondition
                ),
                "{old:?}"
            );
            assert_eq!(reason(&old).as_deref(), Some("VERSION_NOT_SUPPORTED"));
            assert!(old.message().contains("\"0.3\""), "{old:?}");
            let ok = grpc
                .get_task(versioned(get("assistant"), "1.0"))
                .await
                .expect("1.0");
            assert_eq!(ok.into_inner().id, first);
            let mut no_parts = user_message("x");
            no_parts.parts.clear();
            let bad = grpc
                .send_message(versioned(
                    lf::SendMessageRequest {
                        tenant: "assistant".into(),
                        message: Some(no_parts),
                        ..Default::default()
                    },
                    "1.0",
                ))
                .await
                .expect_err("no parts");
            assert_eq!(bad.code(), tonic::Code::InvalidArgument, "{bad:?}");
            assert!(bad.message().contains("message.parts"), "{bad:?}");
            assert_eq!(
                bad.metadata()
                    .get(baton_proto::FIELD_HEADER)
                    .and_then(|v| v.to_str().ok()),
                Some("message.parts")
            );
            let hidden = grpc
                .get_task(versioned(get("summarizer"), "1.0"))
                .await
                .expect_err("not exposed");
            assert_eq!(hidden.code(), tonic::Code::NotFound, "{hidden:?}");
            assert!(hidden.message().contains("\"summarizer\""), "{hidden:?}");
        }
        other => panic!("{other}"),
    }
    server.shutdown().await.expect("shutdown");
    eprintln!("{binding}: {:?}", began.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_client_works_with_baton_over_jsonrpc() {
    sdk_client_over("JSONRPC").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_client_works_with_baton_over_http_json() {
    sdk_client_over("HTTP+JSON").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_client_works_with_baton_over_grpc() {
    sdk_client_over("GRPC").await;
}

/// A2A §3.4.1: a follow-up in the same `contextId` continues the session.
/// The SDK's client sends two messages in one context (the one Baton gave
/// back, then one the client made up) and the second answer depends on
/// the first; the context is a Baton conversation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_in_the_same_context_continues_the_conversation() {
    let server = OrchestratorServer::start(&example_agents(), None, |_| {})
        .await
        .expect("orchestrator");
    let chat = SdkClient::new(format!("{}/a2a/chat", server.endpoint()));
    let first = chat.run(&["send", "my name is Ada"]).await;
    let task = &first.one()["task"];
    assert_eq!(
        text(&task["artifacts"][0]),
        "You said: my name is Ada. Before that: (nothing)"
    );
    let context = str_of(task, "/contextId").to_owned();
    let second = chat
        .run(&["send", "what is my name?", "--context", &context])
        .await;
    let task = &second.one()["task"];
    assert_eq!(str_of(task, "/contextId"), context);
    assert_eq!(
        text(&task["artifacts"][0]),
        "You said: what is my name?. Before that: my name is Ada"
    );
    let baton = server.client().await.expect("client");
    let conversation = baton
        .get_conversation(&context, 0, "", 0)
        .await
        .expect("the context is a conversation");
    assert_eq!(conversation.message_count, 4);
    // A context id the client made: its own conversation, continued too.
    let own = uuid::Uuid::new_v4().to_string();
    chat.run(&["send", "I like tea", "--context", &own]).await;
    let again = chat.run(&["send", "and you?", "--context", &own]).await;
    assert_eq!(
        text(&again.one()["task"]["artifacts"][0]),
        "You said: and you?. Before that: I like tea"
    );
    // Tasks by context are as they were: both, newest first.
    let listed_in = chat.run(&["list", "--context", &context]).await;
    assert_eq!(listed(listed_in.one()).len(), 2);
    server.shutdown().await.expect("shutdown");
}

const KEY_T1: &str = "t1-key-0123456789abcdef";
const KEY_T2: &str = "t2-key-fedcba9876543210";

/// A keys file naming tenants t1 and t2, in `dir`.
fn keys_file(dir: &tempfile::TempDir) -> std::path::PathBuf {
    let path = dir.path().join("api-keys");
    std::fs::write(&path, format!("t1 {KEY_T1}\nt2 {KEY_T2}\n")).expect("keys");
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_api_keys_a_wrong_key_is_refused_and_a_tenant_sees_its_own_tasks() {
    let dir = tempfile::tempdir().expect("dir");
    let file = keys_file(&dir);
    let server = OrchestratorServer::start(&example_agents(), None, |c| {
        c.auth.api_keys_file = file.clone();
    })
    .await
    .expect("orchestrator");
    let url = format!("{}/a2a/assistant", server.endpoint());

    // The card is public and says how to send the key.
    let card = SdkClient::new(url.clone()).run(&["card"]).await;
    let card = card.one();
    assert_eq!(
        card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"], "Bearer",
        "{card}"
    );
    for binding in baton_e2e::a2a::BINDINGS {
        let client = SdkClient::new(url.clone()).binding(binding);
        for refused in [
            client.run(&["send", "hi"]).await,
            client
                .clone()
                .key("not-a-known-key")
                .run(&["send", "hi"])
                .await,
            client.clone().key("not-a-known-key").run(&["list"]).await,
        ] {
            let message = refused.error_message().to_owned();
            assert!(
                message.contains("401") || message.contains("UNAUTHENTICATED"),
                "{binding}: {refused:?}"
            );
        }
        let t1 = client.clone().key(KEY_T1);
        let t2 = client.clone().key(KEY_T2);
        let sent = t1.run(&["send", "for t1"]).await;
        let task = &sent.one()["task"];
        assert_eq!(state(task), "TASK_STATE_COMPLETED", "{binding}: {task}");
        let id = str_of(task, "/id").to_owned();
        let mine = t1.run(&["list"]).await;
        assert!(listed(mine.one()).contains(&id), "{binding}");
        let theirs = t2.run(&["list"]).await;
        assert!(!listed(theirs.one()).contains(&id), "{binding}");
        let got = t2.run(&["get", &id]).await;
        assert_eq!(got.error_type(), "TaskNotFoundError", "{binding}");
        let cancel = t2.run(&["cancel", &id]).await;
        assert_eq!(cancel.error_type(), "TaskNotFoundError", "{binding}");
    }
    // Each binding's task is t1's run; t2 has none.
    let t1_runs = server
        .client()
        .await
        .expect("client")
        .with_api_key(KEY_T1)
        .expect("key")
        .list_runs(pb::RunStatus::Unspecified, 10, "")
        .await
        .expect("list");
    assert_eq!(t1_runs.runs.len(), 3);
    let t2_runs = server
        .client()
        .await
        .expect("client")
        .with_api_key(KEY_T2)
        .expect("key")
        .list_runs(pb::RunStatus::Unspecified, 10, "")
        .await
        .expect("list");
    assert!(t2_runs.runs.is_empty());
    server.shutdown().await.expect("shutdown");
}

/// Events of context `ctx`.
fn in_context<'a>(events: &'a [pb::RunEvent], ctx: &str) -> Vec<&'a pb::RunEvent> {
    events.iter().filter(|e| e.context_id == ctx).collect()
}

fn deltas(events: &[&pb::RunEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match &e.payload {
            Some(Payload::TextDelta(d)) => Some(d.text.as_str()),
            _ => None,
        })
        .collect()
}

fn tool_completed<'a>(events: &'a [pb::RunEvent], tool: &str) -> &'a pb::ToolCallCompleted {
    events
        .iter()
        .find_map(|e| match &e.payload {
            Some(Payload::ToolCallCompleted(c)) if c.tool == tool => Some(c),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no ToolCallCompleted of {tool}"))
}

/// An agents file whose agent `caller` calls the remote agent `echo` at
/// `card_url` with the run's input (and says what it answered);
/// `extra_remotes` adds `remote_agents` entries, and each `(agent, tool)`
/// of `callers` an agent like `caller` calling `tool`.
fn remote_agents_file(card_url: &str, extra_remotes: &str, callers: &[(&str, &str)]) -> String {
    let mut scripts = String::new();
    let mut agents = String::new();
    for (agent, tool) in [("caller", "echo")].iter().chain(callers) {
        scripts.push_str(&format!(
            "  {agent}:\n    - calls: [{{tool: {tool}, args: {{task: \"{{{{input}}}}\"}}}}]\n    \
             - text: \"{{{{results}}}}\"\n"
        ));
        agents.push_str(&format!(
            "  {agent}:\n    model: scripted:{agent}\n    tools: [{tool}]\n"
        ));
    }
    format!(
        "remote_agents:\n  echo:\n    card_url: \"{card_url}\"\n    \
         description: Echoes, asks, streams slowly.\n{extra_remotes}\
         scripts:\n{scripts}agents:\n{agents}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_sdk_agent_is_called_like_a_local_one() {
    let began = std::time::Instant::now();
    let remote = RemoteAgent::start(&["--slow-interval", "0.3"]).expect("remote agent");
    let locked = RemoteAgent::start(&["--key", "the-right-key-42"]).expect("locked agent");
    let nowhere = format!("http://127.0.0.1:{}/a2a/gone", free_port().expect("port"));
    let extra_remotes = format!(
        "  nowhere:\n    card_url: \"{nowhere}\"\n    timeout: 5s\n  \
         locked:\n    card_url: \"{locked}\"\n    api_key_env: LOCKED_KEY\n  \
         unlocked:\n    card_url: \"{locked}\"\n    api_key_env: UNLOCKED_KEY\n    \
         binding: HTTP+JSON\n",
        locked = locked.card_url()
    );
    let agents = remote_agents_file(
        &remote.card_url(),
        &extra_remotes,
        &[
            ("lost", "nowhere"),
            ("refused", "locked"),
            ("admitted", "unlocked"),
        ],
    );
    let server = OrchestratorServer::start_with_env(
        &agents,
        None,
        |_| {},
        &[
            ("LOCKED_KEY", "a-wrong-key"),
            ("UNLOCKED_KEY", "the-right-key-42"),
        ],
    )
    .await
    .expect("orchestrator");
    let client = server.client().await.expect("client");

    // The call runs in its own child context, like a local agent's.
    let events = client
        .run_agent_to_end(agent_request("caller", "hello there"))
        .await
        .expect("run");
    baton_e2e::events::check_stream_rules(&events);
    let child = in_context(&events, "root.echo.1");
    let started = child.first().expect("child events");
    assert_eq!(
        (started.depth, started.parent_context_id.as_str()),
        (1, "root")
    );
    match &started.payload {
        Some(Payload::AgentStarted(s)) => {
            assert_eq!(s.agent, "echo");
            assert_eq!(s.model, format!("a2a:{}", remote.card_url()));
        }
        other => panic!("AgentStarted first, got {other:?}"),
    }
    assert!(child.iter().all(|e| e.depth == 1 && e.agent == "echo"));
    let chunks = child
        .iter()
        .filter(|e| matches!(e.payload, Some(Payload::TextDelta(_))))
        .count();
    assert!(chunks > 1, "the remote's chunks as they came: {chunks}");
    assert_eq!(deltas(&child), "Remote echo: hello there");
    match &child.last().expect("events").payload {
        Some(Payload::AgentCompleted(c)) => assert_eq!(c.output, "Remote echo: hello there"),
        other => panic!("AgentCompleted last, got {other:?}"),
    }
    let call = tool_completed(&events, "echo");
    assert_eq!(
        (call.result.as_str(), call.error.as_str()),
        ("Remote echo: hello there", "")
    );
    assert_eq!(
        baton_e2e::events::completed_output(&events),
        "Remote echo: hello there"
    );
    let received = remote.received();
    assert_eq!(received.len(), 1, "{received:?}");
    assert_eq!(received[0]["text"], "hello there");

    // The remote asks: a question in the child context, answered through
    // SubmitInput, goes back on the same remote task.
    let mut stream = client
        .run_agent(agent_request("caller", "ask me"))
        .await
        .expect("run");
    let mut seen = Vec::new();
    let asked = wait_for(&mut stream, &mut seen, |e| {
        matches!(e.payload, Some(Payload::InputRequested(_)))
    })
    .await;
    assert_eq!((asked.context_id.as_str(), asked.depth), ("root.echo.1", 1));
    let Some(Payload::InputRequested(q)) = &asked.payload else {
        unreachable!()
    };
    assert_eq!(q.prompt, "Which colour?");
    client
        .submit_input(&asked.run_id, &q.input_id, "blue")
        .await
        .expect("SubmitInput");
    while let Some(e) = tokio::time::timeout(Duration::from_secs(20), stream.next())
        .await
        .expect("the run goes on")
    {
        seen.push(e.expect("event"));
    }
    baton_e2e::events::check_stream_rules(&seen);
    assert_eq!(
        baton_e2e::events::completed_output(&seen),
        "You chose blue."
    );
    let received = remote.received();
    let asking: Vec<&Value> = received[1..].iter().collect();
    assert_eq!(asking.len(), 2, "{received:?}");
    assert_eq!(
        (&asking[0]["text"], &asking[0]["followUp"]),
        (&json!("ask me"), &json!(false))
    );
    assert_eq!(
        (&asking[1]["text"], &asking[1]["followUp"]),
        (&json!("blue"), &json!(true))
    );
    assert_eq!(asking[0]["taskId"], asking[1]["taskId"], "the same task");

    // Cancelling the Baton run cancels the remote task.
    let mut stream = client
        .run_agent(agent_request("caller", "slow please"))
        .await
        .expect("run");
    let tick = wait_for(&mut stream, &mut Vec::new(), |e| {
        e.context_id == "root.echo.1" && matches!(e.payload, Some(Payload::TextDelta(_)))
    })
    .await;
    assert_eq!(
        client.cancel(&tick.run_id, "enough").await.expect("cancel"),
        pb::RunStatus::Cancelled
    );
    let slow = remote
        .received()
        .into_iter()
        .find(|m| m["text"] == "slow please")
        .expect("the slow message");
    let remote_task = slow["taskId"].as_str().expect("task id").to_owned();
    let on_remote = SdkClient::new(remote.card_url());
    eventually("the remote task is cancelled", || {
        let on_remote = on_remote.clone();
        let remote_task = remote_task.clone();
        async move {
            let got = on_remote.run(&["get", &remote_task]).await;
            state(got.one()) == "TASK_STATE_CANCELED"
        }
    })
    .await;
    assert_eq!(
        remote
            .received()
            .iter()
            .filter(|m| m["taskId"] == remote_task.as_str())
            .count(),
        1
    );

    // An unreachable card and a refused key: tool errors naming the
    // remote agent; the run goes on. The right key works (here over
    // HTTP+JSON, the binding the entry asks for).
    for (agent, tool, why) in [
        ("lost", "nowhere", "unreachable"),
        ("refused", "locked", "refused"),
    ] {
        let events = client
            .run_agent_to_end(agent_request(agent, "x"))
            .await
            .expect("run");
        let call = tool_completed(&events, tool);
        assert!(
            call.error.contains(&format!("remote agent {tool}")) && call.error.contains(why),
            "{agent}: {call:?}"
        );
        assert!(call.result.is_empty());
        baton_e2e::events::completed_output(&events);
    }
    assert!(locked.received().is_empty(), "nothing got past the key");
    let events = client
        .run_agent_to_end(agent_request("admitted", "open sesame"))
        .await
        .expect("run");
    assert_eq!(
        tool_completed(&events, "unlocked").result,
        "Remote echo: open sesame"
    );
    server.shutdown().await.expect("shutdown");
    eprintln!("remote sdk agent: {:?}", began.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn baton_calls_baton_with_one_tenants_key() {
    let dir = tempfile::tempdir().expect("dir");
    let file = keys_file(&dir);
    let b = OrchestratorServer::start(EXAMPLE_AGENTS, None, |c| {
        c.auth.api_keys_file = file.clone();
    })
    .await
    .expect("orchestrator b");
    let card = format!("{}/a2a/assistant", b.endpoint());
    let agents = format!(
        r#"
remote_agents:
  far_assistant:
    card_url: "{card}"
    description: Baton B's assistant.
    api_key_env: B_KEY
scripts:
  delegator:
    - calls: [{{tool: far_assistant, args: {{task: "{{{{input}}}}"}}}}]
    - text: "{{{{results}}}}"
agents:
  delegator:
    model: scripted:delegator
    tools: [far_assistant]
"#
    );
    let a = OrchestratorServer::start_with_env(&agents, None, |_| {}, &[("B_KEY", KEY_T1)])
        .await
        .expect("orchestrator a");
    let events = a
        .client()
        .await
        .expect("client")
        .run_agent_to_end(agent_request("delegator", "from a"))
        .await
        .expect("run");
    baton_e2e::events::check_stream_rules(&events);
    let call = tool_completed(&events, "far_assistant");
    assert_eq!(
        (call.result.as_str(), call.error.as_str()),
        ("You said: from a", "")
    );
    let child = in_context(&events, "root.far_assistant.1");
    assert_eq!(deltas(&child), "You said: from a", "B's text, once");

    // The task is t1's on B: listed with t1's key, not with t2's.
    let on_b = |key: &str| SdkClient::new(card.clone()).key(key);
    let t1 = on_b(KEY_T1).run(&["list"]).await;
    let tasks = listed(t1.one());
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    let task = on_b(KEY_T1).run(&["get", &tasks[0]]).await;
    let task = task.one();
    assert_eq!(state(task), "TASK_STATE_COMPLETED");
    assert_eq!(text(&task["history"][0]), "from a");
    let t2 = on_b(KEY_T2).run(&["list"]).await;
    assert!(listed(t2.one()).is_empty(), "t2 sees none of t1's tasks");
    let got = on_b(KEY_T2).run(&["get", &tasks[0]]).await;
    assert_eq!(got.error_type(), "TaskNotFoundError");
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}

/// A replica keeping runs in `redis`, with a short lease.
async fn durable_replica(redis: &RedisServer, agents: &str) -> OrchestratorServer {
    let durable = baton_e2e::durable_runs(redis.url());
    OrchestratorServer::start(agents, None, move |c| {
        durable(c);
        c.runs.lease = Duration::from_secs(1);
    })
    .await
    .expect("replica")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_task_survives_a_failover_of_the_calling_replica_sent_once() {
    let began = std::time::Instant::now();
    let redis = RedisServer::start().expect("redis-server");
    // "slow": 20 updates 250 ms apart, 5 s in all.
    let remote = RemoteAgent::start(&["--slow-interval", "0.25"]).expect("remote agent");
    let agents = remote_agents_file(&remote.card_url(), "", &[]);
    let a = durable_replica(&redis, &agents).await;
    let b = durable_replica(&redis, &agents).await;

    let mut stream = a
        .client()
        .await
        .expect("client a")
        .run_agent(agent_request("caller", "slow down"))
        .await
        .expect("run on a");
    let mut seen = Vec::new();
    let tick = wait_for(&mut stream, &mut seen, |e| {
        e.context_id == "root.echo.1" && matches!(e.payload, Some(Payload::TextDelta(_)))
    })
    .await;
    let run_id = tick.run_id.clone();
    // Mid-call, the replica running it goes away (handing its runs over).
    tokio::time::timeout(Duration::from_secs(20), a.shutdown())
        .await
        .expect("a stops in time")
        .expect("a stops");
    drop(stream);

    let on_b: OrchestratorClient = b.client().await.expect("client b");
    let mut watch = on_b.watch_run(&run_id, 0, None).await.expect("watch on b");
    let mut events = Vec::new();
    while let Some(e) = tokio::time::timeout(Duration::from_secs(20), watch.next())
        .await
        .expect("the run goes on on b")
    {
        events.push(e.expect("event"));
    }
    baton_e2e::events::check_stream_rules(&events);
    let resumed = events
        .iter()
        .position(|e| matches!(e.payload, Some(Payload::RunResumed(_))))
        .expect("b resumed the run");
    let ticks_after = events[resumed..]
        .iter()
        .filter(|e| {
            e.context_id == "root.echo.1" && matches!(e.payload, Some(Payload::TextDelta(_)))
        })
        .count();
    assert!(
        ticks_after > 0,
        "b followed the live remote task (re-subscribed)"
    );
    let call = tool_completed(&events, "echo");
    assert_eq!(call.error, "", "{call:?}");
    assert!(
        call.result.starts_with("tick 2 tick 4") && call.result.contains("tick 20"),
        "{call:?}"
    );
    // One message reached the remote agent; its task completed.
    let received = remote.received();
    assert_eq!(received.len(), 1, "sent exactly once: {received:?}");
    assert_eq!(received[0]["text"], "slow down");
    let task = received[0]["taskId"].as_str().expect("task id");
    let got = SdkClient::new(remote.card_url()).run(&["get", task]).await;
    assert_eq!(state(got.one()), "TASK_STATE_COMPLETED");
    b.shutdown().await.expect("b");
    eprintln!("failover: {:?}", began.elapsed());
}

/// A JSON-RPC call of `method` on `agent` of `server`: the response.
async fn jsonrpc(server: &OrchestratorServer, agent: &str, method: &str, params: Value) -> Value {
    reqwest::Client::new()
        .post(format!("{}/a2a/{agent}", server.endpoint()))
        .header("A2A-Version", "1.0")
        .json(&json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}))
        .send()
        .await
        .expect("JSON-RPC call")
        .json()
        .await
        .expect("JSON-RPC answer")
}

/// The limits of the A2A face at and just over them, and the tenant's run
/// quota applied to tasks: ListTasks' page size (100 is the most, 101 is
/// refused naming `pageSize`, 0 is the default 50), and a second task over
/// `concurrent_runs = 1` refused as the quota (RESOURCE_EXHAUSTED, -32012),
/// accepted again once the first is cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a2a_limits_and_the_run_quota_apply_to_tasks() {
    let server = OrchestratorServer::start(&example_agents(), None, |c| {
        c.quotas.default.concurrent_runs = Some(1);
    })
    .await
    .expect("orchestrator");
    let message = |id: &str| {
        json!({"message": {"messageId": id, "role": "ROLE_USER", "parts": [{"text": "x"}]},
        "configuration": {"returnImmediately": true}})
    };

    let first = jsonrpc(&server, "slow", "SendMessage", message("m1")).await;
    let task = first["result"]["task"]["id"]
        .as_str()
        .expect("task")
        .to_owned();
    let over = jsonrpc(&server, "slow", "SendMessage", message("m2")).await;
    assert_eq!(over["error"]["code"], -32012, "{over}");
    let why = over["error"]["message"].as_str().unwrap_or_default();
    assert!(why.contains("concurrent_runs"), "{why}");
    // A message without parts is refused naming the field.
    let bad = jsonrpc(
        &server,
        "slow",
        "SendMessage",
        json!({"message": {"messageId": "m9", "role": "ROLE_USER", "parts": []}}),
    )
    .await;
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    assert!(
        bad["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with("message.parts:"),
        "{bad}"
    );
    // Neither refusal started anything: the one task is all there is.
    let all = jsonrpc(&server, "slow", "ListTasks", json!({})).await;
    assert_eq!(all["result"]["totalSize"], 1, "{all}");
    assert_eq!(server.core.runs().running(), 1, "nothing else started");

    for (size, ok) in [(100, true), (101, false), (1, true)] {
        let list = jsonrpc(&server, "slow", "ListTasks", json!({"pageSize": size})).await;
        if ok {
            assert_eq!(list["result"]["pageSize"], size, "{list}");
            assert_eq!(list["result"]["tasks"][0]["id"], task.as_str(), "{list}");
        } else {
            assert_eq!(list["error"]["code"], -32602, "{list}");
            let text = list["error"]["message"].as_str().unwrap_or_default();
            assert!(text.starts_with("pageSize:"), "{text}");
        }
    }
    let default = jsonrpc(&server, "slow", "ListTasks", json!({})).await;
    assert_eq!(default["result"]["pageSize"], 50, "{default}");
    assert_eq!(default["result"]["nextPageToken"], "", "{default}");

    let cancelled = jsonrpc(&server, "slow", "CancelTask", json!({"id": task})).await;
    assert_eq!(
        cancelled["result"]["status"]["state"], "TASK_STATE_CANCELED",
        "{cancelled}"
    );
    let again = jsonrpc(&server, "slow", "SendMessage", message("m3")).await;
    assert!(again["result"]["task"]["id"].is_string(), "{again}");
}

/// Durable runs: any replica answers for any task. A task sent to replica
/// A is read (GetTask, ListTasks), followed (SubscribeToTask) and
/// cancelled (CancelTask) through replica B.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_replica_answers_for_a_durable_task() {
    let redis = RedisServer::start().expect("redis-server");
    let agents = example_agents();
    let a = durable_replica(&redis, &agents).await;
    let b = durable_replica(&redis, &agents).await;
    let sent = jsonrpc(
        &a,
        "slow",
        "SendMessage",
        json!({"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "x"}]},
               "configuration": {"returnImmediately": true}}),
    )
    .await;
    let task = sent["result"]["task"]["id"]
        .as_str()
        .expect("task")
        .to_owned();

    let got = jsonrpc(&b, "slow", "GetTask", json!({"id": task})).await;
    assert_eq!(got["result"]["id"], task.as_str(), "{got}");
    assert_eq!(
        got["result"]["status"]["state"], "TASK_STATE_WORKING",
        "{got}"
    );
    let listed = jsonrpc(&b, "slow", "ListTasks", json!({})).await;
    assert_eq!(
        listed["result"]["tasks"][0]["id"],
        task.as_str(),
        "{listed}"
    );

    // B follows the task that A runs, then cancels it.
    let subscribed = reqwest::Client::new()
        .post(format!("{}/a2a/slow", b.endpoint()))
        .header("A2A-Version", "1.0")
        .json(&json!({"jsonrpc": "2.0", "id": 2, "method": "SubscribeToTask", "params": {"id": task}}))
        .send()
        .await
        .expect("subscribe");
    let mut body = subscribed.bytes_stream();
    let first = tokio::time::timeout(Duration::from_secs(10), body.next())
        .await
        .expect("first frame in time")
        .expect("a frame")
        .expect("bytes");
    let first = String::from_utf8_lossy(&first).into_owned();
    assert!(first.contains(r#""task""#), "{first}");
    let cancelled = jsonrpc(&b, "slow", "CancelTask", json!({"id": task})).await;
    assert_eq!(
        cancelled["result"]["status"]["state"], "TASK_STATE_CANCELED",
        "{cancelled}"
    );
    let rest = tokio::time::timeout(Duration::from_secs(10), async {
        let mut text = String::new();
        while let Some(chunk) = body.next().await {
            text.push_str(&String::from_utf8_lossy(&chunk.expect("bytes")));
        }
        text
    })
    .await
    .expect("the subscription ends with the task");
    assert!(rest.contains("TASK_STATE_CANCELED"), "{rest}");
    a.shutdown().await.expect("a");
    b.shutdown().await.expect("b");
}

/// A remote agent whose card offers only A2A 0.3 (served by a bare HTTP
/// listener: an agent of an older SDK) is a tool error that says so; the
/// run goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_agent_without_a_version_in_common_is_a_tool_error() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let card = json!({
        "name": "old", "description": "An A2A 0.3 agent.", "version": "1",
        "supportedInterfaces": [{"url": format!("http://127.0.0.1:{port}/"),
            "protocolBinding": "JSONRPC", "protocolVersion": "0.3"}],
        "capabilities": {"streaming": true}, "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"], "skills": []
    })
    .to_string();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut request = [0u8; 4096];
            let _ = socket.read(&mut request).await;
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{card}",
                card.len()
            );
            let _ = socket.write_all(answer.as_bytes()).await;
        }
    });
    let agents = remote_agents_file(&format!("http://127.0.0.1:{port}/old"), "", &[]);
    let server = OrchestratorServer::start(&agents, None, |_| {})
        .await
        .expect("orchestrator");
    let client = server.client().await.expect("client");
    let events = client
        .run_agent_to_end(agent_request("caller", "x"))
        .await
        .expect("run");
    let call = tool_completed(&events, "echo");
    assert!(
        call.error
            .starts_with("remote agent echo: its card offers no interface Baton can use")
            && call.error.contains("JSONRPC 0.3"),
        "{call:?}"
    );
    baton_e2e::events::completed_output(&events);
    server.shutdown().await.expect("shutdown");
}
