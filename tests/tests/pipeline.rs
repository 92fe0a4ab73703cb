//! RunPipeline through gRPC, with the Redis-backed context store: validation
//! before anything runs, the three modes, templating and slots, the failure
//! policies on a graph whose middle step fails, retries and timeouts,
//! cancellation, approvals inside steps, and the store lifecycle.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
    time::Duration,
};

use baton_client::{OrchestratorClient, StoreClient, pb, pb::run_event::Payload};
use baton_context_store::config::Backend;
use baton_e2e::{
    OrchestratorServer, RedisServer, StoreServer,
    events::{check_stream_rules, terminal},
};
use baton_orchestrator::remote_store::RemoteStore;
use baton_store::{ContextStore, redis::RedisStore};
use futures::StreamExt;
use tonic::Code;

const AGENTS: &str = r#"
policies:
  stop: {final: true, tools: [write_context]}
scripts:
  finisher:
    - calls: [{tool: write_context, args: {key: done/x, value: "v"}}]
    - text: "never reached"
  echo: [{text: "{{input}}"}]
  fail: [{fail: "step exploded"}]
  slow: [{delay: 300ms, text: "slow done"}]
  stuck: [{delay: 60s, text: "never"}]
  refund:
    - calls: [{tool: write_context, args: {key: refunds/x, value: "{{input}}"}}]
    - text: "refunded"
  asker:
    - calls: [{tool: ask_user, args: {question: "Which plan?", options: [basic, gold]}}]
    - text: "chose {{results}}"
  planner:
    - calls: [{tool: run_pipeline, args: {mode: dag, steps: [
        {id: gather, agent: echo, task: "facts on {{input}}", output_to: facts},
        {id: write, agent: echo, task: "report: {{facts}}"}]}}]
    - text: "planned {{results}}"
  bad_planner:
    - calls: [{tool: run_pipeline, args: {steps: [{id: a, agent: nobody}]}}]
    - text: "{{results}}"
  reader:
    - calls: [{tool: read_context, args: {key: x}}]
    - text: "read {{results}}"
agents:
  reader: {model: "scripted:reader", tools: [read_context]}
  finisher: {model: "scripted:finisher", tools: [write_context], policies: [stop]}
  echo: {model: "scripted:echo"}
  asker: {model: "scripted:asker", tools: [ask_user]}
  planner: {model: "scripted:planner", tools: [run_pipeline]}
  bad_planner: {model: "scripted:bad_planner", tools: [run_pipeline]}
  fail: {model: "scripted:fail"}
  slow: {model: "scripted:slow"}
  stuck: {model: "scripted:stuck"}
  refund: {model: "scripted:refund", tools: [write_context], approvals: {write_context: always}}
"#;

struct Env {
    _redis: RedisServer,
    _store: StoreServer,
    store: StoreClient,
    server: OrchestratorServer,
    client: OrchestratorClient,
}

/// An orchestrator whose context store is a context-store service on Redis.
async fn env() -> Env {
    env_with_value_limits(None, None).await
}

/// Like [`env`], with the largest value the store service takes and the one
/// the orchestrator believes it takes (defaults: 1 MiB).
async fn env_with_value_limits(server: Option<u64>, orchestrator: Option<u64>) -> Env {
    let redis = RedisServer::start().expect("redis-server");
    let mut config = StoreServer::config(Backend::Redis, Some(redis.url()));
    if let Some(limit) = server {
        config.limits.max_value_bytes = limit;
    }
    let store_server = StoreServer::start(config).await.expect("store");
    let mut limits = baton_store::Limits::default();
    if let Some(limit) = orchestrator {
        limits.max_value_bytes = limit;
    }
    env_on(redis, store_server, limits).await
}

/// An orchestrator on `store_server` (whose Redis is `redis`), believing
/// the store takes `limits`.
async fn env_on(redis: RedisServer, store_server: StoreServer, limits: baton_store::Limits) -> Env {
    let remote: Arc<dyn ContextStore> = Arc::new(
        RemoteStore::new(&store_server.endpoint(), limits, Duration::from_secs(5))
            .expect("remote store"),
    );
    let server = OrchestratorServer::start(AGENTS, Some(remote), |_| {})
        .await
        .expect("orchestrator");
    let client = OrchestratorClient::connect(server.endpoint())
        .await
        .expect("connect");
    let store = StoreClient::connect(store_server.endpoint())
        .await
        .expect("store client");
    Env {
        _redis: redis,
        _store: store_server,
        store,
        server,
        client,
    }
}

fn step(id: &str, agent: &str, task: &str) -> pb::PipelineStep {
    pb::PipelineStep {
        id: id.into(),
        agent: agent.into(),
        task: task.into(),
        ..Default::default()
    }
}

fn pipeline(
    mode: pb::PipelineMode,
    policy: pb::FailurePolicy,
    steps: Vec<pb::PipelineStep>,
) -> pb::RunPipelineRequest {
    pb::RunPipelineRequest {
        pipeline: Some(pb::PipelineSpec {
            name: "test".into(),
            steps,
            mode: mode as i32,
            policy: policy as i32,
            max_concurrency: None,
        }),
        ..Default::default()
    }
}

fn summary(events: &[pb::RunEvent]) -> pb::PipelineCompleted {
    events
        .iter()
        .find_map(|e| match &e.payload {
            Some(Payload::PipelineCompleted(p)) => Some(p.clone()),
            _ => None,
        })
        .expect("PipelineCompleted")
}

/// (success, succeeded, failed, skipped) of a PipelineCompleted.
fn lists(p: &pb::PipelineCompleted) -> (bool, Vec<String>, Vec<String>, Vec<String>) {
    (
        p.success,
        p.succeeded.clone(),
        p.failed.clone(),
        p.skipped.clone(),
    )
}

