//! Runs waiting for a person say so (issue 35, items 5 and 13): GetRun and
//! ListRuns carry `waiting_for` (`approval`, `input`), ListRuns filters on
//! `waiting`, over gRPC and HTTP, in memory and with durable runs read on a
//! replica that does not run them (the run store's count, kept by the
//! append script); a question nobody answers in time is an `InputTimedOut`
//! event in the context that asked, and the model reads that no answer
//! came.

use baton_client::{
    OrchestratorClient,
    pb::{self, run_event::Payload},
};
use baton_e2e::{OrchestratorServer, RedisServer, events, eventually};
use futures::StreamExt;

const AGENTS: &str = r#"
scripts:
  payer: [{calls: [{tool: write_context, args: {key: paid, value: "yes"}}]}, {text: "paid"}]
  asker:
    - {calls: [{tool: ask_user, args: {question: "Which city?", options: [Paris, Lisbon]}}]}
    - {text: "going to {{results}}"}
  quick: [{text: "done"}]
  napper: [{calls: [{tool: sleep, args: {ms: 5000, steps: 1}}]}, {text: "rested"}]
agents:
  napper: {model: "scripted:napper", tools: [sleep]}
  payer: {model: "scripted:payer", tools: [write_context], approvals: {write_context: always}}
  asker: {model: "scripted:asker", tools: [ask_user]}
  quick: {model: "scripted:quick"}
"#;

