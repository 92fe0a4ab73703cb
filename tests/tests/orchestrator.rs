//! RunAgent and the run-control RPCs through gRPC: nested contexts, the
//! stream rules, filters, handoffs, approvals, human input, cancellation and
//! bad input.

use std::{
    collections::{BTreeSet, HashMap},
    sync::atomic::Ordering,
    time::{Duration, Instant},
};

use baton_client::{OrchestratorClient, pb, pb::run_event::Payload};
use baton_e2e::{
    EXAMPLE_AGENTS, OrchestratorServer, agent_request,
    events::{self, kind},
    wait_for,
};
use futures::StreamExt;
use tonic::Code;

fn req(agent: &str, input: &str) -> pb::RunAgentRequest {
    pb::RunAgentRequest {
        agent: agent.into(),
        input: input.into(),
        ..Default::default()
    }
}

async fn example() -> (OrchestratorServer, OrchestratorClient) {
    let server = OrchestratorServer::start(EXAMPLE_AGENTS, None, |_| {})
        .await
        .expect("orchestrator");
    let client = OrchestratorClient::connect(server.endpoint())
        .await
        .expect("connect");
    (server, client)
}

/// Checks the rules every run keeps ([`events::check_stream_rules`]) and
/// those of agent contexts (depth and parent from the id, the agent's
/// start first and its completion last).
fn check_stream_rules(events: &[pb::RunEvent]) {
    events::check_stream_rules(events);
    for e in events {
        let depth = e.context_id.matches('.').count() as u32 / 2;
        assert_eq!(e.depth, depth, "{} is at depth {depth}", e.context_id);
        let parent = e.context_id.rsplitn(3, '.').nth(2).unwrap_or("");
        assert_eq!(e.parent_context_id, parent, "parent of {}", e.context_id);
    }
    // Per context, the agent starts before anything else it does and
    // completes after everything else it does.
    let mut by_ctx: HashMap<&str, Vec<&str>> = HashMap::new();
    for e in events.iter().filter(|e| !e.agent.is_empty()) {
        by_ctx
            .entry(e.context_id.as_str())
            .or_default()
            .push(kind(e));
    }
    for (ctx, kinds) in by_ctx {
        assert_eq!(kinds[0], "AgentStarted", "{ctx}: {kinds:?}");
        if let Some(pos) = kinds.iter().position(|k| *k == "AgentCompleted") {
            assert_eq!(
                pos,
                kinds.len() - 1,
                "{ctx}: AgentCompleted is its last event: {kinds:?}"
            );
        }
    }
}

fn completed(events: &[pb::RunEvent]) -> &pb::RunCompleted {
    match events.last().and_then(|e| e.payload.as_ref()) {
        Some(Payload::RunCompleted(c)) => c,
        other => panic!("the run did not complete: {other:?}"),
    }
}

async fn drain(stream: &mut baton_client::Events, seen: &mut Vec<pb::RunEvent>) {
    while let Some(e) = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("in time")
    {
        seen.push(e.expect("event"));
    }
}

