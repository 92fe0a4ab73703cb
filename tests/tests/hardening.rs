//! What a hostile or broken client cannot do, through the real gRPC API:
//! make a replica unready, get a status that lies about retrying, reach a
//! service a port does not serve, or grow a server's memory or metrics
//! without bound. Every limit is tried at and just over its value.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use baton_client::{Error, OrchestratorClient, StoreClient, pb, pb::run_event::Payload};
use baton_context_store::config::Backend;
use baton_e2e::{
    OrchestratorServer, RedisServer, StoreServer, agent_request, eventually, health, scrape,
};
use baton_store::{ContextStore, Limits, memory::MemoryStore};
use futures::StreamExt;
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;

const AGENTS: &str = r#"
default_model: "scripted:hello"
scripts:
  hello: [{text: "hello"}]
  unlisted: [{text: "from a model no agent names"}]
  inventor:
    - calls: [{tool: made_up_tool, args: {}}]
    - text: "done"
  waiter:
    - calls: [{tool: write_context, args: {key: k, value: v}}]
    - text: "approved"
  lister:
    - calls: [{tool: list_context, args: {page_size: 1000}}]
    - text: "listed"
  planner:
    - calls: [{tool: run_pipeline, args: {steps: [{id: a, agent: hello, task: "hi"}]}}]
    - text: "planned"
agents:
  lister: {model: "scripted:lister", tools: [list_context]}
  planner: {model: "scripted:planner", tools: [run_pipeline]}
  hello: {}
  inventor: {model: "scripted:inventor"}
  waiter: {model: "scripted:waiter", tools: [write_context], approvals: {write_context: always}}
  seq: {}
"#;

#[track_caller]
fn refused<T>(r: Result<T, Error>) -> Error {
    match r {
        Ok(_) => panic!("the call must fail"),
        Err(e) => e,
    }
}

