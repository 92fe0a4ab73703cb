//! Fallback models and circuit breakers (issue 46) against HTTP servers
//! speaking OpenAI's Chat Completions: a 429 moves the call to the next
//! model; a stream that breaks mid-answer is discarded (an event says so)
//! and the next model starts the turn again; a provider that failed
//! `failures` times is skipped without a request until its cool-down
//! ends, then probed; a 400 moves nothing; a context-window error goes to
//! the model with the larger window. Every `MessageCompleted` names the
//! model that answered and those passed over.

use baton_client::{OrchestratorClient, pb, pb::run_event::Payload};
use baton_e2e::{
    OrchestratorServer,
    openai::{FakeOpenAi, Reply, finish, text, usage},
};
use futures::StreamExt;
use tonic::Code;

fn answer(words: &str) -> Reply {
    Reply::Stream(vec![text(words), finish("stop"), usage(10, 3)])
}

async fn run(client: &OrchestratorClient, agent: &str) -> Vec<pb::RunEvent> {
    let mut stream = client
        .run_agent(pb::RunAgentRequest {
            agent: agent.into(),
            input: "hi".into(),
            ..Default::default()
        })
        .await
        .expect("run");
    let mut out = Vec::new();
    while let Some(e) = stream.next().await {
        out.push(e.expect("event"));
    }
    out
}

/// The run's only model turn.
fn turn(log: &[pb::RunEvent]) -> pb::MessageCompleted {
    let turns: Vec<_> = log
        .iter()
        .filter_map(|e| match &e.payload {
            Some(Payload::MessageCompleted(m)) => Some(m.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(turns.len(), 1, "{log:?}");
    turns[0].clone()
}

fn skipped(m: &pb::MessageCompleted) -> Vec<(&str, &str)> {
    m.skipped
        .iter()
        .map(|s| (s.model.as_str(), s.reason.as_str()))
        .collect()
}

/// What the stream showed of the turn: text deltas and fallbacks, in order.
fn shown(log: &[pb::RunEvent]) -> Vec<String> {
    log.iter()
        .filter_map(|e| match &e.payload {
            Some(Payload::TextDelta(d)) => Some(d.text.clone()),
            Some(Payload::ModelFallback(f)) => Some(format!(
                "[{} -> {}: {}{}]",
                f.from_model,
                f.to_model,
                f.reason,
                if f.discarded_text { ", discarded" } else { "" }
            )),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_move_to_fallbacks_on_what_another_model_may_answer_and_a_breaker_skips_a_failing_provider()
 {
    let a = FakeOpenAi::start(vec![
        Reply::Status {
            code: 429,
            retry_after: None,
        },
        Reply::Broken(vec![text("partial ")]),
        // Past the cool-down: the probe.
        answer("a is back"),
        Reply::Status {
            code: 400,
            retry_after: None,
        },
        Reply::Said {
            code: 400,
            message: "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.",
        },
    ])
    .await
    .expect("a");
    let b = FakeOpenAi::start(vec![
        answer("from b"),
        answer("whole"),
        answer("b while a is out"),
        answer("the larger window"),
    ])
    .await
    .expect("b");
    let agents = format!(
        r#"
providers:
  a:
    kind: openai
    base_url: "{}"
    api_key_env: ""
    max_retries: 0
    breaker: {{failures: 2, window: 60s, cooldown: 1s}}
  b: {{kind: openai, base_url: "{}", api_key_env: "", max_retries: 0}}
  big: {{kind: openai, base_url: "{}", api_key_env: "", max_retries: 0}}
agents:
  chat: {{model: "a:m", fallbacks: ["b:m"]}}
  wide: {{model: "a:m", fallbacks: ["b:m"], context_window_fallbacks: ["big:m"]}}
"#,
        a.base_url(),
        b.base_url(),
        b.base_url()
    );
    let server = OrchestratorServer::start(&agents, None, |_| {})
        .await
        .expect("orchestrator");
    let client = server.client().await.expect("client");

    // A 429 (after a's retries, none here): b answers.
    let log = run(&client, "chat").await;
    let m = turn(&log);
    assert_eq!((m.text.as_str(), m.model.as_str()), ("from b", "b:m"));
    assert_eq!(skipped(&m), [("a:m", "rate_limited")]);
    assert!(m.skipped[0].error.contains("429"), "{:?}", m.skipped);
    assert_eq!(shown(&log), ["[a:m -> b:m: rate_limited]", "from b"]);

    // a's stream breaks mid-answer: its text is discarded, b starts over.
    let log = run(&client, "chat").await;
    let m = turn(&log);
    assert_eq!((m.text.as_str(), m.model.as_str()), ("whole", "b:m"));
    assert_eq!(skipped(&m), [("a:m", "unavailable")]);
    assert_eq!(
        shown(&log),
        ["partial ", "[a:m -> b:m: unavailable, discarded]", "whole"]
    );
    match log.last().and_then(|e| e.payload.as_ref()) {
        Some(Payload::RunCompleted(c)) => assert_eq!(c.output, "whole"),
        other => panic!("{other:?}"),
    }

    // Two failures within the window opened a's breaker: the next call
    // goes straight to b, and a sees no request.
    let asked_a = a.requests().len();
    let log = run(&client, "chat").await;
    let m = turn(&log);
    assert_eq!(m.model, "b:m");
    assert_eq!(skipped(&m), [("a:m", "breaker_open")]);
    assert!(
        m.skipped[0].error.contains("circuit breaker is open"),
        "{:?}",
        m.skipped
    );
    assert_eq!(a.requests().len(), asked_a, "an open breaker sends nothing");

    // After the cool-down one call probes a, which answers: closed again.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let m = turn(&run(&client, "chat").await);
    assert_eq!((m.text.as_str(), m.model.as_str()), ("a is back", "a:m"));
    assert!(m.skipped.is_empty());

    // A 400 is the request's fault: no fallback, and b is not asked.
    let asked_b = b.requests().len();
    let log = run(&client, "chat").await;
    match log.last().and_then(|e| e.payload.as_ref()) {
        Some(Payload::RunFailed(f)) => assert_eq!(f.code, Code::FailedPrecondition as i32, "{f:?}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(b.requests().len(), asked_b);

    // Over its context window: the larger window answers, not b.
    let m = turn(&run(&client, "wide").await);
    assert_eq!(
        (m.text.as_str(), m.model.as_str()),
        ("the larger window", "big:m")
    );
    assert_eq!(skipped(&m), [("a:m", "context_window")]);
    server.shutdown().await.expect("shutdown");
}