fn request(agent: &str, timeout: Option<u64>) -> pb::RunAgentRequest {
    pb::RunAgentRequest {
        agent: agent.into(),
        input: "x".into(),
        detach: true,
        limits: timeout.map(|s| pb::RunLimits {
            approval_timeout: Some(baton_proto::wkt::Duration {
                seconds: s as i64,
                nanos: 0,
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Starts `agent` detached and reads until it asks; its run id and the
/// question's id.
async fn asking(
    client: &OrchestratorClient,
    agent: &str,
    timeout: Option<u64>,
) -> (String, String) {
    let mut stream = client
        .run_agent(request(agent, timeout))
        .await
        .expect("run");
    while let Some(e) = stream.next().await {
        let e = e.expect("event");
        match e.payload {
            Some(Payload::ApprovalRequested(a)) => return (e.run_id, a.approval_id),
            Some(Payload::InputRequested(q)) => return (e.run_id, q.input_id),
            _ => {}
        }
    }
    panic!("{agent} never asked")
}

async fn waiting_list(client: &OrchestratorClient) -> Vec<String> {
    let mut raw = client.raw();
    let page = raw
        .list_runs(pb::ListRunsRequest {
            waiting: true,
            ..Default::default()
        })
        .await
        .expect("list")
        .into_inner();
    let mut ids: Vec<String> = page.runs.into_iter().map(|r| r.run_id).collect();
    ids.sort();
    ids
}

/// The checks, with runs started on `runs_on` and read on `read_on`.
async fn check(runs_on: &OrchestratorServer, read_on: &OrchestratorServer, what: &str) {
    let on = runs_on.client().await.expect("client");
    let read = read_on.client().await.expect("client");
    let (payer, approval) = asking(&on, "payer", None).await;
    let (asker, _) = asking(&on, "asker", None).await;
    let quick = on
        .run_agent_to_end(pb::RunAgentRequest {
            agent: "quick".into(),
            input: "x".into(),
            ..Default::default()
        })
        .await
        .expect("quick")[0]
        .run_id
        .clone();
    eventually(
        &format!("{what}: GetRun says what each run waits for"),
        || async {
            let p = read.get_run(&payer).await.expect("get").waiting_for;
            let a = read.get_run(&asker).await.expect("get").waiting_for;
            p == ["approval"] && a == ["input"]
        },
    )
    .await;
    assert!(
        read.get_run(&quick)
            .await
            .expect("get")
            .waiting_for
            .is_empty()
    );
    let mut expected = vec![payer.clone(), asker.clone()];
    expected.sort();
    assert_eq!(
        waiting_list(&read).await,
        expected,
        "{what}: ListRuns(waiting)"
    );
    let all = read
        .list_runs(pb::RunStatus::Unspecified, 100, "")
        .await
        .expect("list");
    let of = |id: &str| {
        all.runs
            .iter()
            .find(|r| r.run_id == id)
            .map(|r| r.waiting_for.clone())
            .expect("listed")
    };
    assert_eq!(of(&payer), ["approval"]);
    assert_eq!(of(&quick), Vec::<String>::new());

    // Over HTTP: `waiting=true`, camelCase `waitingFor`; a bad value is
    // refused naming the field.
    let http = reqwest::Client::new();
    let base = read_on.endpoint();
    let body: serde_json::Value = http
        .get(format!("{base}/v1/runs?waiting=true"))
        .send()
        .await
        .expect("GET")
        .json()
        .await
        .expect("json");
    let runs = body["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 2, "{body}");
    assert!(
        runs.iter()
            .all(|r| r["waitingFor"].as_array().is_some_and(|w| w.len() == 1)),
        "{body}"
    );
    let refused = http
        .get(format!("{base}/v1/runs?waiting=maybe"))
        .send()
        .await
        .expect("GET");
    assert_eq!(refused.status(), 400);
    let refused: serde_json::Value = refused.json().await.expect("json");
    assert_eq!(refused["field"], "waiting", "{refused}");

    // Answered: it waits for nobody.
    on.resolve_approval(&payer, &approval, true, "")
        .await
        .expect("approve");
    eventually(
        &format!("{what}: an answered run waits for nobody"),
        || async {
            read.get_run(&payer)
                .await
                .is_ok_and(|r| r.status() == pb::RunStatus::Completed && r.waiting_for.is_empty())
        },
    )
    .await;
    assert_eq!(waiting_list(&read).await, std::slice::from_ref(&asker));
    on.cancel(&asker, "done").await.expect("cancel");

    // Nobody answers in time: InputTimedOut where the question was asked,
    // and the model reads that no answer came; then it waits for nobody.
    let (late, _) = asking(&on, "asker", Some(1)).await;
    eventually(&format!("{what}: the timed-out run ends"), || async {
        read.get_run(&late)
            .await
            .is_ok_and(|r| r.status() == pb::RunStatus::Completed)
    })
    .await;
    let run = read.get_run(&late).await.expect("get");
    assert!(run.waiting_for.is_empty(), "{what}: {run:?}");
    assert!(
        run.output.starts_with("going to ")
            && run
                .output
                .contains("no answer: nobody answered the question within 1s"),
        "{what}: {}",
        run.output
    );
    let log: Vec<pb::RunEvent> = read
        .watch_run(&late, 0, None)
        .await
        .expect("watch")
        .map(|e| e.expect("event"))
        .collect()
        .await;
    events::check_stream_rules(&log);
    let asked = log
        .iter()
        .find_map(|e| match &e.payload {
            Some(Payload::InputRequested(q)) => Some((e.context_id.clone(), q.input_id.clone())),
            _ => None,
        })
        .expect("asked");
    let timed_out = log
        .iter()
        .find_map(|e| match &e.payload {
            Some(Payload::InputTimedOut(t)) => {
                Some((e.context_id.clone(), t.input_id.clone(), t.deadline))
            }
            _ => None,
        })
        .expect("InputTimedOut");
    assert_eq!(
        (timed_out.0.clone(), timed_out.1.clone()),
        asked,
        "{what}: in the context that asked"
    );
    assert!(timed_out.2.is_some());
    assert!(
        !log.iter()
            .any(|e| matches!(e.payload, Some(Payload::InputReceived(_)))),
        "{what}: no answer was received"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_memory_a_waiting_run_says_what_for_and_is_listed_as_waiting() {
    let server = OrchestratorServer::start(AGENTS, None, |_| {})
        .await
        .expect("orchestrator");
    check(&server, &server, "memory").await;
    server.shutdown().await.expect("shutdown");
}

/// A run waiting for a person has spent its first turn's tokens, and
/// GetRun says so while it waits (it said 0 until the run's end — the
/// console's runs list showed 0 while the run's page, adding up its
/// events, said otherwise).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_runs_usage_so_far_is_what_get_run_says() {
    let server = OrchestratorServer::start(AGENTS, None, |_| {})
        .await
        .expect("orchestrator");
    let client = server.client().await.expect("client");
    let mut stream = client.run_agent(request("payer", None)).await.expect("run");
    let mut spent = None;
    while let Some(e) = stream.next().await {
        let e = e.expect("event");
        match e.payload {
            Some(Payload::MessageCompleted(m)) => spent = m.usage,
            Some(Payload::ApprovalRequested(_)) => break,
            _ => {}
        }
    }
    let spent = spent.expect("the first turn's usage");
    assert!(spent.input_tokens > 0, "{spent:?}");
    let run_id = client
        .list_runs(pb::RunStatus::Running, 10, "")
        .await
        .expect("list")
        .runs[0]
        .clone();
    let got = client.get_run(&run_id.run_id).await.expect("get");
    let usage = got.usage.clone().expect("usage");
    assert_eq!(
        (usage.input_tokens, usage.output_tokens, usage.model_calls),
        (spent.input_tokens, spent.output_tokens, 1)
    );
    assert_eq!(got.status(), pb::RunStatus::Running);
    server.shutdown().await.expect("shutdown");
}

/// The same with durable runs, read on a replica that does not run the
/// run: GetRun there reads the run store, whose totals the
/// owner writes with each model turn's event (they were written only at
/// the run's end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_durable_runs_usage_so_far_is_what_every_replica_says() {
    let redis = RedisServer::start().expect("redis-server");
    let start = || OrchestratorServer::start(AGENTS, None, baton_e2e::durable_runs(redis.url()));
    let owner = start().await.expect("owner");
    let other = start().await.expect("other");
    let on = owner.client().await.expect("client");
    let read = other.client().await.expect("client");
    let mut stream = on.run_agent(request("payer", None)).await.expect("run");
    let (mut spent, mut run_id) = (None, String::new());
    while let Some(e) = stream.next().await {
        let e = e.expect("event");
        run_id.clone_from(&e.run_id);
        match e.payload {
            Some(Payload::MessageCompleted(m)) => spent = m.usage,
            Some(Payload::ApprovalRequested(_)) => break,
            _ => {}
        }
    }
    let spent = spent.expect("the first turn's usage");
    assert!(spent.input_tokens > 0, "{spent:?}");
    let want = (spent.input_tokens, spent.output_tokens, 1);
    let got = read.get_run(&run_id).await.expect("get on the other");
    assert_eq!(got.status(), pb::RunStatus::Running);
    let usage = got.usage.expect("usage");
    assert_eq!(
        (usage.input_tokens, usage.output_tokens, usage.model_calls),
        want
    );
    other.shutdown().await.expect("shutdown");
    owner.shutdown().await.expect("shutdown");
}

/// A question whose branch is dropped unanswered (here a pipeline step
/// that timed out while its agent waited for an approval) is waited for no
/// more: a replica that does not run the run reads that from the run
/// store within a renewal of the lease, while the run goes on. (The run
/// store's count was lowered only by an answer or a time-out journaled,
/// so it said `approval` until the run's end.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_question_is_waited_for_no_more_on_any_replica() {
    let redis = RedisServer::start().expect("redis-server");
    let start = || {
        let durable = baton_e2e::durable_runs(redis.url());
        OrchestratorServer::start(AGENTS, None, move |c| {
            durable(c);
            c.runs.lease = std::time::Duration::from_secs(1);
        })
    };
    let owner = start().await.expect("owner");
    let other = start().await.expect("other");
    let on = owner.client().await.expect("client");
    let read = other.client().await.expect("client");
    let step = |id: &str, agent: &str| pb::PipelineStep {
        id: id.into(),
        agent: agent.into(),
        task: "x".into(),
        ..Default::default()
    };
    let mut ask = step("ask", "payer");
    ask.timeout = Some(baton_proto::wkt::Duration {
        seconds: 1,
        nanos: 0,
    });
    let mut stream = on
        .run_pipeline(pb::RunPipelineRequest {
            pipeline: Some(pb::PipelineSpec {
                name: "drop".into(),
                steps: vec![ask, step("nap", "napper")],
                mode: pb::PipelineMode::Parallel as i32,
                policy: pb::FailurePolicy::Continue as i32,
                ..Default::default()
            }),
            detach: true,
            ..Default::default()
        })
        .await
        .expect("run");
    let mut run_id = String::new();
    while let Some(e) = stream.next().await {
        let e = e.expect("event");
        run_id.clone_from(&e.run_id);
        if matches!(&e.payload, Some(Payload::StepFailed(f)) if f.step_id == "ask") {
            break;
        }
    }
    eventually(
        "the other replica says the run waits for nobody while it runs",
        || async {
            let r = read.get_run(&run_id).await.expect("get");
            r.status() == pb::RunStatus::Running && r.waiting_for.is_empty()
        },
    )
    .await;
    other.shutdown().await.expect("shutdown");
    owner.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_durable_runs_any_replica_says_what_a_run_waits_for() {
    let redis = RedisServer::start().expect("redis-server");
    let start = || OrchestratorServer::start(AGENTS, None, baton_e2e::durable_runs(redis.url()));
    let owner = start().await.expect("owner");
    let other = start().await.expect("other");
    check(&owner, &other, "durable").await;
    other.shutdown().await.expect("shutdown");
    owner.shutdown().await.expect("shutdown");
}
