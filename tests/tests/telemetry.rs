//! OpenTelemetry across both services, proven with an OTLP receiver inside
//! the test: a nested agent (depth 2) and a pipeline, each started with a
//! client `traceparent`, through an orchestrator whose context store is the
//! context-store service on Redis, with the GenAI semantic conventions'
//! span names and attributes. Also: an unreachable collector never slows or
//! fails a run.

use std::{
    collections::{HashMap, HashSet},
    time::{Duration, Instant},
};

use baton_client::{OrchestratorClient, pb, pb::run_event::Payload};
use baton_context_store::config::Backend;
use baton_e2e::{
    OrchestratorServer, RedisServer, StoreServer, agent_request,
    otlp::{OtlpReceiver, ReceivedSpan},
};
use baton_orchestrator::config::StoreMode;

const AGENTS: &str = r#"
scripts:
  outer:
    - calls: [{tool: middle, args: {task: "dig into {{input}}"}}]
      usage: {input_tokens: 11, output_tokens: 7}
    - text: "outer: {{results}}"
      usage: {input_tokens: 13, output_tokens: 5}
  middle:
    - calls: [{tool: inner, args: {task: "{{input}}"}}]
      usage: {input_tokens: 17, output_tokens: 3}
    - text: "middle: {{results}}"
      usage: {input_tokens: 19, output_tokens: 2}
  inner:
    - calls: [{tool: write_context, args: {key: notes, value: "{{input}}"}}]
      usage: {input_tokens: 23, output_tokens: 4}
    - text: "inner wrote"
      usage: {input_tokens: 29, output_tokens: 6}
  echo: [{text: "{{input}}", usage: {input_tokens: 2, output_tokens: 1}}]
  broken: [{fail: "the provider is down"}]
agents:
  broken: {model: "scripted:broken"}
  outer: {model: "scripted:outer", tools: [middle]}
  middle: {model: "scripted:middle", tools: [inner]}
  inner: {model: "scripted:inner", tools: [write_context]}
  echo: {model: "scripted:echo"}
"#;

const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

fn by_id(spans: &[ReceivedSpan]) -> HashMap<&str, &ReceivedSpan> {
    spans.iter().map(|s| (s.span_id.as_str(), s)).collect()
}

