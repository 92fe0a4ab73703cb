//! ForkRun: a fork replays everything before its fork point from the
//! original's recording — no model, tool server or person is asked again —
//! takes the point's edit, and runs live from there; at any depth; in
//! memory and durable; refused, naming the field and starting nothing,
//! when the point or the edit is wrong.

use std::time::Duration;

use baton_client::{OrchestratorClient, pb, pb::run_event::Payload};
use baton_e2e::{
    OrchestratorServer, RedisServer, durable_runs,
    openai::{FakeOpenAi, Reply, finish, text, tool_fragment, usage},
    toolhost::TestToolHost,
};
use futures::StreamExt as _;
use tonic::Code;

fn agents(toolhost: &str) -> String {
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
  scout: {{model: "scripted:scout", tools: [web_search]}}
"#
    )
}

/// A tool server, an orchestrator serving [`agents`] with it, a client.
async fn boss() -> (TestToolHost, OrchestratorServer, OrchestratorClient) {
    let host = TestToolHost::start().await.expect("tool host");
    let server = OrchestratorServer::start(&agents(&host.endpoint()), None, |_| {})
        .await
        .expect("orchestrator");
    let client = server.client().await.expect("client");
    (host, server, client)
}

async fn run_to_end(client: &OrchestratorClient, agent: &str, input: &str) -> Vec<pb::RunEvent> {
    client
        .run_agent_to_end(baton_e2e::agent_request(agent, input))
        .await
        .expect("run")
}

async fn fork_to_end(
    client: &OrchestratorClient,
    run_id: &str,
    at_seq: u64,
    edit: Option<pb::fork_edit::Edit>,
) -> Result<Vec<pb::RunEvent>, tonic::Status> {
    let mut events = client
        .fork_run(pb::ForkRunRequest {
            run_id: run_id.into(),
            at_seq,
            edit: edit.map(|e| pb::ForkEdit { edit: Some(e) }),
            ..Default::default()
        })
        .await
        .map_err(|e| match e {
            baton_client::Error::Status(s) => s,
            other => tonic::Status::unknown(other.to_string()),
        })?;
    let mut out = Vec::new();
    while let Some(e) = events.next().await {
        out.push(e.map_err(|e| tonic::Status::unknown(e.to_string()))?);
    }
    Ok(out)
}

fn output(events: &[pb::RunEvent]) -> String {
    match events.last().and_then(|e| e.payload.as_ref()) {
        Some(Payload::RunCompleted(c)) => c.output.clone(),
        other => panic!("did not complete: {other:?}"),
    }
}

/// The seq of the first event matching `f`.
fn seq_of(events: &[pb::RunEvent], f: impl Fn(&pb::RunEvent) -> bool) -> u64 {
    events.iter().find(|e| f(e)).map(|e| e.seq).expect("event")
}

fn is_tool_result(e: &pb::RunEvent, ctx: &str, tool: &str) -> bool {
    e.context_id == ctx
        && matches!(&e.payload, Some(Payload::ToolCallCompleted(c)) if c.tool == tool)
}