#[track_caller]
fn assert_refused<T>(r: Result<T, Error>, code: Code, field: &str) -> Error {
    let e = refused(r);
    assert_eq!((e.code(), e.field()), (code, Some(field)), "{e}");
    e
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_depends_on_nothing_a_client_writes() {
    let mut redis = RedisServer::start().expect("redis-server");
    let store_metrics = baton_e2e::free_addr().expect("port");
    let mut config = StoreServer::config(Backend::Redis, Some(redis.url()));
    config.telemetry.metrics_listen = store_metrics.to_string();
    let store = StoreServer::start(config).await.expect("store");
    let endpoint = store.endpoint();
    let orchestrator = OrchestratorServer::start(AGENTS, None, |c| {
        c.store.mode = baton_orchestrator::config::StoreMode::Remote;
        c.store.endpoint = endpoint.clone();
    })
    .await
    .expect("orchestrator");
    let orch = orchestrator.endpoint();
    eventually("ready", || async {
        health(&orch, "baton.v1.Orchestrator").await == ServingStatus::Serving as i32
    })
    .await;

    // What the old probe read: fill that trace to its key quota with the
    // longest keys (a single List of it is over 4 MiB).
    let c = StoreClient::connect(endpoint.clone())
        .await
        .expect("store client");
    let fixed = "00000000000000000000000000000001";
    for chunk in (0..4096).collect::<Vec<_>>().chunks(256) {
        futures::future::try_join_all(chunk.iter().map(|&i| {
            let (c, k) = (&c, format!("{i:05}/{}", "k".repeat(250)));
            async move { c.put(fixed, &k, b"v".to_vec()).await }
        }))
        .await
        .expect("any tenant can write that trace");
    }
    // Several probe periods later the orchestrator is still ready, and its
    // probes never listed a trace.
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        assert_eq!(
            health(&orch, "baton.v1.Orchestrator").await,
            ServingStatus::Serving as i32
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let metrics = scrape(store_metrics).await;
    assert!(
        !metrics.lines().any(|l| l.contains(r#"op="List""#)),
        "readiness lists nothing: {metrics}"
    );
    // It follows the store's own readiness: Redis away → unready, back →
    // ready.
    redis.stop();
    eventually("unready with the store", || async {
        health(&orch, "baton.v1.Orchestrator").await == ServingStatus::NotServing as i32
    })
    .await;
    redis.restart().expect("restart");
    eventually("ready again", || async {
        health(&orch, "baton.v1.Orchestrator").await == ServingStatus::Serving as i32
    })
    .await;
    orchestrator.shutdown().await.expect("shutdown");
    store.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_list_and_plan_over_a_trace_at_its_key_quota() {
    let redis = RedisServer::start().expect("redis-server");
    let store = StoreServer::start(StoreServer::config(Backend::Redis, Some(redis.url())))
        .await
        .expect("store");
    let endpoint = store.endpoint();
    let orchestrator = OrchestratorServer::start(AGENTS, None, |c| {
        c.store.mode = baton_orchestrator::config::StoreMode::Remote;
        c.store.endpoint = endpoint.clone();
    })
    .await
    .expect("orchestrator");
    let trace = "5ef92f3577b34da6a3ce929d0e0e4736";
    let c = StoreClient::connect(endpoint.clone())
        .await
        .expect("store client");
    for chunk in (0..4096).collect::<Vec<_>>().chunks(256) {
        futures::future::try_join_all(chunk.iter().map(|&i| {
            let (c, k) = (&c, format!("{i:05}/{}", "k".repeat(250)));
            async move { c.put(trace, &k, b"v".to_vec()).await }
        }))
        .await
        .expect("within the quotas");
    }
    let client = orchestrator.client().await.expect("client");
    let traceparent = format!("00-{trace}-00f067aa0ba902b7-01");
    let result_of = |events: &[pb::RunEvent], tool: &str| {
        events
            .iter()
            .find_map(|e| match &e.payload {
                Some(Payload::ToolCallCompleted(t)) if t.tool == tool => Some(t.clone()),
                _ => None,
            })
            .expect("the tool ran")
    };
    let run = |agent: &'static str| {
        let (client, traceparent) = (client.clone(), traceparent.clone());
        async move {
            let mut stream = client
                .run_agent_traced(agent_request(agent, "go"), Some(&traceparent))
                .await
                .expect("run");
            let mut events = Vec::new();
            while let Some(e) = stream.next().await {
                events.push(e.expect("event"));
            }
            events
        }
    };
    // list_context answers a page of the full trace (one answer of all of
    // it would be over the message limit).
    let events = run("lister").await;
    assert_eq!(events[0].trace_id, trace);
    let listed = result_of(&events, "list_context");
    assert_eq!(listed.error, "");
    let page: serde_json::Value = serde_json::from_str(&listed.result).expect("JSON");
    assert_eq!(page["slots"].as_array().map(Vec::len), Some(1000));
    assert!(!page["next_page_token"].as_str().unwrap_or("").is_empty());
    // The run_pipeline tool reads every slot of the trace (they count as
    // seeded) before it runs.
    let events = run("planner").await;
    let planned = result_of(&events, "run_pipeline");
    assert_eq!(planned.error, "", "{planned:?}");
    assert!(planned.result.contains(r#""success":true"#), "{planned:?}");
    assert!(matches!(
        events.last().and_then(|e| e.payload.as_ref()),
        Some(Payload::RunCompleted(_))
    ));
    orchestrator.shutdown().await.expect("shutdown");
    store.shutdown().await.expect("shutdown");
}

/// A message whose field 1 is a varint where every request of ours has a
/// string: not decodable as any of them.
#[derive(Clone, PartialEq, prost::Message)]
struct Undecodable {
    #[prost(uint64, tag = "1")]
    one: u64,
}

/// Calls `path` on `endpoint` with `message` (any prost message), expecting
/// a unary answer of type `R`.
async fn raw_call<M, R>(endpoint: &str, path: &'static str, message: M) -> tonic::Status
where
    M: prost::Message + Send + Sync + 'static,
    R: prost::Message + Default + Send + Sync + std::fmt::Debug + 'static,
{
    let channel = baton_client::channel(endpoint.to_owned())
        .await
        .expect("channel");
    let mut grpc = tonic::client::Grpc::new(channel)
        .max_encoding_message_size(64 << 20)
        .max_decoding_message_size(64 << 20);
    grpc.ready().await.expect("ready");
    let codec = tonic_prost::ProstCodec::<M, R>::default();
    grpc.unary(
        tonic::Request::new(message),
        tonic::codegen::http::uri::PathAndQuery::from_static(path),
        codec,
    )
    .await
    .expect_err("the call must fail")
}

/// The same, for a server-streaming method.
async fn raw_stream_call<M>(endpoint: &str, path: &'static str, message: M) -> tonic::Status
where
    M: prost::Message + Send + Sync + 'static,
{
    let channel = baton_client::channel(endpoint.to_owned())
        .await
        .expect("channel");
    let mut grpc = tonic::client::Grpc::new(channel)
        .max_encoding_message_size(64 << 20)
        .max_decoding_message_size(64 << 20);
    grpc.ready().await.expect("ready");
    let codec = tonic_prost::ProstCodec::<M, pb::RunEvent>::default();
    match grpc
        .server_streaming(
            tonic::Request::new(message),
            tonic::codegen::http::uri::PathAndQuery::from_static(path),
            codec,
        )
        .await
    {
        Err(status) => status,
        Ok(mut stream) => match stream.get_mut().message().await {
            Err(status) => status,
            Ok(m) => panic!("the call must fail, got {m:?}"),
        },
    }
}

fn field_of(s: &tonic::Status) -> Option<&str> {
    s.metadata()
        .get("baton-field")
        .and_then(|v| v.to_str().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statuses_made_before_a_handler_tell_whether_to_retry() {
    let store = StoreServer::start(StoreServer::config(Backend::Memory, None))
        .await
        .expect("store");
    let orchestrator = OrchestratorServer::start(AGENTS, None, |_| {})
        .await
        .expect("orchestrator");
    let (s, o) = (store.endpoint(), orchestrator.endpoint());

    // Undecodable protobuf: INVALID_ARGUMENT naming `request` (was INTERNAL).
    let st =
        raw_call::<_, pb::PutResponse>(&s, "/baton.v1.ContextStore/Put", Undecodable { one: 7 })
            .await;
    assert_eq!(
        (st.code(), field_of(&st)),
        (Code::InvalidArgument, Some("request")),
        "{st:?}"
    );
    assert!(st.message().starts_with("request: "), "{st:?}");
    let st = raw_stream_call(
        &o,
        "/baton.v1.Orchestrator/RunAgent",
        Undecodable { one: 7 },
    )
    .await;
    assert_eq!(
        (st.code(), field_of(&st)),
        (Code::InvalidArgument, Some("request")),
        "{st:?}"
    );
    assert!(orchestrator.core.runs().running() == 0);

    // Over the message size limit: RESOURCE_EXHAUSTED (was OUT_OF_RANGE).
    // The store takes its value limit (1 MiB) plus 64 KiB of framing.
    let over = pb::PutRequest {
        trace_id: "4bf92f3577b34da6a3ce929d0e0e4736".into(),
        key: "k".into(),
        value: vec![0; (1 << 20) + (64 << 10) + 1],
        ..Default::default()
    };
    let st = raw_call::<_, pb::PutResponse>(&s, "/baton.v1.ContextStore/Put", over).await;
    assert_eq!(
        (st.code(), field_of(&st)),
        (Code::ResourceExhausted, Some("request")),
        "{st:?}"
    );
    let huge = agent_request("hello", &"x".repeat(5 << 20));
    let st = raw_stream_call(&o, "/baton.v1.Orchestrator/RunAgent", huge).await;
    assert_eq!(
        (st.code(), field_of(&st)),
        (Code::ResourceExhausted, Some("request")),
        "{st:?}"
    );

    // A service the port does not serve: UNIMPLEMENTED saying what it does.
    let get = pb::GetRequest {
        trace_id: "4bf92f3577b34da6a3ce929d0e0e4736".into(),
        key: "k".into(),
    };
    let st = raw_call::<_, pb::GetResponse>(&o, "/baton.v1.ContextStore/Get", get).await;
    assert_eq!(st.code(), Code::Unimplemented, "{st:?}");
    assert!(
        st.message().contains("baton.v1.Orchestrator") && st.message().contains("ContextStore"),
        "{st:?}"
    );
    let st =
        raw_call::<_, pb::PutResponse>(&s, "/baton.v1.ToolHost/Execute", pb::PutRequest::default())
            .await;
    assert_eq!(st.code(), Code::Unimplemented, "{st:?}");
    assert!(st.message().contains("baton.v1.ContextStore"), "{st:?}");
    orchestrator.shutdown().await.expect("shutdown");
    store.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_errors_carry_the_code_of_their_cause() {
    // A store whose key quota the pipeline's seeds go over.
    let limits = Limits {
        max_trace_keys: 2,
        ..Limits::default()
    };
    let store: Arc<dyn ContextStore> = Arc::new(MemoryStore::new(limits));
    let server = OrchestratorServer::start(AGENTS, Some(store), |_| {})
        .await
        .expect("orchestrator");
    let client = server.client().await.expect("client");
    let request = |seeds: usize| pb::RunPipelineRequest {
        pipeline: Some(pb::PipelineSpec {
            steps: vec![pb::PipelineStep {
                id: "a".into(),
                agent: "hello".into(),
                task: "hi".into(),
                ..Default::default()
            }],
            ..Default::default()
        }),
        initial_slots: (0..seeds)
            .map(|i| (format!("seed{i}"), "v".into()))
            .collect(),
        ..Default::default()
    };
    let events = client
        .run_pipeline_to_end(request(2))
        .await
        .expect("at the quota");
    assert!(matches!(
        events.last().and_then(|e| e.payload.as_ref()),
        Some(Payload::RunCompleted(_))
    ));
    let events = client
        .run_pipeline_to_end(request(3))
        .await
        .expect("the run starts");
    match events.last().and_then(|e| e.payload.as_ref()) {
        Some(Payload::RunFailed(f)) => {
            assert_eq!(f.code, Code::ResourceExhausted as i32, "{f:?}");
            assert!(f.message.contains("seed2"), "{f:?}");
        }
        other => panic!("{other:?}"),
    }
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_ids_and_sequence_numbers_cannot_hurt() {
    let server = OrchestratorServer::start(AGENTS, None, |_| {})
        .await
        .expect("orchestrator");
    let client = server.client().await.expect("client");
    // A malformed run id of 100 KB: INVALID_ARGUMENT, not echoed back.
    let long = "r".repeat(100 * 1024);
    let check = |e: Error| {
        assert_eq!(
            (e.code(), e.field()),
            (Code::InvalidArgument, Some("run_id")),
            "{e}"
        );
        assert!(
            e.message().len() < 300,
            "not echoed: {} bytes",
            e.message().len()
        );
    };
    check(refused(client.get_run(&long).await));
    check(refused(client.cancel(&long, "x").await));
    check(refused(client.watch_run(&long, 0, None).await));
    check(refused(client.resolve_approval(&long, "a", true, "").await));
    check(refused(client.submit_input(&long, "i", "x").await));

    // after_seq near 2^64 reads nothing and does not wrap to the start.
    let events = client
        .run_agent_to_end(agent_request("hello", "hi"))
        .await
        .expect("run");
    let run_id = events[0].run_id.clone();
    for after in [u64::MAX, u64::MAX - 1, events.len() as u64] {
        let mut w = client.watch_run(&run_id, after, None).await.expect("watch");
        let got = tokio::time::timeout(Duration::from_secs(5), w.next())
            .await
            .expect("ends in time");
        assert!(got.is_none(), "after_seq {after}: {got:?}");
    }
    let mut w = client
        .watch_run(&run_id, events.len() as u64 - 1, None)
        .await
        .expect("watch");
    let last = w.next().await.expect("one").expect("event");
    assert_eq!(last.seq, events.len() as u64);
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_sizes_filters_and_watchers_are_bounded() {
    let server = OrchestratorServer::start(AGENTS, None, |c| {
        c.runs.max_watchers_per_run = 2;
    })
    .await
    .expect("orchestrator");
    let client = server.client().await.expect("client");
    let limits = baton_orchestrator::config::RunDefaults::default();

    // run_context_json: 1 MiB is the limit.
    let context = |n: usize| format!(r#"{{"k":"{}"}}"#, "x".repeat(n - 8));
    let mut at = agent_request("hello", "hi");
    at.run_context_json = context(limits.max_run_context_bytes);
    assert_eq!(at.run_context_json.len(), 1 << 20);
    client.run_agent_to_end(at).await.expect("at the limit");
    let mut over = agent_request("hello", "hi");
    over.run_context_json = context(limits.max_run_context_bytes + 1);
    let e = assert_refused(
        client.run_agent(over).await,
        Code::ResourceExhausted,
        "run_context_json",
    );
    assert!(e.message().contains("runs.max_run_context_bytes"), "{e}");

    // Filters: 64 prefixes and kinds, 1024-character prefixes.
    let filtered = |prefixes: Vec<String>, kinds: Vec<i32>| {
        let mut r = agent_request("hello", "hi");
        r.filter = Some(pb::EventFilter {
            context_prefixes: prefixes,
            kinds,
            ..Default::default()
        });
        r
    };
    // A context id of exactly `len` characters: root, then segments of at
    // most 64 characters.
    let prefix = |len: usize| {
        let mut p = String::from("root");
        while p.len() < len {
            let room = len - p.len() - 1;
            let seg = if room > 64 && room - 64 < 2 {
                62
            } else {
                room.min(64)
            };
            p.push('.');
            p.push_str(&"a".repeat(seg));
        }
        p
    };
    assert_eq!((prefix(1024).len(), prefix(1025).len()), (1024, 1025));
    let ok = [
        filtered(vec!["root".into(); 64], vec![]),
        filtered(vec![], vec![pb::EventKind::TextDelta as i32; 64]),
        filtered(vec![prefix(1024)], vec![]),
    ];
    for r in ok {
        client.run_agent_to_end(r).await.expect("at the limit");
    }
    for (r, field) in [
        (
            filtered(vec!["root".into(); 65], vec![]),
            "filter.context_prefixes",
        ),
        (
            filtered(vec![], vec![pb::EventKind::TextDelta as i32; 65]),
            "filter.kinds",
        ),
        (
            filtered(vec![prefix(1026)], vec![]),
            "filter.context_prefixes",
        ),
    ] {
        assert_refused(client.run_agent(r).await, Code::ResourceExhausted, field);
    }

    // WatchRun: two watchers of a run is the limit here; a third is
    // refused until one leaves.
    let mut run = client
        .run_agent(agent_request("waiter", "go"))
        .await
        .expect("run");
    let mut seen = Vec::new();
    let asked = baton_e2e::wait_for(&mut run, &mut seen, |e| {
        matches!(e.payload, Some(Payload::ApprovalRequested(_)))
    })
    .await;
    let run_id = asked.run_id.clone();
    let w1 = client.watch_run(&run_id, 0, None).await.expect("1st");
    let w2 = client.watch_run(&run_id, 0, None).await.expect("2nd");
    let e = assert_refused(
        client.watch_run(&run_id, 0, None).await,
        Code::ResourceExhausted,
        "run_id",
    );
    assert!(e.message().contains("runs.max_watchers_per_run"), "{e}");
    drop(w1);
    eventually("a place comes back", || async {
        client.watch_run(&run_id, 0, None).await.is_ok()
    })
    .await;
    drop(w2);
    client.cancel(&run_id, "done").await.expect("cancel");
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metric_labels_come_from_the_catalog_only() {
    let metrics = baton_e2e::free_addr().expect("port");
    let server = OrchestratorServer::start(AGENTS, None, |c| {
        c.telemetry.metrics_listen = metrics.to_string();
    })
    .await
    .expect("orchestrator");
    let client = server.client().await.expect("client");
    client
        .run_agent_to_end(agent_request("hello", "hi"))
        .await
        .expect("run");
    // A request's own default_model, and a tool name a model made up.
    let mut r = agent_request("seq", "hi");
    r.default_model = "scripted:unlisted".into();
    client.run_agent_to_end(r).await.expect("run");
    client
        .run_agent_to_end(agent_request("inventor", "hi"))
        .await
        .expect("run");
    let text = scrape(metrics).await;
    assert!(text.contains(r#"model="scripted:hello""#), "{text}");
    assert!(text.contains(r#"model="other""#), "{text}");
    assert!(!text.contains("scripted:unlisted"), "{text}");
    assert!(text.contains(r#"tool="other""#), "{text}");
    assert!(!text.contains("made_up_tool"), "{text}");
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_lists_only_what_the_port_serves() {
    let store = StoreServer::start(StoreServer::config(Backend::Memory, None))
        .await
        .expect("store");
    let orchestrator = OrchestratorServer::start(AGENTS, None, |_| {})
        .await
        .expect("orchestrator");
    let infrastructure = [
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
    ];
    let with = |own: &str| {
        let mut v: Vec<String> = infrastructure.iter().map(|s| s.to_string()).collect();
        v.push(own.into());
        v.sort();
        v
    };
    assert_eq!(
        baton_e2e::reflected_services(&orchestrator.endpoint()).await,
        with("baton.v1.Orchestrator")
    );
    assert_eq!(
        baton_e2e::reflected_services(&store.endpoint()).await,
        with("baton.v1.ContextStore")
    );
    orchestrator.shutdown().await.expect("shutdown");
    store.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_per_connection_are_capped() {
    let mut config = StoreServer::config(Backend::Memory, None);
    config.server.max_concurrent_streams = 2;
    let store = StoreServer::start(config).await.expect("store");
    // One client is one HTTP/2 connection.
    let c = StoreClient::connect(store.endpoint())
        .await
        .expect("connect");
    let t = "4bf92f3577b34da6a3ce929d0e0e4736";
    let w1 = c.watch(t, "").await.expect("1st stream");
    let _w2 = c.watch(t, "").await.expect("2nd stream");
    // A third call on the connection waits for a stream to end.
    let third = tokio::spawn({
        let c = c.clone();
        async move { c.list(t, "").await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!third.is_finished(), "the third stream waited");
    drop(w1);
    let listed = tokio::time::timeout(Duration::from_secs(5), third)
        .await
        .expect("runs once a stream ended")
        .expect("task");
    listed.expect("list");
    store.shutdown().await.expect("shutdown");
}

/// A TCP proxy that can stop forwarding without closing anything: the
/// client behind it becomes half-open, as a vanished laptop looks.
struct Freezable {
    addr: SocketAddr,
    frozen: Arc<AtomicBool>,
}

impl Freezable {
    async fn start(upstream: SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let frozen = Arc::new(AtomicBool::new(false));
        let flag = frozen.clone();
        tokio::spawn(async move {
            while let Ok((down, _)) = listener.accept().await {
                let up = tokio::net::TcpStream::connect(upstream)
                    .await
                    .expect("upstream");
                let (dr, dw) = down.into_split();
                let (ur, uw) = up.into_split();
                tokio::spawn(pump(dr, uw, flag.clone()));
                tokio::spawn(pump(ur, dw, flag.clone()));
            }
        });
        Self { addr, frozen }
    }

    fn freeze(&self) {
        self.frozen.store(true, Ordering::SeqCst);
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    frozen: Arc<AtomicBool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0; 16 * 1024];
    loop {
        let Ok(n) = from.read(&mut buf).await else {
            return;
        };
        if n == 0 {
            return;
        }
        if frozen.load(Ordering::SeqCst) {
            // Hold both sockets open, forward nothing, read nothing more.
            std::future::pending::<()>().await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_open_client_is_noticed_by_keepalive_and_its_watch_freed() {
    let mut config = StoreServer::config(Backend::Memory, None);
    config.server.keepalive_interval = Duration::from_millis(300);
    config.server.keepalive_timeout = Duration::from_millis(300);
    config.watches.per_trace = 1;
    let store = StoreServer::start(config).await.expect("store");
    let proxy = Freezable::start(store.addr).await;
    let t = "4bf92f3577b34da6a3ce929d0e0e4736";
    let behind = StoreClient::connect(format!("http://{}", proxy.addr))
        .await
        .expect("connect through the proxy");
    let _held = behind.watch(t, "").await.expect("watch");
    let direct = StoreClient::connect(store.endpoint())
        .await
        .expect("connect");
    assert_eq!(
        refused(direct.watch(t, "").await).code(),
        Code::ResourceExhausted,
        "the trace's one watch is taken"
    );
    // The client vanishes without closing its connection.
    proxy.freeze();
    let began = Instant::now();
    eventually("the server drops the half-open connection", || async {
        direct.watch(t, "").await.is_ok()
    })
    .await;
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "noticed after {:?}",
        began.elapsed()
    );
    store.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orchestrator_keeps_serving_with_a_bad_request_in_between() {
    // Sanity: the rewritten statuses leave good calls alone, on gRPC and on
    // the same connection right after a bad one.
    let server = OrchestratorServer::start(AGENTS, None, |_| {})
        .await
        .expect("orchestrator");
    let client: OrchestratorClient = server.client().await.expect("client");
    let _ = raw_stream_call(
        &server.endpoint(),
        "/baton.v1.Orchestrator/RunAgent",
        Undecodable { one: 1 },
    )
    .await;
    let events = client
        .run_agent_to_end(agent_request("hello", "hi"))
        .await
        .expect("run");
    assert!(matches!(
        events.last().and_then(|e| e.payload.as_ref()),
        Some(Payload::RunCompleted(c)) if c.output == "hello"
    ));
    server.shutdown().await.expect("shutdown");
}