/// Checks one run's events against the spans: one trace (the client's),
/// every event's span exported, the span tree equal to the context tree,
/// and the root context under the run span under the client's span.
fn check_run(events: &[pb::RunEvent], spans: &[ReceivedSpan]) {
    let index = by_id(spans);
    for e in events {
        assert_eq!(e.trace_id, CLIENT_TRACE, "{e:?}");
        let span = index
            .get(e.span_id.as_str())
            .unwrap_or_else(|| panic!("event {} names span {} nobody exported", e.seq, e.span_id));
        assert_eq!(span.trace_id, CLIENT_TRACE);
        assert_eq!(span.service, "baton-orchestrator");
        assert_eq!(span.attributes["baton.context.id"], e.context_id);
    }
    // context id → its span, from the events.
    let mut context_span: HashMap<&str, &str> = HashMap::new();
    for e in events {
        let previous = context_span.insert(&e.context_id, &e.span_id);
        assert!(
            previous.is_none_or(|p| p == e.span_id),
            "one span per context"
        );
    }
    for e in events {
        let span = index[e.span_id.as_str()];
        if e.parent_context_id.is_empty() {
            let run = index[span.parent_span_id.as_str()];
            assert!(run.name.starts_with("run "), "{}", run.name);
            assert_eq!(
                run.parent_span_id, CLIENT_SPAN,
                "the run continues the client's span"
            );
        } else {
            // An agent or pipeline a call started sits under the call's
            // `execute_tool` span, itself in the parent context; a
            // pipeline's steps sit right under the pipeline's context.
            let parent = index[span.parent_span_id.as_str()];
            let via = if parent.name.starts_with("execute_tool ") {
                parent.parent_span_id.as_str()
            } else {
                parent.span_id.as_str()
            };
            assert_eq!(
                via,
                context_span[e.parent_context_id.as_str()],
                "context {}'s span is under its parent context's span",
                e.context_id
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_across_both_services_with_the_context_tree_as_span_tree() {
    let receiver = OtlpReceiver::start().await.expect("receiver");
    let redis = RedisServer::start().expect("redis-server");
    let mut store_config = StoreServer::config(Backend::Redis, Some(redis.url()));
    store_config.telemetry.otlp_endpoint = receiver.endpoint();
    store_config.telemetry.service_name = "baton-context-store".into();
    let store = StoreServer::start(store_config).await.expect("store");
    let store_endpoint = store.endpoint();
    let otlp = receiver.endpoint();
    let server = OrchestratorServer::start(AGENTS, None, |c| {
        c.store.mode = StoreMode::Remote;
        c.store.endpoint = store_endpoint;
        c.telemetry.otlp_endpoint = otlp;
    })
    .await
    .expect("orchestrator");
    let client = OrchestratorClient::connect(server.endpoint())
        .await
        .expect("connect");
    let traceparent = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");

    let mut events = Vec::new();
    let mut stream = client
        .run_agent_traced(
            pb::RunAgentRequest {
                agent: "outer".into(),
                input: "tides".into(),
                settings: Some(pb::GenerationSettings {
                    temperature: Some(0.25),
                    max_tokens: Some(64),
                    ..Default::default()
                }),
                ..Default::default()
            },
            Some(&traceparent),
        )
        .await
        .expect("run");
    while let Some(e) = futures::StreamExt::next(&mut stream).await {
        events.push(e.expect("event"));
    }
    assert!(matches!(
        events.last().and_then(|e| e.payload.as_ref()),
        Some(Payload::RunCompleted(_))
    ));
    assert_eq!(
        events.iter().map(|e| e.depth).max(),
        Some(2),
        "nested two deep"
    );

    let step = |id: &str, task: &str, output_to: &str| pb::PipelineStep {
        id: id.into(),
        agent: "echo".into(),
        task: task.into(),
        output_to: output_to.into(),
        ..Default::default()
    };
    let mut pipeline_events = Vec::new();
    let mut stream = client
        .run_pipeline_traced(
            pb::RunPipelineRequest {
                pipeline: Some(pb::PipelineSpec {
                    name: "traced".into(),
                    steps: vec![step("a", "alpha", "x"), step("b", "got {{x}}", "")],
                    mode: pb::PipelineMode::Dag as i32,
                    ..Default::default()
                }),
                ..Default::default()
            },
            Some(&traceparent),
        )
        .await
        .expect("pipeline");
    while let Some(e) = futures::StreamExt::next(&mut stream).await {
        pipeline_events.push(e.expect("event"));
    }
    assert!(matches!(
        pipeline_events.last().and_then(|e| e.payload.as_ref()),
        Some(Payload::RunCompleted(c)) if c.output == "got alpha"
    ));

    // A failed run: its contexts' spans carry `error.type`.
    let mut failed = Vec::new();
    let mut stream = client
        .run_agent_traced(
            pb::RunAgentRequest {
                agent: "broken".into(),
                input: "x".into(),
                ..Default::default()
            },
            Some(&traceparent),
        )
        .await
        .expect("run");
    while let Some(e) = futures::StreamExt::next(&mut stream).await {
        failed.push(e.expect("event"));
    }
    assert!(matches!(
        failed.last().and_then(|e| e.payload.as_ref()),
        Some(Payload::RunFailed(f)) if f.code == tonic::Code::Unavailable as i32
    ));

    // Shutting down flushes both services' spans.
    server.shutdown().await.expect("orchestrator shutdown");
    store.shutdown().await.expect("store shutdown");
    let spans = receiver.spans();
    assert!(
        spans.iter().all(|s| s.trace_id == CLIENT_TRACE),
        "one trace: {:?}",
        spans
            .iter()
            .filter(|s| s.trace_id != CLIENT_TRACE)
            .map(|s| &s.name)
            .collect::<Vec<_>>()
    );
    check_run(&events, &spans);
    check_run(&pipeline_events, &spans);
    // GenAI semantic conventions: agent contexts are `invoke_agent
    // {agent}`, tool calls `execute_tool {tool}`, model calls `chat
    // {model}`, failures carry `error.type`.
    let broken = spans
        .iter()
        .find(|s| s.name == "invoke_agent broken")
        .expect("the failed agent's span");
    assert_eq!(broken.attributes["gen_ai.operation.name"], "invoke_agent");
    assert_eq!(broken.attributes["gen_ai.agent.name"], "broken");
    assert_eq!(broken.attributes["error.type"], "UNAVAILABLE");
    let broken_chat = spans
        .iter()
        .find(|s| s.name == "chat broken")
        .expect("the failed chat span");
    assert_eq!(broken_chat.attributes["error.type"], "scripted");
    let outer = spans
        .iter()
        .find(|s| s.name == "invoke_agent outer")
        .expect("outer");
    assert_eq!(outer.attributes["gen_ai.agent.name"], "outer");
    assert!(!outer.attributes.contains_key("error.type"));
    let index = by_id(&spans);
    let names: HashSet<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    for expected in [
        "run outer",
        "invoke_agent outer",
        "invoke_agent middle",
        "invoke_agent inner",
        "chat outer",
        "execute_tool middle",
        "execute_tool write_context",
        "run traced",
        "pipeline traced",
        "invoke_agent echo",
        "baton.v1.ContextStore/Put",
    ] {
        assert!(
            names.contains(expected),
            "no span {expected:?} in {names:?}"
        );
    }

    // An agent called as a tool nests under the call that ran it:
    // invoke_agent outer → execute_tool middle → invoke_agent middle.
    let middle = spans
        .iter()
        .find(|s| s.name == "invoke_agent middle")
        .expect("middle");
    let call = index[middle.parent_span_id.as_str()];
    assert_eq!(call.name, "execute_tool middle");
    assert_eq!(
        index[call.parent_span_id.as_str()].name,
        "invoke_agent outer"
    );

    // Each pipeline step is a span, with its attempt.
    let step_a = spans
        .iter()
        .find(|s| s.attributes.get("baton.step.id").map(String::as_str) == Some("a"))
        .expect("step a");
    assert_eq!(step_a.name, "invoke_agent echo");
    assert_eq!(step_a.attributes["baton.step.attempt"], "1");

    // The store's server spans are children of the orchestrator's client
    // spans, across the two services.
    let server_spans: Vec<&ReceivedSpan> = spans
        .iter()
        .filter(|s| s.service == "baton-context-store")
        .collect();
    assert!(
        server_spans.len() >= 3,
        "Put of notes, Put of x, Delete of x"
    );
    for s in &server_spans {
        let parent = index
            .get(s.parent_span_id.as_str())
            .unwrap_or_else(|| panic!("store span {} has no exported parent", s.name));
        assert_eq!(parent.service, "baton-orchestrator");
        assert_eq!(parent.name, s.name, "client span of the same RPC");
    }
    // The write of depth 2 sits under its tool call, under agent inner.
    let put = server_spans
        .iter()
        .map(|s| index[s.parent_span_id.as_str()])
        .find(|c| {
            index
                .get(c.parent_span_id.as_str())
                .map(|t| t.name.as_str())
                == Some("execute_tool write_context")
        })
        .expect("the store client span of write_context");
    let tool = index[put.parent_span_id.as_str()];
    assert_eq!(
        index[tool.parent_span_id.as_str()].name,
        "invoke_agent inner"
    );
    assert!(tool.attributes.contains_key("gen_ai.tool.call.id"));

    // GenAI attributes carry the scripted token counts.
    let chats: Vec<&ReceivedSpan> = spans.iter().filter(|s| s.name == "chat inner").collect();
    assert_eq!(chats.len(), 2);
    let mut tokens: Vec<(String, String)> = chats
        .iter()
        .map(|c| {
            assert_eq!(c.attributes["gen_ai.operation.name"], "chat");
            assert_eq!(c.attributes["gen_ai.provider.name"], "scripted");
            assert_eq!(c.attributes["gen_ai.request.model"], "inner");
            assert_eq!(c.attributes["gen_ai.response.model"], "inner");
            // The request's settings reach every model call of the run.
            assert_eq!(c.attributes["gen_ai.request.temperature"], "0.25");
            assert_eq!(c.attributes["gen_ai.request.max_tokens"], "64");
            assert!(c.attributes.contains_key("gen_ai.response.finish_reasons"));
            (
                c.attributes["gen_ai.usage.input_tokens"].clone(),
                c.attributes["gen_ai.usage.output_tokens"].clone(),
            )
        })
        .collect();
    tokens.sort();
    assert_eq!(
        tokens,
        [("23".into(), "4".into()), ("29".into(), "6".into())]
    );
}

/// A tiny TCP server that accepts connections and never answers: the worst
/// collector, one that hangs.
async fn black_hole() -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    (format!("http://{addr}"), task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_or_hanging_collector_never_slows_or_fails_a_run() {
    let closed = format!("http://{}", baton_e2e::free_addr().expect("port"));
    let (hanging, _hole) = black_hole().await;
    for endpoint in [closed, hanging] {
        let otlp = endpoint.clone();
        let server = OrchestratorServer::start(AGENTS, None, |c| {
            c.telemetry.otlp_endpoint = otlp;
        })
        .await
        .expect("orchestrator");
        let client = OrchestratorClient::connect(server.endpoint())
            .await
            .expect("connect");
        let began = Instant::now();
        for _ in 0..50 {
            let events = client
                .run_agent_to_end(pb::RunAgentRequest {
                    agent: "outer".into(),
                    input: "x".into(),
                    ..Default::default()
                })
                .await
                .expect("run");
            assert!(
                matches!(
                    events.last().and_then(|e| e.payload.as_ref()),
                    Some(Payload::RunCompleted(_))
                ),
                "{endpoint}"
            );
        }
        // 50 nested runs take a few ms each; an exporter on the run's path
        // would take seconds.
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "{endpoint}: {:?}",
            began.elapsed()
        );
        // Shutdown tries a last flush, bounded by the export timeout.
        let stopping = Instant::now();
        server.shutdown().await.expect("shutdown");
        assert!(
            stopping.elapsed() < Duration::from_secs(15),
            "{endpoint}: shutdown took {:?}",
            stopping.elapsed()
        );
    }
}

/// The value of the sample `name{labels}` in Prometheus text, where
/// `labels` is the exact label text.
fn sample(text: &str, name: &str, labels: &str) -> Option<f64> {
    let head = if labels.is_empty() {
        format!("{name} ")
    } else {
        format!("{name}{{{labels}}} ")
    };
    text.lines()
        .find_map(|l| l.strip_prefix(head.as_str()))
        .and_then(|v| v.trim().parse().ok())
}

async fn scrape(addr: std::net::SocketAddr) -> String {
    let response = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .expect("scrape");
    assert!(response.status().is_success());
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    response.text().await.expect("body")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_services_serve_prometheus_metrics() {
    let redis = RedisServer::start().expect("redis-server");
    let store_metrics = baton_e2e::free_addr().expect("port");
    let mut store_config = StoreServer::config(Backend::Redis, Some(redis.url()));
    store_config.telemetry.metrics_listen = store_metrics.to_string();
    store_config.limits.max_value_bytes = 64;
    let store = StoreServer::start(store_config).await.expect("store");
    let orch_metrics = baton_e2e::free_addr().expect("port");
    let store_endpoint = store.endpoint();
    let server = OrchestratorServer::start(AGENTS, None, |c| {
        c.store.mode = StoreMode::Remote;
        c.store.endpoint = store_endpoint;
        c.telemetry.metrics_listen = orch_metrics.to_string();
    })
    .await
    .expect("orchestrator");
    let client = server.client().await.expect("connect");
    let events = client
        .run_agent_to_end(agent_request("outer", "tides"))
        .await
        .expect("run");
    assert!(matches!(
        events.last().and_then(|e| e.payload.as_ref()),
        Some(Payload::RunCompleted(_))
    ));
    // The run is recorded once its task has finished.
    tokio::time::sleep(Duration::from_millis(100)).await;

    let text = scrape(orch_metrics).await;
    let m = |name: &str, labels: &str| {
        sample(&text, name, labels).unwrap_or_else(|| panic!("no {name}{{{labels}}} in\n{text}"))
    };
    assert_eq!(m("baton_runs_started_total", r#"kind="agent""#), 1.0);
    assert_eq!(
        m(
            "baton_runs_finished_total",
            r#"kind="agent",status="completed""#
        ),
        1.0
    );
    assert_eq!(m("baton_runs_active", ""), 0.0);
    assert_eq!(m("baton_events_emitted_total", ""), events.len() as f64);
    // Three agents, two turns each; the scripted token counts.
    assert_eq!(
        m(
            "baton_model_call_duration_seconds_count",
            r#"model="scripted:inner",outcome="ok""#
        ),
        2.0
    );
    assert_eq!(
        m(
            "baton_model_tokens_total",
            r#"model="scripted:inner",direction="input""#
        ),
        52.0
    );
    assert_eq!(
        m(
            "baton_model_tokens_total",
            r#"model="scripted:outer",direction="output""#
        ),
        12.0
    );
    assert_eq!(
        m(
            "baton_tool_call_duration_seconds_count",
            r#"tool="write_context",outcome="ok""#
        ),
        1.0
    );

    // The store: the run's write, a value over the limit, and a Redis
    // outage.
    let store_client = baton_client::StoreClient::connect(store.endpoint())
        .await
        .expect("store client");
    let big = store_client
        .put(&events[0].trace_id, "big", vec![b'x'; 65])
        .await
        .expect_err("over the limit");
    assert_eq!(big.code(), tonic::Code::ResourceExhausted);
    drop(redis);
    let down = store_client
        .get(&events[0].trace_id, "notes")
        .await
        .expect_err("redis is down");
    assert_eq!(down.code(), tonic::Code::Unavailable);
    let text = scrape(store_metrics).await;
    let m = |name: &str, labels: &str| {
        sample(&text, name, labels).unwrap_or_else(|| panic!("no {name}{{{labels}}} in\n{text}"))
    };
    assert_eq!(
        m("baton_store_operations_total", r#"op="Put",code="OK""#),
        1.0
    );
    assert_eq!(
        m(
            "baton_store_operations_total",
            r#"op="Put",code="RESOURCE_EXHAUSTED""#
        ),
        1.0
    );
    assert_eq!(
        m(
            "baton_store_operations_total",
            r#"op="Get",code="UNAVAILABLE""#
        ),
        1.0
    );
    assert_eq!(
        m("baton_store_quota_rejections_total", r#"field="value""#),
        1.0
    );
    assert_eq!(m("baton_store_backend_errors_total", r#"op="Get""#), 1.0);
    assert!(
        m(
            "baton_store_operation_duration_seconds_count",
            r#"op="Put""#
        ) >= 2.0
    );
    assert_eq!(m("baton_store_watches_active", ""), 0.0);
    server.shutdown().await.expect("shutdown");
    store.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_are_exported_to_an_https_collector_checked_against_a_ca() {
    let pki = baton_e2e::pki::TestPki::generate("otlp").expect("pki");
    let (receiver, otlp) = OtlpReceiver::start_tls(&pki).await.expect("receiver");
    let ca = pki.ca.clone();
    let server = OrchestratorServer::start(AGENTS, None, |c| {
        c.telemetry.otlp_endpoint = otlp;
        c.telemetry.otlp_ca_file = ca;
    })
    .await
    .expect("orchestrator");
    let client = server.client().await.expect("client");
    let events = client
        .run_agent_to_end(pb::RunAgentRequest {
            agent: "outer".into(),
            input: "tides".into(),
            ..Default::default()
        })
        .await
        .expect("run");
    let trace = events[0].trace_id.clone();
    baton_e2e::eventually("the run's spans reach the collector over TLS", || async {
        receiver.spans().iter().any(|s| s.trace_id == trace)
    })
    .await;
}
