//! ReplayRun: a recorded run run again from its request against today's
//! agents. Model calls and calls of tools outside Baton whose request
//! matches the recording are answered from it, people's answers too; at the
//! first request that differs a `Diverged` event says where and what, then
//! a strict replay fails and the default goes live. An unchanged agent
//! replaying an unchanged run reproduces its events, ids and times aside:
//! checked over every example agent and over generated pipelines.

use std::{collections::BTreeMap, time::Duration};

use baton_client::{OrchestratorClient, pb, pb::run_event::Payload};
use baton_e2e::{
    EXAMPLE_AGENTS, OrchestratorServer, RedisServer, durable_runs, openai::FakeOpenAi,
    toolhost::TestToolHost,
};
use futures::StreamExt as _;
use tonic::Code;

fn agents(toolhost: &str, scout_instructions: &str) -> String {
    agents_with(toolhost, scout_instructions, "")
}

/// [`agents`], with `scout_extra` in scout's entry (`approvals: …`).
fn agents_with(toolhost: &str, scout_instructions: &str, scout_extra: &str) -> String {
    format!(
        r#"
tool_servers:
  rusty:
    endpoint: "{toolhost}"
    tools: [web_search]
scripts:
  boss: [{{calls: [{{tool: scout, args: {{task: "{{{{input}}}}"}}}}]}}, {{text: "boss: {{{{results}}}}"}}]
  scout: [{{calls: [{{tool: web_search, args: {{query: "{{{{input}}}}"}}}}]}}, {{text: "scout: {{{{results}}}}"}}]
agents:
  boss: {{model: "scripted:boss", tools: [scout]}}
  scout: {{model: "scripted:scout", tools: [web_search], instructions: "{scout_instructions}"{scout_extra}}}
"#
    )
}

/// Runs boss once: the tool server may have been away (slow to answer)
/// when the orchestrator started, and its first call lists its tools; a run
/// before that offered the model placeholder descriptions, which a replay
/// rightly reports as a difference.
async fn warm(client: &OrchestratorClient) {
    client
        .run_agent_to_end(baton_e2e::agent_request("boss", "warm-up"))
        .await
        .expect("warm-up run");
}

/// Collects a stream of events to its end, answering every approval (yes)
/// and question (its first option, else "yes") on the way when `answer`.
async fn collect(
    client: &OrchestratorClient,
    mut events: baton_client::Events,
    answer: bool,
) -> Vec<pb::RunEvent> {
    let mut out = Vec::new();
    loop {
        let next = tokio::time::timeout(Duration::from_secs(30), events.next())
            .await
            .expect("the run went on");
        let Some(e) = next else { break };
        let e = e.expect("event");
        match (&e.payload, answer) {
            (Some(Payload::ApprovalRequested(a)), true) => client
                .resolve_approval(&e.run_id, &a.approval_id, true, "fine")
                .await
                .expect("approve"),
            (Some(Payload::InputRequested(q)), true) => {
                let input = q.options.first().cloned().unwrap_or_else(|| "yes".into());
                client
                    .submit_input(&e.run_id, &q.input_id, &input)
                    .await
                    .expect("input");
            }
            (Some(Payload::ApprovalRequested(_) | Payload::InputRequested(_)), false) => {}
            _ => {}
        }
        out.push(e);
    }
    out
}

async fn replay(
    client: &OrchestratorClient,
    run_id: &str,
    strict: bool,
) -> Result<Vec<pb::RunEvent>, tonic::Status> {
    let events = client
        .replay_run(pb::ReplayRunRequest {
            run_id: run_id.into(),
            strict,
            ..Default::default()
        })
        .await
        .map_err(|e| match e {
            baton_client::Error::Status(s) => s,
            other => tonic::Status::unknown(other.to_string()),
        })?;
    // A replay asks no person: nobody answers here.
    Ok(collect(client, events, false).await)
}

fn terminal(events: &[pb::RunEvent]) -> &Payload {
    events
        .last()
        .and_then(|e| e.payload.as_ref())
        .expect("an event")
}

fn stats(events: &[pb::RunEvent]) -> pb::ReplayStats {
    match terminal(events) {
        Payload::RunCompleted(c) => c.replay.clone(),
        Payload::RunFailed(f) => f.replay.clone(),
        Payload::RunCancelled(c) => c.replay.clone(),
        other => panic!("not terminal: {other:?}"),
    }
    .expect("replay stats")
}

