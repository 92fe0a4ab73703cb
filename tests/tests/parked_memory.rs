//! Memory mode: a detached run that only waits for people is parked — its
//! task leaves memory, its record stays — and an answer, a cancel, a
//! question's deadline or its `run_timeout` wakes it (`runs.park_after`
//! 200 ms here). A woken run goes on from its recording: nothing it did is
//! done again, an answer given while it slept is taken once, and its
//! stream keeps the rules of every run's. Bounded in time: each wait has a
//! deadline.

use std::time::Duration;

use baton_client::{
    OrchestratorClient,
    pb::{self, run_event::Payload},
};
use baton_e2e::{OrchestratorServer, events, eventually};
use futures::StreamExt;
use tonic::Code;

const AGENTS: &str = r#"
scripts:
  payer:
    - {calls: [{tool: write_context, args: {key: "paid/{{input}}", value: "yes"}}]}
    - {text: "paid {{results}}"}
  asker:
    - {calls: [{tool: ask_user, args: {question: "Which city?", options: [Paris, Lisbon]}}]}
    - {text: "going to {{results}}"}
  planner:
    - calls: [{tool: run_pipeline, args: {mode: parallel, steps: [
        {id: one, agent: payer, task: "a"},
        {id: two, agent: payer, task: "b"}]}}]
    - text: "planned: {{results}}"
agents:
  payer: {model: "scripted:payer", tools: [write_context], approvals: {write_context: always}}
  asker: {model: "scripted:asker", tools: [ask_user]}
  planner: {model: "scripted:planner", tools: [run_pipeline]}
"#;

async fn server() -> OrchestratorServer {
    OrchestratorServer::start(AGENTS, None, |c| {
        c.runs.park_after = Duration::from_millis(200);
    })
    .await
    .expect("orchestrator")
}

fn request(agent: &str, input: &str, limits: Option<pb::RunLimits>) -> pb::RunAgentRequest {
    pb::RunAgentRequest {
        agent: agent.into(),
        input: input.into(),
        detach: true,
        limits,
        ..Default::default()
    }
}

fn seconds(s: i64) -> Option<baton_proto::wkt::Duration> {
    Some(baton_proto::wkt::Duration {
        seconds: s,
        nanos: 0,
    })
}

/// Starts a detached run and reads until it has asked `questions`
/// questions; its id and the questions' ids. The stream is dropped: nobody
/// is attached.
async fn asking(
    client: &OrchestratorClient,
    req: pb::RunAgentRequest,
    questions: usize,
) -> (String, Vec<String>) {
    let mut stream = client.run_agent(req).await.expect("run");
    let mut asked = Vec::new();
    let mut run_id = String::new();
    while let Some(e) = stream.next().await {
        let e = e.expect("event");
        run_id.clone_from(&e.run_id);
        match e.payload {
            Some(Payload::ApprovalRequested(a)) => asked.push(a.approval_id),
            Some(Payload::InputRequested(q)) => asked.push(q.input_id),
            _ => {}
        }
        if asked.len() == questions {
            return (run_id, asked);
        }
    }
    panic!("the run ended before it asked");
}

async fn parked(server: &OrchestratorServer, run_id: &str) {
    let runs = server.core.runs().clone();
    eventually(&format!("run {run_id} is parked"), || {
        let asleep = runs.get(run_id).is_ok_and(|r| r.is_asleep());
        async move { asleep }
    })
    .await;
}

