//! Runs waiting for people across real `baton-orchestrator` processes
//! sharing a real `redis-server`: a run that only waits is parked (it
//! leaves its replica; `runs.park_after` 500 ms here) and an answer on
//! another replica, or its deadline, resumes it there; answers and cancels
//! given on a replica that does not run a run reach it. Bounded in time:
//! each wait has a deadline.

use std::time::{Duration, Instant};

use baton_client::{
    OrchestratorClient,
    pb::{self, run_event::Payload},
};
use baton_e2e::{RedisServer, events};
use futures::StreamExt;

mod replicas;
use replicas::{block_redis, pair, start_until, trio};

const AGENTS: &str = r#"
scripts:
  payer:
    - {calls: [{tool: write_context, args: {key: "pay/order", value: "42"}}]}
    - {text: "paid {{input}}"}
  interviewer:
    - {calls: [{tool: ask_user, args: {question: "Which city?", options: [Paris, Lisbon]}}]}
    - {text: "planned {{input}}"}
  slow:
    - {calls: [{tool: sleep, args: {ms: 20000}}]}
    - {text: "woke up"}
  slowpayer:
    - {calls: [{tool: write_context, args: {key: "pay/order", value: "42"}}]}
    - {calls: [{tool: sleep, args: {ms: 3000, steps: 1}}]}
    - {text: "paid slowly"}
agents:
  slowpayer:
    model: "scripted:slowpayer"
    tools: [write_context, sleep]
    approvals: {write_context: always}
  payer:
    model: "scripted:payer"
    tools: [write_context]
    approvals: {write_context: always}
  interviewer: {model: "scripted:interviewer", tools: [ask_user]}
  slow: {model: "scripted:slow", tools: [sleep]}
"#;

const PARKING: &[(&str, &str)] = &[("BATON_ORCH_RUNS__PARK_AFTER", "500ms")];