/// Each context's events, ids, times and replay marks aside: what an
/// unchanged replay must reproduce. Contexts run concurrently, so their
/// events interleave differently; within a context the order is the run's.
fn by_context(events: &[pb::RunEvent]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for e in events {
        let mut p = e.payload.clone().expect("payload");
        let mut sorted = String::new();
        match &mut p {
            // A map: in its keys' order.
            Payload::PipelineCompleted(c) => {
                let outputs: BTreeMap<_, _> = std::mem::take(&mut c.outputs).into_iter().collect();
                sorted = format!(" outputs {outputs:?}");
            }
            Payload::RunStarted(s) => {
                s.replay_of.clear();
                s.strict = false;
            }
            // What was spent: a replay spends nothing on the calls the
            // recording answers (checked on their own).
            Payload::RunCompleted(c) => (c.replay, c.usage) = (None, None),
            Payload::RunFailed(f) => (f.replay, f.usage) = (None, None),
            Payload::RunCancelled(c) => (c.replay, c.usage) = (None, None),
            Payload::AgentCompleted(c) => c.usage = None,
            Payload::MessageCompleted(m) => m.usage = None,
            Payload::ToolCallCompleted(c) => c.duration = None,
            Payload::StepCompleted(c) => c.duration = None,
            // The store's version counter is the trace's: parallel
            // branches take their numbers in the order they write.
            Payload::ContextWritten(w) => w.version = 0,
            Payload::ApprovalRequested(a) => a.deadline = None,
            Payload::InputRequested(q) => q.deadline = None,
            Payload::InputTimedOut(t) => t.deadline = None,
            _ => {}
        }
        let line = format!(
            "{} {} d{} {}: {p:?}{sorted}",
            e.parent_context_id, e.agent, e.depth, e.context_id
        );
        out.entry(e.context_id.clone()).or_default().push(line);
    }
    // Calls of one batch run at once: how their starts and ends interleave
    // is the race's, not the run's (a replay answers a call at once). Each
    // run of consecutive starts and ends is compared as a set; the batch's
    // end, and everything around it, in order.
    let of_a_batch =
        |l: &String| l.contains(": ToolCallCompleted(") || l.contains(": ToolCallStarted(");
    for lines in out.values_mut() {
        let mut i = 0;
        while i < lines.len() {
            let mut j = i;
            while j < lines.len() && of_a_batch(&lines[j]) {
                j += 1;
            }
            lines[i..j].sort();
            i = j.max(i + 1);
        }
    }
    out
}