async fn eventually(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_agents_two_deep_with_streaming_tool_and_context_writes() {
    let (server, client) = example().await;
    let events = client
        .run_agent_to_end(req("researcher", "rust"))
        .await
        .expect("run");
    check_stream_rules(&events);

    let contexts: BTreeSet<(&str, u32)> = events
        .iter()
        .map(|e| (e.context_id.as_str(), e.depth))
        .collect();
    assert_eq!(
        contexts,
        BTreeSet::from([
            ("root", 0),
            ("root.summarizer.1", 1),
            ("root.summarizer.1.fact_checker.1", 2)
        ])
    );
    let done = completed(&events);
    assert_eq!(
        done.output,
        "Research done. Summary: Checked: Check the facts about: Summarize what is known about rust. Looks right.; slept 400 ms; wrote research/topic at version 1"
    );
    assert_eq!(
        done.run_context_json, r#"{"last_write":"wrote research/topic at version 1"}"#,
        "the example's run policy records the last write"
    );
    let usage = done.usage.clone().expect("usage");
    assert_eq!(
        usage.model_calls,
        2 + 2 + 1,
        "two turns each for researcher and summarizer, one for fact_checker"
    );
    assert_eq!((usage.input_tokens >= 420, usage.tool_calls), (true, 4));

    // The streaming tool's progress reached the client, in order.
    let progress: Vec<u32> = events
        .iter()
        .filter_map(|e| match &e.payload {
            Some(Payload::ToolProgress(p)) => Some(p.percent),
            _ => None,
        })
        .collect();
    assert_eq!(progress, [25, 50, 75, 100]);
    let written: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.payload {
            Some(Payload::ContextWritten(w)) => Some((w.key.as_str(), w.version, w.size_bytes)),
            _ => None,
        })
        .collect();
    assert_eq!(written, [("research/topic", 1, 4)]);
    // Text arrives as several deltas that add up to the message.
    let deltas: String = events
        .iter()
        .filter(|e| e.context_id == "root")
        .filter_map(|e| match &e.payload {
            Some(Payload::TextDelta(d)) => Some(d.text.as_str()),
            _ => None,
        })
        .collect();
    assert!(
        deltas.starts_with("Let me look into rust.Research done."),
        "{deltas}"
    );
    // The batch completes after its three calls.
    let root_kinds: Vec<&str> = events
        .iter()
        .filter(|e| e.context_id == "root")
        .map(kind)
        .collect();
    let batch = root_kinds
        .iter()
        .position(|k| *k == "ToolBatchCompleted")
        .expect("batch");
    assert_eq!(
        root_kinds[..batch]
            .iter()
            .filter(|k| **k == "ToolCallCompleted")
            .count(),
        3
    );

    let run = client.get_run(&events[0].run_id).await.expect("get run");
    assert_eq!(run.status(), pb::RunStatus::Completed);
    assert_eq!(run.output, done.output);
    assert_eq!(run.last_seq, events.len() as u64);
    assert_eq!(run.trace_id, events[0].trace_id);
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_apply_on_the_server_and_keep_seq() {
    let (_server, client) = example().await;
    let mut r = req("researcher", "rust");
    r.filter = Some(pb::EventFilter {
        max_depth: Some(0),
        ..Default::default()
    });
    let events = client.run_agent_to_end(r).await.expect("run");
    assert!(events.iter().all(|e| e.depth == 0));
    assert!(
        events.windows(2).any(|w| w[1].seq > w[0].seq + 1),
        "filtered events keep their seq"
    );
    assert!(events.windows(2).all(|w| w[1].seq > w[0].seq));
    completed(&events);

    let mut r = req("researcher", "rust");
    r.filter = Some(pb::EventFilter {
        context_prefixes: vec!["root.summarizer.1.fact_checker.1".into()],
        kinds: vec![
            pb::EventKind::AgentStarted as i32,
            pb::EventKind::AgentCompleted as i32,
        ],
        ..Default::default()
    });
    let events = client.run_agent_to_end(r).await.expect("run");
    let seen: Vec<(&str, &str)> = events
        .iter()
        .map(|e| (e.context_id.as_str(), kind(e)))
        .collect();
    assert_eq!(
        seen,
        [
            ("root.summarizer.1.fact_checker.1", "AgentStarted"),
            ("root.summarizer.1.fact_checker.1", "AgentCompleted"),
            ("root", "RunCompleted"),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_depth_is_a_tool_error_the_model_sees_per_branch() {
    let (_server, client) = example().await;
    let mut r = req("researcher", "rust");
    r.limits = Some(pb::RunLimits {
        max_depth: Some(1),
        ..Default::default()
    });
    let events = client.run_agent_to_end(r).await.expect("run");
    check_stream_rules(&events);
    let refused = events
        .iter()
        .find_map(|e| match &e.payload {
            Some(Payload::ToolCallCompleted(c)) if c.tool == "fact_checker" => {
                Some((e.context_id.clone(), c.error.clone()))
            }
            _ => None,
        })
        .expect("the fact_checker call completed");
    assert_eq!(refused.0, "root.summarizer.1");
    assert!(refused.1.contains("over max_depth 1"), "{}", refused.1);
    let done = completed(&events);
    assert!(
        done.output
            .contains("Summary: error: cannot call agent fact_checker"),
        "{}",
        done.output
    );
    assert!(!events.iter().any(|e| e.depth > 1));

    // Siblings do not affect each other: a root calling the same agent
    // twice in one turn gets two depth-1 children, each allowed to nest.
    let yaml = r#"
scripts:
  fan: [{calls: [{tool: mid, args: {task: a}}, {tool: mid, args: {task: b}}]}, {text: "{{results}}"}]
  mid: [{calls: [{tool: leaf, args: {task: "{{input}}"}}]}, {text: "mid({{results}})"}]
  leaf: [{text: "leaf {{input}}"}]
agents:
  fan: {model: "scripted:fan", tools: [mid]}
  mid: {model: "scripted:mid", tools: [leaf]}
  leaf: {model: "scripted:leaf"}
"#;
    let server = OrchestratorServer::start(yaml, None, |_| {})
        .await
        .expect("orchestrator");
    let client = OrchestratorClient::connect(server.endpoint())
        .await
        .expect("connect");
    let mut r = req("fan", "go");
    r.limits = Some(pb::RunLimits {
        max_depth: Some(2),
        ..Default::default()
    });
    let events = client.run_agent_to_end(r).await.expect("run");
    check_stream_rules(&events);
    assert_eq!(completed(&events).output, "mid(leaf a); mid(leaf b)");
    let contexts: BTreeSet<&str> = events.iter().map(|e| e.context_id.as_str()).collect();
    assert!(
        contexts.contains("root.mid.1.leaf.1") && contexts.contains("root.mid.2.leaf.1"),
        "{contexts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_hands_off_in_the_same_context_with_auto_approval() {
    let (_server, client) = example().await;
    let mut r = req("support", "order 42 arrived broken");
    r.approval_mode = pb::ApprovalMode::AutoApprove as i32;
    let events = client.run_agent_to_end(r).await.expect("run");
    check_stream_rules(&events);
    let handoff = events
        .iter()
        .find_map(|e| match &e.payload {
            Some(Payload::Handoff(h)) => Some((
                e.context_id.as_str(),
                h.from_agent.as_str(),
                h.to_agent.as_str(),
            )),
            _ => None,
        })
        .expect("a handoff");
    assert_eq!(handoff, ("root", "triage", "billing"));
    let approval = events
        .iter()
        .find_map(|e| match &e.payload {
            Some(Payload::ApprovalResolved(a)) => Some((a.approved, a.source())),
            _ => None,
        })
        .expect("auto approval");
    assert_eq!(approval, (true, pb::ApprovalSource::Mode));
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.payload, Some(Payload::ApprovalRequested(_))))
    );
    assert_eq!(
        completed(&events).output,
        "Done. wrote refunds/last at version 1"
    );
    assert!(
        events.iter().all(|e| e.context_id == "root"),
        "a handoff stays in its context"
    );

    let mut r = req("support", "order 42");
    r.approval_mode = pb::ApprovalMode::AutoDeny as i32;
    let events = client.run_agent_to_end(r).await.expect("run");
    assert_eq!(
        completed(&events).output,
        "Done. error: write_context was denied by the run's approval mode"
    );
}

/// Runs `agent` with approvals asked, answers the first approval with
/// `approved`, and returns every event.
async fn run_with_approval(
    client: &OrchestratorClient,
    agent: &str,
    approved: bool,
) -> Vec<pb::RunEvent> {
    let mut stream = client.run_agent(req(agent, "order 7")).await.expect("run");
    let mut seen = Vec::new();
    let asked = wait_for(&mut stream, &mut seen, |e| {
        matches!(e.payload, Some(Payload::ApprovalRequested(_)))
    })
    .await;
    let Some(Payload::ApprovalRequested(a)) = &asked.payload else {
        unreachable!()
    };
    assert_eq!(a.tool, "write_context");
    client
        .resolve_approval(&asked.run_id, &a.approval_id, approved, "checked by Ana")
        .await
        .expect("resolve");
    let twice = client
        .resolve_approval(&asked.run_id, &a.approval_id, true, "")
        .await
        .expect_err("twice");
    assert_eq!(
        (twice.code(), twice.field()),
        (Code::FailedPrecondition, Some("approval_id"))
    );
    drain(&mut stream, &mut seen).await;
    check_stream_rules(&seen);
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_asked_at_depth_zero_and_two() {
    let (_server, client) = example().await;
    let events = run_with_approval(&client, "support", true).await;
    let resolved = events.iter().find_map(|e| match &e.payload {
        Some(Payload::ApprovalResolved(a)) => {
            Some((e.depth, a.approved, a.source(), a.reason.clone()))
        }
        _ => None,
    });
    assert_eq!(
        resolved,
        Some((0, true, pb::ApprovalSource::Person, "checked by Ana".into()))
    );
    assert_eq!(
        completed(&events).output,
        "Done. wrote refunds/last at version 1"
    );

    let events = run_with_approval(&client, "support", false).await;
    assert_eq!(
        completed(&events).output,
        "Done. error: write_context was denied: checked by Ana"
    );

    // Two deep: outer → middle → billing, whose `nested` policy asks only
    // below the root.
    let server = OrchestratorServer::start(NESTED, None, |_| {})
        .await
        .expect("orchestrator");
    let client = OrchestratorClient::connect(server.endpoint())
        .await
        .expect("connect");
    let events = run_with_approval(&client, "outer", true).await;
    let asked = events
        .iter()
        .find(|e| matches!(e.payload, Some(Payload::ApprovalRequested(_))))
        .expect("asked");
    assert_eq!(
        (asked.context_id.as_str(), asked.depth),
        ("root.middle.1.billing.1", 2)
    );
    assert_eq!(
        completed(&events).output,
        "outer: middle: Done. wrote refunds/last at version 1"
    );
    // At the root the same agent needs no approval.
    let events = client
        .run_agent_to_end(req("billing", "order 8"))
        .await
        .expect("run");
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.payload, Some(Payload::ApprovalRequested(_))))
    );
}