fn request(agent: &str, detach: bool, approval_timeout: Option<Duration>) -> pb::RunAgentRequest {
    pb::RunAgentRequest {
        agent: agent.into(),
        input: "x".into(),
        detach,
        limits: approval_timeout.map(|t| pb::RunLimits {
            approval_timeout: Some(baton_proto::wkt::Duration {
                seconds: t.as_secs() as i64,
                nanos: 0,
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn asked(e: &pb::RunEvent) -> bool {
    matches!(
        e.payload,
        Some(Payload::ApprovalRequested(_) | Payload::InputRequested(_))
    )
}

fn meta(redis: &RedisServer, run_id: &str, field: &str) -> String {
    redis
        .cli(&["HGET", &format!("baton:run:{{{run_id}}}:meta"), field])
        .expect("redis-cli")
        .trim()
        .to_owned()
}

async fn until_parked(redis: &RedisServer, run_id: &str) {
    let deadline = Instant::now() + Duration::from_secs(6);
    while meta(redis, run_id, "parked") != "1" || !meta(redis, run_id, "owner").is_empty() {
        assert!(Instant::now() < deadline, "the run is parked within 6 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every event of a run from the start, read on `client` until its end.
async fn whole_run(client: &OrchestratorClient, run_id: &str) -> Vec<pb::RunEvent> {
    tokio::time::timeout(Duration::from_secs(10), async {
        client
            .watch_run(run_id, 0, None)
            .await
            .expect("watch")
            .map(|e| e.expect("event"))
            .collect()
            .await
    })
    .await
    .expect("the run ends within 10 s")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_run_is_resumed_by_the_replica_an_answer_reaches() {
    let (redis, a, b) = pair(PARKING).await;
    let on_a = a.client().await;
    let (stream, seen) = start_until(&on_a, request("payer", true, None), asked).await;
    let run_id = seen[0].run_id.clone();
    let approval_id = match &seen.last().and_then(|e| e.payload.clone()) {
        Some(Payload::ApprovalRequested(q)) => q.approval_id.clone(),
        other => panic!("{other:?}"),
    };
    // The caller goes: nobody is attached, the run only waits.
    drop(stream);
    until_parked(&redis, &run_id).await;

    let on_b = b.client().await;
    // A question it never asked is not found; the run stays parked.
    let err = on_b
        .resolve_approval(&run_id, "approval:nope", true, "")
        .await
        .expect_err("unknown approval");
    assert_eq!(err.code(), tonic::Code::NotFound, "{err:?}");
    assert_eq!(meta(&redis, &run_id, "parked"), "1");

    let answered = Instant::now();
    on_b.resolve_approval(&run_id, &approval_id, true, "ok")
        .await
        .expect("the answer is taken on b");
    let all = whole_run(&on_b, &run_id).await;
    let took = answered.elapsed();
    events::check_stream_rules(&all);
    match all.last().and_then(|e| e.payload.as_ref()) {
        Some(Payload::RunCompleted(c)) => assert_eq!(c.output, "paid x"),
        other => panic!("{other:?}"),
    }
    assert!(took < Duration::from_secs(3), "resumed on b in {took:?}");
    assert!(
        all.iter().any(
            |e| matches!(&e.payload, Some(Payload::RunResumed(r)) if r.replica == "replica-b")
        )
    );
    // Announced again after RunResumed with the same id and deadline;
    // answered once, by the person.
    let requests: Vec<&pb::ApprovalRequested> = all
        .iter()
        .filter_map(|e| match &e.payload {
            Some(Payload::ApprovalRequested(q)) => Some(q),
            _ => None,
        })
        .collect();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].approval_id, requests[1].approval_id);
    assert_eq!(requests[0].deadline, requests[1].deadline);
    let resolved: Vec<&pb::ApprovalResolved> = all
        .iter()
        .filter_map(|e| match &e.payload {
            Some(Payload::ApprovalResolved(r)) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(resolved.len(), 1);
    assert!(resolved[0].approved);
    assert_eq!(resolved[0].source, pb::ApprovalSource::Person as i32);
    // A second answer, on either replica, finds the question closed.
    for client in [&on_a, &on_b] {
        let err = client
            .resolve_approval(&run_id, &approval_id, false, "")
            .await
            .expect_err("answered already");
        assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_run_wakes_at_its_deadline_and_is_denied() {
    let (redis, a, b) = pair(PARKING).await;
    let timeout = Duration::from_secs(3);
    let (stream, seen) = start_until(
        &a.client().await,
        request("payer", true, Some(timeout)),
        asked,
    )
    .await;
    let run_id = seen[0].run_id.clone();
    drop(stream);
    until_parked(&redis, &run_id).await;
    let all = whole_run(&b.client().await, &run_id).await;
    events::check_stream_rules(&all);
    let denied = all.iter().find_map(|e| match &e.payload {
        Some(Payload::ApprovalResolved(r)) => Some(r.clone()),
        _ => None,
    });
    let denied = denied.expect("resolved");
    assert!(!denied.approved);
    assert_eq!(denied.source, pb::ApprovalSource::Deadline as i32);
    assert!(matches!(
        all.last().and_then(|e| e.payload.as_ref()),
        Some(Payload::RunCompleted(_))
    ));
    let writes = all
        .iter()
        .filter(|e| matches!(e.payload, Some(Payload::ContextWritten(_))))
        .count();
    assert_eq!(writes, 0, "the denied call never ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_and_cancels_reach_a_run_on_another_replica() {
    let (_redis, a, b) = pair(&[]).await;
    let (on_a, on_b) = (a.client().await, b.client().await);

    // Input for a run whose caller is attached on a, given on b.
    let (mut stream, seen) = start_until(&on_a, request("interviewer", false, None), asked).await;
    let run_id = seen[0].run_id.clone();
    let input_id = match &seen.last().and_then(|e| e.payload.clone()) {
        Some(Payload::InputRequested(q)) => q.input_id.clone(),
        other => panic!("{other:?}"),
    };
    on_b.submit_input(&run_id, &input_id, "Lisbon")
        .await
        .expect("input on b");
    let mut rest = Vec::new();
    while let Some(e) = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("the run goes on within 5 s")
    {
        rest.push(e.expect("event"));
    }
    assert!(
        rest.iter()
            .any(|e| matches!(&e.payload, Some(Payload::InputReceived(r)) if r.input == "Lisbon"))
    );
    assert!(matches!(
        rest.last().and_then(|e| e.payload.as_ref()),
        Some(Payload::RunCompleted(_))
    ));
    let err = on_b
        .submit_input(&run_id, &input_id, "Paris")
        .await
        .expect_err("the run has ended");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");

    // A cancel of a run working on a, given on b.
    let (mut stream, seen) = start_until(&on_a, request("slow", false, None), |e| {
        matches!(&e.payload, Some(Payload::ToolCallStarted(_)))
    })
    .await;
    let run_id = seen[0].run_id.clone();
    let status = on_b
        .cancel(&run_id, "changed my mind")
        .await
        .expect("cancel");
    assert_eq!(status, pb::RunStatus::Cancelled);
    let mut last = None;
    while let Some(e) = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("the run ends within 5 s")
    {
        last = Some(e.expect("event"));
    }
    match last.and_then(|e| e.payload) {
        Some(Payload::RunCancelled(c)) => assert!(c.reason.contains("changed my mind"), "{c:?}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        on_b.cancel(&run_id, "again").await.expect("cancel"),
        pb::RunStatus::Cancelled,
        "an ended run answers the status it ended with"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_run_cancelled_on_another_replica_ends_cancelled() {
    let (redis, a, b) = pair(PARKING).await;
    let (stream, seen) = start_until(&a.client().await, request("payer", true, None), asked).await;
    let run_id = seen[0].run_id.clone();
    drop(stream);
    until_parked(&redis, &run_id).await;
    let on_b = b.client().await;
    assert_eq!(
        on_b.cancel(&run_id, "no longer needed")
            .await
            .expect("cancel"),
        pb::RunStatus::Cancelled
    );
    let all = whole_run(&on_b, &run_id).await;
    events::check_stream_rules(&all);
    assert!(matches!(
        all.last().and_then(|e| e.payload.as_ref()),
        Some(Payload::RunCancelled(_))
    ));
    assert_eq!(
        on_b.get_run(&run_id).await.expect("get").status(),
        pb::RunStatus::Cancelled
    );
}

/// With the peer list the Kubernetes manifests deploy (every replica, this
/// one included), the first answer to a parked run's question is taken
/// exactly once and applied, whichever replica it reaches; a second is
/// refused and changes nothing. (Every replica used to record the
/// forwarded answer: all but one refused it as "already answered", and the
/// caller got that refusal while the answer took effect — or was lost when
/// the recording replica's call was dropped before it woke the run.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_peers_a_parked_runs_first_answer_is_taken_once_on_any_replica() {
    let (redis, replicas) = trio(true, PARKING).await;
    let mut clients = Vec::new();
    for r in &replicas {
        clients.push(r.client().await);
    }
    for answerer in 0..3 {
        let (agent, approval) = if answerer == 1 {
            ("interviewer", false)
        } else {
            ("payer", true)
        };
        let (stream, seen) = start_until(&clients[0], request(agent, true, None), asked).await;
        let run_id = seen[0].run_id.clone();
        let question = match &seen.last().and_then(|e| e.payload.clone()) {
            Some(Payload::ApprovalRequested(q)) => q.approval_id.clone(),
            Some(Payload::InputRequested(q)) => q.input_id.clone(),
            other => panic!("{other:?}"),
        };
        drop(stream);
        until_parked(&redis, &run_id).await;

        let on = &clients[answerer];
        let answered = Instant::now();
        if approval {
            on.resolve_approval(&run_id, &question, true, "ok")
                .await
                .unwrap_or_else(|e| panic!("the first answer on replica-{answerer}: {e:?}"));
        } else {
            on.submit_input(&run_id, &question, "Lisbon")
                .await
                .unwrap_or_else(|e| panic!("the first answer on replica-{answerer}: {e:?}"));
        }
        let all = whole_run(&clients[(answerer + 1) % 3], &run_id).await;
        assert!(
            answered.elapsed() < Duration::from_secs(4),
            "resumed in {:?}",
            answered.elapsed()
        );
        events::check_stream_rules(&all);
        let expected = if approval { "paid x" } else { "planned x" };
        match all.last().and_then(|e| e.payload.as_ref()) {
            Some(Payload::RunCompleted(c)) => assert_eq!(c.output, expected),
            other => panic!("{other:?}"),
        }
        let applied: Vec<String> = all
            .iter()
            .filter_map(|e| match &e.payload {
                Some(Payload::ApprovalResolved(r)) => {
                    assert_eq!(r.source, pb::ApprovalSource::Person as i32, "{r:?}");
                    Some(format!("{}:{}", r.approved, r.reason))
                }
                Some(Payload::InputReceived(r)) => Some(r.input.clone()),
                _ => None,
            })
            .collect();
        let ours = if approval { "true:ok" } else { "Lisbon" };
        assert_eq!(applied, [ours], "applied exactly once, as given");
        // A second answer, on any replica, is refused and changes nothing.
        for client in &clients {
            let err = if approval {
                client
                    .resolve_approval(&run_id, &question, false, "late")
                    .await
            } else {
                client.submit_input(&run_id, &question, "Paris").await
            }
            .expect_err("answered already");
            assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
        }
        assert_eq!(whole_run(&clients[2], &run_id).await, all);
    }
}

/// A durable run's end is logged, with its meta, a moment before the
/// replica running it takes it into its own record; a watcher reading the
/// log can see the end in between. GetRun on that replica then answers
/// from the run store, not from its record still saying RUNNING. (The
/// window is microseconds wide; here the store is made to say the run
/// ended while the run goes on.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_run_here_says_a_durable_run_ended_once_the_store_says_so() {
    let (redis, a, _b) = pair(&[]).await;
    let on_a = a.client().await;
    let started = |e: &pb::RunEvent| matches!(e.payload, Some(Payload::ToolCallStarted(_)));
    let (stream, seen) = start_until(&on_a, request("slow", true, None), started).await;
    let run_id = seen[0].run_id.clone();
    assert_eq!(
        on_a.get_run(&run_id).await.expect("get").status(),
        pb::RunStatus::Running
    );
    let key = format!("baton:run:{{{run_id}}}:meta");
    let cancelled = (pb::RunStatus::Cancelled as i32).to_string();
    redis
        .cli(&["HSET", &key, "status", &cancelled])
        .expect("redis-cli");
    assert_eq!(
        on_a.get_run(&run_id).await.expect("get").status(),
        pb::RunStatus::Cancelled
    );
    drop(stream);
}

/// The deadline of a question the answer arrived for.
fn deadline_ms(e: &pb::RunEvent) -> i64 {
    let d = match &e.payload {
        Some(Payload::ApprovalRequested(q)) => q.deadline,
        Some(Payload::InputRequested(q)) => q.deadline,
        other => panic!("{other:?}"),
    }
    .expect("a deadline");
    d.seconds * 1000 + i64::from(d.nanos) / 1_000_000
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64
}

/// An answer given on a replica that does not run the run, told OK a
/// moment before the deadline, is the run's answer: its owner learns of
/// answers taken elsewhere at its next renewal (a third of the lease, 20 s
/// here), which comes after the deadline, so at the deadline it asks the
/// run store before it records a denial. (It used to deny the approval,
/// "no answer before the deadline", and time the input out, though the
/// caller had been told OK.) Once closed, the question takes no answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_told_ok_just_before_the_deadline_is_never_lost() {
    let (_redis, a, b) = pair(&[("BATON_ORCH_RUNS__LEASE", "60s")]).await;
    let (on_a, on_b) = (a.client().await, b.client().await);
    let timeout = Some(Duration::from_secs(3));
    for agent in ["payer", "interviewer"] {
        // Attached on a: never parked.
        let (mut stream, seen) = start_until(&on_a, request(agent, false, timeout), asked).await;
        let run_id = seen[0].run_id.clone();
        let asked_event = seen.last().expect("asked").clone();
        let deadline = deadline_ms(&asked_event);
        let wait = (deadline - 500 - now_ms()).max(0) as u64;
        tokio::time::sleep(Duration::from_millis(wait)).await;
        match &asked_event.payload {
            Some(Payload::ApprovalRequested(q)) => on_b
                .resolve_approval(&run_id, &q.approval_id, true, "just in time")
                .await
                .expect("taken on b before the deadline"),
            Some(Payload::InputRequested(q)) => on_b
                .submit_input(&run_id, &q.input_id, "Lisbon")
                .await
                .expect("taken on b before the deadline"),
            other => panic!("{other:?}"),
        }
        let mut rest = Vec::new();
        while let Some(e) = tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .expect("the run goes on within 5 s")
        {
            rest.push(e.expect("event"));
        }
        let taken: Vec<String> = rest
            .iter()
            .filter_map(|e| match &e.payload {
                Some(Payload::ApprovalResolved(r)) => Some(format!(
                    "{}:{}:{}",
                    r.approved,
                    r.reason,
                    pb::ApprovalSource::try_from(r.source)
                        .unwrap_or_default()
                        .as_str_name()
                )),
                Some(Payload::InputReceived(r)) => Some(r.input.clone()),
                Some(Payload::InputTimedOut(_)) => Some("timed out".into()),
                _ => None,
            })
            .collect();
        let (expected, output) = if agent == "payer" {
            ("true:just in time:APPROVAL_SOURCE_PERSON", "paid x")
        } else {
            ("Lisbon", "planned x")
        };
        assert_eq!(taken, [expected], "{agent}: the answer told OK is taken");
        match rest.last().and_then(|e| e.payload.as_ref()) {
            Some(Payload::RunCompleted(c)) => assert_eq!(c.output, output),
            other => panic!("{other:?}"),
        }
    }

    // Nobody answers: the owner closes the question at its deadline, and
    // an answer after it is refused (never OK and lost).
    let (mut stream, seen) = start_until(&on_a, request("payer", false, timeout), asked).await;
    let run_id = seen[0].run_id.clone();
    let approval_id = match &seen.last().and_then(|e| e.payload.clone()) {
        Some(Payload::ApprovalRequested(q)) => q.approval_id.clone(),
        other => panic!("{other:?}"),
    };
    let mut rest = Vec::new();
    while let Some(e) = tokio::time::timeout(Duration::from_secs(6), stream.next())
        .await
        .expect("the run ends within 6 s")
    {
        rest.push(e.expect("event"));
    }
    assert!(rest.iter().any(|e| matches!(&e.payload,
        Some(Payload::ApprovalResolved(r)) if r.source == pb::ApprovalSource::Deadline as i32)));
    let err = on_b
        .resolve_approval(&run_id, &approval_id, true, "late")
        .await
        .expect_err("too late");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
}

/// With peers, an answer forwarded to the replica running the run, taken
/// there, but not acknowledged within `peers.timeout` (the run store was
/// slow): the replica the caller asked records it in the run store
/// itself, finds this very answer taken (the forward carried its token)
/// and answers OK. (It used to answer FAILED_PRECONDITION "already
/// answered", or "has ended", while the answer took effect.) An error
/// means nothing changed; OK means the answer is the run's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_answer_taken_but_not_acknowledged_in_time_is_told_ok() {
    let (redis, replicas) = trio(true, &[("BATON_ORCH_PEERS__TIMEOUT", "60ms")]).await;
    let on_0 = replicas[0].client().await;
    let on_1 = replicas[1].client().await;
    for agent in ["payer", "interviewer"] {
        let (mut stream, seen) = start_until(&on_0, request(agent, false, None), asked).await;
        let run_id = seen[0].run_id.clone();
        let blocked = block_redis(&redis, 250);
        tokio::time::sleep(Duration::from_millis(20)).await;
        let answered = match &seen.last().and_then(|e| e.payload.clone()) {
            Some(Payload::ApprovalRequested(q)) => {
                on_1.resolve_approval(&run_id, &q.approval_id, true, "ok")
                    .await
            }
            Some(Payload::InputRequested(q)) => {
                on_1.submit_input(&run_id, &q.input_id, "Lisbon").await
            }
            other => panic!("{other:?}"),
        };
        blocked.join().expect("blocked");
        answered.unwrap_or_else(|e| panic!("{agent}: the answer was taken: {e:?}"));
        let mut rest = Vec::new();
        while let Some(e) = tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .expect("the run goes on within 5 s")
        {
            rest.push(e.expect("event"));
        }
        let taken = rest
            .iter()
            .filter(|e| match &e.payload {
                Some(Payload::ApprovalResolved(r)) => r.approved && r.reason == "ok",
                Some(Payload::InputReceived(r)) => r.input == "Lisbon",
                _ => false,
            })
            .count();
        assert_eq!(taken, 1, "{agent}: taken once");
        assert!(matches!(
            rest.last().and_then(|e| e.payload.as_ref()),
            Some(Payload::RunCompleted(_))
        ));
    }
}

/// A second answer to a question already answered, given while the run
/// still runs (the first answer taken, the run busy with what follows), is
/// refused "already answered" on every replica, with and without peers,
/// and changes nothing: the run ends with the first answer. (The other
/// tests' second answers came after the run's end, where "has ended"
/// answers them.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_answer_while_the_run_runs_is_refused_as_already_answered() {
    for peers in [false, true] {
        let (_redis, replicas) = trio(peers, &[]).await;
        let mut clients = Vec::new();
        for r in &replicas {
            clients.push(r.client().await);
        }
        let (mut stream, seen) =
            start_until(&clients[0], request("slowpayer", false, None), asked).await;
        let run_id = seen[0].run_id.clone();
        let approval_id = match &seen.last().and_then(|e| e.payload.clone()) {
            Some(Payload::ApprovalRequested(q)) => q.approval_id.clone(),
            other => panic!("{other:?}"),
        };
        clients[1]
            .resolve_approval(&run_id, &approval_id, true, "first")
            .await
            .expect("the first answer");
        // Until the run is past the approval, asleep.
        loop {
            let e = tokio::time::timeout(Duration::from_secs(5), stream.next())
                .await
                .expect("the run goes on")
                .expect("open")
                .expect("event");
            if matches!(&e.payload, Some(Payload::ToolCallStarted(c)) if c.tool == "sleep") {
                break;
            }
        }
        for (i, client) in clients.iter().enumerate() {
            let err = client
                .resolve_approval(&run_id, &approval_id, false, "second")
                .await
                .expect_err("answered already");
            assert_eq!(
                err.code(),
                tonic::Code::FailedPrecondition,
                "peers {peers}, replica {i}: {err:?}"
            );
            assert!(
                err.message().contains("already"),
                "peers {peers}, replica {i}: {}",
                err.message()
            );
            let view = client.get_run(&run_id).await.expect("get");
            assert_eq!(view.status(), pb::RunStatus::Running, "still running");
        }
        let mut rest = Vec::new();
        while let Some(e) = tokio::time::timeout(Duration::from_secs(8), stream.next())
            .await
            .expect("the run ends")
        {
            rest.push(e.expect("event"));
        }
        match rest.last().and_then(|e| e.payload.as_ref()) {
            Some(Payload::RunCompleted(c)) => assert_eq!(c.output, "paid slowly"),
            other => panic!("{other:?}"),
        }
    }
}
