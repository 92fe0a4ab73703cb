//! Named providers and generation settings through the gRPC API, against
//! recording HTTP servers: the `providers` map (several entries, kinds
//! `openai` and `anthropic`, the pre-map form still read), settings from
//! provider, model entry, agent and request merged in that order (extra
//! body fields untouched), `stream: false` and the fallback for empty
//! streamed answers, `response_format` checked (and retried), and model
//! errors keeping their meaning in the gRPC code.

use baton_client::{OrchestratorClient, pb, pb::run_event::Payload};
use baton_e2e::{
    OrchestratorServer, agent_request,
    events::{completed_output, run_failed},
    openai::{FakeOpenAi, Reply, finish, text, usage},
};
use serde_json::{Value, json};
use tonic::Code;

async fn connect(server: &OrchestratorServer) -> OrchestratorClient {
    OrchestratorClient::connect(server.endpoint())
        .await
        .expect("connect")
}

fn answer(t: &str) -> Reply {
    Reply::Stream(vec![text(t), finish("stop"), usage(5, 2)])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_merge_provider_model_agent_request_and_extra_fields_pass_untouched() {
    let local = FakeOpenAi::start(vec![answer("one"), answer("two"), answer("three")])
        .await
        .expect("fake");
    let gpu = FakeOpenAi::start(vec![answer("gpu")]).await.expect("fake");
    let agents = format!(
        r#"
providers:
  local:
    kind: openai
    base_url: "{local}"
    api_key_env: ""
    settings:
      temperature: 0.1
      max_tokens: 100
      seed: 7
      extra: {{repetition_penalty: 1.1, cache_prompt: true}}
    models:
      small:
        settings: {{max_tokens: 50, stop: ["</s>"]}}
  gpu:
    kind: openai
    base_url: "{gpu}"
    api_key_env: GPU_KEY
agents:
  terse:
    model: "local:small"
    tools: [write_context]
    settings:
      top_p: 0.9
      tool_choice: required
      parallel_tool_calls: false
      extra: {{cache_prompt: false}}
  big:
    model: "gpu:llama-70b"
"#,
        local = local.base_url(),
        gpu = gpu.base_url()
    );
    let server = OrchestratorServer::start_with_env(&agents, None, |_| {}, &[("GPU_KEY", "k-gpu")])
        .await
        .expect("orchestrator");
    let client = connect(&server).await;

    // Provider, model entry and agent.
    assert_eq!(
        completed_output(
            &client
                .run_agent_to_end(agent_request("terse", "a"))
                .await
                .expect("run")
        ),
        "one"
    );
    let body = &local.requests()[0].body;
    assert_eq!(body["model"], "small");
    assert_eq!(body["temperature"], 0.1);
    assert_eq!(body["max_tokens"], 50, "the model entry over the provider");
    assert_eq!(body["stop"], json!(["</s>"]));
    assert_eq!(body["seed"], 7);
    assert_eq!(body["top_p"], 0.9);
    assert_eq!(body["tool_choice"], "required");
    assert_eq!(body["parallel_tool_calls"], false);
    assert_eq!(body["repetition_penalty"], 1.1, "extra fields as written");
    assert_eq!(body["cache_prompt"], false, "the agent's extra key wins");
    assert_eq!(body["stream"], true);
    assert!(local.requests()[0].header("authorization").is_none());

    // The request over everything, with its own extra fields and a tool
    // forced by name.
    let mut r = agent_request("terse", "b");
    r.settings = Some(pb::GenerationSettings {
        temperature: Some(1.5),
        max_tokens: Some(9),
        stop: vec!["END".into(), "STOP".into()],
        tool_choice: "write_context".into(),
        parallel_tool_calls: Some(true),
        extra_body_json:
            r#"{"logit_bias": {"50256": -100}, "cache_prompt": true, "nested": {"a": [1, 2]}}"#
                .into(),
        ..Default::default()
    });
    assert_eq!(
        completed_output(&client.run_agent_to_end(r).await.expect("run")),
        "two"
    );
    let body = &local.requests()[1].body;
    assert_eq!(body["temperature"], 1.5);
    assert_eq!(body["max_tokens"], 9);
    assert_eq!(body["stop"], json!(["END", "STOP"]));
    assert_eq!(body["seed"], 7, "unset in the request: the provider's");
    assert_eq!(body["top_p"], 0.9, "unset in the request: the agent's");
    assert_eq!(
        body["tool_choice"],
        json!({"type": "function", "function": {"name": "write_context"}})
    );
    assert_eq!(body["parallel_tool_calls"], true);
    assert_eq!(body["logit_bias"], json!({"50256": -100}));
    assert_eq!(body["nested"], json!({"a": [1, 2]}));
    assert_eq!(body["cache_prompt"], true);
    assert_eq!(body["repetition_penalty"], 1.1);

    // A structured-output schema goes to the provider as response_format.
    let mut r = agent_request("terse", "c");
    r.settings = Some(pb::GenerationSettings {
        response_format: Some(pb::ResponseFormat {
            schema_json: r#"{"type": "string"}"#.into(),
            name: "word".into(),
            strict: true,
            retries: 0,
        }),
        ..Default::default()
    });
    let events = client.run_agent_to_end(r).await.expect("run");
    assert_eq!(
        local.requests()[2].body["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "word", "schema": {"type": "string"}, "strict": true}})
    );
    // "three" is not JSON: the answer does not match.
    let f = run_failed(&events);
    assert_eq!(f.code, Code::FailedPrecondition as i32, "{f:?}");
    assert!(f.message.contains("not JSON"), "{}", f.message);

    // A second provider of the same kind, with its own key.
    assert_eq!(
        completed_output(
            &client
                .run_agent_to_end(agent_request("big", "d"))
                .await
                .expect("run")
        ),
        "gpu"
    );
    let g = &gpu.requests()[0];
    assert_eq!(g.body["model"], "llama-70b");
    assert_eq!(g.header("authorization"), Some("Bearer k-gpu"));
    assert!(
        g.body.get("temperature").is_none(),
        "no settings: none sent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_settings_are_refused_naming_the_field_and_nothing_runs() {
    let server = OrchestratorServer::start(
        "scripts: {s: [{text: ok}]}\nagents: {a: {model: 'scripted:s'}}\n",
        None,
        |_| {},
    )
    .await
    .expect("orchestrator");
    let client = connect(&server).await;
    let cases: Vec<(pb::GenerationSettings, &str)> = vec![
        (
            pb::GenerationSettings {
                temperature: Some(2.5),
                ..Default::default()
            },
            "settings.temperature",
        ),
        (
            pb::GenerationSettings {
                max_tokens: Some(0),
                ..Default::default()
            },
            "settings.max_tokens",
        ),
        (
            pb::GenerationSettings {
                stop: vec!["x".into(); 17],
                ..Default::default()
            },
            "settings.stop",
        ),
        (
            pb::GenerationSettings {
                tool_choice: "not a tool".into(),
                ..Default::default()
            },
            "settings.tool_choice",
        ),
        (
            pb::GenerationSettings {
                extra_body_json: "[1]".into(),
                ..Default::default()
            },
            "settings.extra_body_json",
        ),
        (
            pb::GenerationSettings {
                response_format: Some(pb::ResponseFormat {
                    schema_json: r#"{"type": 5}"#.into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            "settings.response_format.schema_json",
        ),
        (
            pb::GenerationSettings {
                response_format: Some(pb::ResponseFormat {
                    schema_json: "{}".into(),
                    retries: 6,
                    ..Default::default()
                }),
                ..Default::default()
            },
            "settings.response_format.retries",
        ),
    ];
    for (settings, field) in cases {
        let mut r = agent_request("a", "x");
        r.settings = Some(settings);
        let status = client.run_agent_to_end(r).await.expect_err(field);
        assert_eq!(status.code(), Code::InvalidArgument, "{field}: {status:?}");
        assert!(
            status.message().starts_with(field),
            "{field}: {}",
            status.message()
        );
    }
    // The pipeline form of the request is checked the same way.
    let p = pb::RunPipelineRequest {
        pipeline: Some(pb::PipelineSpec {
            name: "p".into(),
            steps: vec![pb::PipelineStep {
                id: "s".into(),
                agent: "a".into(),
                task: "t".into(),
                ..Default::default()
            }],
            ..Default::default()
        }),
        settings: Some(pb::GenerationSettings {
            top_p: Some(0.0),
            ..Default::default()
        }),
        ..Default::default()
    };
    let status = client.run_pipeline_to_end(p).await.expect_err("top_p");
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().starts_with("settings.top_p"), "{status:?}");
    // At the limits: accepted.
    let mut r = agent_request("a", "x");
    r.settings = Some(pb::GenerationSettings {
        temperature: Some(2.0),
        top_p: Some(1.0),
        max_tokens: Some(1),
        stop: vec!["y".repeat(256); 16],
        response_format: None,
        ..Default::default()
    });
    assert_eq!(
        completed_output(&client.run_agent_to_end(r).await.expect("run")),
        "ok"
    );
    let runs = client
        .list_runs(pb::RunStatus::Unspecified, 100, "")
        .await
        .expect("list");
    assert_eq!(runs.runs.len(), 1, "only the valid run started");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mismatching_answer_is_sent_back_as_often_as_configured_then_fails() {
    let agents = r#"
scripts:
  drafts:
    - text: "Oslo"
    - text: '{"city": 3}'
    - text: '{"city": "Oslo"}'
  helper: [{text: "plain words, no JSON"}]
  lead:
    - calls: [{tool: helper, args: {task: go}}]
    - text: '{"city": "Bergen"}'
agents:
  geo:
    model: "scripted:drafts"
    settings:
      response_format:
        schema: {type: object, required: [city], properties: {city: {type: string}}}
        retries: 2
  strict:
    model: "scripted:drafts"
    settings:
      response_format:
        schema: {type: object, required: [city]}
  helper: {model: "scripted:helper"}
  lead: {model: "scripted:lead", tools: [helper]}
"#;
    let server = OrchestratorServer::start(agents, None, |_| {})
        .await
        .expect("orchestrator");
    let client = connect(&server).await;
    // Two wrong answers sent back, the third matches.
    let events = client
        .run_agent_to_end(agent_request("geo", "x"))
        .await
        .expect("run");
    assert_eq!(completed_output(&events), r#"{"city": "Oslo"}"#);
    let turns = events
        .iter()
        .filter(|e| matches!(e.payload, Some(Payload::MessageCompleted(_))))
        .count();
    assert_eq!(turns, 3);
    // No retries: the first mismatch fails.
    let f = run_failed(
        &client
            .run_agent_to_end(agent_request("strict", "x"))
            .await
            .expect("run"),
    );
    assert_eq!(f.code, Code::FailedPrecondition as i32);
    assert!(
        f.message.contains("does not match response_format") && f.message.contains("not JSON"),
        "{}",
        f.message
    );
    // The request's schema holds the run's answer, not a delegate's: the
    // helper answers in words, the lead in JSON.
    let mut r = agent_request("lead", "x");
    r.settings = Some(pb::GenerationSettings {
        response_format: Some(pb::ResponseFormat {
            schema_json: r#"{"type": "object", "required": ["city"]}"#.into(),
            ..Default::default()
        }),
        ..Default::default()
    });
    assert_eq!(
        completed_output(&client.run_agent_to_end(r).await.expect("run")),
        r#"{"city": "Bergen"}"#
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_false_asks_for_whole_answers_and_an_empty_stream_is_asked_again() {
    let whole = |message: Value| {
        Reply::Json(json!({
            "id": "x", "object": "chat.completion", "model": "m-served",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 4, "completion_tokens": 3},
        }))
    };
    let fake = FakeOpenAi::start(vec![
        // `whole`: a tool call, then the answer.
        whole(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "write_context", "arguments": "{\"key\": \"k\", \"value\": \"v\"}"}}
        ]})),
        whole(json!({"role": "assistant", "content": "stored"})),
        // `streamy`: an empty stream, then the same question unstreamed.
        Reply::Stream(vec![finish("stop"), usage(4, 0)]),
        whole(json!({"role": "assistant", "content": "found it"})),
        // `streamy` again: empty both ways.
        Reply::Stream(vec![finish("stop")]),
        whole(json!({"role": "assistant", "content": ""})),
    ])
    .await
    .expect("fake");
    let agents = format!(
        r#"
providers:
  local:
    kind: openai
    base_url: "{}"
    api_key_env: ""
    models:
      whole: {{stream: false}}
agents:
  whole: {{model: "local:whole", tools: [write_context]}}
  streamy: {{model: "local:streamy"}}
"#,
        fake.base_url()
    );
    let server = OrchestratorServer::start(&agents, None, |_| {})
        .await
        .expect("orchestrator");
    let client = connect(&server).await;
    let events = client
        .run_agent_to_end(agent_request("whole", "x"))
        .await
        .expect("run");
    assert_eq!(completed_output(&events), "stored");
    let sent = fake.requests();
    assert!(sent[0].body.get("stream").is_none(), "{}", sent[0].body);
    let deltas: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.payload {
            Some(Payload::TextDelta(d)) => Some(d.text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, ["stored"], "a whole answer is one delta");

    let events = client
        .run_agent_to_end(agent_request("streamy", "x"))
        .await
        .expect("run");
    assert_eq!(completed_output(&events), "found it");
    let sent = fake.requests();
    assert_eq!(sent[2].body["stream"], true);
    assert!(sent[3].body.get("stream").is_none(), "the fallback");

    let f = run_failed(
        &client
            .run_agent_to_end(agent_request("streamy", "x"))
            .await
            .expect("run"),
    );
    assert_eq!(f.code, Code::FailedPrecondition as i32);
    assert!(
        f.message.contains("neither text nor tool calls"),
        "{}",
        f.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_errors_keep_their_meaning_in_the_grpc_code() {
    let status = |code| Reply::Status {
        code,
        retry_after: None,
    };
    let fake = FakeOpenAi::start(vec![
        status(429),
        status(429),
        status(401),
        status(404),
        status(422),
    ])
    .await
    .expect("fake");
    let closed = format!("http://{}/v1", baton_e2e::free_addr().expect("port"));
    let agents = format!(
        r#"
providers:
  local:
    kind: openai
    base_url: "{}"
    api_key_env: LOCAL_KEY
    max_retries: 1
    backoff: 5ms
  gone:
    kind: openai
    base_url: "{closed}"
    api_key_env: ""
    max_retries: 1
    backoff: 5ms
agents:
  a: {{model: "local:m"}}
  b: {{model: "gone:m"}}
"#,
        fake.base_url()
    );
    let server =
        OrchestratorServer::start_with_env(&agents, None, |_| {}, &[("LOCAL_KEY", "sk-local")])
            .await
            .expect("orchestrator");
    let client = connect(&server).await;
    let f = run_failed(
        &client
            .run_agent_to_end(agent_request("a", "x"))
            .await
            .expect("run"),
    );
    assert_eq!(f.code, Code::ResourceExhausted as i32, "{f:?}");
    assert!(
        f.message.contains("HTTP 429") && f.message.contains("after 1 retries"),
        "{}",
        f.message
    );
    let f = run_failed(
        &client
            .run_agent_to_end(agent_request("a", "x"))
            .await
            .expect("run"),
    );
    assert_eq!(f.code, Code::FailedPrecondition as i32, "{f:?}");
    assert!(
        f.message.contains("LOCAL_KEY")
            && f.message.contains("not about the caller")
            && f.message.contains("scripted status 401"),
        "{}",
        f.message
    );
    for code in [404, 422] {
        let f = run_failed(
            &client
                .run_agent_to_end(agent_request("a", "x"))
                .await
                .expect("run"),
        );
        assert_eq!(f.code, Code::FailedPrecondition as i32, "{code}: {f:?}");
        assert!(
            f.message.contains(&format!("scripted status {code}")),
            "{}",
            f.message
        );
    }
    assert_eq!(fake.requests().len(), 5, "only the 429 was retried");
    // A connection failure: retried, then UNAVAILABLE with its cause.
    let f = run_failed(
        &client
            .run_agent_to_end(agent_request("b", "x"))
            .await
            .expect("run"),
    );
    assert_eq!(f.code, Code::Unavailable as i32, "{f:?}");
    assert!(
        f.message.contains("after 1 retries") && f.message.to_lowercase().contains("connect"),
        "{}",
        f.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_entries_are_checked_at_start_and_old_files_still_load() {
    let start = |yaml: String| async move {
        OrchestratorServer::start(&yaml, None, |_| {})
            .await
            .err()
            .map(|e| e.to_string())
    };
    // An entry named after no kind needs `kind`.
    let e = start(
        "providers: {local: {base_url: 'http://127.0.0.1:1/v1', api_key_env: ''}}\nagents: {a: {model: 'local:m'}}".into(),
    )
    .await
    .expect("refused");
    assert!(
        e.contains("providers.local.kind") && e.contains("kind: openai"),
        "{e}"
    );
    // A reference to no entry lists the known ones.
    let e = start(
        "providers: {local: {kind: openai, api_key_env: ''}}\nagents: {a: {model: 'gpu:m'}}".into(),
    )
    .await
    .expect("refused");
    assert!(
        e.contains("agents.a.model") && e.contains("known: scripted, local"),
        "{e}"
    );
    // `scripted` is built in; settings are checked where they are written.
    let e = start("providers: {scripted: {kind: openai}}".into())
        .await
        .expect("refused");
    assert!(e.contains("providers.scripted"), "{e}");
    let e = start(
        "providers: {local: {kind: openai, api_key_env: '', models: {m: {settings: {top_p: 2}}}}}"
            .into(),
    )
    .await
    .expect("refused");
    assert!(e.contains("providers.local.models.m.settings.top_p"), "{e}");
    let e = start("agents: {a: {settings: {temperature: -1}}}".into())
        .await
        .expect("refused");
    assert!(e.contains("agents.a.settings.temperature"), "{e}");
    // The form before named providers (`providers.openai` with no kind).
    assert!(
        start(
            "providers: {openai: {base_url: 'http://127.0.0.1:1/v1', api_key_env: '', timeout: 5s, max_retries: 0, backoff: 1ms}}\nagents: {a: {model: 'openai:gpt'}}".into()
        )
        .await
        .is_none()
    );
}

/// Anthropic's streamed events, as `data:` lines.
fn anthropic_stream(text_pieces: &[&str], tool: Option<(&str, &str, &[&str])>) -> Reply {
    let mut events = vec![
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test-served", "content": [], "usage": {"input_tokens": 21, "output_tokens": 1}}}),
        json!({"type": "ping"}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    ];
    for p in text_pieces {
        events.push(json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}}));
    }
    events.push(json!({"type": "content_block_stop", "index": 0}));
    let mut stop = "end_turn";
    if let Some((id, name, parts)) = tool {
        stop = "tool_use";
        events.push(json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}));
        for p in parts {
            events.push(json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": p}}));
        }
        events.push(json!({"type": "content_block_stop", "index": 1}));
    }
    events.push(json!({"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 9}}));
    events.push(json!({"type": "message_stop"}));
    Reply::Stream(events)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_anthropic_kind_streams_calls_tools_and_maps_errors() {
    let fake = FakeOpenAi::start(vec![
        anthropic_stream(
            &["Let me ", "write that."],
            Some((
                "toolu_01",
                "write_context",
                &["{\"key\": \"no", "tes\", \"value\": \"milk\"}"],
            )),
        ),
        anthropic_stream(&["Done", "."], None),
        Reply::Status {
            code: 529,
            retry_after: Some("0"),
        },
        Reply::Status {
            code: 529,
            retry_after: Some("0"),
        },
        Reply::Status {
            code: 400,
            retry_after: None,
        },
    ])
    .await
    .expect("fake");
    let agents = format!(
        r#"
providers:
  claude:
    kind: anthropic
    base_url: "{}"
    api_key_env: TEST_ANTHROPIC_KEY
    max_retries: 1
    backoff: 5ms
    settings: {{temperature: 0.3, stop: ["@@@"]}}
agents:
  c:
    instructions: Be brief.
    model: "claude:claude-test"
    tools: [write_context]
    settings: {{parallel_tool_calls: false}}
"#,
        fake.base_url()
    );
    let server = OrchestratorServer::start_with_env(
        &agents,
        None,
        |_| {},
        &[("TEST_ANTHROPIC_KEY", "sk-ant-test")],
    )
    .await
    .expect("orchestrator");
    let client = connect(&server).await;
    let events = client
        .run_agent_to_end(agent_request("c", "note milk"))
        .await
        .expect("run");
    assert_eq!(completed_output(&events), "Done.");
    let call = events
        .iter()
        .find_map(|e| match &e.payload {
            Some(Payload::ToolCallStarted(s)) => Some(s.clone()),
            _ => None,
        })
        .expect("tool call");
    assert_eq!(call.tool, "write_context");
    let usage = events
        .iter()
        .find_map(|e| match &e.payload {
            Some(Payload::RunCompleted(c)) => c.usage.clone(),
            _ => None,
        })
        .expect("usage");
    assert_eq!((usage.input_tokens, usage.output_tokens), (42, 18));

    let sent = fake.requests();
    let first = &sent[0];
    assert!(
        first
            .header(":request")
            .is_some_and(|l| l.starts_with("POST /v1/messages"))
    );
    assert_eq!(first.header("x-api-key"), Some("sk-ant-test"));
    assert_eq!(first.header("anthropic-version"), Some("2023-06-01"));
    let b = &first.body;
    assert_eq!(b["model"], "claude-test");
    assert_eq!(b["system"], "Be brief.");
    assert_eq!(b["max_tokens"], 4096, "required by the API: a default");
    assert_eq!(b["temperature"], 0.3);
    assert_eq!(b["stop_sequences"], json!(["@@@"]));
    assert_eq!(b["stream"], true);
    assert_eq!(b["tools"][0]["name"], "write_context");
    assert!(b["tools"][0]["input_schema"].is_object());
    assert_eq!(
        b["tool_choice"],
        json!({"type": "auto", "disable_parallel_tool_use": true})
    );
    // The second turn carries the call and its result as the API wants.
    let m = &sent[1].body["messages"];
    assert_eq!(m[1]["role"], "assistant");
    assert_eq!(m[1]["content"][1]["type"], "tool_use");
    assert_eq!(m[1]["content"][1]["id"], "toolu_01");
    assert_eq!(
        m[1]["content"][1]["input"],
        json!({"key": "notes", "value": "milk"})
    );
    assert_eq!(m[2]["role"], "user");
    assert_eq!(m[2]["content"][0]["type"], "tool_result");
    assert_eq!(m[2]["content"][0]["tool_use_id"], "toolu_01");

    // 529 (overloaded) is retried, then UNAVAILABLE; 400 is not retried.
    let f = run_failed(
        &client
            .run_agent_to_end(agent_request("c", "x"))
            .await
            .expect("run"),
    );
    assert_eq!(f.code, Code::Unavailable as i32, "{f:?}");
    assert!(f.message.contains("HTTP 529"), "{}", f.message);
    let f = run_failed(
        &client
            .run_agent_to_end(agent_request("c", "x"))
            .await
            .expect("run"),
    );
    assert_eq!(f.code, Code::FailedPrecondition as i32, "{f:?}");
    assert_eq!(fake.requests().len(), 5);
}
