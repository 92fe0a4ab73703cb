//! The orchestrator as deployed: using a separate context-store service over
//! gRPC (on a real redis-server), groups as other agents' tools, and
//! shutdown ending running streams.

use std::{sync::Arc, time::Duration};

use baton_client::{OrchestratorClient, StoreClient, pb, pb::run_event::Payload};
use baton_context_store::config::Backend;
use baton_e2e::{EXAMPLE_AGENTS, OrchestratorServer, RedisServer, StoreServer};
use baton_orchestrator::remote_store::RemoteStore;
use futures::StreamExt;

fn req(agent: &str, input: &str) -> pb::RunAgentRequest {
    pb::RunAgentRequest {
        agent: agent.into(),
        input: input.into(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_write_through_a_remote_context_store_on_redis() {
    let redis = RedisServer::start().expect("redis-server");
    let mut store_config = StoreServer::config(Backend::Redis, Some(redis.url()));
    store_config.limits.max_value_bytes = 64;
    let store = StoreServer::start(store_config.clone())
        .await
        .expect("context store");
    let remote = Arc::new(
        RemoteStore::new(
            &store.endpoint(),
            store_config.limits.clone(),
            std::time::Duration::from_secs(5),
        )
        .expect("remote store"),
    );
    let server = OrchestratorServer::start(EXAMPLE_AGENTS, Some(remote.clone()), |_| {})
        .await
        .expect("orchestrator");
    let client = OrchestratorClient::connect(server.endpoint())
        .await
        .expect("connect");

    let events = client
        .run_agent_to_end(req("researcher", "tides"))
        .await
        .expect("run");
    let trace = events[0].trace_id.clone();
    assert!(matches!(
        events.last().and_then(|e| e.payload.as_ref()),
        Some(Payload::RunCompleted(_))
    ));
    let store_client = StoreClient::connect(store.endpoint())
        .await
        .expect("store client");
    let slot = store_client
        .get(&trace, "research/topic")
        .await
        .expect("the run's write is in the store");
    assert_eq!(slot.value, b"tides");
    let written = events.iter().find_map(|e| match &e.payload {
        Some(Payload::ContextWritten(w)) => Some(w.version),
        _ => None,
    });
    assert_eq!(written, slot.slot.map(|s| s.version));

    // The example planner builds a DAG and runs it with run_pipeline: its
    // steps read and write slots through the remote store, nested below it.
    let events = client
        .run_agent_to_end(req("planner", "tides"))
        .await
        .expect("run");
    match events.last().and_then(|e| e.payload.as_ref()) {
        Some(Payload::RunCompleted(c)) => assert!(
            c.output
                .contains("Report. Analysis: the market for tides / Analysis: the risks of tides"),
            "{}",
            c.output
        ),
        other => panic!("{other:?}"),
    }
    assert!(
        events
            .iter()
            .any(|e| e.context_id == "root.run_pipeline.1.report"
                && e.depth == 2
                && matches!(e.payload, Some(Payload::StepCompleted(_))))
    );
    let left = store_client
        .list(&events[0].trace_id, "")
        .await
        .expect("list");
    assert_eq!(left.used_keys, 0, "the pipeline's slots are cleared");

    // A store-side refusal reaches the model as a tool error naming the limit.
    let big = format!(
        "scripts:\n  big: [{{calls: [{{tool: write_context, args: {{key: big, value: {}}}}}]}}, {{text: '{{{{results}}}}'}}]\nagents:\n  big: {{model: 'scripted:big', tools: [write_context]}}\n",
        "x".repeat(65)
    );
    let server = OrchestratorServer::start(&big, Some(remote), |_| {})
        .await
        .expect("orchestrator");
    let client = OrchestratorClient::connect(server.endpoint())
        .await
        .expect("connect");
    let events = client.run_agent_to_end(req("big", "x")).await.expect("run");
    match events.last().and_then(|e| e.payload.as_ref()) {
        Some(Payload::RunCompleted(c)) => assert!(
            c.output.contains("value: 65 bytes is over the limit of 64"),
            "{}",
            c.output
        ),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_is_a_tool_of_another_agent() {
    let yaml = EXAMPLE_AGENTS
        .replacen("scripts:\n", "scripts:\n  desk: [{calls: [{tool: support, args: {task: 'refund order 5'}}]}, {text: 'desk: {{results}}'}]\n", 1)
        .replacen("agents:\n", "agents:\n  desk: {model: 'scripted:desk', tools: [support]}\n", 1);
    let server = OrchestratorServer::start(&yaml, None, |_| {})
        .await
        .expect("orchestrator");
    let client = OrchestratorClient::connect(server.endpoint())
        .await
        .expect("connect");
    let mut r = req("desk", "help");
    r.approval_mode = pb::ApprovalMode::AutoApprove as i32;
    let events = client.run_agent_to_end(r).await.expect("run");
    let handoff = events.iter().find_map(|e| match &e.payload {
        Some(Payload::Handoff(h)) => Some((
            e.context_id.as_str(),
            e.depth,
            h.from_agent.as_str(),
            h.to_agent.as_str(),
        )),
        _ => None,
    });
    assert_eq!(handoff, Some(("root.support.1", 1, "triage", "billing")));
    match events.last().and_then(|e| e.payload.as_ref()) {
        Some(Payload::RunCompleted(c)) => {
            assert_eq!(c.output, "desk: Done. wrote refunds/last at version 1")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_runs_finish_within_the_grace_then_cancels_the_rest() {
    let yaml = r#"
scripts:
  slow: [{calls: [{tool: sleep, args: {ms: 30000}}]}, {text: never}]
  quick: [{calls: [{tool: sleep, args: {ms: 400}}]}, {text: "finished anyway"}]
agents:
  slow: {model: "scripted:slow", tools: [sleep]}
  quick: {model: "scripted:quick", tools: [sleep]}
"#;
    let grace = Duration::from_millis(1500);
    let server = OrchestratorServer::start(yaml, None, |c| c.shutdown_grace = grace)
        .await
        .expect("orchestrator");
    let client = OrchestratorClient::connect(server.endpoint())
        .await
        .expect("connect");
    let mut slow = client.run_agent(req("slow", "x")).await.expect("run");
    let mut quick = client.run_agent(req("quick", "x")).await.expect("run");
    for stream in [&mut slow, &mut quick] {
        loop {
            let e = stream.next().await.expect("open").expect("event");
            if matches!(e.payload, Some(Payload::ToolCallStarted(_))) {
                break;
            }
        }
    }
    let began = std::time::Instant::now();
    let stopping = tokio::spawn(server.shutdown());
    // New runs are refused at once, while running runs go on (the server
    // sends GOAWAY: a new call on this connection is refused by HTTP/2,
    // one that got through is UNAVAILABLE).
    tokio::time::timeout(Duration::from_secs(2), async {
        while client.run_agent(req("quick", "x")).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("new runs are refused soon after shutdown begins");
    let last = |mut stream: baton_client::Events| async move {
        let mut last = None;
        while let Some(e) = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("ends in time")
        {
            last = Some(e.expect("event"));
        }
        (last.and_then(|e| e.payload), began.elapsed())
    };
    let ((quick_end, quick_at), (slow_end, slow_at)) = tokio::join!(last(quick), last(slow));
    match quick_end {
        Some(Payload::RunCompleted(c)) => assert_eq!(c.output, "finished anyway"),
        other => panic!("the quick run finishes within the grace period: {other:?}"),
    }
    assert!(quick_at < grace, "{quick_at:?}");
    match slow_end {
        Some(Payload::RunCancelled(c)) => assert_eq!(c.reason, "server shutting down"),
        other => panic!("expected RunCancelled, got {other:?}"),
    }
    assert!(
        slow_at >= grace && slow_at < grace + Duration::from_secs(3),
        "the slow run is cancelled when the grace period ends: {slow_at:?}"
    );
    tokio::time::timeout(Duration::from_secs(10), stopping)
        .await
        .expect("drains in time")
        .expect("task")
        .expect("clean");
    assert!(
        client.run_agent(req("slow", "x")).await.is_err(),
        "no new runs once stopped"
    );
}
