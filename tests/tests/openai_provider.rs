//! The `openai` provider against an HTTP server speaking the Chat Completions
//! streaming wire format: streamed text, tool calls in fragments, usage, a
//! 429 with Retry-After then success, retries running out, and errors that
//! must not be retried.

use std::time::{Duration, Instant};

use baton_client::{OrchestratorClient, pb, pb::run_event::Payload};
use baton_e2e::{
    OrchestratorServer,
    openai::{FakeOpenAi, Reply, finish, text, tool_fragment, usage},
};
use serde_json::json;

fn agents(base_url: &str, retries: u32) -> String {
    format!(
        r#"
providers:
  openai:
    base_url: "{base_url}"
    api_key_env: TEST_OPENAI_KEY
    timeout: 5s
    max_retries: {retries}
    backoff: 10ms
agents:
  gpt:
    instructions: You are terse.
    model: "openai:gpt-test"
    tools: [write_context, sleep]
"#
    )
}

async fn start(fake: &FakeOpenAi, retries: u32) -> (OrchestratorServer, OrchestratorClient) {
    let server = OrchestratorServer::start_with_env(
        &agents(&fake.base_url(), retries),
        None,
        |_| {},
        &[("TEST_OPENAI_KEY", "sk-test")],
    )
    .await
    .expect("orchestrator");
    let client = OrchestratorClient::connect(server.endpoint())
        .await
        .expect("connect");
    (server, client)
}