/// The run's whole stream, from its first event to its end.
async fn whole(client: &OrchestratorClient, run_id: &str) -> Vec<pb::RunEvent> {
    let mut stream = client.watch_run(run_id, 0, None).await.expect("watch");
    let mut out = Vec::new();
    let read = async {
        while let Some(e) = stream.next().await {
            let e = e.expect("event");
            let end = events::is_terminal(&e);
            out.push(e);
            if end {
                break;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .expect("the run ends");
    out
}

fn count(events: &[pb::RunEvent], kind: &str) -> usize {
    events.iter().filter(|e| events::kind(e) == kind).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_wakes_a_parked_run_which_goes_on_from_where_it_was() {
    let server = server().await;
    let client = server.client().await.expect("client");
    let (run_id, asked) = asking(&client, request("payer", "x", None), 1).await;
    parked(&server, &run_id).await;
    // Parked, it still answers as a waiting run: GetRun and ListRuns.
    let run = client.get_run(&run_id).await.expect("get");
    assert_eq!(run.status, pb::RunStatus::Running as i32);
    assert_eq!(run.waiting_for, ["approval"]);
    client
        .resolve_approval(&run_id, &asked[0], true, "")
        .await
        .expect("told OK");
    let again = client
        .resolve_approval(&run_id, &asked[0], false, "twice")
        .await
        .expect_err("answered once");
    assert_eq!(again.code(), Code::FailedPrecondition, "{again:?}");
    let events = whole(&client, &run_id).await;
    events::check_stream_rules(&events);
    assert_eq!(
        events::completed_output(&events),
        "paid wrote paid/x at version 1"
    );
    // The write ran once, after the person's yes; nothing was done twice.
    assert_eq!(count(&events, "RunResumed"), 1, "{events:#?}");
    assert_eq!(count(&events, "ToolCallCompleted"), 1);
    assert_eq!(count(&events, "MessageCompleted"), 2);
    let resolved: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.payload {
            Some(Payload::ApprovalResolved(r)) => Some((r.approved, r.source)),
            _ => None,
        })
        .collect();
    assert_eq!(resolved, [(true, pb::ApprovalSource::Person as i32)]);
    let usage = client
        .get_run(&run_id)
        .await
        .expect("get")
        .usage
        .expect("usage");
    assert_eq!((usage.model_calls, usage.tool_calls), (2, 1), "{usage:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_runs_take_input_hold_their_deadline_and_end_when_cancelled() {
    let server = server().await;
    let client = server.client().await.expect("client");

    // Input given while parked is the answer.
    let (asker, input) = asking(&client, request("asker", "x", None), 1).await;
    parked(&server, &asker).await;
    client
        .submit_input(&asker, &input[0], "Lisbon")
        .await
        .expect("told OK");
    let events = whole(&client, &asker).await;
    events::check_stream_rules(&events);
    assert_eq!(events::completed_output(&events), "going to Lisbon");

    // Nobody answers: its deadline wakes it, and the model reads that no
    // answer came; an answer after the deadline is refused.
    let limits = pb::RunLimits {
        approval_timeout: seconds(3),
        ..Default::default()
    };
    let (late, asked) = asking(&client, request("payer", "x", Some(limits)), 1).await;
    parked(&server, &late).await;
    let events = whole(&client, &late).await;
    events::check_stream_rules(&events);
    let denied = events.iter().find_map(|e| match &e.payload {
        Some(Payload::ApprovalResolved(r)) => Some(r.clone()),
        _ => None,
    });
    let denied = denied.expect("resolved");
    assert!(!denied.approved);
    assert_eq!(denied.source, pb::ApprovalSource::Deadline as i32);
    let refused = client
        .resolve_approval(&late, &asked[0], true, "")
        .await
        .expect_err("too late");
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");

    // Cancelled while parked: it ends cancelled with what it had spent,
    // and does not start again.
    let (cancelled, _) = asking(&client, request("payer", "y", None), 1).await;
    parked(&server, &cancelled).await;
    client
        .cancel(&cancelled, "changed my mind")
        .await
        .expect("cancel");
    let events = whole(&client, &cancelled).await;
    events::check_stream_rules(&events);
    match events::terminal(&events) {
        Payload::RunCancelled(c) => {
            assert!(c.reason.contains("changed my mind"), "{c:?}");
            assert_eq!(c.usage.as_ref().map(|u| u.model_calls), Some(1), "{c:?}");
        }
        other => panic!("cancelled, not {other:?}"),
    }
    assert_eq!(count(&events, "RunResumed"), 0);

    // Its run_timeout passes while parked: it fails DEADLINE_EXCEEDED.
    let limits = pb::RunLimits {
        run_timeout: seconds(2),
        approval_timeout: seconds(60),
        ..Default::default()
    };
    let (timed_out, _) = asking(&client, request("payer", "z", Some(limits)), 1).await;
    parked(&server, &timed_out).await;
    let events = whole(&client, &timed_out).await;
    events::check_stream_rules(&events);
    let failed = events::run_failed(&events);
    assert_eq!(failed.code, Code::DeadlineExceeded as i32, "{failed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_of_nested_agents_parks_and_wakes_for_each_answer() {
    let server = server().await;
    let client = server.client().await.expect("client");
    // Two steps of a pipeline the agent runs (depth 2) each ask.
    let (run_id, asked) = asking(&client, request("planner", "p", None), 2).await;
    parked(&server, &run_id).await;
    client
        .resolve_approval(&run_id, &asked[0], true, "")
        .await
        .expect("first");
    // It wakes (told OK as it is sent to be woken: not asleep from then),
    // asks the other again, and parks again.
    parked(&server, &run_id).await;
    client
        .resolve_approval(&run_id, &asked[1], true, "")
        .await
        .expect("second");
    let events = whole(&client, &run_id).await;
    events::check_stream_rules(&events);
    let output = events::completed_output(&events);
    assert!(output.starts_with("planned: "), "{output}");
    assert_eq!(count(&events, "ToolCallCompleted"), 3, "{events:#?}");
    assert_eq!(count(&events, "RunResumed"), 2);
    // Every answer was a person's, taken once.
    assert_eq!(count(&events, "ApprovalResolved"), 2);

    // A watcher keeps a run here: it parks once nobody follows it.
    let (watched, asked) = asking(&client, request("payer", "w", None), 1).await;
    let watch = client.watch_run(&watched, 0, None).await.expect("watch");
    tokio::time::sleep(Duration::from_millis(800)).await;
    let record = server.core.runs().get(&watched).expect("here");
    assert!(!record.is_parked(), "a watcher is attached");
    drop(watch);
    parked(&server, &watched).await;
    client
        .resolve_approval(&watched, &asked[0], false, "no")
        .await
        .expect("told OK");
    let events = whole(&client, &watched).await;
    events::check_stream_rules(&events);
}
