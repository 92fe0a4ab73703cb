//! The `openai` provider kind against a real OpenAI-compatible server that
//! nobody here wrote: LiteLLM's proxy with mock models (offline). Its
//! streamed text reaches the client as deltas; the settings of every level
//! and the extra body fields arrive at the proxy as sent (a proxy callback
//! records what it received); its 429, 500 and 400 keep their meaning in
//! the gRPC code.

use baton_client::{OrchestratorClient, pb, pb::run_event::Payload};
use baton_e2e::{
    OrchestratorServer, agent_request,
    servers::{LITELLM_KEY, LiteLlm},
};
use serde_json::json;
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn litellm_streams_receives_the_settings_as_sent_and_its_errors_keep_their_meaning() {
    let proxy = tokio::task::spawn_blocking(LiteLlm::start)
        .await
        .expect("join")
        .expect("LiteLLM proxy");
    let agents = format!(
        r#"
providers:
  proxy:
    kind: openai
    base_url: "{}"
    api_key_env: LITELLM_KEY
    max_retries: 1
    backoff: 10ms
    settings: {{temperature: 0.2, max_tokens: 64, extra: {{mock_testing_note: from-provider}}}}
agents:
  talker:
    model: "proxy:text"
    settings: {{stop: ["</end>"], seed: 11}}
  limited: {{model: "proxy:rate-limited"}}
  failing: {{model: "proxy:failing"}}
  too-long: {{model: "proxy:too-long"}}
"#,
        proxy.base_url()
    );
    let server =
        OrchestratorServer::start_with_env(&agents, None, |_| {}, &[("LITELLM_KEY", LITELLM_KEY)])
            .await
            .expect("orchestrator");
    let client = OrchestratorClient::connect(server.endpoint())
        .await
        .expect("connect");

    let mut r = agent_request("talker", "hi");
    r.settings = Some(pb::GenerationSettings {
        top_p: Some(0.5),
        extra_body_json: r#"{"user": "baton-test", "metadata_tag": {"nested": [1, "two"]}}"#.into(),
        ..Default::default()
    });
    let events = client.run_agent_to_end(r).await.expect("run");
    let deltas = events
        .iter()
        .filter(|e| matches!(e.payload, Some(Payload::TextDelta(_))))
        .count();
    match events.last().and_then(|e| e.payload.clone()) {
        Some(Payload::RunCompleted(c)) => assert_eq!(c.output, "Hello from LiteLLM"),
        other => panic!("expected RunCompleted, got {other:?}"),
    }
    assert!(deltas > 1, "streamed in pieces: {deltas}");

    let recorded = proxy.recorded();
    let body = recorded
        .iter()
        .find(|b| b["model"] == "text")
        .expect("the proxy saw the request");
    assert_eq!(body["temperature"], 0.2);
    assert_eq!(body["max_tokens"], 64);
    assert_eq!(body["stop"], json!(["</end>"]));
    assert_eq!(body["seed"], 11);
    assert_eq!(body["top_p"], 0.5);
    assert_eq!(body["mock_testing_note"], "from-provider");
    assert_eq!(body["user"], "baton-test");
    assert_eq!(body["metadata_tag"], json!({"nested": [1, "two"]}));
    assert_eq!(body["stream"], true);

    for (agent, code, said) in [
        ("limited", Code::ResourceExhausted, "mock rate limit error"),
        ("failing", Code::Unavailable, "mock internal server error"),
        (
            "too-long",
            Code::FailedPrecondition,
            "context window exceeded",
        ),
    ] {
        let events = client
            .run_agent_to_end(agent_request(agent, "hi"))
            .await
            .expect("run");
        match events.last().and_then(|e| e.payload.clone()) {
            Some(Payload::RunFailed(f)) => {
                assert_eq!(f.code, code as i32, "{agent}: {f:?}");
                assert!(f.message.contains(said), "{agent}: {}", f.message);
            }
            other => panic!("{agent}: expected RunFailed, got {other:?}"),
        }
    }
    let tries = |model: &str| {
        proxy
            .recorded()
            .iter()
            .filter(|b| b["model"] == model)
            .count()
    };
    assert_eq!(tries("rate-limited"), 2, "a 429 is retried");
    assert_eq!(tries("failing"), 2, "a 500 is retried");
    assert_eq!(tries("too-long"), 1, "a 400 is not");

    // Fallbacks through the proxy: its 429 and 500 move the call on to a
    // model that answers; its context-window error to the larger window.
    let agents = format!(
        r#"
providers:
  proxy: {{kind: openai, base_url: "{}", api_key_env: LITELLM_KEY, max_retries: 0}}
agents:
  resilient: {{model: "proxy:rate-limited", fallbacks: ["proxy:failing", "proxy:text"]}}
  roomy: {{model: "proxy:too-long", fallbacks: ["proxy:failing"], context_window_fallbacks: ["proxy:text"]}}
"#,
        proxy.base_url()
    );
    let fallbacks =
        OrchestratorServer::start_with_env(&agents, None, |_| {}, &[("LITELLM_KEY", LITELLM_KEY)])
            .await
            .expect("orchestrator");
    let client = OrchestratorClient::connect(fallbacks.endpoint())
        .await
        .expect("connect");
    for (agent, passed) in [
        (
            "resilient",
            vec![
                ("proxy:rate-limited", "rate_limited"),
                ("proxy:failing", "unavailable"),
            ],
        ),
        ("roomy", vec![("proxy:too-long", "context_window")]),
    ] {
        let events = client
            .run_agent_to_end(agent_request(agent, "hi"))
            .await
            .expect("run");
        let m = events
            .iter()
            .find_map(|e| match &e.payload {
                Some(Payload::MessageCompleted(m)) => Some(m.clone()),
                _ => None,
            })
            .expect("a model turn");
        assert_eq!(
            (m.text.as_str(), m.model.as_str()),
            ("Hello from LiteLLM", "proxy:text"),
            "{agent}"
        );
        let skipped: Vec<(&str, &str)> = m
            .skipped
            .iter()
            .map(|s| (s.model.as_str(), s.reason.as_str()))
            .collect();
        assert_eq!(skipped, passed, "{agent}");
    }
    fallbacks.shutdown().await.expect("shutdown");
}
