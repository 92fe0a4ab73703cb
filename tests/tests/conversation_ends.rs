//! How a run's end reaches its conversation (issue 55): a run that ends
//! through a `final` tool-output policy is its conversation's completed
//! answer; a run parked in memory that is cancelled or times out asleep
//! still appends its input, marked interrupted, and gives the turn back.

use std::time::Duration;

use baton_client::{OrchestratorClient, pb, pb::run_event::Payload};
use baton_e2e::{OrchestratorServer, eventually};
use futures::StreamExt;

const AGENTS: &str = r#"
policies:
  stop: {final: true, tools: [write_context]}
scripts:
  finisher:
    - calls: [{tool: write_context, args: {key: k, value: "the final word"}}]
    - text: "never reached"
  payer:
    - {calls: [{tool: write_context, args: {key: "paid/{{input}}", value: "yes"}}]}
    - {text: "paid {{results}}"}
  chat:
    - text: "You said: {{input}}. Before that: {{history}}"
  slow:
    - text: "slowly: {{input}}"
      delay: 1500ms
agents:
  slow: {model: "scripted:slow"}
  finisher: {model: "scripted:finisher", tools: [write_context], policies: [stop]}
  payer: {model: "scripted:payer", tools: [write_context], approvals: {write_context: always}}
  chat: {model: "scripted:chat"}
"#;

fn send(agent: &str, input: &str, conversation: &str) -> pb::RunAgentRequest {
    pb::RunAgentRequest {
        agent: agent.into(),
        input: input.into(),
        conversation_id: conversation.into(),
        new_conversation: conversation.is_empty(),
        ..Default::default()
    }
}

async fn run(client: &OrchestratorClient, r: pb::RunAgentRequest) -> Vec<pb::RunEvent> {
    let mut stream = client.run_agent(r).await.expect("run");
    let mut out = Vec::new();
    while let Some(e) = stream.next().await {
        out.push(e.expect("event"));
    }
    out
}

fn conversation_of(log: &[pb::RunEvent]) -> String {
    log.iter()
        .find_map(|e| match &e.payload {
            Some(Payload::RunStarted(s)) => Some(s.conversation_id.clone()),
            _ => None,
        })
        .expect("RunStarted")
}

fn said(c: &pb::Conversation) -> Vec<(i32, String, bool)> {
    c.messages
        .iter()
        .map(|m| {
            let msg = m.message.as_ref().expect("a message");
            (msg.role, msg.content.clone(), m.interrupted)
        })
        .collect()
}

const USER: i32 = pb::Role::User as i32;
const ASSISTANT: i32 = pb::Role::Assistant as i32;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_ended_by_a_final_tool_output_is_its_conversations_completed_answer() {
    let server = OrchestratorServer::start(AGENTS, None, |_| {})
        .await
        .expect("server");
    let client = server.client().await.expect("client");
    let log = run(&client, send("finisher", "go", "")).await;
    let Some(Payload::RunCompleted(done)) = log.last().and_then(|e| e.payload.clone()) else {
        panic!("{:?}", log.last())
    };
    let id = conversation_of(&log);
    let c = client.get_conversation(&id, 0, "", 0).await.expect("get");
    assert_eq!(c.runs.len(), 1);
    assert_eq!(c.runs[0].status, pb::RunStatus::Completed as i32, "{c:?}");
    let said = said(&c);
    assert!(
        said.iter().all(|(_, _, interrupted)| !interrupted),
        "{said:?}"
    );
    assert_eq!(said[0], (USER, "go".into(), false));
    assert_eq!(
        said.last().cloned(),
        Some((ASSISTANT, done.output.clone(), false)),
        "the tool's output is the answer"
    );
    // The next message continues after it.
    let next = run(&client, send("chat", "and then?", &id)).await;
    assert!(matches!(
        next.last().and_then(|e| e.payload.as_ref()),
        Some(Payload::RunCompleted(_))
    ));
    server.shutdown().await.expect("shutdown");
}

