//! Durable runs across real `baton-orchestrator` processes sharing only a
//! real `redis-server` (`runs.store = "redis"`, a 1 s lease): a replica
//! killed mid tool call has its run claimed and resumed by another — the
//! completed turns and calls are not done again, the call in flight is —
//! which a client follows with WatchRun to the same output (one terminal
//! event, no seq gap); a replica paused past its lease (SIGSTOP) writes
//! nothing more once another claimed its run. Bounded in time: each wait
//! has a deadline.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use baton_client::{
    OrchestratorClient,
    pb::{self, run_event::Payload},
};
use baton_e2e::{RedisServer, events};

mod replicas;
use futures::StreamExt;
use replicas::{Replica, agents_file, block_redis, follow_on, pair, start_until};

const AGENTS: &str = r#"
scripts:
  slow:
    - {calls: [{tool: write_context, args: {key: "notes/a", value: "first"}}]}
    - {calls: [{tool: sleep, args: {ms: 2500}}]}
    - {text: "woke up on {{input}}"}
  thinker:
    - {calls: [{tool: write_context, args: {key: "notes/t", value: "before"}}]}
    - {text: "thought about {{input}}", delay: 2500ms}
  payer:
    - {calls: [{tool: write_context, args: {key: "pay/order", value: "42"}}]}
    - {text: "paid {{input}}"}
  drafter:
    - {text: "draft of {{input}}"}
  napper:
    - {calls: [{tool: sleep, args: {ms: 2500}}]}
    - {text: "reviewed {{input}}"}
  stepper:
    - {calls: [{tool: sleep, args: {ms: 1200, steps: 2}}]}
    - {calls: [{tool: sleep, args: {ms: 1200, steps: 2}}]}
    - {calls: [{tool: sleep, args: {ms: 1200, steps: 2}}]}
    - {calls: [{tool: sleep, args: {ms: 1200, steps: 2}}]}
    - {text: "stepped {{input}}"}
  spendy:
    - {calls: [{tool: sleep, args: {ms: 2500}}], usage: {input_tokens: 100, output_tokens: 10}}
    - {text: "answered within budget", usage: {input_tokens: 100, output_tokens: 10}}
  looper:
    - {calls: [{tool: read_context, args: {key: "notes/none"}}], repeat: 600}
    - {text: "looped {{input}}"}
agents:
  spendy: {model: "scripted:spendy", tools: [sleep]}
  looper: {model: "scripted:looper", tools: [read_context]}
  stepper: {model: "scripted:stepper", tools: [sleep]}
  drafter: {model: "scripted:drafter"}
  napper: {model: "scripted:napper", tools: [sleep]}
  slow: {model: "scripted:slow", tools: [sleep, write_context]}
  thinker: {model: "scripted:thinker", tools: [write_context]}
  payer:
    model: "scripted:payer"
    tools: [write_context]
    approvals: {write_context: always}
"#;

fn request(agent: &str) -> pb::RunAgentRequest {
    pb::RunAgentRequest {
        agent: agent.into(),
        input: "x".into(),
        ..Default::default()
    }
}

fn slow() -> pb::RunAgentRequest {
    pb::RunAgentRequest {
        agent: "slow".into(),
        input: "x".into(),
        ..Default::default()
    }
}

/// Starts a slow run on `client`; its stream (re-attaching by itself, as
/// the client's streams do), once the tool call began, and the events so
/// far.
async fn start_slow(client: &OrchestratorClient) -> (baton_client::Events, Vec<pb::RunEvent>) {
    let stream = client.run_agent(slow()).await.expect("run");
    until_sleeping(stream).await
}

/// [`start_slow`] with the bare gRPC stream, which shows what the server
/// sends (no re-attaching).
async fn start_slow_raw(client: &OrchestratorClient) -> (baton_client::Events, Vec<pb::RunEvent>) {
    let stream = client
        .raw()
        .run_agent(slow())
        .await
        .expect("run")
        .into_inner();
    until_sleeping(Box::pin(
        stream.map(|e| e.map_err(baton_client::Error::from)),
    ))
    .await
}

async fn until_sleeping(
    mut stream: baton_client::Events,
) -> (baton_client::Events, Vec<pb::RunEvent>) {
    let mut seen = Vec::new();
    loop {
        let e = stream.next().await.expect("open").expect("event");
        let started = matches!(&e.payload, Some(Payload::ToolCallStarted(c)) if c.tool == "sleep");
        seen.push(e);
        if started {
            return (stream, seen);
        }
    }
}