fn ids(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

/// The rules of every run's stream, and a step's context: `{pipeline's
/// context}.{step_id}`.
fn check_rules(events: &[pb::RunEvent]) {
    check_stream_rules(events);
    for e in events {
        // A step runs in `{pipeline's context}.{step_id}`: root.{id} at
        // depth 1 for RunPipeline, deeper when an agent started it.
        if let Some(Payload::StepStarted(s)) = &e.payload {
            assert!(e.context_id.ends_with(&format!(".{}", s.step_id)));
            if e.context_id == format!("root.{}", s.step_id) {
                assert_eq!(e.depth, 1);
            } else {
                assert!(e.depth > 1, "{e:?}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dag_research_analysts_writer_with_slots_and_templating() {
    let env = env().await;
    let mut research = step("research", "echo", "notes on {{topic}}");
    research.output_to = "notes".into();
    let mut a = step("analyst-a", "echo", "A read");
    a.input_from = vec!["notes".into()];
    a.output_to = "view-a".into();
    let mut b = step("analyst-b", "echo", "B read");
    b.input_from = vec!["notes".into()];
    b.output_to = "view-b".into();
    let mut writer = step("writer", "echo", "final: {{view-a}} | {{view-b}}");
    writer.output_to = "report".into();
    let mut req = pipeline(
        pb::PipelineMode::Dag,
        pb::FailurePolicy::Fail,
        vec![writer, b, a, research],
    );
    req.initial_slots = HashMap::from([("topic".into(), "tides".into())]);
    req.keep_context = true;
    let events = env.client.run_pipeline_to_end(req).await.expect("run");
    check_rules(&events);

    let report = "final: A read\n\nInputs:\n[notes]\nnotes on tides | B read\n\nInputs:\n[notes]\nnotes on tides";
    match terminal(&events) {
        Payload::RunCompleted(c) => assert_eq!(
            c.output, report,
            "the output of the graph's sink, whatever the list order"
        ),
        other => panic!("{other:?}"),
    }
    let p = summary(&events);
    assert!(p.success);
    assert_eq!(
        p.succeeded,
        ["writer", "analyst-b", "analyst-a", "research"]
    );
    assert_eq!(p.outputs["research"], "notes on tides");
    // Dependencies came from data flow: research first, writer last, the
    // analysts in between.
    let order: Vec<&str> = events
        .iter()
        .filter_map(|e| match &e.payload {
            Some(Payload::StepCompleted(s)) => Some(s.step_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(order.first(), Some(&"research"));
    assert_eq!(order.last(), Some(&"writer"));
    // Each step's agent runs in the step's context.
    assert!(
        events.iter().any(|e| e.context_id == "root.writer"
            && matches!(e.payload, Some(Payload::AgentStarted(_))))
    );
    // keep_context: the slots stay, under the run's trace.
    let trace = &events[0].trace_id;
    let slot = env.store.get(trace, "report").await.expect("kept");
    assert_eq!(String::from_utf8_lossy(&slot.value), report);
    assert_eq!(
        env.store.list(trace, "").await.expect("list").used_keys,
        5,
        "topic + 4 outputs"
    );

    // Without keep_context the pipeline's slots are cleared at the end.
    let mut s1 = step("one", "echo", "x");
    s1.output_to = "out".into();
    let mut req = pipeline(
        pb::PipelineMode::Sequential,
        pb::FailurePolicy::Fail,
        vec![s1],
    );
    req.initial_slots = HashMap::from([("seed".into(), "s".into())]);
    let events = env.client.run_pipeline_to_end(req).await.expect("run");
    assert!(matches!(terminal(&events), Payload::RunCompleted(_)));
    assert_eq!(
        env.store
            .list(&events[0].trace_id, "")
            .await
            .expect("list")
            .used_keys,
        0
    );
}

/// a → b (fails) → c, and d independent (slow, so it is running when b
/// fails).
fn middle_fails(policy: pb::FailurePolicy, b_required: bool) -> pb::RunPipelineRequest {
    let a = step("a", "echo", "a");
    let mut b = step("b", "fail", "b");
    b.depends_on = vec!["a".into()];
    b.required = Some(b_required);
    let mut c = step("c", "echo", "c");
    c.depends_on = vec!["b".into()];
    let d = step("d", "slow", "d");
    pipeline(pb::PipelineMode::Dag, policy, vec![a, b, c, d])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_policies_on_a_graph_whose_middle_step_fails() {
    let env = env().await;

    // fail: everything still running is cancelled, the run fails.
    let events = env
        .client
        .run_pipeline_to_end(middle_fails(pb::FailurePolicy::Fail, true))
        .await
        .expect("run");
    check_rules(&events);
    let p = summary(&events);
    assert_eq!(
        lists(&p),
        (false, ids(&["a"]), ids(&["b"]), ids(&["c", "d"]))
    );
    let d_skipped = events.iter().find_map(|e| match &e.payload {
        Some(Payload::StepSkipped(s)) if s.step_id == "d" => Some(s.reason.clone()),
        _ => None,
    });
    assert_eq!(
        d_skipped.as_deref(),
        Some("cancelled: required step \"b\" failed")
    );
    assert!(
        !events
            .iter()
            .any(|e| matches!(&e.payload, Some(Payload::StepCompleted(s)) if s.step_id == "d"))
    );
    match terminal(&events) {
        Payload::RunFailed(f) => assert_eq!(f.code, Code::Aborted as i32),
        other => panic!("{other:?}"),
    }

    // continue: independent steps go on, dependents are skipped, the run
    // fails with partial results.
    let events = env
        .client
        .run_pipeline_to_end(middle_fails(pb::FailurePolicy::Continue, true))
        .await
        .expect("run");
    check_rules(&events);
    let p = summary(&events);
    assert_eq!(
        lists(&p),
        (false, ids(&["a", "d"]), ids(&["b"]), ids(&["c"]))
    );
    assert_eq!(p.outputs["d"], "slow done");
    assert!(matches!(terminal(&events), Payload::RunFailed(_)));

    // best_effort: the same, and the run succeeds because some steps did.
    let events = env
        .client
        .run_pipeline_to_end(middle_fails(pb::FailurePolicy::BestEffort, true))
        .await
        .expect("run");
    let p = summary(&events);
    assert_eq!(
        lists(&p),
        (true, ids(&["a", "d"]), ids(&["b"]), ids(&["c"]))
    );
    assert!(matches!(terminal(&events), Payload::RunCompleted(c) if c.output == "slow done"));

    // required: false never fails the run, even under fail.
    let events = env
        .client
        .run_pipeline_to_end(middle_fails(pb::FailurePolicy::Fail, false))
        .await
        .expect("run");
    let p = summary(&events);
    assert_eq!(
        lists(&p),
        (true, ids(&["a", "d"]), ids(&["b"]), ids(&["c"]))
    );
    assert!(matches!(terminal(&events), Payload::RunCompleted(_)));
}

/// A sequential pipeline whose second step fails: `c` needs it (depends_on),
/// `d` is independent, `e` reads what `a` wrote.
fn sequential_second_fails(policy: pb::FailurePolicy, b_required: bool) -> pb::RunPipelineRequest {
    let mut a = step("a", "echo", "a");
    a.output_to = "out/a".into();
    let mut b = step("b", "fail", "b");
    b.required = Some(b_required);
    let mut c = step("c", "echo", "c");
    c.depends_on = vec!["b".into()];
    let d = step("d", "echo", "d");
    let e = step("e", "echo", "e after {{out/a}}");
    pipeline(pb::PipelineMode::Sequential, policy, vec![a, b, c, d, e])
}

/// The step ids in the order they started, and checks that each started
/// after the one before it in the list ended (list order is the order of
/// execution).
fn started_in_list_order(events: &[pb::RunEvent]) -> Vec<String> {
    let mut order = Vec::new();
    let mut open: Option<String> = None;
    for e in events {
        match &e.payload {
            Some(Payload::StepStarted(s)) => {
                assert!(open.is_none(), "{} started while {open:?} ran", s.step_id);
                open = Some(s.step_id.clone());
                order.push(s.step_id.clone());
            }
            Some(Payload::StepCompleted(s)) => {
                assert_eq!(open.take().as_deref(), Some(s.step_id.as_str()));
            }
            Some(Payload::StepFailed(s)) if !s.will_retry => {
                assert_eq!(open.take().as_deref(), Some(s.step_id.as_str()));
            }
            _ => {}
        }
    }
    order
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_mode_skips_only_what_needs_a_failed_step() {
    let env = env().await;
    // Runs the pipeline whose second step fails under `policy`; checks the
    // stream rules and that steps ran one after another in list order.
    let run = |policy, b_required, started: &'static [&'static str]| {
        let client = env.client.clone();
        async move {
            let events = client
                .run_pipeline_to_end(sequential_second_fails(policy, b_required))
                .await
                .expect("run");
            check_rules(&events);
            assert_eq!(started_in_list_order(&events), ids(started), "{policy:?}");
            events
        }
    };
    // continue: c needs b and is skipped; d and e still run, in list order.
    let events = run(pb::FailurePolicy::Continue, true, &["a", "b", "d", "e"]).await;
    let p = summary(&events);
    assert_eq!(
        lists(&p),
        (false, ids(&["a", "d", "e"]), ids(&["b"]), ids(&["c"]))
    );
    assert_eq!(p.outputs["e"], "e after a");
    let c_skipped = events.iter().find_map(|e| match &e.payload {
        Some(Payload::StepSkipped(s)) if s.step_id == "c" => Some(s.reason.clone()),
        _ => None,
    });
    assert_eq!(
        c_skipped.as_deref(),
        Some("needs step \"b\", which did not succeed")
    );
    assert!(matches!(terminal(&events), Payload::RunFailed(f) if f.code == Code::Aborted as i32));

    // best_effort: the same steps, and the run succeeds with the last
    // succeeded step's output.
    let events = run(pb::FailurePolicy::BestEffort, true, &["a", "b", "d", "e"]).await;
    assert_eq!(
        lists(&summary(&events)),
        (true, ids(&["a", "d", "e"]), ids(&["b"]), ids(&["c"]))
    );
    assert!(matches!(terminal(&events), Payload::RunCompleted(c) if c.output == "e after a"));

    // fail: a failed required step still ends everything.
    let events = run(pb::FailurePolicy::Fail, true, &["a", "b"]).await;
    assert_eq!(
        lists(&summary(&events)),
        (false, ids(&["a"]), ids(&["b"]), ids(&["c", "d", "e"]))
    );
    assert!(matches!(terminal(&events), Payload::RunFailed(_)));

    // required: false under fail: its dependent is skipped, the rest runs
    // and the run succeeds (it ran something).
    let events = run(pb::FailurePolicy::Fail, false, &["a", "b", "d", "e"]).await;
    assert_eq!(
        lists(&summary(&events)),
        (true, ids(&["a", "d", "e"]), ids(&["b"]), ids(&["c"]))
    );
    assert!(matches!(terminal(&events), Payload::RunCompleted(c) if c.output == "e after a"));

    // A step cannot need a later one: in sequential mode that is a bad spec.
    let mut first = step("first", "echo", "needs {{later/out}}");
    first.depends_on = vec![];
    let mut later = step("later", "echo", "x");
    later.output_to = "later/out".into();
    let err = env
        .client
        .run_pipeline_to_end(pipeline(
            pb::PipelineMode::Sequential,
            pb::FailurePolicy::Continue,
            vec![first, later],
        ))
        .await
        .expect_err("a forward dependency is refused");
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.to_string().contains("pipeline.steps[0]"), "{err}");
    assert!(env.server.core.runs().running() == 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_final_tool_output_ends_its_step_successfully_without_retry() {
    let env = env().await;
    for mode in [pb::PipelineMode::Sequential, pb::PipelineMode::Dag] {
        let mut f = step("f", "finisher", "finish");
        f.retries = 2;
        f.output_to = "out/f".into();
        let mut next = step("next", "echo", "after {{out/f}}");
        next.depends_on = vec!["f".into()];
        let events = env
            .client
            .run_pipeline_to_end(pipeline(mode, pb::FailurePolicy::Fail, vec![f, next]))
            .await
            .expect("run");
        check_rules(&events);
        let p = summary(&events);
        assert_eq!(
            lists(&p),
            (true, ids(&["f", "next"]), vec![], vec![]),
            "{mode:?}"
        );
        assert!(
            p.outputs["f"].starts_with("wrote done/x at version"),
            "{p:?}"
        );
        assert_eq!(p.outputs["next"], format!("after {}", p.outputs["f"]));
        let attempts: Vec<u32> = events
            .iter()
            .filter_map(|e| match &e.payload {
                Some(Payload::StepStarted(s)) if s.step_id == "f" => Some(s.attempt),
                _ => None,
            })
            .collect();
        assert_eq!(attempts, vec![1], "no retry");
        assert!(
            !events
                .iter()
                .any(|e| matches!(&e.payload, Some(Payload::StepFailed(_)))),
            "{mode:?}"
        );
        // The agent's second turn never ran.
        assert!(!events.iter().any(|e| matches!(&e.payload,
            Some(Payload::MessageCompleted(m)) if m.text == "never reached")));
        assert!(matches!(terminal(&events), Payload::RunCompleted(_)));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_timeouts_and_concurrency() {
    let env = env().await;
    let mut flaky = step("flaky", "fail", "x");
    flaky.retries = 2;
    let mut late = step("late", "slow", "x");
    late.timeout = Some(baton_proto::wkt::Duration {
        seconds: 0,
        nanos: 50_000_000,
    });
    let events = env
        .client
        .run_pipeline_to_end(pipeline(
            pb::PipelineMode::Parallel,
            pb::FailurePolicy::Continue,
            vec![flaky, late],
        ))
        .await
        .expect("run");
    check_rules(&events);
    let attempts: Vec<(u32, bool)> = events
        .iter()
        .filter_map(|e| match &e.payload {
            Some(Payload::StepFailed(f)) if f.step_id == "flaky" => Some((f.attempt, f.will_retry)),
            _ => None,
        })
        .collect();
    assert_eq!(attempts, [(1, true), (2, true), (3, false)]);
    let started: Vec<u32> = events
        .iter()
        .filter_map(|e| match &e.payload {
            Some(Payload::StepStarted(s)) if s.step_id == "flaky" => Some(s.attempt),
            _ => None,
        })
        .collect();
    assert_eq!(started, [1, 2, 3]);
    let timed_out = events.iter().find_map(|e| match &e.payload {
        Some(Payload::StepFailed(f)) if f.step_id == "late" => Some(f.error.clone()),
        _ => None,
    });
    assert!(timed_out.is_some_and(|e| e.contains("timed out")));

    // max_concurrency 2: never more than two steps at once.
    let steps: Vec<pb::PipelineStep> = (0..5)
        .map(|i| step(&format!("s{i}"), "slow", "x"))
        .collect();
    let mut req = pipeline(pb::PipelineMode::Parallel, pb::FailurePolicy::Fail, steps);
    req.pipeline.as_mut().expect("spec").max_concurrency = Some(2);
    let started = std::time::Instant::now();
    let events = env.client.run_pipeline_to_end(req).await.expect("run");
    let (mut running, mut most) = (0i32, 0i32);
    for e in &events {
        match &e.payload {
            Some(Payload::StepStarted(_)) => {
                running += 1;
                most = most.max(running);
            }
            Some(Payload::StepCompleted(_)) => running -= 1,
            _ => {}
        }
    }
    assert_eq!(most, 2);
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "five 300 ms steps, two at a time"
    );
    assert!(summary(&events).success);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_stops_every_step_and_sequential_mode_starts_no_more() {
    let env = env().await;
    for mode in [pb::PipelineMode::Parallel, pb::PipelineMode::Sequential] {
        let steps = vec![
            step("one", "stuck", "x"),
            step("two", "stuck", "x"),
            step("three", "stuck", "x"),
        ];
        let mut stream = env
            .client
            .run_pipeline(pipeline(mode, pb::FailurePolicy::Fail, steps))
            .await
            .expect("run");
        let mut seen = Vec::new();
        let run_id = loop {
            let e = stream.next().await.expect("open").expect("event");
            seen.push(e.clone());
            if matches!(e.payload, Some(Payload::AgentStarted(_))) {
                break e.run_id;
            }
        };
        let run = env.server.core.runs().get(&run_id).expect("record");
        let began = std::time::Instant::now();
        env.client.cancel(&run_id, "stop").await.expect("cancel");
        while let Some(e) = tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .expect("in time")
        {
            seen.push(e.expect("event"));
        }
        assert!(began.elapsed() < Duration::from_secs(2));
        check_rules(&seen);
        assert!(matches!(terminal(&seen), Payload::RunCancelled(_)));
        assert_eq!(
            run.live_tasks.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "nothing of the run is alive"
        );
        let starts = seen
            .iter()
            .filter(|e| matches!(e.payload, Some(Payload::StepStarted(_))))
            .count();
        assert_eq!(
            starts,
            if mode == pb::PipelineMode::Sequential {
                1
            } else {
                3
            },
            "{mode:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_inside_a_step_surfaces_with_the_steps_context() {
    let env = env().await;
    let mut stream = env
        .client
        .run_pipeline(pipeline(
            pb::PipelineMode::Sequential,
            pb::FailurePolicy::Fail,
            vec![step("pay", "refund", "order 3")],
        ))
        .await
        .expect("run");
    let mut seen = Vec::new();
    loop {
        let e = stream.next().await.expect("open").expect("event");
        seen.push(e.clone());
        if let Some(Payload::ApprovalRequested(a)) = &e.payload {
            assert_eq!((e.context_id.as_str(), e.depth), ("root.pay", 1));
            env.client
                .resolve_approval(&e.run_id, &a.approval_id, true, "")
                .await
                .expect("approve");
            break;
        }
    }
    while let Some(e) = stream.next().await {
        seen.push(e.expect("event"));
    }
    check_rules(&seen);
    assert!(matches!(terminal(&seen), Payload::RunCompleted(c) if c.output == "refunded"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_request_inside_a_step_resumes_that_step() {
    let env = env().await;
    let mut ask = step("ask", "asker", "pick a plan");
    ask.output_to = "choice".into();
    let mut stream = env
        .client
        .run_pipeline(pipeline(
            pb::PipelineMode::Sequential,
            pb::FailurePolicy::Fail,
            vec![ask, step("confirm", "echo", "confirmed: {{choice}}")],
        ))
        .await
        .expect("run");
    let mut seen = Vec::new();
    loop {
        let e = stream.next().await.expect("open").expect("event");
        seen.push(e.clone());
        if let Some(Payload::InputRequested(r)) = &e.payload {
            assert_eq!((e.context_id.as_str(), e.depth), ("root.ask", 1));
            assert_eq!(r.options, ["basic", "gold"]);
            env.client
                .submit_input(&e.run_id, &r.input_id, "gold")
                .await
                .expect("answer");
            break;
        }
    }
    while let Some(e) = stream.next().await {
        seen.push(e.expect("event"));
    }
    check_rules(&seen);
    // The wait was not a failure: one attempt, no StepFailed, and the next
    // step saw the answer.
    assert!(
        !seen
            .iter()
            .any(|e| matches!(e.payload, Some(Payload::StepFailed(_))))
    );
    assert_eq!(
        lists(&summary(&seen)),
        (true, ids(&["ask", "confirm"]), vec![], vec![])
    );
    assert!(
        matches!(terminal(&seen), Payload::RunCompleted(c) if c.output == "confirmed: chose gold"),
        "{:?}",
        terminal(&seen)
    );
}

fn agent_request(agent: &str, input: &str, max_depth: Option<u32>) -> pb::RunAgentRequest {
    pb::RunAgentRequest {
        agent: agent.into(),
        input: input.into(),
        limits: Some(pb::RunLimits {
            max_depth,
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn tool_completed<'a>(events: &'a [pb::RunEvent], tool: &str) -> &'a pb::ToolCallCompleted {
    events
        .iter()
        .find_map(|e| match &e.payload {
            Some(Payload::ToolCallCompleted(c)) if c.tool == tool => Some(c),
            _ => None,
        })
        .expect("ToolCallCompleted")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_starts_a_pipeline_in_its_child_context_with_run_pipeline() {
    let env = env().await;
    let events = env
        .client
        .run_agent_to_end(agent_request("planner", "tides", Some(2)))
        .await
        .expect("run");
    check_rules(&events);

    // The pipeline runs in the agent's child context; its steps one level
    // further down, with their agents' events nested in them.
    let p = events
        .iter()
        .find(|e| matches!(e.payload, Some(Payload::PipelineCompleted(_))))
        .expect("PipelineCompleted");
    assert_eq!((p.context_id.as_str(), p.depth), ("root.run_pipeline.1", 1));
    assert_eq!(p.parent_context_id, "root");
    assert_eq!(
        lists(&summary(&events)),
        (true, ids(&["gather", "write"]), vec![], vec![])
    );
    for step in ["gather", "write"] {
        let ctx = format!("root.run_pipeline.1.{step}");
        let in_step: Vec<&pb::RunEvent> = events.iter().filter(|e| e.context_id == ctx).collect();
        assert!(
            in_step
                .iter()
                .all(|e| e.depth == 2 && e.parent_context_id == "root.run_pipeline.1")
        );
        assert!(
            in_step
                .iter()
                .any(|e| matches!(e.payload, Some(Payload::StepStarted(_))))
        );
        assert!(
            in_step
                .iter()
                .any(|e| matches!(&e.payload, Some(Payload::AgentStarted(a)) if a.agent == "echo"))
        );
    }
    // The tool's result is the summary; the agent's answer uses it.
    let call = tool_completed(&events, "run_pipeline");
    assert!(call.error.is_empty(), "{}", call.error);
    let result: serde_json::Value = serde_json::from_str(&call.result).expect("json");
    assert_eq!(result["success"], true);
    assert_eq!(result["output"], "report: facts on tides");
    assert_eq!(result["outputs"]["gather"], "facts on tides");
    assert!(
        matches!(terminal(&events), Payload::RunCompleted(c) if c.output.starts_with("planned {") && c.output.contains("report: facts on tides"))
    );
    // Its slots were cleared when it ended.
    let trace = &events[0].trace_id;
    assert_eq!(env.store.list(trace, "").await.expect("list").used_keys, 0);

    // max_depth applies: with 1, the steps (depth 2) may not run; the agent
    // gets the refusal as its tool's error and no step starts.
    let events = env
        .client
        .run_agent_to_end(agent_request("planner", "tides", Some(1)))
        .await
        .expect("run");
    check_rules(&events);
    let call = tool_completed(&events, "run_pipeline");
    assert!(call.error.contains("over max_depth 1"), "{}", call.error);
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.payload, Some(Payload::StepStarted(_))))
    );
    assert!(events.iter().all(|e| e.depth == 0));

    // A bad pipeline is the tool's error, naming the field, and runs nothing.
    let events = env
        .client
        .run_agent_to_end(agent_request("bad_planner", "go", None))
        .await
        .expect("run");
    let call = tool_completed(&events, "run_pipeline");
    assert!(
        call.error
            .starts_with("pipeline.steps[0].agent: unknown agent or group \"nobody\""),
        "{}",
        call.error
    );
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.payload, Some(Payload::StepStarted(_))))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_specs_are_rejected_naming_the_field_before_anything_runs() {
    let env = env().await;
    let check =
        |r: Result<baton_client::Events, baton_client::Error>, field: &str, contains: &str| {
            let Err(e) = r else {
                panic!("{field}: must fail")
            };
            assert_eq!(
                (e.code(), e.field()),
                (Code::InvalidArgument, Some(field)),
                "{e}"
            );
            assert!(e.message().contains(contains), "{e}");
        };
    let dag = |steps| pipeline(pb::PipelineMode::Dag, pb::FailurePolicy::Fail, steps);
    let c = &env.client;
    check(
        c.run_pipeline(dag(vec![step("a", "echo", "x"), step("b", "nobody", "x")]))
            .await,
        "pipeline.steps[1].agent",
        "nobody",
    );
    check(
        c.run_pipeline(dag(vec![step("a", "echo", "x"), step("a", "echo", "x")]))
            .await,
        "pipeline.steps[1].id",
        "earlier step",
    );
    check(
        c.run_pipeline(dag(vec![step("Bad Id", "echo", "x")])).await,
        "pipeline.steps[0].id",
        "[a-z0-9_-]",
    );
    let mut a = step("a", "echo", "x");
    a.depends_on = vec!["b".into()];
    let mut b = step("b", "echo", "x");
    b.depends_on = vec!["c".into()];
    let mut cc = step("c", "echo", "x");
    cc.depends_on = vec!["a".into()];
    check(
        c.run_pipeline(dag(vec![a, b, cc])).await,
        "pipeline.steps",
        "cycle: a → b → c → a",
    );
    let mut a = step("a", "echo", "x");
    a.depends_on = vec!["ghost".into()];
    check(
        c.run_pipeline(dag(vec![a])).await,
        "pipeline.steps[0].depends_on",
        "ghost",
    );
    let mut a = step("a", "echo", "x");
    a.input_from = vec!["nobody-writes".into()];
    check(
        c.run_pipeline(dag(vec![a])).await,
        "pipeline.steps[0].input_from",
        "nobody-writes",
    );
    check(
        c.run_pipeline(dag(vec![step("a", "echo", "use {{missing}}")]))
            .await,
        "pipeline.steps[0].task",
        "{{missing}}",
    );
    let mut req = dag(vec![step("a", "echo", "x")]);
    req.pipeline.as_mut().expect("spec").max_concurrency = Some(0);
    check(
        c.run_pipeline(req).await,
        "pipeline.max_concurrency",
        "at least 1",
    );
    for (seconds, nanos) in [(0, 0), (-1, 0), (86_401, 0)] {
        let mut a = step("a", "echo", "x");
        a.timeout = Some(baton_proto::wkt::Duration { seconds, nanos });
        check(
            c.run_pipeline(dag(vec![a])).await,
            "pipeline.steps[0].timeout",
            "",
        );
    }
    let mut a = step("a", "echo", "x");
    a.retries = 11;
    check(
        c.run_pipeline(dag(vec![a])).await,
        "pipeline.steps[0].retries",
        "maximum of 10",
    );
    let too_many: Vec<pb::PipelineStep> = (0..257)
        .map(|i| step(&format!("s{i}"), "echo", "x"))
        .collect();
    check(
        c.run_pipeline(pipeline(
            pb::PipelineMode::Parallel,
            pb::FailurePolicy::Fail,
            too_many,
        ))
        .await,
        "pipeline.steps",
        "maximum of 256",
    );
    check(
        c.run_pipeline(pb::RunPipelineRequest::default()).await,
        "pipeline",
        "required",
    );
    assert_eq!(env.server.core.runs().running(), 0, "nothing started");

    // At the limits: 256 steps, 10 retries, a 24 h timeout.
    let mut at_limit: Vec<pb::PipelineStep> = (0..256)
        .map(|i| step(&format!("s{i}"), "echo", "x"))
        .collect();
    at_limit[0].retries = 10;
    at_limit[1].timeout = Some(baton_proto::wkt::Duration {
        seconds: 86_400,
        nanos: 0,
    });
    let events = c
        .run_pipeline_to_end(pipeline(
            pb::PipelineMode::Parallel,
            pb::FailurePolicy::Fail,
            at_limit,
        ))
        .await
        .expect("run");
    assert_eq!(summary(&events).succeeded.len(), 256);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_on_an_in_process_redis_store_too() {
    let redis = RedisServer::start().expect("redis-server");
    let store: Arc<dyn ContextStore> = Arc::new(
        RedisStore::new(
            &baton_store::redis::RedisConfig {
                url: redis.url(),
                ..Default::default()
            },
            Default::default(),
        )
        .expect("redis store"),
    );
    let server = OrchestratorServer::start(AGENTS, Some(store), |_| {})
        .await
        .expect("orchestrator");
    let client = OrchestratorClient::connect(server.endpoint())
        .await
        .expect("connect");
    let mut one = step("one", "echo", "hello");
    one.output_to = "greeting".into();
    let two = step("two", "echo", "{{greeting}} again");
    let events = client
        .run_pipeline_to_end(pipeline(
            pb::PipelineMode::Sequential,
            pb::FailurePolicy::Fail,
            vec![one, two],
        ))
        .await
        .expect("run");
    assert!(matches!(terminal(&events), Payload::RunCompleted(c) if c.output == "hello again"));
}

/// Step outputs are written behind (dependents get them from memory), yet
/// everything reading the store inside the run sees them: a tool of a later
/// step, and a template naming a slot of a step that is no direct
/// dependency.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outputs_written_behind_are_visible_to_every_later_read() {
    let env = env().await;
    for _ in 0..20 {
        let mut a = step("a", "echo", "alpha");
        a.output_to = "x".into();
        let b = step("b", "reader", "go");
        let c = step("c", "echo", "c saw {{x}}");
        let mut req = pipeline(
            pb::PipelineMode::Sequential,
            pb::FailurePolicy::Fail,
            vec![a, b, c],
        );
        req.keep_context = true;
        let events = env.client.run_pipeline_to_end(req).await.expect("run");
        check_rules(&events);
        let p = summary(&events);
        assert_eq!(p.outputs["b"], "read alpha");
        assert_eq!(p.outputs["c"], "c saw alpha");
        // The slot's ContextWritten comes before PipelineCompleted, in the
        // writing step's context.
        let written = events
            .iter()
            .position(|e| {
                e.context_id == "root.a" && matches!(e.payload, Some(Payload::ContextWritten(_)))
            })
            .expect("ContextWritten");
        let completed = events
            .iter()
            .position(|e| matches!(e.payload, Some(Payload::PipelineCompleted(_))))
            .expect("PipelineCompleted");
        assert!(written < completed);
        let slot = env.store.get(&events[0].trace_id, "x").await.expect("kept");
        assert_eq!(slot.value, b"alpha");
    }
}

/// An output the store cannot take: over the limit the orchestrator knows,
/// the step fails (and the policy decides); over a smaller limit only the
/// store service knows, the write fails and so does the run, naming the
/// slot and the step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_over_the_value_limit() {
    let big = "y".repeat(65);
    let env = env_with_value_limits(Some(64), Some(64)).await;
    let mut a = step("a", "echo", &big);
    a.output_to = "big".into();
    let mut ok = step("ok", "echo", &"z".repeat(64));
    ok.output_to = "fits".into();
    let events = env
        .client
        .run_pipeline_to_end(pipeline(
            pb::PipelineMode::Parallel,
            pb::FailurePolicy::Continue,
            vec![a, ok],
        ))
        .await
        .expect("run");
    check_rules(&events);
    let failed = events
        .iter()
        .find_map(|e| match &e.payload {
            Some(Payload::StepFailed(f)) => Some(f.error.clone()),
            _ => None,
        })
        .expect("StepFailed");
    assert_eq!(
        failed,
        "the output is 65 bytes, over the store's value limit of 64 bytes"
    );
    assert_eq!(
        lists(&summary(&events)),
        (false, ids(&["ok"]), ids(&["a"]), vec![]),
        "exactly 64 bytes fit"
    );

    let env = env_with_value_limits(Some(64), None).await;
    let mut a = step("a", "echo", &big);
    a.output_to = "big".into();
    let events = env
        .client
        .run_pipeline_to_end(pipeline(
            pb::PipelineMode::Sequential,
            pb::FailurePolicy::Continue,
            vec![a, step("b", "slow", "x")],
        ))
        .await
        .expect("run");
    check_rules(&events);
    match terminal(&events) {
        Payload::RunFailed(f) => {
            assert_eq!(f.code, Code::ResourceExhausted as i32);
            assert!(
                f.message.starts_with(
                    "step \"a\" succeeded but its output could not be written to slot big:"
                ),
                "{}",
                f.message
            );
        }
        other => panic!("{other:?}"),
    }
}

/// A regression test: the executor once awaited an event send (a skipped
/// step's, a slot's) while hundreds of steps waited to send theirs, and the
/// fair event channel handed the free places to steps it was not polling.
/// A wide fan-out whose outputs are written while steps run, and a failing
/// step whose dependents are skipped meanwhile, must finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wide_fan_out_with_writes_and_skips_never_stalls() {
    let server = OrchestratorServer::start(AGENTS, None, |c| {
        c.runs.max_pipeline_steps = 2000;
        c.runs.max_pipeline_concurrency = 1000;
    })
    .await
    .expect("orchestrator");
    let client = OrchestratorClient::connect(server.endpoint())
        .await
        .expect("connect");
    let mut steps: Vec<pb::PipelineStep> = (0..1000)
        .map(|i| {
            let mut s = step(&format!("f{i}"), "echo", "x");
            s.output_to = format!("f{i}");
            s
        })
        .collect();
    steps.push(step("bad", "fail", "x"));
    for i in 0..50 {
        let mut s = step(&format!("after-bad-{i}"), "echo", "y");
        s.depends_on = vec!["bad".into()];
        steps.push(s);
    }
    let mut join = step("join", "echo", "joined");
    join.input_from = (0..1000).map(|i| format!("f{i}")).collect();
    steps.push(join);
    let mut req = pipeline(pb::PipelineMode::Dag, pb::FailurePolicy::Continue, steps);
    if let Some(p) = req.pipeline.as_mut() {
        p.max_concurrency = Some(1000);
    }
    let events = tokio::time::timeout(Duration::from_secs(60), client.run_pipeline_to_end(req))
        .await
        .expect("the pipeline finished")
        .expect("run");
    check_rules(&events);
    let p = summary(&events);
    assert_eq!(p.succeeded.len(), 1001);
    assert_eq!(p.failed, ["bad"]);
    assert_eq!(p.skipped.len(), 50);
    let written = events
        .iter()
        .filter(|e| matches!(e.payload, Some(Payload::ContextWritten(_))))
        .count();
    assert_eq!(written, 1000);
}

/// Counts `baton_store_operations_total` of `op` (every code) in a scrape.
fn store_ops(metrics: &str, op: &str) -> u64 {
    metrics
        .lines()
        .filter(|l| {
            l.starts_with("baton_store_operations_total") && l.contains(&format!("op=\"{op}\""))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fan_out_writes_its_outputs_in_a_few_batches_and_cleans_up_in_one_call() {
    let redis = RedisServer::start().expect("redis-server");
    let metrics = baton_e2e::free_addr().expect("port");
    let mut config = StoreServer::config(Backend::Redis, Some(redis.url()));
    config.telemetry.metrics_listen = metrics.to_string();
    let store_server = StoreServer::start(config).await.expect("store");
    let env = env_on(redis, store_server, baton_store::Limits::default()).await;
    const STEPS: usize = 250;
    let steps = (0..STEPS)
        .map(|i| pb::PipelineStep {
            output_to: format!("out/{i}"),
            ..step(&format!("s{i}"), "echo", &format!("answer {i}"))
        })
        .collect();
    let mut request = pipeline(pb::PipelineMode::Parallel, pb::FailurePolicy::Fail, steps);
    request.initial_slots = (0..3).map(|i| (format!("seed/{i}"), "v".into())).collect();
    let events: Vec<pb::RunEvent> = env
        .client
        .run_pipeline(request)
        .await
        .expect("run")
        .map(|e| e.expect("event"))
        .collect()
        .await;
    check_rules(&events);
    assert!(matches!(terminal(&events), Payload::RunCompleted(_)));
    // One ContextWritten per slot, versions all distinct.
    let mut versions: Vec<u64> = events
        .iter()
        .filter_map(|e| match &e.payload {
            Some(Payload::ContextWritten(w)) => Some(w.version),
            _ => None,
        })
        .collect();
    assert_eq!(versions.len(), STEPS + 3);
    versions.sort_unstable();
    versions.dedup();
    assert_eq!(versions.len(), STEPS + 3, "each slot its own revision");
    let scraped = baton_e2e::scrape(metrics).await;
    let (puts, batches, deletes, batch_deletes) = (
        store_ops(&scraped, "Put"),
        store_ops(&scraped, "PutMany"),
        store_ops(&scraped, "Delete"),
        store_ops(&scraped, "DeleteMany"),
    );
    assert_eq!((puts, deletes), (0, 0), "no single-slot calls");
    assert_eq!(batch_deletes, 1, "the cleanup is one call");
    assert!(
        (2..=STEPS as u64 / 10).contains(&batches),
        "the seeds and {STEPS} outputs took {batches} PutMany calls"
    );
    // The cleanup removed every slot of the pipeline.
    let trace = events[0].trace_id.clone();
    assert!(
        env.store
            .list(&trace, "")
            .await
            .expect("list")
            .slots
            .is_empty()
    );
    env.server.shutdown().await.expect("shutdown");
}

/// What a trace's slots hold: key → value, read from `store`.
async fn stored(store: &dyn ContextStore, trace_id: &str) -> BTreeMap<String, String> {
    let scope = baton_store::Scope::new(
        Default::default(),
        baton_store::parse_trace_id(trace_id).expect("trace id"),
    );
    let mut out = BTreeMap::new();
    for meta in store.list(&scope, "").await.expect("list").slots {
        let key = baton_store::Key::parse("key", &meta.key, 1024).expect("key");
        let slot = store.get(&scope, &key).await.expect("get");
        out.insert(
            meta.key,
            String::from_utf8(slot.value.to_vec()).expect("utf-8"),
        );
    }
    out
}

/// A regression test: a batched write of step outputs that the store
/// refused (the sixth slot of a trace allowed five) lost the outputs of the
/// steps before it in the batch — reported as succeeded, never stored.
/// Writing behind must store what one write per step would: every slot but
/// the refused one. Sequential, parallel and DAG pipelines, on the
/// context-store service and on the orchestrator's own Redis store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_batched_write_keeps_the_outputs_written_before_it() {
    let redis = RedisServer::start().expect("redis-server");
    let limits = baton_store::Limits {
        max_trace_keys: 5,
        ..Default::default()
    };
    let mut config = StoreServer::config(Backend::Redis, Some(redis.url()));
    config.limits.max_trace_keys = 5;
    let store_server = StoreServer::start(config).await.expect("store");
    let remote: Arc<dyn ContextStore> = Arc::new(
        RemoteStore::new(
            &store_server.endpoint(),
            limits.clone(),
            Duration::from_secs(5),
        )
        .expect("remote store"),
    );
    let own: Arc<dyn ContextStore> = Arc::new(
        RedisStore::new(
            &baton_store::redis::RedisConfig {
                url: redis.url(),
                key_prefix: "own".into(),
                ..Default::default()
            },
            limits,
        )
        .expect("redis store"),
    );
    for (name, store) in [("the store service", remote), ("its own Redis store", own)] {
        let server = OrchestratorServer::start(AGENTS, Some(store.clone()), |_| {})
            .await
            .expect("orchestrator");
        let client = OrchestratorClient::connect(server.endpoint())
            .await
            .expect("connect");
        for mode in [
            pb::PipelineMode::Sequential,
            pb::PipelineMode::Parallel,
            pb::PipelineMode::Dag,
        ] {
            let steps = (0..6)
                .map(|i| {
                    let mut s = step(&format!("w{i}"), "echo", &format!("output {i}"));
                    s.output_to = format!("slot{i}");
                    s
                })
                .collect();
            let mut request = pipeline(mode, pb::FailurePolicy::Continue, steps);
            request.keep_context = true;
            let events = client.run_pipeline_to_end(request).await.expect("run");
            check_rules(&events);
            let refused = match terminal(&events) {
                Payload::RunFailed(f) => {
                    assert_eq!(f.code, Code::ResourceExhausted as i32, "{}", f.message);
                    let step = f
                        .message
                        .strip_prefix("step \"w")
                        .and_then(|r| r.split_once('"'))
                        .map(|(n, _)| n.to_owned())
                        .unwrap_or_else(|| panic!("{name} {mode:?}: {}", f.message));
                    assert!(
                        f.message.contains(&format!(
                            "succeeded but its output could not be written to slot slot{step}:"
                        )),
                        "{}",
                        f.message
                    );
                    step
                }
                other => panic!("{name} {mode:?}: {other:?}"),
            };
            let expected: BTreeMap<String, String> = (0..6)
                .map(|i| i.to_string())
                .filter(|i| *i != refused)
                .map(|i| (format!("slot{i}"), format!("output {i}")))
                .collect();
            let trace = events[0].trace_id.clone();
            assert_eq!(
                stored(store.as_ref(), &trace).await,
                expected,
                "{name} {mode:?}: every output but the refused one is stored"
            );
            // And every stored one was announced.
            let mut announced: Vec<String> = events
                .iter()
                .filter_map(|e| match &e.payload {
                    Some(Payload::ContextWritten(w)) => Some(w.key.clone()),
                    _ => None,
                })
                .collect();
            announced.sort();
            assert_eq!(
                announced,
                expected.keys().cloned().collect::<Vec<_>>(),
                "{name} {mode:?}"
            );
        }
        server.shutdown().await.expect("shutdown");
    }
}

/// A regression test: with outputs written behind in batches, the store
/// refused the sixth slot of a trace allowed five, and the run's error
/// named the first step of the refused batch (`w1`, `slot1`) instead of
/// the step whose write it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_output_write_names_its_own_step_and_slot() {
    let redis = RedisServer::start().expect("redis-server");
    let mut config = StoreServer::config(Backend::Redis, Some(redis.url()));
    config.limits.max_trace_keys = 5;
    let store_server = StoreServer::start(config).await.expect("store");
    let limits = baton_store::Limits {
        max_trace_keys: 5,
        ..Default::default()
    };
    let env = env_on(redis, store_server, limits).await;
    let steps = (0..6)
        .map(|i| {
            let mut s = step(&format!("w{i}"), "echo", &format!("output {i}"));
            s.output_to = format!("slot{i}");
            s
        })
        .collect();
    let events = env
        .client
        .run_pipeline_to_end(pipeline(
            pb::PipelineMode::Sequential,
            pb::FailurePolicy::Continue,
            steps,
        ))
        .await
        .expect("run");
    check_rules(&events);
    match terminal(&events) {
        Payload::RunFailed(f) => {
            assert_eq!(f.code, Code::ResourceExhausted as i32, "{}", f.message);
            assert!(
                f.message.starts_with(
                    "step \"w5\" succeeded but its output could not be written to slot slot5:"
                ),
                "{}",
                f.message
            );
            assert!(f.message.contains("(key \"slot5\")"), "{}", f.message);
        }
        other => panic!("{other:?}"),
    }
}