/// `replayed` is `original` again, ids and times aside, every call matched.
fn assert_reproduced(original: &[pb::RunEvent], replayed: &[pb::RunEvent], what: &str) {
    let diverged: Vec<_> = replayed
        .iter()
        .filter(|e| {
            matches!(
                e.payload,
                Some(Payload::Diverged(_) | Payload::StepFailed(_) | Payload::RunFailed(_))
            )
        })
        .collect();
    assert!(diverged.is_empty(), "{what}: diverged: {diverged:?}");
    let (a, b) = (by_context(original), by_context(replayed));
    assert_eq!(
        a.keys().collect::<Vec<_>>(),
        b.keys().collect::<Vec<_>>(),
        "{what}: contexts"
    );
    for (ctx, events) in &a {
        assert_eq!(events, &b[ctx], "{what}: context {ctx}");
    }
    let s = stats(replayed);
    assert!(!s.diverged, "{what}: {s:?}");
    assert_eq!(s.matched_calls, s.calls, "{what}: {s:?}");
    assert_eq!(s.run_id, original[0].run_id, "{what}");
    assert!(
        !replayed
            .iter()
            .any(|e| matches!(e.payload, Some(Payload::Diverged(_)))),
        "{what}: diverged"
    );
    match &replayed[0].payload {
        Some(Payload::RunStarted(s)) => {
            assert_eq!(
                (s.replay_of.as_str(), s.strict),
                (original[0].run_id.as_str(), true)
            );
        }
        other => panic!("{what}: first event {other:?}"),
    }
    assert_ne!(replayed[0].run_id, original[0].run_id);
    assert_ne!(replayed[0].trace_id, original[0].trace_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_run_replayed_strictly_matches_every_call_and_calls_no_tool_server() {
    let host = TestToolHost::start().await.expect("tool host");
    let server = OrchestratorServer::start(&agents(&host.endpoint(), "Scout."), None, |_| {})
        .await
        .expect("orchestrator");
    let client = server.client().await.expect("client");
    warm(&client).await;
    let original = client
        .run_agent_to_end(baton_e2e::agent_request("boss", "rust"))
        .await
        .expect("run");
    assert_eq!(
        host.seen.requests.lock().expect("seen").len(),
        2,
        "the warm-up's and the run's search"
    );
    let replayed = replay(&client, &original[0].run_id, true)
        .await
        .expect("replay");
    assert_reproduced(&original, &replayed, "boss");
    // Four model turns and the tool server's call, all from the recording.
    assert_eq!(stats(&replayed).calls, 5);
    // Nothing spent: the run it replays spent those tokens.
    let spent = match terminal(&replayed) {
        Payload::RunCompleted(c) => c.usage.clone().expect("usage"),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        (spent.input_tokens, spent.output_tokens, spent.model_calls),
        (0, 0, 0),
        "{spent:?}"
    );
    assert_eq!(
        host.seen.requests.lock().expect("seen").len(),
        2,
        "no search again"
    );
    // GetRun and ListRuns say what the replay replays.
    let replay_id = replayed[0].run_id.clone();
    let got = client.get_run(&replay_id).await.expect("get");
    assert_eq!(got.replay_of, original[0].run_id);
    let listed = client
        .list_runs(pb::RunStatus::Unspecified, 10, "")
        .await
        .expect("list");
    let entry = listed
        .runs
        .iter()
        .find(|r| r.run_id == replay_id)
        .expect("listed");
    assert_eq!(entry.replay_of, original[0].run_id);
    // A replay of the replay: the same again.
    let again = replay(&client, &replay_id, true).await.expect("again");
    assert_eq!(by_context(&again), by_context(&original));
}

/// A fork is a run like any other: replayed, it reproduces itself — its
/// edited model turn too (the edit changed the answer, not what the model
/// was asked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_with_an_edited_model_turn_replays_strictly_as_it_ran() {
    let host = TestToolHost::start().await.expect("tool host");
    let server = OrchestratorServer::start(&agents(&host.endpoint(), "Scout."), None, |_| {})
        .await
        .expect("orchestrator");
    let client = server.client().await.expect("client");
    warm(&client).await;
    let original = client
        .run_agent_to_end(baton_e2e::agent_request("boss", "rust"))
        .await
        .expect("run");
    let at = original
        .iter()
        .find(|e| {
            e.context_id == "root.scout.1"
                && matches!(e.payload, Some(Payload::MessageCompleted(_)))
        })
        .map(|e| e.seq)
        .expect("scout's first turn");
    let edit = pb::fork_edit::Edit::ModelTurn(pb::ModelTurnEdit {
        text: String::new(),
        tool_calls: vec![pb::ToolCall {
            call_id: "1".into(),
            tool: "web_search".into(),
            arguments_json: r#"{"query": "edited"}"#.into(),
        }],
    });
    let fork = client
        .fork_run(pb::ForkRunRequest {
            run_id: original[0].run_id.clone(),
            at_seq: at,
            edit: Some(pb::ForkEdit { edit: Some(edit) }),
            ..Default::default()
        })
        .await
        .expect("fork");
    let fork = collect(&client, fork, false).await;
    assert!(matches!(terminal(&fork), Payload::RunCompleted(_)));
    assert_eq!(
        host.seen.requests.lock().expect("seen").len(),
        3,
        "the warm-up's, the run's and the fork's"
    );
    let replayed = replay(&client, &fork[0].run_id, true)
        .await
        .expect("replay");
    let s = stats(&replayed);
    assert_eq!(
        (s.matched_calls, s.calls, s.diverged),
        (5, 5, false),
        "{s:?}"
    );
    let (Payload::RunCompleted(a), Payload::RunCompleted(b)) =
        (terminal(&fork), terminal(&replayed))
    else {
        panic!("both complete");
    };
    assert_eq!(a.output, b.output);
    assert_eq!(
        host.seen.requests.lock().expect("seen").len(),
        3,
        "no search again"
    );
}

/// Today's agents differ from the recording's (another replica serves
/// other agents; the run store holds the recording): the replay says where
/// and what, then a strict replay fails and the default goes live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_agent_diverges_where_it_changed_then_strict_fails_and_default_goes_live() {
    let redis = RedisServer::start().expect("redis");
    let host = TestToolHost::start().await.expect("tool host");
    let (before, today) = (
        OrchestratorServer::start(
            &agents(&host.endpoint(), "Scout."),
            None,
            durable_runs(redis.url()),
        )
        .await
        .expect("before"),
        OrchestratorServer::start(
            &agents(&host.endpoint(), "Scout carefully."),
            None,
            durable_runs(redis.url()),
        )
        .await
        .expect("today"),
    );
    let (cb, ct) = (
        before.client().await.expect("client"),
        today.client().await.expect("client"),
    );
    warm(&cb).await;
    warm(&ct).await;
    let original = cb
        .run_agent_to_end(baton_e2e::agent_request("boss", "rust"))
        .await
        .expect("run");
    let origin = original[0].run_id.clone();

    // On the replica with the same agents: every call matched.
    let same = replay(&cb, &origin, true).await.expect("same");
    assert_reproduced(&original, &same, "durable boss");

    let strict = replay(&ct, &origin, true).await.expect("strict");
    let diverged: Vec<_> = strict
        .iter()
        .filter_map(|e| match &e.payload {
            Some(Payload::Diverged(d)) => Some((e.context_id.clone(), d.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(diverged.len(), 1, "{diverged:?}");
    let (ctx, d) = &diverged[0];
    assert_eq!(ctx, "root.scout.1");
    assert_eq!(
        (d.point.as_str(), d.turn, d.strict),
        ("model_turn", 1, true)
    );
    assert_eq!(
        d.diff, r#"message 1 (system) differs: now "Scout carefully.""#,
        "{d:?}"
    );
    match terminal(&strict) {
        Payload::RunFailed(f) => {
            assert_eq!(f.code, Code::FailedPrecondition as i32);
            assert!(
                f.message
                    .contains("diverged in root.scout.1 at model turn 1"),
                "{}",
                f.message
            );
        }
        other => panic!("a strict replay that diverged fails: {other:?}"),
    }
    // The boss's first turn matched; the scout's did not; nothing after.
    let s = stats(&strict);
    assert_eq!((s.matched_calls, s.calls, s.diverged), (1, 2, true));
    assert_eq!(
        host.seen.requests.lock().expect("seen").len(),
        3,
        "the warm-ups' and the run's"
    );

    // The default goes live from there: the scout searches again.
    let live = replay(&ct, &origin, false).await.expect("live");
    assert!(matches!(terminal(&live), Payload::RunCompleted(_)));
    let s = stats(&live);
    assert_eq!((s.matched_calls, s.calls, s.diverged), (1, 5, true));
    // GetRun and ListRuns say it diverged, on either replica (the run
    // store keeps it); a replay that matched says it did not.
    for client in [&cb, &ct] {
        let got = client.get_run(&live[0].run_id).await.expect("get");
        assert!(got.replay_diverged, "{got:?}");
        assert!(
            !client
                .get_run(&same[0].run_id)
                .await
                .expect("get")
                .replay_diverged
        );
        let listed = client
            .list_runs(pb::RunStatus::Unspecified, 20, "")
            .await
            .expect("list");
        let entry = listed
            .runs
            .iter()
            .find(|r| r.run_id == live[0].run_id)
            .expect("listed");
        assert!(entry.replay_diverged);
    }
    assert_eq!(
        host.seen.requests.lock().expect("seen").len(),
        4,
        "one search again, live"
    );
    let d = live
        .iter()
        .find_map(|e| match &e.payload {
            Some(Payload::Diverged(d)) => Some(d),
            _ => None,
        })
        .expect("diverged");
    assert!(!d.strict);

    // Today scout's search needs a person's approval, which the recording
    // has no answer to: the replay diverges there, and a strict one asks
    // nobody.
    let careful = OrchestratorServer::start(
        &agents_with(
            &host.endpoint(),
            "Scout.",
            ", approvals: {web_search: always}",
        ),
        None,
        durable_runs(redis.url()),
    )
    .await
    .expect("careful");
    let cc = careful.client().await.expect("client");
    let mut request = baton_e2e::agent_request("boss", "warm-up");
    request.approval_mode = pb::ApprovalMode::AutoApprove as i32;
    cc.run_agent_to_end(request).await.expect("warm-up");
    let strict = replay(&cc, &origin, true).await.expect("strict");
    let d = strict
        .iter()
        .find_map(|e| match &e.payload {
            Some(Payload::Diverged(d)) => Some((e.context_id.as_str(), d)),
            _ => None,
        })
        .expect("diverged");
    assert_eq!((d.0, d.1.point.as_str()), ("root.scout.1", "approval"));
    assert!(d.1.diff.contains("no answer"), "{:?}", d.1);
    assert!(matches!(terminal(&strict), Payload::RunFailed(_)));
    assert!(
        !strict
            .iter()
            .any(|e| matches!(e.payload, Some(Payload::ApprovalRequested(_)))),
        "nobody is asked"
    );
}

/// A question nobody answered in time is not asked again: the replay
/// times out at once, as the run did, and matches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_nobody_answered_is_replayed_unanswered() {
    let server = OrchestratorServer::start(EXAMPLE_AGENTS, None, |c| {
        c.runs.approval_timeout = Duration::from_millis(300);
    })
    .await
    .expect("orchestrator");
    let client = server.client().await.expect("client");
    let events = client
        .run_agent(baton_e2e::agent_request("interviewer", "a trip"))
        .await
        .expect("run");
    let original = collect(&client, events, false).await;
    assert!(
        original
            .iter()
            .any(|e| matches!(e.payload, Some(Payload::InputTimedOut(_))))
    );
    let t = std::time::Instant::now();
    let replayed = replay(&client, &original[0].run_id, true)
        .await
        .expect("replay");
    assert_reproduced(&original, &replayed, "interviewer unanswered");
    assert!(
        t.elapsed() < Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replays_that_cannot_be_are_refused_naming_the_field_and_start_nothing() {
    let dir = std::env::temp_dir().join(format!("baton-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let keys = dir.join("keys");
    std::fs::write(
        &keys,
        "acme acme-key-0123456789\nglobex globex-key-9876543210\n",
    )
    .expect("keys");
    let server = OrchestratorServer::start(EXAMPLE_AGENTS, None, move |c| {
        c.auth.api_keys_file = keys.clone();
    })
    .await
    .expect("orchestrator");
    let client = |key: &'static str| {
        let server = &server;
        async move {
            server
                .client()
                .await
                .expect("client")
                .with_api_key(key)
                .expect("key")
        }
    };
    let (acme, globex) = (
        client("acme-key-0123456789").await,
        client("globex-key-9876543210").await,
    );
    let done = acme
        .run_agent_to_end(baton_e2e::agent_request("assistant", "hi"))
        .await
        .expect("run");
    let before = acme
        .list_runs(pb::RunStatus::Unspecified, 100, "")
        .await
        .expect("list")
        .runs
        .len();

    let err = replay(&acme, "not a run id", false)
        .await
        .expect_err("bad id");
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("run_id"), "{}", err.message());
    let err = replay(&acme, &uuid::Uuid::new_v4().to_string(), false)
        .await
        .expect_err("unknown");
    assert_eq!(err.code(), Code::NotFound);
    let err = replay(&globex, &done[0].run_id, false)
        .await
        .expect_err("another tenant's");
    assert_eq!(err.code(), Code::NotFound);

    // Over HTTP: a body field of the wrong type is named; nothing starts.
    let http = reqwest::Client::new();
    let answer = http
        .post(format!(
            "{}/v1/runs/{}:replay",
            server.endpoint(),
            done[0].run_id
        ))
        .bearer_auth("acme-key-0123456789")
        .body(r#"{"strict": "yes"}"#)
        .send()
        .await
        .expect("http");
    assert_eq!(answer.status(), 400);
    let body = answer.text().await.expect("body");
    assert!(body.contains("strict"), "{body}");
    // Detached (no event stream asked for): the replay's ids.
    let answer = http
        .post(format!(
            "{}/v1/runs/{}:replay",
            server.endpoint(),
            done[0].run_id
        ))
        .bearer_auth("acme-key-0123456789")
        .send()
        .await
        .expect("http");
    assert_eq!(answer.status(), 200);
    let started: serde_json::Value = answer.json().await.expect("json");
    let replay_id = started["runId"].as_str().expect("runId").to_owned();
    let got = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let got = acme.get_run(&replay_id).await.expect("get");
            if got.status != pb::RunStatus::Running as i32 {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the replay ends");
    assert_eq!(got.status, pb::RunStatus::Completed as i32);
    assert_eq!(got.replay_of, done[0].run_id);

    // A run still running (it waits for a person) is refused.
    let mut waiting = acme
        .run_agent(baton_e2e::agent_request("interviewer", "a trip"))
        .await
        .expect("run");
    let first = waiting.next().await.expect("event").expect("event");
    loop {
        let e = waiting.next().await.expect("event").expect("event");
        if matches!(e.payload, Some(Payload::InputRequested(_))) {
            break;
        }
    }
    let err = replay(&acme, &first.run_id, false)
        .await
        .expect_err("running");
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(
        err.message().contains("run_id") && err.message().contains("still running"),
        "{}",
        err.message()
    );
    // Nothing else started: the run waiting and the HTTP replay.
    let after = acme
        .list_runs(pb::RunStatus::Unspecified, 100, "")
        .await
        .expect("list")
        .runs
        .len();
    assert_eq!(after, before + 2);

    // A run whose history was evicted for room: refused, saying so.
    server.core.runs().expire_finished_logs_now();
    let err = replay(&acme, &done[0].run_id, false)
        .await
        .expect_err("history gone");
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(
        err.message().starts_with("run_id: ") && err.message().contains("no longer kept"),
        "{}",
        err.message()
    );
}

/// The example agents, each run as a person would (approvals granted,
/// questions answered), replayed strictly: each reproduces its events and
/// asks nobody again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_example_agent_replayed_unchanged_reproduces_its_events() {
    let server = OrchestratorServer::start(EXAMPLE_AGENTS, None, |_| {})
        .await
        .expect("orchestrator");
    let client = server.client().await.expect("client");
    let targets = [
        "assistant",
        "researcher",
        "summarizer",
        "fact_checker",
        "triage",
        "support",
        "billing",
        "analyst",
        "writer",
        "planner",
        "interviewer",
    ];
    for target in targets {
        let mut request = baton_e2e::agent_request(target, "the tides of Lisbon");
        request.approval_mode = pb::ApprovalMode::Ask as i32;
        let events = client.run_agent(request).await.expect("run");
        let original = collect(&client, events, true).await;
        assert!(
            matches!(terminal(&original), Payload::RunCompleted(_)),
            "{target}: {:?}",
            terminal(&original)
        );
        let replayed = replay(&client, &original[0].run_id, true)
            .await
            .expect("replay");
        assert_reproduced(&original, &replayed, target);
    }
}

/// A small deterministic generator (xorshift): the cases are the same on
/// every run, and a failing seed is printed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// A pipeline of 1 to 4 steps over the example agents: sequential,
/// parallel or a DAG; steps that call agents (researcher, planner's nested
/// pipeline), ask for approval (billing), ask a question (interviewer),
/// hand off (support), read earlier steps' outputs.
///
/// billing (alone, or handed off to in support) and researcher tell the
/// model the store version they wrote at, and a trace's versions are
/// numbered in the order its writes land: run beside other steps, what
/// their model reads depends on the race, so a replay rightly diverges
/// there. They run in sequential pipelines only. So does a second planner:
/// two nested pipelines at once in one trace share their slots' names
/// (`topic`), and one's clean-up can remove the slot the other reads.
fn pipeline(rng: &mut Rng, n: u64) -> pb::PipelineSpec {
    const AGENTS: [&str; 8] = [
        "analyst",
        "writer",
        "interviewer",
        "planner",
        "summarizer",
        "support",
        "billing",
        "researcher",
    ];
    let mode = [
        pb::PipelineMode::Sequential,
        pb::PipelineMode::Parallel,
        pb::PipelineMode::Dag,
    ][rng.below(3)];
    let agents = match mode {
        pb::PipelineMode::Sequential => &AGENTS[..],
        _ => &AGENTS[..5],
    };
    let count = 1 + rng.below(4);
    let mut planners = 0;
    let steps = (0..count)
        .map(|i| {
            let mut agent = agents[rng.below(agents.len())];
            if agent == "planner" && mode != pb::PipelineMode::Sequential {
                planners += 1;
                if planners > 1 {
                    agent = "analyst";
                }
            }
            let mut step = pb::PipelineStep {
                id: format!("s{i}"),
                agent: agent.into(),
                task: format!("part {i} of case {n}"),
                output_to: format!("out{i}"),
                ..Default::default()
            };
            if mode != pb::PipelineMode::Parallel && i > 0 && rng.below(2) == 0 {
                let from = rng.below(i);
                step.input_from.push(format!("out{from}"));
                step.task = format!("build on {{{{out{from}}}}}");
            }
            step
        })
        .collect();
    pb::PipelineSpec {
        name: format!("case{n}"),
        steps,
        mode: mode as i32,
        ..Default::default()
    }
}

/// Generated pipelines, each run as a person would, replayed strictly:
/// each reproduces its events (per context).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_pipelines_replayed_unchanged_reproduce_their_events() {
    let server = OrchestratorServer::start(EXAMPLE_AGENTS, None, |_| {})
        .await
        .expect("orchestrator");
    let client = server.client().await.expect("client");
    let seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut rng = Rng(seed);
    let mut covered = std::collections::BTreeSet::new();
    for n in 0..16 {
        let spec = pipeline(&mut rng, n);
        covered.insert(format!("{:?}", spec.mode()));
        covered.extend(spec.steps.iter().map(|s| s.agent.clone()));
        let what = format!("seed {seed:#x} case {n}: {spec:?}");
        let request = pb::RunPipelineRequest {
            pipeline: Some(spec),
            approval_mode: pb::ApprovalMode::Ask as i32,
            ..Default::default()
        };
        let events = client.run_pipeline(request).await.expect("run");
        let original = collect(&client, events, true).await;
        assert!(
            matches!(terminal(&original), Payload::RunCompleted(_)),
            "{what}: {:?}",
            terminal(&original)
        );
        let replayed = replay(&client, &original[0].run_id, true)
            .await
            .expect("replay");
        assert_reproduced(&original, &replayed, &what);
    }
    // The cases cover every mode, and agents that ask, hand off and nest.
    for wanted in [
        "Sequential",
        "Parallel",
        "Dag",
        "billing",
        "interviewer",
        "support",
        "planner",
        "researcher",
    ] {
        assert!(
            covered.contains(wanted),
            "no case with {wanted}: {covered:?}"
        );
    }
}

/// Agents for the replay property test: every kind of point, and nothing
/// that depends on how concurrent branches interleave (no store versions
/// in what a model reads), so parallel and DAG pipelines replay too.
/// `searcher` needs an approval for the tool server's search; `asker` asks
/// a person; `lead` calls both as tools at once (nested agents); `desk`
/// hands off to `searcher`. Their models are a fake OpenAI-compatible
/// provider's ([`property_provider`]), so model calls are counted where
/// they arrive.
fn property_agents(toolhost: &str, provider: &FakeOpenAi) -> String {
    format!(
        r#"
providers:
  fake: {{kind: openai, base_url: "{}", api_key_env: "", max_retries: 0}}
tool_servers:
  remote:
    endpoint: "{toolhost}"
    tools: [web_search]
agents:
  searcher: {{model: "fake:searcher", tools: [web_search], approvals: {{web_search: always}}}}
  asker: {{model: "fake:asker", tools: [ask_user]}}
  lead: {{model: "fake:lead", tools: [searcher, asker]}}
  desk: {{model: "fake:desk", handoffs: [searcher]}}
"#,
        provider.base_url()
    )
}

/// The property test's models, by the `model` a request names: each first
/// calls its tools (`searcher` web_search, `asker` ask_user, `lead`
/// searcher and asker at once, `desk` hands off to searcher), then answers
/// with their results — a deterministic function of what it is sent, as a
/// scripted model is of its turn.
async fn property_provider() -> FakeOpenAi {
    use baton_e2e::openai::{Reply, finish, text, tool_fragment, usage};
    FakeOpenAi::answering(|body: &serde_json::Value| {
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let input = messages
            .iter()
            .find(|m| m["role"] == "user")
            .and_then(|m| m["content"].as_str())
            .unwrap_or("")
            .to_owned();
        // Tools whose results it has, and the results of its last turn.
        let answered: Vec<String> = messages
            .iter()
            .filter(|m| m["role"] == "assistant")
            .flat_map(|m| m["tool_calls"].as_array().cloned().unwrap_or_default())
            .filter_map(|c| c["function"]["name"].as_str().map(str::to_owned))
            .collect();
        let results: Vec<String> = messages
            .iter()
            .rev()
            .take_while(|m| m["role"] == "tool")
            .filter_map(|m| m["content"].as_str().map(str::to_owned))
            .collect();
        let results = results.into_iter().rev().collect::<Vec<_>>().join("; ");
        let model = body["model"].as_str().unwrap_or("");
        // Call ids unique in a run, as a provider's are: from what it is
        // sent (FNV-1a), so the same request gets the same ids.
        let sent = body
            .to_string()
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            });
        let call = |i: u32, name: &str, args: serde_json::Value| {
            let id = format!("call_{sent:016x}_{i}");
            tool_fragment(i, Some(&id), Some(name), &args.to_string())
        };
        let chunks = match model {
            "searcher" if !answered.iter().any(|n| n == "web_search") => {
                vec![
                    call(0, "web_search", serde_json::json!({"query": input})),
                    finish("tool_calls"),
                ]
            }
            "searcher" => vec![text(&format!("found: {results}")), finish("stop")],
            "asker" if !answered.iter().any(|n| n == "ask_user") => vec![
                call(
                    0,
                    "ask_user",
                    serde_json::json!({"question": "Which one?", "options": ["red", "blue"]}),
                ),
                finish("tool_calls"),
            ],
            "asker" => vec![text(&format!("chose {results}")), finish("stop")],
            "lead" if !answered.iter().any(|n| n == "searcher") => vec![
                call(0, "searcher", serde_json::json!({"task": input})),
                call(1, "asker", serde_json::json!({"task": input})),
                finish("tool_calls"),
            ],
            "lead" => vec![text(&format!("lead: {results}")), finish("stop")],
            "desk" => vec![
                call(0, "transfer_to_searcher", serde_json::json!({})),
                finish("tool_calls"),
            ],
            other => vec![text(&format!("no such model {other}")), finish("stop")],
        };
        let mut chunks = chunks;
        chunks.push(usage(10, 5));
        Reply::Stream(chunks)
    })
    .await
    .expect("provider")
}

/// The replay property: generated pipelines — sequential, parallel and DAG
/// steps of agents that ask for approval, ask a question, call agents as
/// tools and hand off — run (approved and answered as a person would),
/// then replayed strictly, reproduce their events, and the replay calls no
/// model (the fake provider's request count does not move) and no tool
/// server (the tool server's request count does not move). Each case has
/// a seed of its own (60 cases), drawn from the run's seed, printed first;
/// a failing case prints its own; `BATON_REPLAY_SEED=N` runs a run's cases
/// again, `BATON_REPLAY_CASE=N` one case.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replays_of_generated_pipelines_call_nothing_and_reproduce_their_events() {
    let seed = std::env::var("BATON_REPLAY_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
                | 1
        });
    eprintln!("replay property test: BATON_REPLAY_SEED={seed}");
    let one: Option<u64> = std::env::var("BATON_REPLAY_CASE")
        .ok()
        .and_then(|s| s.parse().ok());
    let host = TestToolHost::start().await.expect("tool host");
    let provider = property_provider().await;
    let server =
        OrchestratorServer::start(&property_agents(&host.endpoint(), &provider), None, |_| {})
            .await
            .expect("orchestrator");
    let client = server.client().await.expect("client");
    let searches = || host.seen.requests.lock().expect("seen").len();
    let mut covered = std::collections::BTreeSet::new();
    let mut draw = Rng(seed);
    let cases: Vec<u64> = (0..60)
        .map(|_| draw.0.wrapping_add(draw.below(usize::MAX) as u64) | 1)
        .collect();
    for (n, case_seed) in cases.into_iter().enumerate() {
        let case_seed = one.unwrap_or(case_seed);
        let mut rng = Rng(case_seed);
        let mode = [
            pb::PipelineMode::Sequential,
            pb::PipelineMode::Parallel,
            pb::PipelineMode::Dag,
        ][rng.below(3)];
        let count = 1 + rng.below(4);
        let steps: Vec<pb::PipelineStep> = (0..count)
            .map(|i| {
                let agent = ["searcher", "asker", "lead", "desk"][rng.below(4)];
                let mut step = pb::PipelineStep {
                    id: format!("s{i}"),
                    agent: agent.into(),
                    task: format!("part {i} of case {n}"),
                    output_to: format!("out{i}"),
                    ..Default::default()
                };
                if mode != pb::PipelineMode::Parallel && i > 0 && rng.below(2) == 0 {
                    let from = rng.below(i);
                    step.input_from.push(format!("out{from}"));
                }
                step
            })
            .collect();
        covered.insert(format!("{mode:?}"));
        covered.extend(steps.iter().map(|s| format!("{mode:?} {}", s.agent)));
        let what = format!("BATON_REPLAY_CASE={case_seed} (case {n}): {mode:?} {steps:?}");
        let request = pb::RunPipelineRequest {
            pipeline: Some(pb::PipelineSpec {
                name: format!("case{n}"),
                steps,
                mode: mode as i32,
                ..Default::default()
            }),
            approval_mode: pb::ApprovalMode::Ask as i32,
            ..Default::default()
        };
        let events = client.run_pipeline(request).await.expect("run");
        let original = collect(&client, events, true).await;
        assert!(
            matches!(terminal(&original), Payload::RunCompleted(_)),
            "{what}: {:?}",
            terminal(&original)
        );
        let (calls_before, searches_before) = (provider.requests().len(), searches());
        assert!(calls_before > 0, "{what}: the provider was called");
        let replayed = replay(&client, &original[0].run_id, true)
            .await
            .expect("replay");
        assert_reproduced(&original, &replayed, &what);
        assert_eq!(
            provider.requests().len(),
            calls_before,
            "{what}: the replay called the provider"
        );
        assert_eq!(
            searches(),
            searches_before,
            "{what}: the replay called the tool server"
        );
        if one.is_some() {
            break;
        }
    }
    eprintln!("replay property test: covered {covered:?}");
}

/// A durable replay survives a SIGKILL of its replica: another replica
/// resumes it with the recording of the run it replays, so it still calls
/// no model again, and its result counts the calls made before the kill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_replay_survives_a_sigkill_of_its_replica() {
    use baton_e2e::chaos::{Binaries, Cluster, Options};
    let binaries = match Binaries::from_env() {
        Some(found) => found.expect("BATON_BIN_DIR holds the binaries"),
        None => Binaries {
            orchestrator: env!("CARGO_BIN_EXE_baton-e2e-orchestrator").into(),
            context_store: env!("CARGO_BIN_EXE_baton-e2e-context-store").into(),
        },
    };
    let options = Options::short(1, false, binaries);
    let dir = tempfile::tempdir().expect("dir");
    let agents = dir.path().join("agents.yaml");
    // A sleep long enough that the replica is killed inside it.
    let slow = EXAMPLE_AGENTS.replace("{ms: 400, steps: 4}", "{ms: 3000, steps: 30}");
    assert_ne!(slow, EXAMPLE_AGENTS);
    std::fs::write(&agents, slow).expect("agents");
    let mut cluster = Cluster::start(&options, &agents, dir.path())
        .await
        .expect("cluster");
    let endpoints = cluster.endpoints();
    let client = |i: usize| OrchestratorClient::connect(endpoints[i].clone());
    let (c0, c1) = (client(0).await.expect("r0"), client(1).await.expect("r1"));
    let original = c0
        .run_agent_to_end(baton_e2e::agent_request("researcher", "tides"))
        .await
        .expect("run");
    assert!(matches!(terminal(&original), Payload::RunCompleted(_)));

    // The replay, on r0, until its sleep (Baton's own tool, run again)
    // reports progress: the model turns before it were answered there.
    let mut replay = c0
        .replay_run(pb::ReplayRunRequest {
            run_id: original[0].run_id.clone(),
            strict: true,
            detach: true,
            ..Default::default()
        })
        .await
        .expect("replay");
    let mut replay_id = String::new();
    while let Some(e) = replay.next().await {
        let e = e.expect("event");
        replay_id.clone_from(&e.run_id);
        if matches!(e.payload, Some(Payload::ToolProgress(_))) {
            break;
        }
    }
    drop(replay);
    cluster.replicas[0].kill();

    // Another replica resumes it and it ends there.
    let deadline = std::time::Instant::now() + Duration::from_secs(40);
    let after = loop {
        let mut watched = c1.watch_run(&replay_id, 0, None).await.expect("watch");
        let mut events = Vec::new();
        while let Ok(Some(e)) =
            tokio::time::timeout(Duration::from_millis(500), watched.next()).await
        {
            events.push(e.expect("event"));
        }
        if events.last().is_some_and(|e| {
            matches!(
                e.payload,
                Some(Payload::RunCompleted(_) | Payload::RunFailed(_) | Payload::RunCancelled(_))
            )
        }) {
            break events;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the replay was not resumed and ended in time"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert!(
        after
            .iter()
            .any(|e| matches!(e.payload, Some(Payload::RunResumed(_)))),
        "resumed on another replica"
    );
    let (Payload::RunCompleted(done), Payload::RunCompleted(was)) =
        (terminal(&after), terminal(&original))
    else {
        panic!("the replay completed: {:?}", terminal(&after));
    };
    assert_eq!(done.output, was.output);
    assert!(
        !after
            .iter()
            .any(|e| matches!(e.payload, Some(Payload::Diverged(_))))
    );
    // Its five model turns, answered from the recording before and after
    // the kill, are counted once each.
    let s = stats(&after);
    assert_eq!(
        (s.matched_calls, s.calls, s.diverged),
        (5, 5, false),
        "{s:?}"
    );
    let got = c1.get_run(&replay_id).await.expect("get");
    assert_eq!(got.replay_of, original[0].run_id);
}