/// Waits until `check` holds, up to `within`.
async fn until(within: Duration, what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !check().await {
        assert!(Instant::now() < deadline, "{what} within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replicas_run_is_resumed_by_another_where_it_was() {
    let (_redis, a, b) = pair(&[]).await;
    let (stream, seen) = start_slow(&a.client().await).await;
    let run_id = seen[0].run_id.clone();
    let last = seen.last().expect("events").seq;

    let killed = Instant::now();
    a.signal("-KILL");
    drop(stream);
    // The client re-attaches on the other replica after what it saw.
    let on_b = b.client().await;
    let rest: Vec<pb::RunEvent> = tokio::time::timeout(Duration::from_secs(10), async {
        on_b.watch_run(&run_id, last, None)
            .await
            .expect("watch on b")
            .map(|e| e.expect("event"))
            .collect()
            .await
    })
    .await
    .expect("the run ends within the deadline");
    let took = killed.elapsed();
    match rest.first().and_then(|e| e.payload.as_ref()) {
        Some(Payload::RunResumed(r)) => {
            assert_eq!((r.replica.as_str(), r.checkpoint_seq), ("replica-b", last));
        }
        other => panic!("first RunResumed: {other:?}"),
    }
    match rest.last().and_then(|e| e.payload.as_ref()) {
        Some(Payload::RunCompleted(c)) => assert_eq!(c.output, "woke up on x"),
        other => panic!("the run completes on replica b: {other:?}"),
    }
    // The call in flight (sleep) is done again; the completed write is not.
    let kinds: Vec<String> = rest
        .iter()
        .filter_map(|e| match &e.payload {
            Some(Payload::ToolCallStarted(c)) => Some(format!("start {}", c.tool)),
            Some(Payload::ToolCallCompleted(c)) => Some(format!("done {}", c.tool)),
            _ => None,
        })
        .collect();
    assert_eq!(kinds, ["start sleep", "done sleep"]);
    let mut whole = seen.clone();
    whole.extend(rest);
    events::check_stream_rules(&whole);
    let writes = whole
        .iter()
        .filter(|e| matches!(&e.payload, Some(Payload::ContextWritten(_))))
        .count();
    assert_eq!(writes, 1, "the completed write_context is not done again");
    assert!(
        took < Duration::from_secs(8),
        "resumed and finished {took:?} after the kill (lease 1 s, the sleep 2.5 s)"
    );
    let got = on_b.get_run(&run_id).await.expect("get");
    assert_eq!(
        (got.status(), got.output.as_str()),
        (pb::RunStatus::Completed, "woke up on x")
    );
}

/// A run with a budget resumed on another replica counts the turns it had
/// taken against its budget, once: a budget of 219 tokens for turns of 110
/// and 110 leaves the second turn 9 output tokens, before the kill or
/// after it (counted twice, the run would fail; not at all, it would
/// spend 220).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_run_counts_what_it_spent_before_against_its_budget() {
    let (_redis, a, b) = pair(&[]).await;
    let mut r = request("spendy");
    r.limits = Some(pb::RunLimits {
        budget: Some(pb::Budget {
            tokens: Some(219),
            cost: None,
        }),
        ..Default::default()
    });
    let stream = a.client().await.run_agent(r).await.expect("run");
    let (stream, seen) = until_sleeping(stream).await;
    let run_id = seen[0].run_id.clone();
    let last = seen.last().expect("events").seq;
    a.signal("-KILL");
    drop(stream);
    let on_b = b.client().await;
    let rest: Vec<pb::RunEvent> = tokio::time::timeout(Duration::from_secs(10), async {
        on_b.watch_run(&run_id, last, None)
            .await
            .expect("watch on b")
            .map(|e| e.expect("event"))
            .collect()
            .await
    })
    .await
    .expect("the run ends within the deadline");
    assert!(
        matches!(
            rest.first().and_then(|e| e.payload.as_ref()),
            Some(Payload::RunResumed(_))
        ),
        "{rest:?}"
    );
    let turn = rest
        .iter()
        .find_map(|e| match &e.payload {
            Some(Payload::MessageCompleted(m)) => Some(m.clone()),
            _ => None,
        })
        .expect("the second turn, on b");
    assert_eq!(turn.finish_reason, "length", "{turn:?}");
    match rest.last().and_then(|e| e.payload.as_ref()) {
        Some(Payload::RunCompleted(c)) => {
            let u = c.usage.clone().expect("usage");
            assert_eq!(u.input_tokens + u.output_tokens, 219, "{u:?}");
        }
        other => panic!("the run completes on b: {other:?}"),
    }
}

/// Pauses `a` (SIGSTOP, past its lease) until `b` has resumed and
/// completed `run_id`; a client of `b`.
async fn pause_until_completed_elsewhere(
    a: &Replica,
    b: &Replica,
    run_id: &str,
) -> OrchestratorClient {
    a.signal("-STOP");
    let on_b = b.client().await;
    until(
        Duration::from_secs(8),
        "replica b resumes and completes the run",
        async || {
            on_b.get_run(run_id)
                .await
                .is_ok_and(|r| r.status() == pb::RunStatus::Completed)
        },
    )
    .await;
    on_b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_owner_writes_nothing_once_another_replica_claimed_its_run() {
    let (redis, a, b) = pair(&[]).await;
    let (mut stream, seen) = start_slow_raw(&a.client().await).await;
    let run_id = seen[0].run_id.clone();
    let log = format!("baton:run:{{{run_id}}}:log");

    let on_b = pause_until_completed_elsewhere(&a, &b, &run_id).await;
    let length = redis.cli(&["XLEN", &log]).expect("xlen");
    a.signal("-CONT");
    // The former owner finds its epoch gone at its next renewal and stops
    // the run; its client's stream ends UNAVAILABLE, and the log keeps
    // exactly what it had.
    let ended = tokio::time::timeout(Duration::from_secs(6), async {
        while let Some(e) = stream.next().await {
            if let Err(e) = e {
                return Some(e);
            }
        }
        None
    })
    .await
    .expect("the former owner's stream ends");
    let err = ended.expect("with an error");
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(redis.cli(&["XLEN", &log]).expect("xlen"), length);
    let all: Vec<pb::RunEvent> = on_b
        .watch_run(&run_id, 0, None)
        .await
        .expect("watch")
        .map(|e| e.expect("event"))
        .collect()
        .await;
    events::check_stream_rules(&all);
    assert!(matches!(
        all.last().and_then(|e| e.payload.as_ref()),
        Some(Payload::RunCompleted(_))
    ));
    let resumed = all
        .iter()
        .filter(|e| matches!(e.payload, Some(Payload::RunResumed(_))))
        .count();
    assert_eq!(resumed, 1);
}

/// A replica paused past its lease drops the runs another replica claimed
/// meanwhile the moment it goes on: it answers GetRun and WatchRun about
/// them from the run store (never its stale view), keeps nothing of them,
/// and its drain ends within its grace. (It used to say RUNNING while the
/// others said COMPLETED, hang a WatchRun, log "another replica owns this
/// run now" every third of the lease forever, and never finish a drain.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_paused_past_its_lease_drops_the_runs_it_lost_and_drains_in_time() {
    let (_redis, a, b) = pair(&[]).await;
    let on_a = a.client().await;
    let (_stream, seen) = start_slow_raw(&on_a).await;
    let run_id = seen[0].run_id.clone();

    let on_b = pause_until_completed_elsewhere(&a, &b, &run_id).await;
    let on_b_view = on_b.get_run(&run_id).await.expect("get on b");
    let whole: Vec<pb::RunEvent> = on_b
        .watch_run(&run_id, 0, None)
        .await
        .expect("watch on b")
        .map(|e| e.expect("event"))
        .collect()
        .await;
    a.signal("-CONT");
    // At once (before its next renewal could tell it): its lease lapsed
    // while it was paused, so it reads the run store.
    let on_a_view = on_a.get_run(&run_id).await.expect("get on a");
    assert_eq!(
        (on_a_view.status(), on_a_view.last_seq, &on_a_view.output),
        (on_b_view.status(), on_b_view.last_seq, &on_b_view.output),
        "GetRun on the former owner agrees with the others"
    );
    let on_a_log: Vec<pb::RunEvent> = tokio::time::timeout(Duration::from_secs(5), async {
        on_a.watch_run(&run_id, 0, None)
            .await
            .expect("watch on a")
            .map(|e| e.expect("event"))
            .collect()
            .await
    })
    .await
    .expect("WatchRun on the former owner ends");
    assert_eq!(on_a_log, whole, "the run store's log, not its own");
    // After its renewal found the run gone, still the same answers.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let again = on_a.get_run(&run_id).await.expect("get on a");
    assert_eq!(again.status(), pb::RunStatus::Completed);
    // Its drain ends within the grace (1 s) and a margin.
    let began = Instant::now();
    a.signal("-TERM");
    let mut a = a;
    let exited = tokio::time::timeout(Duration::from_secs(6), async {
        loop {
            if let Ok(Some(status)) = a.child.try_wait() {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(
        exited.is_ok(),
        "the former owner's drain did not end within 6 s"
    );
    assert!(began.elapsed() < Duration::from_secs(6));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_hands_runs_over_and_the_client_follows_them_elsewhere() {
    let (_redis, mut a, b) = pair(&[]).await;
    let (mut stream, seen) = start_slow_raw(&a.client().await).await;
    let run_id = seen[0].run_id.clone();

    let began = Instant::now();
    a.signal("-TERM");
    // The draining replica ends the stream UNAVAILABLE at once (no
    // terminal event: the run is not over) and exits soon after.
    let mut last = seen.last().expect("events").seq;
    let mut seen = seen;
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(e) = stream.next().await {
            match e {
                Ok(e) => {
                    last = e.seq;
                    seen.push(e);
                }
                Err(e) => return Some(e),
            }
        }
        None
    })
    .await
    .expect("the stream ends")
    .expect("with an error");
    assert_eq!(ended.code(), tonic::Code::Unavailable, "{ended:?}");
    assert!(
        began.elapsed() < Duration::from_secs(2),
        "{:?}",
        began.elapsed()
    );
    assert!(seen.iter().all(|e| !events::is_terminal(e)));
    let exited = tokio::task::spawn_blocking(move || {
        let status = a.child.wait().expect("wait");
        (status, a)
    });
    let (status, _a) = tokio::time::timeout(Duration::from_secs(10), exited)
        .await
        .expect("the drained replica exits")
        .expect("join");
    assert!(status.success(), "{status:?}");

    // The client re-attaches on another replica and follows the run to
    // its end: resumed there at once, no gap, one terminal event.
    let rest: Vec<pb::RunEvent> = follow_on(&b, &run_id, last, Duration::from_secs(10)).await;
    seen.extend(rest);
    events::check_stream_rules(&seen);
    match seen.last().and_then(|e| e.payload.as_ref()) {
        Some(Payload::RunCompleted(c)) => assert_eq!(c.output, "woke up on x"),
        other => panic!("{other:?}"),
    }
    assert!(
        seen.iter().any(
            |e| matches!(&e.payload, Some(Payload::RunResumed(r)) if r.replica == "replica-b")
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_of_a_balanced_target_sees_a_pause_not_an_error() {
    let (redis, a, b) = pair(&[]).await;
    // One target for both replicas, as a headless Service gives.
    let addrs = vec![a.addr, b.addr];
    let resolve: Arc<baton_client::balance::Resolve> = Arc::new(move |_host, _port| {
        let answer = Ok(addrs.clone());
        Box::pin(async move { answer })
            as std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send>>
    });
    let channel = baton_client::balance::lazy_channel_with(
        "dns:///orchestrator.baton.svc:50051",
        resolve,
        Duration::from_millis(100),
    )
    .expect("channel");
    let client = OrchestratorClient::new(channel);
    let (mut stream, mut seen) = start_slow(&client).await;
    let run_id = seen[0].run_id.clone();
    let owner = redis
        .cli(&["HGET", &format!("baton:run:{{{run_id}}}:meta"), "owner"])
        .expect("owner");
    let owner = if owner.trim() == "replica-a" { &a } else { &b };

    owner.signal("-TERM");
    // The same stream goes on: the client re-attached by itself.
    while let Some(e) = tokio::time::timeout(Duration::from_secs(15), stream.next())
        .await
        .expect("the run ends")
    {
        seen.push(e.expect("no error reaches the caller"));
    }
    events::check_stream_rules(&seen);
    match seen.last().and_then(|e| e.payload.as_ref()) {
        Some(Payload::RunCompleted(c)) => assert_eq!(c.output, "woke up on x"),
        other => panic!("{other:?}"),
    }
    assert!(
        seen.iter()
            .any(|e| matches!(e.payload, Some(Payload::RunResumed(_))))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_mid_model_turn_is_resumed_with_the_turn_asked_again() {
    let (_redis, a, b) = pair(&[]).await;
    // The second turn takes 2.5 s: kill the owner while the model thinks.
    let (_stream, mut seen) = start_until(&a.client().await, request("thinker"), |e| {
        matches!(&e.payload, Some(Payload::ToolBatchCompleted(_)))
    })
    .await;
    let run_id = seen[0].run_id.clone();
    let last = seen.last().expect("events").seq;
    a.signal("-KILL");
    let rest: Vec<pb::RunEvent> = follow_on(&b, &run_id, last, Duration::from_secs(15)).await;
    seen.extend(rest);
    events::check_stream_rules(&seen);
    match seen.last().and_then(|e| e.payload.as_ref()) {
        Some(Payload::RunCompleted(c)) => assert_eq!(c.output, "thought about x"),
        other => panic!("{other:?}"),
    }
    let writes = seen
        .iter()
        .filter(|e| matches!(&e.payload, Some(Payload::ContextWritten(_))))
        .count();
    assert_eq!(writes, 1, "the first turn's call is not done again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_while_parked_on_an_approval_asks_again_and_an_answer_is_never_lost() {
    let (_redis, a, b) = pair(&[]).await;
    let (_stream, mut seen) = start_until(&a.client().await, request("payer"), |e| {
        matches!(&e.payload, Some(Payload::ApprovalRequested(_)))
    })
    .await;
    let run_id = seen[0].run_id.clone();
    let last = seen.last().expect("events").seq;
    a.signal("-KILL");
    // The question is asked again on the replica that resumed the run; the
    // person answers there, and the run goes on.
    let on_b = b.client().await;
    let mut rest =
        tokio::time::timeout(Duration::from_secs(10), on_b.watch_run(&run_id, last, None))
            .await
            .expect("watch in time")
            .expect("watch on b");
    let deadline = Instant::now() + Duration::from_secs(15);
    while let Some(e) = tokio::time::timeout_at(deadline.into(), rest.next())
        .await
        .expect("the run ends on b")
    {
        let e = e.expect("event");
        if let Some(Payload::ApprovalRequested(q)) = &e.payload {
            on_b.resolve_approval(&run_id, &q.approval_id, true, "")
                .await
                .expect("answer on b");
        }
        seen.push(e);
    }
    events::check_stream_rules(&seen);
    match seen.last().and_then(|e| e.payload.as_ref()) {
        Some(Payload::RunCompleted(c)) => assert_eq!(c.output, "paid x"),
        other => panic!("{other:?}"),
    }
    let asked = seen
        .iter()
        .filter(|e| matches!(&e.payload, Some(Payload::ApprovalRequested(_))))
        .count();
    assert_eq!(
        asked, 2,
        "asked on a, then again on b (it was never answered)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_killed_mid_step_resumes_with_its_finished_steps_kept() {
    let (_redis, a, b) = pair(&[]).await;
    let step = |id: &str, agent: &str, task: &str, output_to: &str| pb::PipelineStep {
        id: id.into(),
        agent: agent.into(),
        task: task.into(),
        output_to: output_to.into(),
        ..Default::default()
    };
    let request = pb::RunPipelineRequest {
        pipeline: Some(pb::PipelineSpec {
            name: "review".into(),
            steps: vec![
                step("draft", "drafter", "{{topic}}", "draft"),
                step("review", "napper", "{{draft}}", "review"),
                step("final", "drafter", "{{review}}", ""),
            ],
            ..Default::default()
        }),
        initial_slots: [("topic".to_owned(), "tides".to_owned())].into(),
        ..Default::default()
    };
    let mut stream = a
        .client()
        .await
        .raw()
        .run_pipeline(request)
        .await
        .expect("run")
        .into_inner();
    // Kill the owner while the second step's agent sleeps.
    let mut seen = Vec::new();
    loop {
        let e = stream.next().await.expect("open").expect("event");
        let sleeping = matches!(&e.payload, Some(Payload::ToolCallStarted(c)) if c.tool == "sleep");
        seen.push(e);
        if sleeping {
            break;
        }
    }
    let run_id = seen[0].run_id.clone();
    let last = seen.last().expect("events").seq;
    a.signal("-KILL");
    let rest: Vec<pb::RunEvent> = follow_on(&b, &run_id, last, Duration::from_secs(15)).await;
    // (Events replica a logged after the client's last one come first.)
    assert!(
        rest.iter().any(
            |e| matches!(&e.payload, Some(Payload::RunResumed(r)) if r.replica == "replica-b")
        ),
        "{rest:?}"
    );
    seen.extend(rest);
    events::check_stream_rules(&seen);
    match seen.last().and_then(|e| e.payload.as_ref()) {
        Some(Payload::RunCompleted(c)) => {
            assert_eq!(c.output, "draft of reviewed draft of tides");
            // Every model call counts once: the finished step's (from its
            // record), the napper's two, the last step's.
            let calls = c.usage.as_ref().map_or(0, |u| u.model_calls);
            assert_eq!(calls, 4, "{:?}", c.usage);
        }
        other => panic!("{other:?}"),
    }
    // Each step started once and ended once: the finished one was kept,
    // the running one went on (its sleep done again), the last one ran on b.
    let steps: Vec<String> = seen
        .iter()
        .filter_map(|e| match &e.payload {
            Some(Payload::StepStarted(s)) => Some(format!("start {}", s.step_id)),
            Some(Payload::StepCompleted(s)) => Some(format!("done {}", s.step_id)),
            _ => None,
        })
        .collect();
    assert_eq!(
        steps,
        [
            "start draft",
            "done draft",
            "start review",
            "done review",
            "start final",
            "done final"
        ]
    );
    let sleeps = seen
        .iter()
        .filter(|e| matches!(&e.payload, Some(Payload::ToolCallStarted(c)) if c.tool == "sleep"))
        .count();
    assert_eq!(
        sleeps, 2,
        "the sleep in flight is done again, at least once"
    );
    let drafts = seen
        .iter()
        .filter(|e| matches!(&e.payload, Some(Payload::ContextWritten(w)) if w.key == "draft"))
        .count();
    assert_eq!(drafts, 1, "the finished step's output is not written again");
    match seen.iter().rev().find_map(|e| match &e.payload {
        Some(Payload::PipelineCompleted(p)) => Some(p),
        _ => None,
    }) {
        Some(p) => {
            assert!(p.success);
            assert_eq!(p.succeeded, ["draft", "review", "final"]);
        }
        None => panic!("no PipelineCompleted"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_of_every_replica_loses_no_run_and_shows_no_error() {
    let redis = RedisServer::start().expect("redis-server");
    let agents = agents_file();
    let mut replicas = vec![
        Replica::start("replica-1", &redis, &agents).await,
        Replica::start("replica-2", &redis, &agents).await,
        Replica::start("replica-3", &redis, &agents).await,
    ];
    // One balanced target over whatever replicas exist now, as a headless
    // Service gives while a Deployment rolls.
    let addrs = Arc::new(std::sync::Mutex::new(
        replicas.iter().map(|r| r.addr).collect::<Vec<_>>(),
    ));
    let resolve: Arc<baton_client::balance::Resolve> = {
        let addrs = addrs.clone();
        Arc::new(move |_host, _port| {
            let answer = Ok(addrs.lock().expect("addrs").clone());
            Box::pin(async move { answer })
                as std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send>>
        })
    };
    let channel = baton_client::balance::lazy_channel_with(
        "dns:///orchestrator.baton.svc:50051",
        resolve,
        Duration::from_millis(100),
    )
    .expect("channel");
    let client = OrchestratorClient::new(channel);
    // 50 streamed runs of four 1.2 s tool calls each, spread over the
    // replicas; every caller reads its stream to the end.
    let mut callers = Vec::new();
    for i in 0..50 {
        let client = client.clone();
        callers.push(tokio::spawn(async move {
            let mut stream = client
                .run_agent(pb::RunAgentRequest {
                    agent: "stepper".into(),
                    input: format!("r{i}"),
                    ..Default::default()
                })
                .await
                .expect("run");
            let mut seen = Vec::new();
            while let Some(e) = stream.next().await {
                seen.push(e.expect("no error reaches the caller"));
            }
            (i, seen)
        }));
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    // Each replica in turn: SIGTERM, wait for it to exit, a new one (a new
    // name, as a new pod) takes its place.
    for n in 0..3 {
        let old = replicas.remove(0);
        old.signal("-TERM");
        let mut old = old;
        let exited = tokio::task::spawn_blocking(move || {
            let status = old.child.wait().expect("wait");
            (status, old)
        });
        let (status, _old) = tokio::time::timeout(Duration::from_secs(10), exited)
            .await
            .expect("a drained replica exits within 10 s")
            .expect("join");
        assert!(status.success(), "{status:?}");
        let new = Replica::start(&format!("replica-{}", n + 4), &redis, &agents).await;
        *addrs.lock().expect("addrs") = replicas.iter().map(|r| r.addr).chain([new.addr]).collect();
        replicas.push(new);
        tokio::time::sleep(Duration::from_millis(600)).await;
    }
    let mut handed_over = 0;
    for caller in callers {
        let (i, seen) = tokio::time::timeout(Duration::from_secs(60), caller)
            .await
            .expect("every run ends within 60 s")
            .expect("caller");
        events::check_stream_rules(&seen);
        match seen.last().and_then(|e| e.payload.as_ref()) {
            Some(Payload::RunCompleted(c)) => assert_eq!(c.output, format!("stepped r{i}")),
            other => panic!("run {i}: {other:?}"),
        }
        if seen
            .iter()
            .any(|e| matches!(e.payload, Some(Payload::RunResumed(_))))
        {
            handed_over += 1;
        }
    }
    // Every run was on one of the first three replicas, all of which
    // stopped while it ran.
    assert_eq!(handed_over, 50, "every run moved at least once");
}

/// A `redis-server`, a tool server with `slow_charge`, and two replicas
/// serving `agents` (scripts and agents, YAML) with it; the agents file's
/// folder (the caller removes it).
async fn with_charges(
    tag: &str,
    agents: &str,
) -> (
    RedisServer,
    baton_e2e::toolhost::TestToolHost,
    std::path::PathBuf,
    Replica,
    Replica,
) {
    let redis = RedisServer::start().expect("redis-server");
    let host = baton_e2e::toolhost::TestToolHost::start()
        .await
        .expect("tool host");
    let dir = std::env::temp_dir().join(format!("baton-failover-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let file = dir.join("agents.yaml");
    let yaml = format!(
        "tool_servers:\n  payments: {{endpoint: \"{}\", tools: [slow_charge]}}\n{agents}",
        host.endpoint()
    );
    std::fs::write(&file, yaml).expect("write agents");
    let a = Replica::start("replica-a", &redis, &file).await;
    let b = Replica::start("replica-b", &redis, &file).await;
    (redis, host, dir, a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_toolhost_call_done_again_after_a_failover_carries_the_same_idempotency_key() {
    let (_redis, host, dir, a, b) = with_charges(
        "th",
        r#"
scripts:
  charger: [{calls: [{tool: slow_charge}]}, {text: "done"}]
agents:
  charger: {model: "scripted:charger", tools: [slow_charge]}
"#,
    )
    .await;
    let (_stream, mut seen) = start_until(
        &a.client().await,
        request("charger"),
        |e| matches!(&e.payload, Some(Payload::ToolCallStarted(c)) if c.tool == "slow_charge"),
    )
    .await;
    let run_id = seen[0].run_id.clone();
    // Once the tool server has the call, the owner dies.
    until(
        Duration::from_secs(5),
        "the tool server has the call",
        async || !host.seen.requests.lock().expect("lock").is_empty(),
    )
    .await;
    let last = seen.last().expect("events").seq;
    a.signal("-KILL");
    let rest: Vec<pb::RunEvent> = follow_on(&b, &run_id, last, Duration::from_secs(15)).await;
    seen.extend(rest);
    events::check_stream_rules(&seen);
    match seen.last().and_then(|e| e.payload.as_ref()) {
        Some(Payload::RunCompleted(c)) => assert_eq!(c.output, "done"),
        other => panic!("{other:?}"),
    }
    // Executed twice (at least once), both with one key the tool server
    // can deduplicate by.
    let requests = host.seen.requests.lock().expect("lock").clone();
    assert_eq!(requests.len(), 2, "{requests:?}");
    assert_eq!(requests[0].idempotency_key, requests[1].idempotency_key);
    assert!(
        requests[0]
            .idempotency_key
            .starts_with(&format!("{run_id}/root/")),
        "{}",
        requests[0].idempotency_key
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A replica paused past its lease calls no tool (nor model) once it goes
/// on: another replica may be doing the same work. Its journal appends
/// were fenced already; its side effects were not (it went on to the next
/// call until an append or a renewal failed). The tool server counts the
/// calls: only the replica that claimed the run makes one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_paused_past_its_lease_calls_no_tool_when_it_goes_on() {
    let (redis, host, dir, a, b) = with_charges(
        "fence",
        r#"
scripts:
  charger:
    - {calls: [{tool: sleep, args: {ms: 1500, steps: 1}}]}
    - {calls: [{tool: slow_charge}]}
    - {text: "done"}
agents:
  charger: {model: "scripted:charger", tools: [sleep, slow_charge]}
"#,
    )
    .await;
    let (_stream, seen) = start_until(
        &a.client().await,
        request("charger"),
        |e| matches!(&e.payload, Some(Payload::ToolCallStarted(c)) if c.tool == "sleep"),
    )
    .await;
    let run_id = seen[0].run_id.clone();
    // Paused mid-sleep, past its lease: b claims the run, sleeps again,
    // charges once and completes it.
    let on_b = pause_until_completed_elsewhere(&a, &b, &run_id).await;
    assert_eq!(host.seen.requests.lock().expect("lock").len(), 1);
    // a goes on: its sleep is over at once, and the next call would be the
    // charge. It makes none, though the run store is slow to tell it that
    // it lost the run (its fenced append and renewal wait 400 ms here).
    let blocked = block_redis(&redis, 400);
    std::thread::sleep(Duration::from_millis(30));
    a.signal("-CONT");
    blocked.join().expect("blocked");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let requests = host.seen.requests.lock().expect("lock").clone();
    assert_eq!(
        requests.len(),
        1,
        "the fenced replica charged again: {requests:?}"
    );
    let view = on_b.get_run(&run_id).await.expect("get");
    assert_eq!(view.status(), pb::RunStatus::Completed);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A durable fork whose history could not be written was never started:
/// its caller is told it failed, and no replica runs it later from the part
/// that was written. (Its record was written, with a lease, before its
/// history; once the lease lapsed a replica claimed it and ran it live
/// from a partial history.) Here Redis runs out of memory (`maxmemory`)
/// after the fork's record is written, while its history is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_whose_history_could_not_be_written_never_runs() {
    let (redis, a, b) = pair(&[]).await;
    let on_a = a.client().await;
    let mut origin = pb::RunAgentRequest {
        agent: "looper".into(),
        input: "x".into(),
        ..Default::default()
    };
    origin.limits = Some(pb::RunLimits {
        max_turns: 700,
        ..Default::default()
    });
    let events = on_a.run_agent_to_end(origin).await.expect("origin");
    let origin_id = events[0].run_id.clone();
    let last = events.last().expect("events").seq;
    // Room for the fork's record (its request), not for its history.
    let info = redis.cli(&["INFO", "memory"]).expect("info");
    let used: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory");
    redis
        .cli(&["CONFIG", "SET", "maxmemory", &(used + 300_000).to_string()])
        .expect("maxmemory");
    let forked = on_a
        .fork_run(pb::ForkRunRequest {
            run_id: origin_id.clone(),
            at_seq: last - 2,
            ..Default::default()
        })
        .await;
    let failed = match forked {
        Err(e) => e.to_string(),
        Ok(mut stream) => match stream.next().await {
            Some(Err(e)) => e.to_string(),
            other => panic!("the fork started: {other:?}"),
        },
    };
    redis
        .cli(&["CONFIG", "SET", "maxmemory", "0"])
        .expect("maxmemory");
    assert!(
        failed.contains("run store") || failed.contains("OOM"),
        "{failed}"
    );
    // Its record: ended FAILED within a few leases, never run.
    let keys = redis.cli(&["KEYS", "baton:run:*:meta"]).expect("keys");
    let fork_meta = keys
        .lines()
        .map(str::trim)
        .find(|k| {
            !k.is_empty()
                && !k.contains(&origin_id)
                && !redis
                    .cli(&["HGET", k, "ff"])
                    .expect("hget")
                    .trim()
                    .is_empty()
        })
        .map(str::to_owned);
    let fork_meta = fork_meta.unwrap_or_else(|| panic!("the fork's record was written ({failed})"));
    let status = |field: &str| {
        redis
            .cli(&["HGET", &fork_meta, field])
            .expect("hget")
            .trim()
            .to_owned()
    };
    until(
        Duration::from_secs(8),
        "the fork's record ends",
        async || status("status") != (pb::RunStatus::Running as i32).to_string(),
    )
    .await;
    assert_eq!(
        status("status"),
        (pb::RunStatus::Failed as i32).to_string(),
        "ended failed, not run: {}",
        status("error_message")
    );
    // What a watcher sees: the replayed part, then its failure; nothing
    // ran live.
    let fork_id = fork_meta
        .split(['{', '}'])
        .nth(1)
        .expect("a run id in the key")
        .to_owned();
    let all = follow_on(&b, &fork_id, 0, Duration::from_secs(5)).await;
    match all.last().and_then(|e| e.payload.as_ref()) {
        Some(Payload::RunFailed(f)) => assert!(f.message.contains("cannot be resumed"), "{f:?}"),
        other => panic!("{other:?}"),
    }
    assert!(
        !all.iter()
            .any(|e| matches!(e.payload, Some(Payload::RunCompleted(_)))),
        "the fork never completed"
    );
}

/// A replay resumed on another replica answers from the recording of the
/// run it replays; when that recording cannot be read (a run store error,
/// here a key of the wrong type), it is not resumed from an empty one
/// (which made every model and tool call live): it is given up to be
/// claimed again, and resumed once the recording reads again, matching
/// every call. (A transient error used to read as an empty recording.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_resumed_while_its_recording_cannot_be_read_waits_for_it() {
    let (redis, a, b) = pair(&[]).await;
    let on_a = a.client().await;
    let origin = on_a.run_agent_to_end(slow()).await.expect("origin");
    let origin_id = origin[0].run_id.clone();
    let stream = on_a
        .raw()
        .replay_run(pb::ReplayRunRequest {
            run_id: origin_id.clone(),
            ..Default::default()
        })
        .await
        .expect("replay")
        .into_inner();
    let (_stream, seen) = until_sleeping(Box::pin(
        stream.map(|e| e.map_err(baton_client::Error::from)),
    ))
    .await;
    let replay_id = seen[0].run_id.clone();
    // The recording's log unreadable, then the replay's replica gone.
    let log = format!("baton:run:{{{origin_id}}}:log");
    let aside = format!("baton:run:{{{origin_id}}}:aside");
    redis.cli(&["RENAME", &log, &aside]).expect("rename");
    redis.cli(&["SET", &log, "not a stream"]).expect("set");
    a.signal("-KILL");
    // Claimed and given up again, round after round: nothing more of it.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let on_b = b.client().await;
    let view = on_b.get_run(&replay_id).await.expect("get");
    assert_eq!(view.status(), pb::RunStatus::Running);
    let last = seen.last().expect("events").seq;
    assert_eq!(
        view.last_seq, last,
        "nothing ran while the recording was unreadable"
    );
    // Readable again: resumed, every call answered from the recording.
    redis.cli(&["DEL", &log]).expect("del");
    redis.cli(&["RENAME", &aside, &log]).expect("rename");
    let rest = follow_on(&b, &replay_id, last, Duration::from_secs(10)).await;
    assert!(
        !rest
            .iter()
            .any(|e| matches!(e.payload, Some(Payload::Diverged(_)))),
        "the replay matched every call: {rest:?}"
    );
    match rest.last().and_then(|e| e.payload.as_ref()) {
        Some(Payload::RunCompleted(c)) => assert_eq!(c.output, "woke up on x"),
        other => panic!("{other:?}"),
    }
}