/// Starts `payer` detached in a new conversation and reads until it asks
/// its approval; its run and conversation ids.
async fn asking(client: &OrchestratorClient, limits: Option<pb::RunLimits>) -> (String, String) {
    let mut r = send("payer", "y", "");
    r.detach = true;
    r.limits = limits;
    let mut stream = client.run_agent(r).await.expect("run");
    let mut conversation = String::new();
    while let Some(e) = stream.next().await {
        let e = e.expect("event");
        match e.payload {
            Some(Payload::RunStarted(s)) => conversation = s.conversation_id,
            Some(Payload::ApprovalRequested(_)) => return (e.run_id, conversation),
            _ => {}
        }
    }
    panic!("the run ended before it asked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_parked_in_memory_that_ends_asleep_appends_its_input_and_gives_the_turn_back() {
    let server = OrchestratorServer::start(AGENTS, None, |c| {
        c.runs.park_after = Duration::from_millis(200);
    })
    .await
    .expect("server");
    let client = server.client().await.expect("client");
    let runs = server.core.runs().clone();
    let timeout = Some(pb::RunLimits {
        run_timeout: Some(baton_proto::wkt::Duration {
            seconds: 2,
            nanos: 0,
        }),
        ..Default::default()
    });
    for (limits, status) in [
        (None, pb::RunStatus::Cancelled),
        (timeout, pb::RunStatus::Failed),
    ] {
        let (run_id, id) = asking(&client, limits).await;
        eventually("the run is parked", || {
            let asleep = runs.get(&run_id).is_ok_and(|r| r.is_asleep());
            async move { asleep }
        })
        .await;
        if status == pb::RunStatus::Cancelled {
            client.cancel(&run_id, "never mind").await.expect("cancel");
        }
        eventually("the run ended", || async {
            client
                .get_run(&run_id)
                .await
                .is_ok_and(|r| r.status == status as i32)
        })
        .await;
        let c = client.get_conversation(&id, 0, "", 0).await.expect("get");
        assert_eq!(c.runs.len(), 1, "{c:?}");
        assert_eq!(c.runs[0].status, status as i32, "{c:?}");
        assert!(c.running_run_id.is_empty(), "the turn is given back");
        assert_eq!(said(&c)[0], (USER, "y".into(), true), "{c:?}");
        // The next message goes at once, after it.
        let next = run(&client, send("chat", "still there?", &id)).await;
        let Some(Payload::RunCompleted(done)) = next.last().and_then(|e| e.payload.clone()) else {
            panic!("{:?}", next.last())
        };
        assert!(done.output.contains("Before that: y"), "{}", done.output);
    }
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_message_moves_nothing_and_pages_follow_the_listing_in_memory_and_in_redis() {
    let redis = baton_e2e::RedisServer::start().expect("redis-server");
    for durable in [false, true] {
        let url = redis.url();
        let server = OrchestratorServer::start(AGENTS, None, |c| {
            if durable {
                baton_e2e::durable_runs(url)(c);
            }
            c.conversations.max_bytes = 200;
        })
        .await
        .expect("server");
        let client = server.client().await.expect("client");
        let mut ids = Vec::new();
        for input in ["first", "second", "third"] {
            let log = run(&client, send("chat", input, "")).await;
            ids.push(conversation_of(&log));
        }
        let listed = |size| {
            let client = client.clone();
            async move {
                let mut all = Vec::new();
                let mut token = String::new();
                loop {
                    let page = client.list_conversations(size, &token).await.expect("list");
                    all.extend(page.conversations.into_iter().map(|c| (c.id, c.updated_at)));
                    if page.next_page_token.is_empty() {
                        return all;
                    }
                    token = page.next_page_token;
                }
            }
        };
        let before = listed(10).await;
        // Each is listed with its first message.
        let previews: Vec<String> = client
            .list_conversations(10, "")
            .await
            .expect("list")
            .conversations
            .into_iter()
            .map(|c| c.preview)
            .collect();
        assert_eq!(previews, ["third", "second", "first"], "durable: {durable}");
        let newest_first: Vec<String> = ids.iter().rev().cloned().collect();
        assert_eq!(
            before.iter().map(|(id, _)| id.clone()).collect::<Vec<_>>(),
            newest_first
        );
        // A message over max_bytes to the oldest is refused...
        let over = client
            .run_agent(send("chat", &"x".repeat(300), &ids[0]))
            .await
            .err()
            .expect("over max_bytes");
        assert_eq!(over.code(), tonic::Code::ResourceExhausted, "{over}");
        // ...and changes nothing: not its place, not when it was used.
        assert_eq!(listed(10).await, before, "durable: {durable}");
        if durable {
            // A replica's clock behind Redis's, or an index entry written
            // late: the pages follow the listing's order, each once.
            redis
                .cli(&["ZINCRBY", "baton:convs:", "-5000", &ids[2]])
                .expect("ZINCRBY");
        }
        let paged: Vec<String> = listed(1).await.into_iter().map(|(id, _)| id).collect();
        let mut seen = paged.clone();
        seen.sort();
        seen.dedup();
        assert_eq!(
            (paged.len(), seen.len()),
            (3, 3),
            "durable: {durable}: {paged:?}"
        );
        server.shutdown().await.expect("shutdown");
    }
}

/// A run in a durable conversation whose replica stopped after writing its
/// end (its append with it, phase one) and before applying its append
/// (phase two): made here with the run store's and the conversation
/// store's own calls, as that replica left it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_written_with_a_runs_end_is_applied_by_the_next_message_when_its_replica_stopped_between()
 {
    use baton_orchestrator::conversation::{
        redis::RedisStore,
        store::{self, Begin, Begun, Finish, Key, Open, Store},
    };
    use baton_orchestrator::run::durable::{Append, RedisRuns, RunEnd, RunMeta};
    let redis = baton_e2e::RedisServer::start().expect("redis-server");
    let server = OrchestratorServer::start(AGENTS, None, baton_e2e::durable_runs(redis.url()))
        .await
        .expect("server");
    let client = server.client().await.expect("client");
    let first = run(&client, send("chat", "first", "")).await;
    let id = conversation_of(&first);

    let config = baton_store::redis::RedisConfig {
        url: redis.url(),
        ..Default::default()
    };
    let key = Key {
        tenant: String::new(),
        id: id.clone(),
    };
    let run_id = uuid::Uuid::now_v7().to_string();
    // It took the turn...
    let shared = baton_orchestrator::shared_state::SharedState::open(
        &config,
        "stopped",
        Duration::from_secs(60),
    )
    .expect("shared state");
    let conversations = RedisStore::new(shared.clone());
    let taken = conversations
        .begin(
            &key,
            &Begin {
                run_id: run_id.clone(),
                open: Open::Existing,
                hold_ms: 600_000,
                ttl_ms: 3_600_000,
                base: Vec::new(),
                branched_from: String::new(),
            },
        )
        .await
        .expect("begin");
    assert!(matches!(taken, Begun::Taken { .. }), "{taken:?}");
    // ...ran, and wrote its end with its append.
    let runs = RedisRuns::with_shared(
        shared,
        &config,
        Duration::from_secs(60),
        Duration::from_secs(5),
    );
    let meta = RunMeta {
        run_id: run_id.clone(),
        trace_id: "0af7651916cd43dd8448eb211c80319c".into(),
        tenant: String::new(),
        kind: pb::RunKind::Agent,
        target: "chat".into(),
        started_ms: 1,
        detached: false,
        status: pb::RunStatus::Running,
        ended_ms: None,
        output: String::new(),
        run_context_json: String::new(),
        usage: pb::Usage::default(),
        error_code: 0,
        error_message: String::new(),
        last_seq: 0,
        waiting_approvals: 0,
        waiting_inputs: 0,
        forked_from: None,
        replay_of: None,
        experiment: None,
        schedule: None,
        scores: Vec::new(),
        replay_strict: false,
        replay_diverged: false,
        conversation: None,
        conversation_end: None,
    };
    let epoch = runs
        .create(&meta, &[], Duration::from_secs(60))
        .await
        .expect("create");
    let message = |role: pb::Role, text: &str| pb::ConversationMessage {
        message: Some(pb::Message {
            role: role as i32,
            content: text.into(),
            ..Default::default()
        }),
        run_id: run_id.clone(),
        agent: "chat".into(),
        ..Default::default()
    };
    let messages = vec![
        message(pb::Role::User, "second"),
        message(pb::Role::Assistant, "answered before its replica stopped"),
    ];
    let c = client.get_conversation(&id, 0, "", 0).await.expect("get");
    let finish = Finish {
        run_id: run_id.clone(),
        fold: 0,
        summary: None,
        agent: "chat".into(),
        run: pb::ConversationRun {
            run_id: run_id.clone(),
            status: pb::RunStatus::Completed as i32,
            messages: 2,
            ended_at: None,
        },
        count: c.message_count + 2,
        bytes: c.bytes + messages.iter().map(store::size).sum::<u64>(),
        ttl_ms: 3_600_000,
        messages,
    };
    let end = RunEnd {
        status: pb::RunStatus::Completed,
        ended_ms: 2,
        output: "answered before its replica stopped".into(),
        run_context_json: String::new(),
        usage: None,
        error_code: 0,
        error_message: String::new(),
        replay_diverged: false,
        conversation: Some(finish.encode(&key)),
    };
    let terminal = pb::RunEvent {
        run_id: run_id.clone(),
        seq: 1,
        payload: Some(Payload::RunCompleted(pb::RunCompleted {
            output: end.output.clone(),
            ..Default::default()
        })),
        ..Default::default()
    };
    let written = runs
        .append(
            &run_id,
            epoch,
            &[terminal],
            &[],
            Some(&end),
            None,
            &Default::default(),
        )
        .await
        .expect("append");
    assert_eq!(written, Append::Done);

    // The next message finds the turn held by a run that ended, applies
    // what its record keeps, and goes on after it.
    let next = run(&client, send("chat", "third", &id)).await;
    let Some(Payload::RunCompleted(done)) = next.last().and_then(|e| e.payload.clone()) else {
        panic!("{:?}", next.last())
    };
    assert!(
        done.output.ends_with("Before that: first | second"),
        "{}",
        done.output
    );
    let c = client.get_conversation(&id, 0, "", 0).await.expect("get");
    let said: Vec<String> = said(&c).into_iter().map(|(_, t, _)| t).collect();
    assert_eq!(said.len(), 6, "{said:?}");
    assert_eq!(
        said[2..4],
        ["second", "answered before its replica stopped"]
    );
    assert_eq!(
        c.runs.iter().filter(|r| r.run_id == run_id).count(),
        1,
        "applied once"
    );
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_replica_appends_nothing_to_the_conversation() {
    let redis = baton_e2e::RedisServer::start().expect("redis-server");
    let server = OrchestratorServer::start(AGENTS, None, baton_e2e::durable_runs(redis.url()))
        .await
        .expect("server");
    let client = server.client().await.expect("client");
    let first = run(&client, send("chat", "first", "")).await;
    let id = conversation_of(&first);
    let mut stream = client
        .run_agent(send("slow", "fenced", &id))
        .await
        .expect("run");
    let run_id = stream
        .next()
        .await
        .expect("an event")
        .expect("event")
        .run_id;
    // Another replica claimed the run meanwhile (its epoch is raised): this
    // one may write nothing of it any more.
    redis
        .cli(&[
            "HINCRBY",
            &format!("baton:run:{{{run_id}}}:meta"),
            "epoch",
            "1",
        ])
        .expect("HINCRBY");
    // The client follows the run to where it goes on: it ends its stream
    // here (fenced), then re-attaches, and the replica that claims the run
    // (this one, once the lease lapses) resumes it.
    let mut resumed = false;
    while let Some(e) = stream.next().await {
        let e = e.expect("event");
        if let Some(Payload::RunResumed(_)) = e.payload {
            // The fenced end was not written: nothing of it is in the
            // conversation, whose turn is still the run's.
            let c = client.get_conversation(&id, 0, "", 0).await.expect("get");
            assert_eq!(c.message_count, 2, "nothing of the fenced run: {c:?}");
            assert_eq!(c.running_run_id, run_id, "still its turn");
            resumed = true;
        }
    }
    assert!(resumed, "the run was resumed");
    // The resumed run's end appends it, once.
    let c = client.get_conversation(&id, 0, "", 0).await.expect("get");
    assert_eq!(c.message_count, 4, "{c:?}");
    assert_eq!(c.runs.iter().filter(|r| r.run_id == run_id).count(), 1);
    assert!(c.running_run_id.is_empty());
    server.shutdown().await.expect("shutdown");
}

/// `summed` folds its conversation past four messages into a summary the
/// fake provider writes.
fn summing_agents(provider: &baton_e2e::openai::FakeOpenAi) -> String {
    format!(
        r#"
providers:
  fake: {{kind: openai, base_url: "{}", api_key_env: "", max_retries: 0}}
scripts:
  chat:
    - text: "You said: {{{{input}}}}. Before that: {{{{history}}}}"
      usage: {{input_tokens: 10, output_tokens: 5}}
agents:
  summed:
    model: "scripted:chat"
    conversation: {{compaction: summarize, max_messages: 4, keep_messages: 2, summary_model: "fake:summary"}}
"#,
        provider.base_url()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_summary_is_a_model_call_of_the_run_and_its_entering_holds_the_turn_briefly() {
    use baton_e2e::openai::{FakeOpenAi, Reply, finish, text, usage};
    let redis = baton_e2e::RedisServer::start().expect("redis-server");
    let provider = FakeOpenAi::start(vec![Reply::Slow(
        Duration::from_millis(1500),
        Box::new(Reply::Stream(vec![
            text("they said one and two"),
            finish("stop"),
            usage(100, 20),
        ])),
    )])
    .await
    .expect("provider");
    let server = OrchestratorServer::start(&summing_agents(&provider), None, |c| {
        baton_e2e::durable_runs(redis.url())(c);
        c.runs.model_timeout = Duration::from_secs(5);
        c.quotas.default.model_tokens_per_day = Some(100_000);
    })
    .await
    .expect("server");
    let client = server.client().await.expect("client");
    let first = run(&client, send("summed", "one", "")).await;
    let id = conversation_of(&first);
    run(&client, send("summed", "two", &id)).await;
    // The third folds the first two messages: a summary is asked for.
    let third = tokio::spawn({
        let client = client.clone();
        let id = id.clone();
        async move { run(&client, send("summed", "three", &id)).await }
    });
    eventually("the summary is asked for", || async {
        !provider.requests().is_empty()
    })
    .await;
    // While it is, the turn is held for as long as entering can take (twice
    // the model timeout and a half minute), not the run's hour.
    let meta = format!("baton:conv:{{:{id}}}:meta");
    let until: i64 = redis
        .cli(&["HGET", &meta, "running_until"])
        .expect("HGET")
        .trim()
        .parse()
        .expect("a time");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64;
    assert!(until - now < 41_000, "held for {} ms", until - now);
    let third = third.await.expect("joined");
    let Some(Payload::RunCompleted(done)) = third.last().and_then(|e| e.payload.clone()) else {
        panic!("{:?}", third.last())
    };
    // The summary was the run's first model call: its tokens are the
    // run's, and it went with a worst case reserved (its max_tokens).
    let u = done.usage.expect("usage");
    assert_eq!(
        (u.model_calls, u.input_tokens, u.output_tokens),
        (2, 110, 25)
    );
    assert!(provider.requests()[0].body["max_tokens"].is_number());
    server.shutdown().await.expect("shutdown");
}