fn req() -> pb::RunAgentRequest {
    pb::RunAgentRequest {
        agent: "gpt".into(),
        input: "remember to buy milk".into(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_text_assembles_fragmented_tool_calls_and_honours_retry_after() {
    let fake = FakeOpenAi::start(vec![
        Reply::Status {
            code: 429,
            retry_after: Some("1"),
        },
        Reply::Stream(vec![
            text("Let me "),
            text("save that."),
            tool_fragment(0, Some("call_a"), Some("write_context"), ""),
            tool_fragment(1, Some("call_b"), Some("sleep"), ""),
            tool_fragment(0, None, None, r#"{"key":"notes/"#),
            tool_fragment(1, None, None, r#"{"ms":"#),
            tool_fragment(0, None, None, r#"plan","value":"buy milk"}"#),
            tool_fragment(1, None, None, "1}"),
            finish("tool_calls"),
            usage(50, 20),
        ]),
        Reply::Stream(vec![
            text("All "),
            text("done."),
            finish("stop"),
            usage(80, 5),
        ]),
    ])
    .await
    .expect("fake openai");
    let (_server, client) = start(&fake, 3).await;

    let started = Instant::now();
    let events = client.run_agent_to_end(req()).await.expect("run");
    let done = match &events.last().expect("events").payload {
        Some(Payload::RunCompleted(c)) => c.clone(),
        other => panic!("did not complete: {other:?}"),
    };
    assert_eq!(done.output, "All done.");
    let u = done.usage.expect("usage");
    assert_eq!(
        (u.input_tokens, u.output_tokens, u.model_calls, u.tool_calls),
        (130, 25, 2, 2)
    );

    let requests = fake.requests();
    assert_eq!(
        requests.len(),
        3,
        "the 429 was retried once, then two turns"
    );
    let waited = requests[1].at.duration_since(requests[0].at);
    assert!(
        waited >= Duration::from_millis(950),
        "Retry-After: 1 was honoured ({waited:?})"
    );
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_eq!(
        requests[0].body, requests[1].body,
        "the retry sends the same request"
    );
    for r in &requests {
        assert_eq!(
            r.header(":request"),
            Some("POST /v1/chat/completions HTTP/1.1")
        );
        assert_eq!(r.header("authorization"), Some("Bearer sk-test"));
        assert_eq!(r.body["model"], "gpt-test");
        assert_eq!(r.body["stream"], true);
        assert_eq!(r.body["stream_options"]["include_usage"], true);
    }
    let tools: Vec<&str> = requests[1].body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["function"]["name"].as_str().expect("name"))
        .collect();
    assert_eq!(tools, ["write_context", "sleep"]);
    assert_eq!(requests[1].body["tools"][0]["type"], "function");
    assert_eq!(
        requests[1].body["tools"][0]["function"]["parameters"]["required"],
        json!(["key", "value"])
    );
    assert_eq!(
        requests[1].body["messages"],
        json!([
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "remember to buy milk"}
        ])
    );
    let second = &requests[2].body["messages"];
    assert_eq!(second[2]["role"], "assistant");
    assert_eq!(second[2]["content"], "Let me save that.");
    assert_eq!(second[2]["tool_calls"][0]["id"], "call_a");
    assert_eq!(
        second[2]["tool_calls"][0]["function"]["name"],
        "write_context"
    );
    let args: serde_json::Value = serde_json::from_str(
        second[2]["tool_calls"][0]["function"]["arguments"]
            .as_str()
            .expect("string"),
    )
    .expect("json");
    assert_eq!(args, json!({"key": "notes/plan", "value": "buy milk"}));
    assert_eq!(
        second[3],
        json!({"role": "tool", "tool_call_id": "call_a", "content": "wrote notes/plan at version 1"})
    );
    assert_eq!(
        second[4],
        json!({"role": "tool", "tool_call_id": "call_b", "content": "slept 1 ms"})
    );

    let deltas: Vec<&str> = events
        .iter()
        .filter_map(|e| match &e.payload {
            Some(Payload::TextDelta(d)) => Some(d.text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, ["Let me ", "save that.", "All ", "done."]);
    let started_calls: Vec<(String, String)> = events
        .iter()
        .filter_map(|e| match &e.payload {
            Some(Payload::ToolCallStarted(c)) => {
                Some((c.call_id.clone(), c.arguments_json.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        started_calls[0],
        (
            "call_a".into(),
            r#"{"key":"notes/plan","value":"buy milk"}"#.into()
        )
    );
    let finish_reasons: Vec<&str> = events
        .iter()
        .filter_map(|e| match &e.payload {
            Some(Payload::MessageCompleted(m)) => Some(m.finish_reason.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(finish_reasons, ["tool_calls", "stop"]);
    let agent_started = events.iter().find_map(|e| match &e.payload {
        Some(Payload::AgentStarted(a)) => Some(a.model.clone()),
        _ => None,
    });
    assert_eq!(agent_started.as_deref(), Some("openai:gpt-test"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_are_retried_until_the_limit_and_client_errors_are_not() {
    let fake = FakeOpenAi::start(vec![
        Reply::Status {
            code: 500,
            retry_after: None,
        },
        Reply::Status {
            code: 502,
            retry_after: None,
        },
        Reply::Status {
            code: 503,
            retry_after: None,
        },
        Reply::Status {
            code: 400,
            retry_after: None,
        },
    ])
    .await
    .expect("fake openai");
    let (_server, client) = start(&fake, 2).await;
    let events = client.run_agent_to_end(req()).await.expect("run");
    match &events.last().expect("events").payload {
        Some(Payload::RunFailed(f)) => {
            assert_eq!(f.code, tonic::Code::Unavailable as i32);
            assert!(f.message.contains("HTTP 503"), "{}", f.message);
        }
        other => panic!("expected RunFailed, got {other:?}"),
    }
    assert_eq!(fake.requests().len(), 3, "one try and two retries");

    let events = client.run_agent_to_end(req()).await.expect("run");
    match &events.last().expect("events").payload {
        Some(Payload::RunFailed(f)) => {
            assert_eq!(f.code, tonic::Code::FailedPrecondition as i32, "{f:?}");
            assert!(
                f.message.contains("HTTP 400") && f.message.contains("scripted status 400"),
                "{}",
                f.message
            )
        }
        other => panic!("expected RunFailed, got {other:?}"),
    }
    assert_eq!(fake.requests().len(), 4, "a 400 is not retried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_api_key_stops_the_server_at_start() {
    let err =
        OrchestratorServer::start_with_env(&agents("http://127.0.0.1:9/v1", 0), None, |_| {}, &[])
            .await
            .err()
            .expect("no key");
    assert!(
        err.to_string().contains("TEST_OPENAI_KEY is not set"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_root_sees_the_history_and_delegates_start_with_their_task() {
    let fake = FakeOpenAi::start(vec![
        // root: delegate to the helper
        Reply::Stream(vec![
            tool_fragment(
                0,
                Some("call_h"),
                Some("helper"),
                r#"{"task":"find the receipt"}"#,
            ),
            finish("tool_calls"),
            usage(1, 1),
        ]),
        // helper's only turn
        Reply::Stream(vec![text("found it"), finish("stop"), usage(1, 1)]),
        // root's answer
        Reply::Stream(vec![text("ok"), finish("stop"), usage(1, 1)]),
    ])
    .await
    .expect("fake openai");
    let yaml = agents(&fake.base_url(), 0).replace(
        "    tools: [write_context, sleep]\n",
        "    tools: [write_context, sleep, helper]\n  helper:\n    instructions: You find things.\n    model: \"openai:gpt-test\"\n",
    );
    let server =
        OrchestratorServer::start_with_env(&yaml, None, |_| {}, &[("TEST_OPENAI_KEY", "sk-test")])
            .await
            .expect("orchestrator");
    let client = OrchestratorClient::connect(server.endpoint())
        .await
        .expect("connect");
    let history = vec![
        pb::Message {
            role: pb::Role::User as i32,
            content: "my order is 42".into(),
            ..Default::default()
        },
        pb::Message {
            role: pb::Role::Assistant as i32,
            content: "noted".into(),
            ..Default::default()
        },
    ];
    let mut r = req();
    r.history = history;
    r.input = "where is my receipt?".into();
    let events = client.run_agent_to_end(r).await.expect("run");
    assert!(
        matches!(events.last().and_then(|e| e.payload.as_ref()), Some(Payload::RunCompleted(c)) if c.output == "ok")
    );
    let requests = fake.requests();
    assert_eq!(
        requests[0].body["messages"],
        json!([
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "my order is 42"},
            {"role": "assistant", "content": "noted"},
            {"role": "user", "content": "where is my receipt?"}
        ]),
        "the root sees the history"
    );
    assert_eq!(
        requests[1].body["messages"],
        json!([
            {"role": "system", "content": "You find things."},
            {"role": "user", "content": "find the receipt"}
        ]),
        "a delegated agent starts with just its task"
    );
}