/// The rules every fork's stream keeps: seqs 1..n without gaps, one
/// terminal event at the end, the replayed events first, `RunStarted`
/// naming the origin.
fn check_fork_stream(fork: &[pb::RunEvent], origin: &str, at: u64) {
    for (i, e) in fork.iter().enumerate() {
        assert_eq!(e.seq, i as u64 + 1, "gap-free");
    }
    let terminal = fork
        .iter()
        .filter(|e| {
            matches!(
                e.payload,
                Some(Payload::RunCompleted(_) | Payload::RunFailed(_) | Payload::RunCancelled(_))
            )
        })
        .count();
    assert_eq!(terminal, 1);
    let live_from = fork.iter().position(|e| !e.replayed).expect("a live part");
    assert!(
        fork[live_from..].iter().all(|e| !e.replayed),
        "replayed events come first"
    );
    match &fork[0].payload {
        Some(Payload::RunStarted(s)) => {
            let from = s.forked_from.as_ref().expect("forked_from");
            assert_eq!((from.run_id.as_str(), from.seq), (origin, at));
        }
        other => panic!("first event: {other:?}"),
    }
    assert!(fork[0].replayed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_at_a_nested_tool_result_takes_the_edit_and_calls_nothing_before_it_again() {
    let (host, _server, client) = boss().await;
    let original = run_to_end(&client, "boss", "rust").await;
    let origin = original[0].run_id.clone();
    let searched = host.seen.requests.lock().expect("seen").len();
    assert_eq!(searched, 1);

    // The web search's result, one level down.
    let at = seq_of(&original, |e| {
        is_tool_result(e, "root.scout.1", "web_search")
    });
    let edit = pb::fork_edit::Edit::ToolResult(pb::ToolResultEdit {
        result: "EDITED".into(),
        is_error: false,
    });
    let fork = fork_to_end(&client, &origin, at, Some(edit))
        .await
        .expect("fork");
    check_fork_stream(&fork, &origin, at);
    assert_eq!(output(&fork), "boss: scout: EDITED");
    // What the fork spent is what it ran live, the same whether the run
    // or its root agent says it (the scout its origin ran is not counted).
    let run_usage = match fork.last().and_then(|e| e.payload.as_ref()) {
        Some(Payload::RunCompleted(c)) => c.usage.clone().expect("usage"),
        other => panic!("{other:?}"),
    };
    let root_usage = fork
        .iter()
        .rev()
        .find_map(|e| match &e.payload {
            Some(Payload::AgentCompleted(a)) if e.context_id == "root" => a.usage.clone(),
            _ => None,
        })
        .expect("the root agent's end");
    assert_eq!(
        (
            root_usage.input_tokens,
            root_usage.output_tokens,
            root_usage.model_calls
        ),
        (
            run_usage.input_tokens,
            run_usage.output_tokens,
            run_usage.model_calls
        )
    );
    assert_eq!(
        host.seen.requests.lock().expect("seen").len(),
        searched,
        "the tool server was not called again"
    );
    assert_ne!(fork[0].run_id, origin, "a new run");
    assert_ne!(fork[0].trace_id, original[0].trace_id, "a new trace");
    // The replayed part is the original's, less the in-flight call's
    // re-sent events; the edited point follows it, live.
    let replayed: Vec<&pb::RunEvent> = fork.iter().filter(|e| e.replayed).collect();
    for e in &replayed {
        let same = original
            .iter()
            .any(|o| o.payload == e.payload && o.context_id == e.context_id)
            || matches!(e.payload, Some(Payload::RunStarted(_)));
        assert!(same, "a replayed event is the original's: {e:?}");
    }
    let edited = &fork[replayed.len()];
    assert!(
        matches!(&edited.payload, Some(Payload::ToolCallCompleted(c)) if c.result == "EDITED"),
        "{edited:?}"
    );
    assert_eq!(edited.context_id, "root.scout.1");

    // GetRun and ListRuns name the origin.
    let got = client.get_run(&fork[0].run_id).await.expect("get");
    let from = got.forked_from.expect("forked_from");
    assert_eq!(
        (from.run_id.as_str(), from.seq, from.edited),
        (origin.as_str(), at, true)
    );
    let listed = client
        .list_runs(pb::RunStatus::Unspecified, 10, "")
        .await
        .expect("list");
    let entry = listed
        .runs
        .iter()
        .find(|r| r.run_id == fork[0].run_id)
        .expect("listed");
    assert_eq!(
        entry.forked_from.as_ref().map(|f| (f.seq, f.edited)),
        Some((at, true))
    );

    // Without an edit, the point is done again, live: one more search.
    let retry = fork_to_end(&client, &origin, at, None)
        .await
        .expect("retry");
    check_fork_stream(&retry, &origin, at);
    let edited_of = |events: &[pb::RunEvent]| match &events[0].payload {
        Some(Payload::RunStarted(s)) => s.forked_from.as_ref().map(|f| f.edited),
        _ => None,
    };
    assert_eq!(edited_of(&retry), Some(false), "a retry is no edit");
    assert_eq!(edited_of(&fork), Some(true));
    assert_eq!(output(&retry), output(&original));
    assert_eq!(host.seen.requests.lock().expect("seen").len(), searched + 1);

    // A fork of the fork, at its edited point, with another edit.
    let fork_id = fork[0].run_id.clone();
    let at2 = edited.seq;
    let edit = pb::fork_edit::Edit::ToolResult(pb::ToolResultEdit {
        result: "SECOND".into(),
        is_error: false,
    });
    let second = fork_to_end(&client, &fork_id, at2, Some(edit))
        .await
        .expect("fork of fork");
    check_fork_stream(&second, &fork_id, at2);
    assert_eq!(output(&second), "boss: scout: SECOND");
    assert_eq!(host.seen.requests.lock().expect("seen").len(), searched + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_asks_the_model_only_after_its_fork_point_and_the_model_reads_the_edit() {
    let fake = FakeOpenAi::start(vec![
        Reply::Stream(vec![
            tool_fragment(0, Some("call_a"), Some("sleep"), r#"{"ms":1}"#),
            finish("tool_calls"),
            usage(10, 5),
        ]),
        Reply::Stream(vec![text("first answer"), finish("stop"), usage(20, 2)]),
        Reply::Stream(vec![text("second answer"), finish("stop"), usage(20, 2)]),
    ])
    .await
    .expect("fake openai");
    let agents = format!(
        r#"
providers:
  openai:
    base_url: "{}"
    api_key_env: TEST_OPENAI_KEY
    timeout: 5s
agents:
  gpt:
    model: "openai:gpt-test"
    tools: [sleep]
"#,
        fake.base_url()
    );
    let server =
        OrchestratorServer::start_with_env(&agents, None, |_| {}, &[("TEST_OPENAI_KEY", "sk")])
            .await
            .expect("orchestrator");
    let client = server.client().await.expect("client");
    let original = run_to_end(&client, "gpt", "nap").await;
    assert_eq!(output(&original), "first answer");
    assert_eq!(fake.requests().len(), 2);

    let at = seq_of(&original, |e| is_tool_result(e, "root", "sleep"));
    let edit = pb::fork_edit::Edit::ToolResult(pb::ToolResultEdit {
        result: "the nap was cancelled".into(),
        is_error: true,
    });
    let fork = fork_to_end(&client, &original[0].run_id, at, Some(edit))
        .await
        .expect("fork");
    assert_eq!(output(&fork), "second answer");
    // The fork spent its live turn's tokens, not its origin's.
    let spent = match fork.last().and_then(|e| e.payload.as_ref()) {
        Some(Payload::RunCompleted(c)) => c.usage.clone().expect("usage"),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        (spent.input_tokens, spent.output_tokens, spent.model_calls),
        (20, 2, 1),
        "{spent:?}"
    );
    let requests = fake.requests();
    assert_eq!(
        requests.len(),
        3,
        "one model call: the turn after the point"
    );
    let asked = requests[2].body.to_string();
    assert!(
        asked.contains("error: the nap was cancelled"),
        "the model read the edited result: {asked}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_fork_points_and_edits_are_refused_naming_the_field_and_start_nothing() {
    let (_host, server, client) = boss().await;
    let original = run_to_end(&client, "boss", "rust").await;
    let origin = original[0].run_id.clone();
    let last = original.last().expect("events").seq;
    let tool_result = seq_of(&original, |e| {
        is_tool_result(e, "root.scout.1", "web_search")
    });
    let model_turn = seq_of(&original, |e| {
        matches!(e.payload, Some(Payload::MessageCompleted(_)))
    });
    let runs_before = client
        .list_runs(pb::RunStatus::Unspecified, 100, "")
        .await
        .expect("list")
        .runs
        .len();
    let turn_edit = |args: &str| {
        pb::fork_edit::Edit::ModelTurn(pb::ModelTurnEdit {
            text: String::new(),
            tool_calls: vec![pb::ToolCall {
                call_id: "1".into(),
                tool: "web_search".into(),
                arguments_json: args.into(),
            }],
        })
    };
    let cases: Vec<(u64, Option<pb::fork_edit::Edit>, Code, &str)> = vec![
        (0, None, Code::InvalidArgument, "at_seq"),
        (last + 1, None, Code::OutOfRange, "at_seq"),
        (1, None, Code::InvalidArgument, "at_seq"),
        (
            tool_result,
            Some(turn_edit("{}")),
            Code::InvalidArgument,
            "edit.model_turn",
        ),
        (
            model_turn,
            Some(pb::fork_edit::Edit::Input("x".into())),
            Code::InvalidArgument,
            "edit.input",
        ),
        (
            model_turn,
            Some(turn_edit("[1]")),
            Code::InvalidArgument,
            "edit.model_turn.tool_calls[0].arguments_json",
        ),
        (
            model_turn,
            Some(turn_edit("{nope")),
            Code::InvalidArgument,
            "edit.model_turn.tool_calls[0].arguments_json",
        ),
        // Neither a text nor a call: a turn that says nothing.
        (
            model_turn,
            Some(pb::fork_edit::Edit::ModelTurn(pb::ModelTurnEdit {
                text: "  ".into(),
                tool_calls: Vec::new(),
            })),
            Code::InvalidArgument,
            "edit.model_turn",
        ),
    ];
    for (at, edit, code, field) in cases {
        let err = fork_to_end(&client, &origin, at, edit)
            .await
            .expect_err("refused");
        assert_eq!(err.code(), code, "at {at}: {}", err.message());
        assert!(
            err.message().starts_with(&format!("{field}: ")),
            "at {at}: names {field}: {}",
            err.message()
        );
    }
    // An unknown run, and a malformed id.
    let err = fork_to_end(&client, "01900000-0000-7000-8000-000000000000", 1, None)
        .await
        .expect_err("unknown");
    assert_eq!(err.code(), Code::NotFound);
    let err = fork_to_end(&client, "nope", 1, None)
        .await
        .expect_err("bad id");
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().starts_with("run_id: "), "{}", err.message());
    let runs_after = client
        .list_runs(pb::RunStatus::Unspecified, 100, "")
        .await
        .expect("list")
        .runs
        .len();
    assert_eq!(runs_after, runs_before, "nothing started");

    // A run whose history was evicted for room: refused, saying so; GetRun
    // still answers, and says its history is gone.
    server.core.runs().expire_finished_logs_now();
    let err = fork_to_end(&client, &origin, tool_result, None)
        .await
        .expect_err("history gone");
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(
        err.message().contains("no longer kept"),
        "{}",
        err.message()
    );
    let got = client.get_run(&origin).await.expect("get");
    assert!(got.history_gone);
    assert_eq!(got.output, output(&original));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_run_cannot_be_forked() {
    let dir = std::env::temp_dir().join(format!("baton-fork-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let keys = dir.join("keys");
    std::fs::write(
        &keys,
        "acme acme-key-0123456789\nglobex globex-key-9876543210\n",
    )
    .expect("keys");
    let host = TestToolHost::start().await.expect("tool host");
    let server = OrchestratorServer::start(&agents(&host.endpoint()), None, move |c| {
        c.auth.api_keys_file = keys.clone();
    })
    .await
    .expect("orchestrator");
    let acme = server
        .client()
        .await
        .expect("client")
        .with_api_key("acme-key-0123456789")
        .expect("key");
    let globex = server
        .client()
        .await
        .expect("client")
        .with_api_key("globex-key-9876543210")
        .expect("key");
    let original = run_to_end(&acme, "boss", "rust").await;
    let at = seq_of(&original, |e| {
        is_tool_result(e, "root.scout.1", "web_search")
    });
    let err = fork_to_end(&globex, &original[0].run_id, at, None)
        .await
        .expect_err("another tenant's");
    assert_eq!(err.code(), Code::NotFound);
    let fork = fork_to_end(&acme, &original[0].run_id, at, None)
        .await
        .expect("own");
    assert_eq!(output(&fork), output(&original));
}

/// Durable runs: a fork is forked on any replica from the run store, is
/// durable itself (its replayed part is in the store before it starts:
/// every replica serves it from seq 1), and a fork at a person's decision
/// takes the edited decision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_runs_fork_is_made_on_any_replica_and_kept_in_the_run_store() {
    let redis = RedisServer::start().expect("redis");
    let (a, b) = (
        OrchestratorServer::start(baton_e2e::EXAMPLE_AGENTS, None, durable_runs(redis.url()))
            .await
            .expect("a"),
        OrchestratorServer::start(baton_e2e::EXAMPLE_AGENTS, None, durable_runs(redis.url()))
            .await
            .expect("b"),
    );
    let (ca, cb) = (a.client().await.expect("a"), b.client().await.expect("b"));
    // billing asks a person before its refund; approve it on a.
    let mut request = baton_e2e::agent_request("billing", "refund order 42");
    request.approval_mode = pb::ApprovalMode::AutoApprove as i32;
    let original = ca.run_agent_to_end(request).await.expect("run");
    let origin = original[0].run_id.clone();
    let decided = seq_of(&original, |e| {
        matches!(e.payload, Some(Payload::ToolCallCompleted(_)))
    });
    // Forked on b, which never had the run.
    let edit = pb::fork_edit::Edit::ToolResult(pb::ToolResultEdit {
        result: "refund refused by the bank".into(),
        is_error: true,
    });
    let fork = fork_to_end(&cb, &origin, decided, Some(edit))
        .await
        .expect("fork");
    check_fork_stream(&fork, &origin, decided);
    // a serves the fork's whole history from the run store, replayed
    // marks included.
    let fork_id = fork[0].run_id.clone();
    let mut watched = Vec::new();
    let mut events = ca.watch_run(&fork_id, 0, None).await.expect("watch");
    while let Some(e) = tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .expect("in time")
    {
        watched.push(e.expect("event"));
    }
    assert_eq!(watched.len(), fork.len());
    for (w, f) in watched.iter().zip(&fork) {
        assert_eq!(
            (w.seq, w.replayed, &w.payload),
            (f.seq, f.replayed, &f.payload)
        );
        assert_eq!((&w.run_id, &w.trace_id), (&fork_id, &fork[0].trace_id));
    }
    assert!(
        output(&fork).contains("error: refund refused by the bank"),
        "{}",
        output(&fork)
    );
    let got = ca.get_run(&fork_id).await.expect("get");
    assert_eq!(
        got.forked_from.map(|f| (f.seq, f.edited)),
        Some((decided, true))
    );
    // A fork of the fork on a, from the store's recording: a retry of the
    // edited point does the tool call again, live.
    let edited = fork.iter().find(|e| !e.replayed).expect("edited").seq;
    let again = fork_to_end(&ca, &fork_id, edited, None)
        .await
        .expect("fork of fork");
    check_fork_stream(&again, &fork_id, edited);
    assert_eq!(output(&again), output(&original));
}

/// A long run (more than one packed chunk of the log) forked at its last
/// tool result: the fork's replayed part is the original's, event for
/// event, on its stream and from its log (WatchRun from seq 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_runs_fork_replays_every_event_before_its_point() {
    let agents = r#"
scripts:
  looper:
    - {calls: [{tool: list_context, args: {}}], repeat: 150}
    - {text: "done"}
agents:
  looper: {model: "scripted:looper", tools: [list_context]}
"#;
    let server = OrchestratorServer::start(agents, None, |c| c.runs.max_turns = 200)
        .await
        .expect("orchestrator");
    let client = server.client().await.expect("client");
    let original = run_to_end(&client, "looper", "go").await;
    assert!(original.len() > 600);
    // A finished run's log is packed in the background, a chunk at a time;
    // once it is, a fork copies the packed chunks it replays unchanged
    // (`run::log::PackedChunk`) instead of encoding their events again.
    // Both ways, the fork's log must read back as its stream (below).
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let at = original
        .iter()
        .rev()
        .find(|e| matches!(e.payload, Some(Payload::ToolCallCompleted(_))))
        .expect("a tool result")
        .seq;
    let edit = pb::fork_edit::Edit::ToolResult(pb::ToolResultEdit {
        result: "[]".into(),
        is_error: false,
    });
    let fork = fork_to_end(&client, &original[0].run_id, at, Some(edit))
        .await
        .expect("fork");
    check_fork_stream(&fork, &original[0].run_id, at);
    let replayed: Vec<&pb::RunEvent> = fork.iter().filter(|e| e.replayed).collect();
    assert_eq!(replayed.len() as u64, at - 1, "nothing was in flight");
    for (f, o) in replayed.iter().zip(&original).skip(1) {
        assert_eq!(
            (f.seq, &f.context_id, &f.payload),
            (o.seq, &o.context_id, &o.payload)
        );
        assert_eq!(f.run_id, fork[0].run_id);
    }
    let watched: Vec<pb::RunEvent> = client
        .watch_run(&fork[0].run_id, 0, None)
        .await
        .expect("watch")
        .map(|e| e.expect("event"))
        .collect()
        .await;
    assert_eq!(watched, fork, "the fork's log is its stream");
}

/// A durable fork survives a SIGKILL of its replica: three replica
/// processes on one Redis; a billing run answered on r0, forked there at
/// its first model turn (a retry: the turn is done again and the refund
/// asks again), then r0 is killed while the fork waits for the person.
/// Another replica resumes the fork, which takes the answer and completes:
/// its replayed part stays, its redone turn is not redone again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_fork_survives_a_sigkill_of_its_replica() {
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
    std::fs::write(&agents, baton_e2e::EXAMPLE_AGENTS).expect("agents");
    let mut cluster = Cluster::start(&options, &agents, dir.path())
        .await
        .expect("cluster");
    let endpoints = cluster.endpoints();
    let client = |i: usize| OrchestratorClient::connect(endpoints[i].clone());
    let (c0, c1) = (client(0).await.expect("r0"), client(1).await.expect("r1"));

    // The original, answered on r0.
    let mut request = baton_e2e::agent_request("billing", "refund order 7");
    request.approval_mode = pb::ApprovalMode::Ask as i32;
    request.detach = true;
    let mut events = c0.run_agent(request).await.expect("run");
    let mut original = Vec::new();
    while let Some(e) = events.next().await {
        let e = e.expect("event");
        if let Some(Payload::ApprovalRequested(a)) = &e.payload {
            c0.resolve_approval(&e.run_id, &a.approval_id, true, "ok")
                .await
                .expect("approve");
        }
        original.push(e);
    }
    assert!(
        output(&original).starts_with("Done."),
        "{}",
        output(&original)
    );
    let turn = seq_of(&original, |e| {
        matches!(e.payload, Some(Payload::MessageCompleted(_)))
    });

    // The fork, on r0, until it waits for the person.
    let mut fork = c0
        .fork_run(pb::ForkRunRequest {
            run_id: original[0].run_id.clone(),
            at_seq: turn,
            detach: true,
            ..Default::default()
        })
        .await
        .expect("fork");
    let mut before_kill = Vec::new();
    while let Some(e) = fork.next().await {
        let e = e.expect("event");
        let asked = matches!(e.payload, Some(Payload::ApprovalRequested(_)));
        before_kill.push(e);
        if asked {
            break;
        }
    }
    let fork_id = before_kill[0].run_id.clone();
    drop(fork);
    cluster.replicas[0].kill();

    // Another replica resumes it; the person answers there.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let approval = loop {
        let got = c1.get_run(&fork_id).await.expect("get");
        let mut watched = c1.watch_run(&fork_id, 0, None).await.expect("watch");
        let mut open = None;
        while let Ok(Some(e)) =
            tokio::time::timeout(Duration::from_millis(500), watched.next()).await
        {
            match e.expect("event").payload {
                Some(Payload::ApprovalRequested(a)) => open = Some(a.approval_id),
                Some(Payload::ApprovalResolved(_)) => open = None,
                _ => {}
            }
        }
        if let Some(id) = open
            && c1.resolve_approval(&fork_id, &id, true, "ok").await.is_ok()
        {
            break id;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the fork was not resumed and answerable in time (status {})",
            got.status
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert!(!approval.is_empty());
    let mut after = Vec::new();
    let mut watched = c1.watch_run(&fork_id, 0, None).await.expect("watch");
    while let Some(e) = tokio::time::timeout(Duration::from_secs(20), watched.next())
        .await
        .expect("the fork ends in time")
    {
        after.push(e.expect("event"));
    }
    assert_eq!(output(&after), output(&original), "the fork completed");
    for (i, e) in after.iter().enumerate() {
        assert_eq!(e.seq, i as u64 + 1, "gap-free");
    }
    // The replayed part is there, as streamed before the kill.
    let replayed = after.iter().take_while(|e| e.replayed).count();
    assert!(replayed > 0);
    for (a, b) in after.iter().zip(&before_kill).take(replayed) {
        assert_eq!((a.seq, &a.payload), (b.seq, &b.payload));
    }
    assert_eq!(
        after
            .iter()
            .filter(|e| matches!(e.payload, Some(Payload::RunResumed(_))))
            .count(),
        1,
        "resumed once"
    );
    let redone_turns = after
        .iter()
        .filter(|e| !e.replayed)
        .filter(|e| {
            matches!(&e.payload, Some(Payload::MessageCompleted(m)) if m.text == "I will record the refund.")
        })
        .count();
    assert_eq!(
        redone_turns, 1,
        "the retried turn is not done again after the resume"
    );
}

/// A run-context edit takes the point as recorded and sets the run context
/// from there on: the fork ends with it (the tools after the point add to
/// it as they did); a context that is not a JSON object, or over
/// `runs.max_run_context_bytes` (at the limit it is taken), is refused
/// naming `edit.run_context_json`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_context_edit_takes_the_point_as_recorded_then_sets_the_context() {
    let server = OrchestratorServer::start(baton_e2e::EXAMPLE_AGENTS, None, |c| {
        c.runs.max_run_context_bytes = 64
    })
    .await
    .expect("orchestrator");
    let client = server.client().await.expect("client");
    let original = run_to_end(&client, "researcher", "tides").await;
    let at = seq_of(&original, |e| {
        is_tool_result(e, "root.summarizer.1", "fact_checker")
    });
    let edit = |json: &str| Some(pb::fork_edit::Edit::RunContextJson(json.into()));
    // 64 bytes: at the limit.
    let context = format!(r#"{{"budget":"{}"}}"#, "x".repeat(64 - 13));
    assert_eq!(context.len(), 64);
    let fork = fork_to_end(&client, &original[0].run_id, at, edit(&context))
        .await
        .expect("fork");
    check_fork_stream(&fork, &original[0].run_id, at);
    assert_eq!(output(&fork), output(&original), "the point as recorded");
    let done = match &fork.last().and_then(|e| e.payload.as_ref()) {
        Some(Payload::RunCompleted(c)) => c.run_context_json.clone(),
        other => panic!("{other:?}"),
    };
    let done: serde_json::Value = serde_json::from_str(&done).expect("json");
    assert_eq!(done["budget"], "x".repeat(51), "{done}");
    let point = fork.iter().find(|e| e.seq == at).expect("the point");
    assert!(point.replayed, "the point itself is replayed");
    // One byte over, and not an object.
    let over = format!(r#"{{"budget":"{}"}}"#, "x".repeat(52));
    for (json, code) in [
        (over.as_str(), Code::ResourceExhausted),
        ("[1]", Code::InvalidArgument),
    ] {
        let err = fork_to_end(&client, &original[0].run_id, at, edit(json))
            .await
            .expect_err("refused");
        assert_eq!(err.code(), code, "{}", err.message());
        assert!(
            err.message().starts_with("edit.run_context_json: "),
            "{}",
            err.message()
        );
    }
}

const PEOPLE: &str = r#"
scripts:
  payer:
    - {calls: [{tool: write_context, args: {key: "pay/order", value: "42"}}]}
    - {text: "payer saw: {{results}}"}
  interviewer:
    - {calls: [{tool: ask_user, args: {question: "Which city?", options: [Paris, Lisbon]}}]}
    - {text: "planned {{results}}"}
  echo: [{text: "echo of {{input}}"}]
agents:
  payer:
    model: "scripted:payer"
    tools: [write_context]
    approvals: {write_context: always}
  interviewer: {model: "scripted:interviewer", tools: [ask_user]}
  echo: {model: "scripted:echo"}
"#;

/// The edits at a person's answer and at a step's end, end to end: an
/// approval granted in the run and denied in the fork (the fork's
/// `ApprovalResolved` says the fork's edit decided, not a person), an
/// input answered Paris and Lisbon in the fork, a step's output replaced
/// (the next step reads the replacement). Each fork runs on from its point
/// with the edit, and says so in the point's event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_input_and_step_output_edits_reach_what_runs_after_them() {
    use pb::fork_edit::Edit;
    let server = OrchestratorServer::start(PEOPLE, None, |_| {})
        .await
        .expect("orchestrator");
    let client = server.client().await.expect("client");

    // An approval, granted by a person in the run.
    let mut request = baton_e2e::agent_request("payer", "x");
    request.approval_mode = pb::ApprovalMode::Ask as i32;
    let mut stream = client.run_agent(request).await.expect("run");
    let mut origin = Vec::new();
    while let Some(e) = stream.next().await {
        let e = e.expect("event");
        if let Some(Payload::ApprovalRequested(a)) = &e.payload {
            client
                .resolve_approval(&e.run_id, &a.approval_id, true, "fine")
                .await
                .expect("approve");
        }
        origin.push(e);
    }
    assert!(!output(&origin).contains("denied"), "{}", output(&origin));
    let at = seq_of(&origin, |e| {
        matches!(e.payload, Some(Payload::ApprovalResolved(_)))
    });
    let fork = fork_to_end(
        &client,
        &origin[0].run_id,
        at,
        Some(Edit::Approval(pb::ApprovalEdit {
            approved: false,
            reason: "too costly".into(),
        })),
    )
    .await
    .expect("fork");
    check_fork_stream(&fork, &origin[0].run_id, at);
    let resolved: Vec<&pb::ApprovalResolved> = fork
        .iter()
        .filter_map(|e| match &e.payload {
            Some(Payload::ApprovalResolved(r)) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(resolved.len(), 1);
    assert!(!resolved[0].approved);
    assert_eq!(resolved[0].reason, "too costly");
    assert_eq!(resolved[0].source, pb::ApprovalSource::Fork as i32);
    assert!(
        output(&fork).contains("denied: too costly"),
        "the model read the denial: {}",
        output(&fork)
    );

    // An input, answered Paris in the run, Lisbon in the fork.
    let mut stream = client
        .run_agent(baton_e2e::agent_request("interviewer", "x"))
        .await
        .expect("run");
    let mut origin = Vec::new();
    while let Some(e) = stream.next().await {
        let e = e.expect("event");
        if let Some(Payload::InputRequested(q)) = &e.payload {
            client
                .submit_input(&e.run_id, &q.input_id, "Paris")
                .await
                .expect("answer");
        }
        origin.push(e);
    }
    assert!(output(&origin).contains("Paris"), "{}", output(&origin));
    let at = seq_of(&origin, |e| {
        matches!(e.payload, Some(Payload::InputReceived(_)))
    });
    let fork = fork_to_end(
        &client,
        &origin[0].run_id,
        at,
        Some(Edit::Input("Lisbon".into())),
    )
    .await
    .expect("fork");
    check_fork_stream(&fork, &origin[0].run_id, at);
    assert!(
        fork.iter()
            .any(|e| matches!(&e.payload, Some(Payload::InputReceived(r)) if r.input == "Lisbon"))
    );
    assert!(output(&fork).contains("Lisbon"), "{}", output(&fork));
    assert!(!output(&fork).contains("Paris"), "{}", output(&fork));

    // A step's output, replaced: the next step reads the replacement.
    let step = |id: &str, task: &str| pb::PipelineStep {
        id: id.into(),
        agent: "echo".into(),
        task: task.into(),
        ..Default::default()
    };
    let mut first = step("first", "one");
    first.output_to = "notes".into();
    let mut second = step("second", "two");
    second.input_from = vec!["notes".into()];
    let origin = client
        .run_pipeline_to_end(pb::RunPipelineRequest {
            pipeline: Some(pb::PipelineSpec {
                name: "two".into(),
                steps: vec![first, second],
                mode: pb::PipelineMode::Sequential as i32,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .expect("pipeline");
    let at = seq_of(
        &origin,
        |e| matches!(&e.payload, Some(Payload::StepCompleted(s)) if s.step_id == "first"),
    );
    let fork = fork_to_end(
        &client,
        &origin[0].run_id,
        at,
        Some(Edit::StepOutput("edited notes".into())),
    )
    .await
    .expect("fork");
    check_fork_stream(&fork, &origin[0].run_id, at);
    let outputs: Vec<(String, String)> = fork
        .iter()
        .filter_map(|e| match &e.payload {
            Some(Payload::StepCompleted(s)) => Some((s.step_id.clone(), s.output.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(outputs[0], ("first".into(), "edited notes".into()));
    assert!(
        outputs[1].1.contains("edited notes") && !outputs[1].1.contains("echo of one"),
        "the next step read the edit: {outputs:?}"
    );
}