/// Agents nesting two deep, for approvals and input below the root.
const NESTED: &str = r#"
scripts:
  outer: [{calls: [{tool: middle, args: {task: "{{input}}"}}]}, {text: "outer: {{results}}"}]
  middle: [{calls: [{tool: billing, args: {task: "{{input}}"}}]}, {text: "middle: {{results}}"}]
  billing:
    - {text: "I will record the refund.", calls: [{tool: write_context, args: {key: refunds/last, value: "refund for: {{input}}"}}]}
    - {text: "Done. {{results}}"}
  asker: [{calls: [{tool: middle2, args: {task: "{{input}}"}}]}, {text: "outer: {{results}}"}]
  middle2: [{calls: [{tool: interviewer, args: {task: "{{input}}"}}]}, {text: "middle: {{results}}"}]
  interviewer:
    - calls: [{tool: ask_user, args: {question: "Which city should I plan for?", options: [Paris, Lisbon]}}]
    - text: "Planning a trip to {{results}}."
agents:
  outer: {model: "scripted:outer", tools: [middle]}
  middle: {model: "scripted:middle", tools: [billing]}
  billing: {model: "scripted:billing", tools: [write_context], approvals: {write_context: nested}}
  asker: {model: "scripted:asker", tools: [middle2]}
  middle2: {model: "scripted:middle2", tools: [interviewer]}
  interviewer: {model: "scripted:interviewer", tools: [ask_user]}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_deadline_turns_silence_into_a_denial() {
    let (_server, client) = example().await;
    let mut r = req("support", "order 9");
    r.limits = Some(pb::RunLimits {
        approval_timeout: Some(baton_proto::wkt::Duration {
            seconds: 0,
            nanos: 200_000_000,
        }),
        ..Default::default()
    });
    let events = client.run_agent_to_end(r).await.expect("run");
    check_stream_rules(&events);
    let resolved = events.iter().find_map(|e| match &e.payload {
        Some(Payload::ApprovalResolved(a)) => Some((a.approved, a.source())),
        _ => None,
    });
    assert_eq!(resolved, Some((false, pb::ApprovalSource::Deadline)));
    assert!(
        completed(&events)
            .output
            .contains("denied: no answer before the deadline")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn human_input_at_depth_zero_and_two() {
    let (_server, client) = example().await;
    let nested = OrchestratorServer::start(NESTED, None, |_| {})
        .await
        .expect("orchestrator");
    let nested_client = OrchestratorClient::connect(nested.endpoint())
        .await
        .expect("connect");
    for (client, agent, ctx) in [
        (&client, "interviewer", "root"),
        (&nested_client, "asker", "root.middle2.1.interviewer.1"),
    ] {
        let mut stream = client.run_agent(req(agent, "trip")).await.expect("run");
        let mut seen = Vec::new();
        let asked = wait_for(&mut stream, &mut seen, |e| {
            matches!(e.payload, Some(Payload::InputRequested(_)))
        })
        .await;
        let Some(Payload::InputRequested(q)) = &asked.payload else {
            unreachable!()
        };
        assert_eq!(asked.context_id, ctx);
        assert_eq!(
            (q.prompt.as_str(), q.options.clone()),
            (
                "Which city should I plan for?",
                vec!["Paris".into(), "Lisbon".into()]
            )
        );
        client
            .submit_input(&asked.run_id, &q.input_id, "Lisbon")
            .await
            .expect("submit");
        let twice = client
            .submit_input(&asked.run_id, &q.input_id, "Paris")
            .await
            .expect_err("twice");
        assert_eq!(
            (twice.code(), twice.field()),
            (Code::FailedPrecondition, Some("input_id"))
        );
        drain(&mut stream, &mut seen).await;
        check_stream_rules(&seen);
        assert!(
            seen.iter().any(
                |e| matches!(&e.payload, Some(Payload::InputReceived(r)) if r.input == "Lisbon")
            )
        );
        let out = &completed(&seen).output;
        assert!(out.ends_with("Planning a trip to Lisbon."), "{out}");
    }
}

const SLOW: &str = r#"
scripts:
  slow: [{text: "working", calls: [{tool: sleep, args: {ms: 30000}}, {tool: helper, args: {task: x}}]}, {text: "never"}]
  helper: [{calls: [{tool: sleep, args: {ms: 30000}}]}, {text: "never"}]
agents:
  slow: {model: "scripted:slow", tools: [sleep, helper]}
  helper: {model: "scripted:helper", tools: [sleep]}
"#;

/// Starts the SLOW catalog and a run of it, and waits until both sleeps
/// (depth 0 and depth 1) run.
async fn slow_run_started() -> (
    OrchestratorServer,
    OrchestratorClient,
    baton_client::Events,
    Vec<pb::RunEvent>,
    std::sync::Arc<baton_orchestrator::run::record::RunRecord>,
) {
    let server = OrchestratorServer::start(SLOW, None, |_| {})
        .await
        .expect("orchestrator");
    let client = OrchestratorClient::connect(server.endpoint())
        .await
        .expect("connect");
    let mut stream = client.run_agent(req("slow", "go")).await.expect("run");
    let mut seen = Vec::new();
    let first = wait_for(&mut stream, &mut seen, |e| {
        matches!(&e.payload, Some(Payload::ToolCallStarted(c)) if c.tool == "sleep" && e.depth == 1)
    })
    .await;
    let run = server.core.runs().get(&first.run_id).expect("run record");
    (server, client, stream, seen, run)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_run_stops_the_whole_tree_at_once() {
    let (_server, client, mut stream, mut seen, run) = slow_run_started().await;
    assert!(
        run.live_tasks.load(Ordering::SeqCst) >= 4,
        "frames and calls are alive"
    );
    let started = Instant::now();
    assert_eq!(
        client
            .cancel(&run.run_id, "user pressed stop")
            .await
            .expect("cancel"),
        pb::RunStatus::Cancelled
    );
    drain(&mut stream, &mut seen).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "cancelled at once, not after the sleeps"
    );
    check_stream_rules(&seen);
    match &seen.last().expect("terminal").payload {
        Some(Payload::RunCancelled(c)) => {
            assert_eq!(c.reason, "cancelled by request: user pressed stop")
        }
        other => panic!("expected RunCancelled, got {other:?}"),
    }
    assert_eq!(
        run.cancelled_tool_calls.load(Ordering::SeqCst),
        2,
        "both sleeps saw their cancellation"
    );
    assert_eq!(
        run.live_tasks.load(Ordering::SeqCst),
        0,
        "nothing of the run is alive"
    );
    let got = client.get_run(&run.run_id).await.expect("get");
    assert_eq!(
        (got.status(), got.error_message.as_str()),
        (
            pb::RunStatus::Cancelled,
            "cancelled by request: user pressed stop"
        )
    );
    assert_eq!(
        client
            .cancel(&run.run_id, "again")
            .await
            .expect("cancel again"),
        pb::RunStatus::Cancelled
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_disconnect_cancels_the_run() {
    let (_server, client, stream, _seen, run) = slow_run_started().await;
    drop(stream);
    eventually("the run to be cancelled", || {
        run.snapshot().status == pb::RunStatus::Cancelled
    })
    .await;
    eventually("no live task", || {
        run.live_tasks.load(Ordering::SeqCst) == 0
    })
    .await;
    assert_eq!(run.cancelled_tool_calls.load(Ordering::SeqCst), 2);
    let got = client.get_run(&run.run_id).await.expect("get");
    assert_eq!(got.error_message, "client disconnected");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_client_slows_the_run_and_loses_nothing() {
    let yaml = r#"
scripts:
  chatty: [{text: "tok ", deltas: 40000}]
agents:
  chatty: {model: "scripted:chatty"}
"#;
    let server = OrchestratorServer::start(yaml, None, |_| {})
        .await
        .expect("orchestrator");
    let client = OrchestratorClient::connect(server.endpoint())
        .await
        .expect("connect");
    let mut stream = client.run_agent(req("chatty", "go")).await.expect("run");
    let first = stream.next().await.expect("open").expect("event");
    let run = server.core.runs().get(&first.run_id).expect("record");
    // Not reading: once the bounded buffers and HTTP/2's flow-control
    // windows (about 1 MiB, some 10k small events) are full, the run stalls.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stalled_at = run.snapshot().last_seq;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        run.snapshot().last_seq,
        stalled_at,
        "the run is held, not running on"
    );
    assert!(
        stalled_at < 40_000,
        "backpressure holds the run (at seq {stalled_at})"
    );
    assert_eq!(run.snapshot().status, pb::RunStatus::Running);
    let mut seen = vec![first];
    drain(&mut stream, &mut seen).await;
    check_stream_rules(&seen);
    let deltas = seen
        .iter()
        .filter(|e| matches!(e.payload, Some(Payload::TextDelta(_))))
        .count();
    assert_eq!(deltas, 40_000, "every delta arrived");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_context_is_returned_and_list_agents_describes_the_catalog() {
    let (_server, client) = example().await;
    let mut r = req("assistant", "hi");
    r.run_context_json = r#"{"user":"ana","tier":2}"#.into();
    let events = client.run_agent_to_end(r).await.expect("run");
    let done = completed(&events);
    assert_eq!(done.output, "You said: hi");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&done.run_context_json).expect("json"),
        serde_json::json!({"user":"ana","tier":2})
    );

    let agents = client.list_agents().await.expect("list");
    let names: Vec<&str> = agents.agents.iter().map(|a| a.name.as_str()).collect();
    assert!(
        names.contains(&"researcher") && names.contains(&"billing"),
        "{names:?}"
    );
    assert_eq!(agents.groups[0].name, "support");
    assert_eq!(agents.groups[0].members, ["triage", "billing"]);

    // A caller's traceparent makes the run part of the caller's trace.
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let mut stream = client
        .run_agent_traced(req("assistant", "hi"), Some(tp))
        .await
        .expect("run");
    let first = stream.next().await.expect("open").expect("event");
    assert_eq!(first.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_name_the_field_and_start_nothing() {
    let (server, client) = example().await;
    let runs_before = server.core.runs().running();
    let check = |r: Result<baton_client::Events, baton_client::Error>, code: Code, field: &str| {
        let Err(e) = r else {
            panic!("{field}: the request must fail")
        };
        assert_eq!((e.code(), e.field()), (code, Some(field)), "{e}");
        assert!(e.message().starts_with(field), "{e}");
    };
    check(
        client.run_agent(req("nobody", "hi")).await,
        Code::InvalidArgument,
        "agent",
    );
    check(
        client.run_agent(req("", "hi")).await,
        Code::InvalidArgument,
        "agent",
    );
    check(
        client.run_agent(req("assistant", "")).await,
        Code::InvalidArgument,
        "input",
    );
    for bad in ["[1,2]", "\"text\"", "{", "42"] {
        let mut r = req("assistant", "hi");
        r.run_context_json = bad.into();
        check(
            client.run_agent(r).await,
            Code::InvalidArgument,
            "run_context_json",
        );
    }
    let mut r = req("assistant", "hi");
    r.limits = Some(pb::RunLimits {
        max_depth: Some(17),
        ..Default::default()
    });
    check(
        client.run_agent(r).await,
        Code::InvalidArgument,
        "limits.max_depth",
    );
    let mut r = req("assistant", "hi");
    r.limits = Some(pb::RunLimits {
        max_depth: Some(16),
        ..Default::default()
    });
    assert!(
        client.run_agent_to_end(r).await.is_ok(),
        "16 is the maximum"
    );
    let mut r = req("assistant", "hi");
    r.limits = Some(pb::RunLimits {
        max_turns: 1001,
        ..Default::default()
    });
    check(
        client.run_agent(r).await,
        Code::InvalidArgument,
        "limits.max_turns",
    );
    for bad in ["", "root.", "Root", "root.a b", "researcher"] {
        let mut r = req("assistant", "hi");
        r.filter = Some(pb::EventFilter {
            context_prefixes: vec![bad.into()],
            ..Default::default()
        });
        check(
            client.run_agent(r).await,
            Code::InvalidArgument,
            "filter.context_prefixes",
        );
    }
    let mut r = req("assistant", "hi");
    r.default_model = "acme:gpt".into();
    check(
        client.run_agent(r).await,
        Code::InvalidArgument,
        "default_model",
    );
    let mut r = req("assistant", "hi");
    r.approval_mode = 99;
    check(
        client.run_agent(r).await,
        Code::InvalidArgument,
        "approval_mode",
    );
    assert_eq!(server.core.runs().running(), runs_before, "no run started");

    let unknown_run = client
        .resolve_approval(
            "0190f3e5-0000-7000-8000-000000000000",
            "approval:x",
            true,
            "",
        )
        .await;
    let e = unknown_run.expect_err("unknown run");
    assert_eq!((e.code(), e.field()), (Code::NotFound, Some("run_id")));
    let done = client
        .run_agent_to_end(req("assistant", "hi"))
        .await
        .expect("run");
    let e = client
        .resolve_approval(&done[0].run_id, "approval:nope", true, "")
        .await
        .expect_err("unknown approval");
    assert_eq!((e.code(), e.field()), (Code::NotFound, Some("approval_id")));
    let e = client
        .submit_input(&done[0].run_id, "input:nope", "x")
        .await
        .expect_err("unknown input");
    assert_eq!((e.code(), e.field()), (Code::NotFound, Some("input_id")));
    let e = client
        .get_run("0190f5a2-7b3c-7d4e-8f10-1a2b3c4d5e6f")
        .await
        .expect_err("unknown run");
    assert_eq!(e.code(), Code::NotFound);
    let e = client.get_run("nope").await.expect_err("not a run id");
    assert_eq!(
        (e.code(), e.field()),
        (Code::InvalidArgument, Some("run_id"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_output_policies_rewrite_record_report_failures_and_end_the_run() {
    let yaml = r##"
policies:
  short: {truncate: 12, tools: [sleep]}
  digits: {redact: "[0-9]+", replacement: "#"}
  pick: {json_pointer: /version, tools: [list_context]}
  remember: {record: last}
  stop: {final: true, tools: [write_context]}
run_policies: [remember, digits]
scripts:
  p:
    - calls: [{tool: sleep, args: {ms: 1, steps: 1}}, {tool: list_context}]
    - calls: [{tool: write_context, args: {key: k, value: v}}]
    - text: "never reached"
agents:
  p: {model: "scripted:p", tools: [sleep, list_context, write_context], policies: [short, pick, stop]}
"##;
    let server = OrchestratorServer::start(yaml, None, |_| {})
        .await
        .expect("orchestrator");
    let client = OrchestratorClient::connect(server.endpoint())
        .await
        .expect("connect");
    let mut r = req("p", "go");
    r.run_context_json = r#"{"user":"ana"}"#.into();
    let events = client.run_agent_to_end(r).await.expect("run");
    check_stream_rules(&events);
    let calls: HashMap<String, pb::ToolCallCompleted> = events
        .iter()
        .filter_map(|e| match &e.payload {
            Some(Payload::ToolCallCompleted(c)) => Some((c.tool.clone(), c.clone())),
            _ => None,
        })
        .collect();
    let outcomes = |tool: &str| -> Vec<(String, String, pb::PolicyDecision, String)> {
        calls[tool]
            .policies
            .iter()
            .map(|p| {
                (
                    p.policy.clone(),
                    p.scope.clone(),
                    p.decision(),
                    p.error.clone(),
                )
            })
            .collect()
    };
    use pb::PolicyDecision::{Final, Forward, Rewrite};
    assert_eq!(
        calls["sleep"].result, "slept # ms",
        "redacted by the run policy"
    );
    assert_eq!(
        outcomes("sleep"),
        [
            ("remember".into(), "run".into(), Forward, String::new()),
            ("digits".into(), "run".into(), Rewrite, String::new()),
            ("short".into(), "agent".into(), Forward, String::new()),
        ],
        "run-scoped first, then the agent's; truncate only acts past 12 characters"
    );
    assert_eq!(
        calls["list_context"].result, r#"{"next_page_token":"","slots":[]}"#,
        "a failing policy forwards the output unchanged"
    );
    let failed = outcomes("list_context");
    assert_eq!((failed[2].0.as_str(), failed[2].2), ("pick", Forward));
    assert!(
        failed[2].3.contains("nothing at /version"),
        "the failure is reported: {failed:?}"
    );
    assert_eq!(outcomes("write_context").last().map(|o| o.2), Some(Final));

    let done = completed(&events);
    assert_eq!(
        done.output, "wrote k at version #",
        "the Final output ends the run"
    );
    assert!(!events.iter().any(
        |e| matches!(&e.payload, Some(Payload::MessageCompleted(m)) if m.text == "never reached")
    ));
    let ctx: serde_json::Value = serde_json::from_str(&done.run_context_json).expect("json");
    assert_eq!(
        ctx,
        serde_json::json!({"user": "ana", "last": "wrote k at version 1"}),
        "recorded before redaction, kept with the initial context"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_failures_delays_and_max_turns() {
    let yaml = r#"
scripts:
  broken: [{delay: 150ms, fail: "the model is down"}]
  caller: [{calls: [{tool: broken, args: {task: x}}]}, {text: "caller saw: {{results}}"}]
  looper: [{calls: [{tool: list_context}], repeat: 1000}]
agents:
  broken: {model: "scripted:broken"}
  caller: {model: "scripted:caller", tools: [broken]}
  looper: {model: "scripted:looper", tools: [list_context]}
"#;
    let server = OrchestratorServer::start(yaml, None, |_| {})
        .await
        .expect("orchestrator");
    let client = OrchestratorClient::connect(server.endpoint())
        .await
        .expect("connect");

    let started = Instant::now();
    let events = client
        .run_agent_to_end(req("broken", "x"))
        .await
        .expect("run");
    assert!(
        started.elapsed() >= Duration::from_millis(150),
        "the turn's delay was kept"
    );
    check_stream_rules(&events);
    match &events.last().expect("events").payload {
        Some(Payload::RunFailed(f)) => {
            assert_eq!(f.code, Code::Unavailable as i32);
            assert_eq!(f.message, "model scripted:broken: the model is down");
        }
        other => panic!("expected RunFailed, got {other:?}"),
    }

    // Below the root, a failing agent is a tool error its caller sees.
    let events = client
        .run_agent_to_end(req("caller", "x"))
        .await
        .expect("run");
    assert_eq!(
        completed(&events).output,
        "caller saw: error: agent broken failed: model scripted:broken: the model is down"
    );

    let mut r = req("looper", "x");
    r.limits = Some(pb::RunLimits {
        max_turns: 5,
        ..Default::default()
    });
    let events = client.run_agent_to_end(r).await.expect("run");
    check_stream_rules(&events);
    let turns = events
        .iter()
        .filter(|e| matches!(e.payload, Some(Payload::MessageCompleted(_))))
        .count();
    assert_eq!(turns, 5, "exactly max_turns model turns");
    match &events.last().expect("events").payload {
        Some(Payload::RunFailed(f)) => {
            assert_eq!(f.code, Code::ResourceExhausted as i32);
            assert!(f.message.contains("max_turns (5)"), "{}", f.message);
        }
        other => panic!("expected RunFailed, got {other:?}"),
    }
}

/// WatchRun: a second subscriber re-attaches to a live run from any seq,
/// sees exactly what the run's own stream sees (filter applied on the
/// server), and can replay a finished run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_run_reattaches_from_any_seq() {
    let (_server, client) = example().await;
    let mut stream = client
        .run_agent(pb::RunAgentRequest {
            agent: "support".into(),
            input: "refund order 9".into(),
            ..Default::default()
        })
        .await
        .expect("run");
    let mut seen = Vec::new();
    let ask = wait_for(&mut stream, &mut seen, |e| {
        matches!(e.payload, Some(Payload::ApprovalRequested(_)))
    })
    .await;
    let run_id = ask.run_id.clone();
    // Parked on the approval: a watcher from the start gets everything so
    // far, then follows live.
    let mut watch = client.watch_run(&run_id, 0, None).await.expect("watch");
    let mut watched = Vec::new();
    for _ in 0..seen.len() {
        watched.push(watch.next().await.expect("open").expect("event"));
    }
    assert_eq!(watched, seen, "the same events, envelope and all");
    let mut late = client.watch_run(&run_id, 3, None).await.expect("watch");
    let Some(Payload::ApprovalRequested(a)) = &ask.payload else {
        unreachable!()
    };
    client
        .resolve_approval(&run_id, &a.approval_id, true, "")
        .await
        .expect("approve");
    drain(&mut stream, &mut seen).await;
    drain(&mut watch, &mut watched).await;
    assert_eq!(watched, seen, "the live part too, up to the terminal event");
    let mut from_four = Vec::new();
    drain(&mut late, &mut from_four).await;
    assert_eq!(from_four, seen[3..], "after_seq 3 starts at seq 4");

    // A finished run replays, with the filter applied on the server.
    let root_only = client
        .watch_run(
            &run_id,
            0,
            Some(pb::EventFilter {
                max_depth: Some(0),
                kinds: vec![pb::EventKind::Handoff as i32],
                ..Default::default()
            }),
        )
        .await
        .expect("watch");
    let replayed: Vec<pb::RunEvent> = root_only.map(|e| e.expect("event")).collect().await;
    assert_eq!(
        replayed.iter().map(kind).collect::<Vec<_>>(),
        ["Handoff", "RunCompleted"],
        "the terminal event always passes"
    );
    // Past the end: nothing more, the stream ends.
    let last = seen.last().expect("events").seq;
    let after_end: Vec<_> = client
        .watch_run(&run_id, last, None)
        .await
        .expect("watch")
        .collect()
        .await;
    assert!(after_end.is_empty());

    // Bad requests.
    let err = client
        .watch_run("", 0, None)
        .await
        .err()
        .expect("empty run_id");
    assert_eq!(
        (err.code(), err.field()),
        (Code::InvalidArgument, Some("run_id"))
    );
    let err = client
        .watch_run("0190f5a2-7b3c-7d4e-8f10-1a2b3c4d5e6f", 0, None)
        .await
        .err()
        .expect("unknown run");
    assert_eq!(err.code(), Code::NotFound);
}

/// A run's whole history is kept (memory mode: for
/// `runs.finished_retention`, within `runs.max_finished_bytes`): a run of
/// 15,000 events is replayed from seq 1, packed or not, after the sweep.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_run_replays_a_long_runs_whole_history() {
    let deltas = 15_000;
    let agents = format!(
        "scripts:\n  chatty: [{{text: 'word', deltas: {deltas}}}]\nagents:\n  chatty: {{model: 'scripted:chatty'}}\n"
    );
    let server = OrchestratorServer::start(&agents, None, |_| {})
        .await
        .expect("orchestrator");
    let client = server.client().await.expect("connect");
    let events = client
        .run_agent_to_end(agent_request("chatty", "go"))
        .await
        .expect("run");
    assert!(events.len() > deltas);
    let run_id = &events[0].run_id;
    server.core.runs().sweep_now();
    let replayed: Vec<pb::RunEvent> = client
        .watch_run(run_id, 0, None)
        .await
        .expect("from seq 1")
        .map(|e| e.expect("event"))
        .collect()
        .await;
    assert_eq!(replayed, events, "the same events, from seq 1");
    let tail: Vec<_> = client
        .watch_run(run_id, events.len() as u64 - 3, None)
        .await
        .expect("the tail")
        .collect()
        .await;
    assert_eq!(tail.len(), 3);
}

/// A run's history is bounded (`runs.max_history_bytes`): a run that
/// stays within it completes; one that goes over it fails
/// `RESOURCE_EXHAUSTED` naming the setting, with its history kept up to
/// its end (the bound's exact edge, at it and one byte over, is tested on
/// the log itself: `run::log`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_over_its_history_bound_fails_naming_it_and_keeps_its_history() {
    let agents = "scripts:\n  chatty: [{text: 'word', deltas: 3000}]\n  brief: [{text: 'word', deltas: 20}]\nagents:\n  chatty: {model: 'scripted:chatty'}\n  brief: {model: 'scripted:brief'}\n";
    let bound = 32 * 1024;
    let server = OrchestratorServer::start(agents, None, |c| {
        c.runs.max_history_bytes = bound;
    })
    .await
    .expect("orchestrator");
    let client = server.client().await.expect("connect");
    let brief = client
        .run_agent_to_end(agent_request("brief", "go"))
        .await
        .expect("run");
    assert!(matches!(
        brief.last().and_then(|e| e.payload.as_ref()),
        Some(Payload::RunCompleted(_))
    ));
    let events = client
        .run_agent_to_end(agent_request("chatty", "go"))
        .await
        .expect("run");
    let Some(Payload::RunFailed(failed)) = events.last().and_then(|e| e.payload.clone()) else {
        panic!("the run fails: {:?}", events.last());
    };
    assert_eq!(failed.code, Code::ResourceExhausted as i32);
    assert!(
        failed.message.contains("runs.max_history_bytes") && failed.message.contains("32768"),
        "{}",
        failed.message
    );
    // It stopped near the bound: far fewer events than the 3,000 deltas,
    // each charged about 60 bytes.
    assert!(
        events.len() > 300 && events.len() < 1000,
        "{} events",
        events.len()
    );
    let run_id = &events[0].run_id;
    let got = client.get_run(run_id).await.expect("get");
    assert_eq!(got.status, pb::RunStatus::Failed as i32);
    assert!(got.error_message.contains("runs.max_history_bytes"));
    let replayed: Vec<pb::RunEvent> = client
        .watch_run(run_id, 0, None)
        .await
        .expect("from seq 1")
        .map(|e| e.expect("event"))
        .collect()
        .await;
    assert_eq!(replayed, events, "its whole history, to its end");
}
