//! Conversations (issue 47): a follow-up continues where the last run
//! ended — over gRPC and HTTP, in memory and in Redis across replicas;
//! tool calls kept with their results; a group's last agent answers next;
//! one run at a time (20 racing senders, a refusal naming the running run);
//! a failed run appends its input marked; compaction (`window` keeps tool
//! pairs, `summarize` puts a summary first, `keep` refuses at the bound and
//! not just under it); bad input refused naming the field; delete takes
//! the runs' histories with it.

use std::time::Duration;

use baton_client::{OrchestratorClient, pb, pb::run_event::Payload};
use baton_e2e::{OrchestratorServer, RedisServer, durable_runs};
use futures::StreamExt;
use serde_json::{Value, json};
use tonic::Code;

const AGENTS: &str = r#"
scripts:
  chat:
    - text: "You said: {{input}}. Before that: {{history}}"
  slow:
    - text: "slowly: {{input}}"
      delay: 1500ms
  tooling:
    - calls: [{tool: helper, args: {task: "look up {{input}}"}}]
    - text: "found: {{results}}"
  helper:
    - text: "fact about {{input}}"
  triage:
    - text: "routing you"
      handoff: billing
  billing:
    - text: "billing here: {{input}}. Before that: {{history}}"
  broken:
    - fail: "the model is down"
  summarizer:
    - text: "they talked about numbers"
  fixed:
    - text: "ok"
agents:
  fixed: {model: "scripted:fixed"}
  chat: {model: "scripted:chat"}
  slow: {model: "scripted:slow"}
  tooling: {model: "scripted:tooling", tools: [helper]}
  helper: {model: "scripted:helper"}
  triage: {model: "scripted:triage", handoffs: [billing]}
  billing: {model: "scripted:billing"}
  broken: {model: "scripted:broken"}
  windowed:
    model: "scripted:chat"
    conversation: {compaction: window, max_messages: 4, keep_messages: 2}
  tool_window:
    model: "scripted:tooling"
    tools: [helper]
    conversation: {compaction: window, max_messages: 6, keep_messages: 3}
  summed:
    model: "scripted:chat"
    conversation: {compaction: summarize, max_messages: 4, keep_messages: 2, summary_model: "scripted:summarizer"}
groups:
  support: {root: triage, members: [triage, billing]}
"#;

fn send(agent: &str, input: &str, conversation: &str) -> pb::RunAgentRequest {
    pb::RunAgentRequest {
        agent: agent.into(),
        input: input.into(),
        conversation_id: conversation.into(),
        ..Default::default()
    }
}

fn start(agent: &str, input: &str) -> pb::RunAgentRequest {
    pb::RunAgentRequest {
        new_conversation: true,
        ..send(agent, input, "")
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

fn started(log: &[pb::RunEvent]) -> pb::RunStarted {
    log.iter()
        .find_map(|e| match &e.payload {
            Some(Payload::RunStarted(s)) => Some(s.clone()),
            _ => None,
        })
        .expect("RunStarted")
}

fn output(log: &[pb::RunEvent]) -> String {
    match log.last().and_then(|e| e.payload.as_ref()) {
        Some(Payload::RunCompleted(c)) => c.output.clone(),
        other => panic!("not completed: {other:?}"),
    }
}

fn texts(c: &pb::Conversation) -> Vec<(i32, String)> {
    c.messages
        .iter()
        .map(|m| {
            let msg = m.message.as_ref().expect("a message");
            (msg.role, msg.content.clone())
        })
        .collect()
}

const USER: i32 = pb::Role::User as i32;
const ASSISTANT: i32 = pb::Role::Assistant as i32;
const TOOL: i32 = pb::Role::Tool as i32;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_message_conversation_over_grpc_remembers_and_is_listed() {
    let server = OrchestratorServer::start(AGENTS, None, |_| {})
        .await
        .expect("server");
    let client = server.client().await.expect("client");
    let first = run(&client, start("chat", "my name is Ada")).await;
    let id = started(&first).conversation_id;
    assert!(id.starts_with("conv-"), "{id}");
    assert_eq!(started(&first).conversation_messages, 0);
    assert_eq!(
        output(&first),
        "You said: my name is Ada. Before that: (nothing)"
    );
    let second = run(&client, send("chat", "I like tea", &id)).await;
    assert_eq!(started(&second).conversation_messages, 2);
    assert_eq!(
        output(&second),
        "You said: I like tea. Before that: my name is Ada"
    );
    let third = run(&client, send("chat", "what do you know?", &id)).await;
    assert_eq!(
        output(&third),
        "You said: what do you know?. Before that: my name is Ada | I like tea"
    );
    let c = client.get_conversation(&id, 0, "", 0).await.expect("get");
    assert_eq!(c.message_count, 6);
    let said = texts(&c);
    assert_eq!(said.len(), 6);
    for (i, (role, _)) in said.iter().enumerate() {
        assert_eq!(*role, if i % 2 == 0 { USER } else { ASSISTANT }, "{said:?}");
    }
    assert_eq!(said[2].1, "I like tea");
    assert_eq!(c.runs.len(), 3);
    assert!(
        c.runs
            .iter()
            .all(|r| r.status == pb::RunStatus::Completed as i32)
    );
    assert_eq!(c.messages[5].agent, "chat");
    assert_eq!(c.messages[3].run_id, second[0].run_id);
    assert!(c.running_run_id.is_empty());
    // Paged from the newest, and in pages.
    let last = client.get_conversation(&id, 0, "", 2).await.expect("get");
    assert_eq!(last.messages.len(), 2);
    assert_eq!(last.messages[0].index, 4);
    let page = client.get_conversation(&id, 4, "", 0).await.expect("get");
    assert_eq!(
        (page.messages.len(), page.next_page_token.as_str()),
        (4, "4")
    );
    let rest = client.get_conversation(&id, 4, "4", 0).await.expect("get");
    assert_eq!(
        (rest.messages.len(), rest.next_page_token.as_str()),
        (2, "")
    );
    // Every face that lists runs shows a run's conversation.
    let got = client.get_run(&third[0].run_id).await.expect("get run");
    assert_eq!(got.conversation_id, id);
    let runs = client
        .list_runs(pb::RunStatus::Unspecified, 10, "")
        .await
        .expect("list runs");
    assert!(runs.runs.iter().all(|r| r.conversation_id == id));
    // Listed, most recent first; titled.
    let other = run(&client, start("chat", "another")).await;
    let other_id = started(&other).conversation_id;
    let listed = client.list_conversations(10, "").await.expect("list");
    let ids: Vec<&str> = listed.conversations.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, [other_id.as_str(), id.as_str()]);
    let page = client.list_conversations(1, "").await.expect("list");
    assert_eq!(page.conversations.len(), 1);
    let next = client
        .list_conversations(1, &page.next_page_token)
        .await
        .expect("list");
    assert_eq!(next.conversations[0].id, id);
    let titled = client
        .update_conversation(pb::UpdateConversationRequest {
            conversation_id: id.clone(),
            title: Some("Ada's tea".into()),
            labels: [("team".to_owned(), "x".to_owned())].into(),
        })
        .await
        .expect("update");
    assert_eq!(titled.title, "Ada's tea");
    assert_eq!(titled.labels.get("team").map(String::as_str), Some("x"));
    // Deleted with its runs' histories.
    let deleted = client.delete_conversation(&id).await.expect("delete");
    assert_eq!(deleted.runs_deleted, 3);
    let gone = client
        .get_conversation(&id, 0, "", 0)
        .await
        .expect_err("gone");
    assert_eq!(gone.code(), Code::NotFound);
    let run_gone = client.get_run(&first[0].run_id).await.expect_err("gone");
    assert_eq!(run_gone.code(), Code::NotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_stay_with_their_results_and_a_group_answers_with_its_last_agent() {
    let server = OrchestratorServer::start(AGENTS, None, |_| {})
        .await
        .expect("server");
    let client = server.client().await.expect("client");
    let log = run(&client, start("tooling", "tea")).await;
    let id = started(&log).conversation_id;
    let c = client.get_conversation(&id, 0, "", 0).await.expect("get");
    let roles: Vec<i32> = texts(&c).into_iter().map(|(r, _)| r).collect();
    assert_eq!(roles, [USER, ASSISTANT, TOOL, ASSISTANT]);
    let call = &c.messages[1].message.as_ref().expect("call").tool_calls[0];
    let result = c.messages[2].message.as_ref().expect("result");
    assert_eq!(call.tool, "helper");
    assert_eq!(result.tool_call_id, call.call_id);
    assert_eq!(result.content, "fact about look up tea");

    // The group: triage hands off to billing; the next message goes to
    // billing, which remembers the first.
    let log = run(&client, start("support", "refund please")).await;
    let id = started(&log).conversation_id;
    assert_eq!(
        client
            .get_conversation(&id, 0, "", 0)
            .await
            .expect("get")
            .agent,
        "billing"
    );
    let next = run(&client, send("support", "order 12", &id)).await;
    assert_eq!(
        output(&next),
        "billing here: order 12. Before that: refund please"
    );
    assert!(
        next.iter().all(|e| e.agent != "triage"),
        "triage answered again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_run_at_a_time_twenty_senders_never_interleave_and_a_refusal_names_the_run() {
    let server = OrchestratorServer::start(AGENTS, None, |_| {})
        .await
        .expect("server");
    let client = server.client().await.expect("client");
    let log = run(&client, start("chat", "m0")).await;
    let id = started(&log).conversation_id;
    let senders = (1..=20).map(|i| {
        let (client, id) = (client.clone(), id.clone());
        tokio::spawn(
            async move { output(&run(&client, send("chat", &format!("m{i}"), &id)).await) },
        )
    });
    let answers = futures::future::join_all(senders).await;
    for a in &answers {
        assert!(a.as_ref().expect("joined").starts_with("You said: m"));
    }
    let c = client.get_conversation(&id, 0, "", 0).await.expect("get");
    assert_eq!(c.message_count, 42);
    let said = texts(&c);
    // Pairs in order: each answer follows its own message, and every
    // answer saw exactly the messages before it.
    let mut seen: Vec<String> = Vec::new();
    for pair in said.chunks(2) {
        let (question, answer) = (&pair[0], &pair[1]);
        assert_eq!((question.0, answer.0), (USER, ASSISTANT));
        let before = if seen.is_empty() {
            "(nothing)".to_owned()
        } else {
            seen.join(" | ")
        };
        assert_eq!(
            answer.1,
            format!("You said: {}. Before that: {before}", question.1)
        );
        seen.push(question.1.clone());
    }
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), 21, "a turn lost or doubled");

    // A slow run holds the turn: a refusing sender is told which run.
    let log = run(&client, start("slow", "first")).await;
    let slow = started(&log).conversation_id;
    let holder = {
        let (client, slow) = (client.clone(), slow.clone());
        tokio::spawn(async move { run(&client, send("slow", "second", &slow)).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let busy = client
        .run_agent(pb::RunAgentRequest {
            conversation_busy: pb::ConversationBusy::Refuse as i32,
            ..send("slow", "third", &slow)
        })
        .await
        .err()
        .expect("refused");
    let holder = holder.await.expect("joined");
    assert_eq!(busy.code(), Code::Aborted, "{busy:?}");
    assert_eq!(busy.field(), Some("conversation_id"));
    assert!(busy.to_string().contains(&holder[0].run_id), "{busy}");
    let c = client.get_conversation(&slow, 0, "", 0).await.expect("get");
    assert_eq!(c.message_count, 4, "the refused message changed nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_appends_its_input_marked() {
    let server = OrchestratorServer::start(AGENTS, None, |_| {})
        .await
        .expect("server");
    let client = server.client().await.expect("client");
    let log = run(&client, start("chat", "hello")).await;
    let id = started(&log).conversation_id;
    let failed = run(&client, send("broken", "are you there?", &id)).await;
    assert!(matches!(
        failed.last().and_then(|e| e.payload.as_ref()),
        Some(Payload::RunFailed(_))
    ));
    let c = client.get_conversation(&id, 0, "", 0).await.expect("get");
    assert_eq!(c.message_count, 3);
    let last = &c.messages[2];
    assert!(last.interrupted);
    assert_eq!(last.message.as_ref().expect("m").content, "are you there?");
    assert_eq!(c.runs[1].status, pb::RunStatus::Failed as i32);
    // The next run sees it.
    let next = run(&client, send("chat", "again", &id)).await;
    assert_eq!(
        output(&next),
        "You said: again. Before that: hello | are you there?"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_windows_in_pairs_summarizes_and_keep_refuses_just_over_the_bound() {
    let server = OrchestratorServer::start(AGENTS, None, |c| {
        c.conversations.max_messages = 6;
    })
    .await
    .expect("server");
    let client = server.client().await.expect("client");

    // window, max_messages 4: two runs hold 4; the third folds to the
    // newest user message on (2 kept), and says so.
    let log = run(&client, start("windowed", "a")).await;
    let id = started(&log).conversation_id;
    run(&client, send("windowed", "b", &id)).await;
    let third = run(&client, send("windowed", "c", &id)).await;
    let compacted = third
        .iter()
        .find_map(|e| match &e.payload {
            Some(Payload::HistoryCompacted(h)) => Some(h.clone()),
            _ => None,
        })
        .expect("HistoryCompacted");
    assert_eq!(
        (
            compacted.mode.as_str(),
            compacted.folded,
            compacted.kept,
            compacted.reason.as_str()
        ),
        ("window", 2, 2, "max_messages")
    );
    assert_eq!(output(&third), "You said: c. Before that: b");
    let c = client.get_conversation(&id, 0, "", 0).await.expect("get");
    assert_eq!((c.message_count, c.folded), (4, 2));

    // window with tool calls: a cut never keeps a result without its call.
    let log = run(&client, start("tool_window", "x")).await;
    let id = started(&log).conversation_id;
    run(&client, send("tool_window", "y", &id)).await;
    run(&client, send("tool_window", "z", &id)).await;
    let c = client.get_conversation(&id, 0, "", 0).await.expect("get");
    assert!(c.folded > 0);
    for (i, m) in c.messages.iter().enumerate() {
        let msg = m.message.as_ref().expect("m");
        if msg.role == TOOL {
            let asked = c.messages[..i].iter().any(|k| {
                k.message
                    .as_ref()
                    .is_some_and(|k| k.tool_calls.iter().any(|t| t.call_id == msg.tool_call_id))
            });
            assert!(asked, "a result kept without its call: {c:?}");
        }
    }
    assert_eq!(c.messages[0].message.as_ref().expect("m").role, USER);

    // summarize: the folded messages become one summary, first.
    let log = run(&client, start("summed", "1")).await;
    let id = started(&log).conversation_id;
    run(&client, send("summed", "2", &id)).await;
    let third = run(&client, send("summed", "3", &id)).await;
    assert!(third.iter().any(|e| matches!(
        &e.payload,
        Some(Payload::HistoryCompacted(h)) if h.mode == "summarize" && h.summary == "they talked about numbers"
    )));
    let c = client.get_conversation(&id, 0, "", 0).await.expect("get");
    assert!(c.messages[0].summary);
    assert!(
        c.messages[0]
            .message
            .as_ref()
            .expect("m")
            .content
            .contains("they talked about numbers")
    );
    assert_eq!(c.message_count, 5, "summary + 2 kept + 2 new");

    // keep (the default) at conversations.max_messages 6: a conversation of
    // 4 takes a third message (6 with it and its answer); at 6 the next is
    // refused naming the bound, and nothing changes.
    let log = run(&client, start("chat", "1")).await;
    let id = started(&log).conversation_id;
    run(&client, send("chat", "2", &id)).await;
    let at = run(&client, send("chat", "3", &id)).await;
    assert!(output(&at).starts_with("You said: 3"));
    let over = client
        .run_agent(send("chat", "4", &id))
        .await
        .err()
        .expect("over the bound");
    assert_eq!(over.code(), Code::ResourceExhausted, "{over:?}");
    assert!(over.message().contains("max_messages"), "{over}");
    let c = client.get_conversation(&id, 0, "", 0).await.expect("get");
    assert_eq!(
        (c.message_count, c.runs.len(), c.running_run_id.as_str()),
        (6, 3, "")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_naming_the_field_and_starts_nothing() {
    let server = OrchestratorServer::start(AGENTS, None, |_| {})
        .await
        .expect("server");
    let client = server.client().await.expect("client");
    let log = run(&client, start("chat", "hi")).await;
    let id = started(&log).conversation_id;
    let cases: Vec<(pb::RunAgentRequest, Code, &str)> = vec![
        (
            send("chat", "x", "no-such"),
            Code::NotFound,
            "conversation_id",
        ),
        (
            send("chat", "x", "a b"),
            Code::InvalidArgument,
            "conversation_id",
        ),
        (
            pb::RunAgentRequest {
                history: vec![pb::Message {
                    role: pb::Role::User as i32,
                    content: "earlier".into(),
                    ..Default::default()
                }],
                ..send("chat", "x", &id)
            },
            Code::InvalidArgument,
            "history",
        ),
        (
            pb::RunAgentRequest {
                conversation_id: id.clone(),
                ..start("chat", "x")
            },
            Code::AlreadyExists,
            "conversation_id",
        ),
        (send("chat", "", &id), Code::InvalidArgument, "input"),
        (
            pb::RunAgentRequest {
                conversation_ttl: Some(baton_client::wkt::Duration {
                    seconds: 400 * 24 * 3600,
                    nanos: 0,
                }),
                ..send("chat", "x", &id)
            },
            Code::InvalidArgument,
            "conversation_ttl",
        ),
        (
            pb::RunAgentRequest {
                conversation_busy: 7,
                ..send("chat", "x", &id)
            },
            Code::InvalidArgument,
            "conversation_busy",
        ),
    ];
    for (request, code, field) in cases {
        let e = client.run_agent(request).await.err().expect("refused");
        assert_eq!(e.code(), code, "{e:?}");
        assert!(e.message().starts_with(field), "{field}: {e}");
    }
    let c = client.get_conversation(&id, 0, "", 0).await.expect("get");
    assert_eq!((c.message_count, c.runs.len()), (2, 1), "nothing changed");
    let e = client
        .get_conversation("nope", 0, "", 0)
        .await
        .expect_err("unknown");
    assert_eq!(e.code(), Code::NotFound);
    let e = client
        .get_conversation(&id, 1001, "", 0)
        .await
        .expect_err("page too big");
    assert!(e.message().starts_with("page_size"), "{e}");
    let e = client
        .update_conversation(pb::UpdateConversationRequest {
            conversation_id: id.clone(),
            title: None,
            labels: [("Bad Key".to_owned(), "v".to_owned())].into(),
        })
        .await
        .expect_err("bad label");
    assert!(e.message().starts_with("labels"), "{e}");
    // A compaction naming an unknown model: the agents file is refused.
    let bad = AGENTS.replace("scripted:summarizer\"}", "nowhere:model\"}");
    let refused = OrchestratorServer::start(&bad, None, |_| {})
        .await
        .err()
        .expect("refused");
    assert!(
        refused
            .to_string()
            .contains("agents.summed.conversation.summary_model"),
        "{refused}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_a_conversation_is_continued_read_titled_and_deleted() {
    let server = OrchestratorServer::start(AGENTS, None, |_| {})
        .await
        .expect("server");
    let http = reqwest::Client::new();
    let base = server.endpoint();
    let post = |body: Value| {
        let http = http.clone();
        let url = format!("{base}/v1/runs");
        async move {
            let r = http.post(url).json(&body).send().await.expect("post");
            let status = r.status();
            (status, r.json::<Value>().await.expect("json"))
        }
    };
    let (status, started) =
        post(json!({"agent": "chat", "input": "one", "newConversation": true})).await;
    assert_eq!(status, 200, "{started}");
    let run_id = started["runId"].as_str().expect("runId").to_owned();
    let client = server.client().await.expect("client");
    let id = loop {
        let run = client.get_run(&run_id).await.expect("run");
        if run.status() != pb::RunStatus::Running {
            break run.conversation_id;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let wait_idle = |count: u64| {
        let (http, base, id) = (http.clone(), base.clone(), id.clone());
        async move {
            loop {
                let c: Value = http
                    .get(format!("{base}/v1/conversations/{id}"))
                    .send()
                    .await
                    .expect("get")
                    .json()
                    .await
                    .expect("json");
                if c.get("runningRunId").is_none_or(|r| r == "") && c["messageCount"] == count {
                    return c;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    let (status, second) =
        post(json!({"agent": "chat", "input": "two", "conversationId": id})).await;
    assert_eq!(status, 200, "{second}");
    wait_idle(4).await;
    let (status, third) =
        post(json!({"agent": "chat", "input": "three", "conversationId": id})).await;
    assert_eq!(status, 200, "{third}");
    let c = wait_idle(6).await;
    assert_eq!(
        c["messages"][3]["message"]["content"],
        "You said: two. Before that: one"
    );
    assert_eq!(
        c["messages"][5]["message"]["content"],
        "You said: three. Before that: one | two"
    );
    assert_eq!(c["messages"][0]["message"]["role"], "ROLE_USER");
    let patched: Value = http
        .patch(format!("{base}/v1/conversations/{id}"))
        .json(&json!({"title": "numbers"}))
        .send()
        .await
        .expect("patch")
        .json()
        .await
        .expect("json");
    assert_eq!(patched["title"], "numbers");
    let listed: Value = http
        .get(format!("{base}/v1/conversations?page_size=5"))
        .send()
        .await
        .expect("list")
        .json()
        .await
        .expect("json");
    assert_eq!(listed["conversations"][0]["id"], id.as_str());
    // Bad input names the field; a busy refusal is 409.
    let (status, bad) =
        post(json!({"agent": "chat", "input": "x", "conversationId": "bad id"})).await;
    assert_eq!(status, 400);
    assert_eq!(bad["field"], "conversation_id");
    let r = http
        .get(format!("{base}/v1/conversations/{id}?page_size=x"))
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 400);
    let deleted = http
        .delete(format!("{base}/v1/conversations/{id}"))
        .send()
        .await
        .expect("delete");
    assert_eq!(deleted.status(), 200);
    let gone = http
        .get(format!("{base}/v1/conversations/{id}"))
        .send()
        .await
        .expect("get");
    assert_eq!(gone.status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_conversations_continue_on_another_replica() {
    let redis = RedisServer::start().expect("redis");
    let configure = durable_runs(redis.url());
    let a = OrchestratorServer::start(AGENTS, None, configure.clone())
        .await
        .expect("a");
    let b = OrchestratorServer::start(AGENTS, None, configure)
        .await
        .expect("b");
    let (ca, cb) = (a.client().await.expect("a"), b.client().await.expect("b"));
    let log = run(&ca, start("chat", "on a")).await;
    let id = started(&log).conversation_id;
    let next = run(&cb, send("chat", "on b", &id)).await;
    assert_eq!(output(&next), "You said: on b. Before that: on a");
    let third = run(&ca, send("chat", "back on a", &id)).await;
    assert_eq!(
        output(&third),
        "You said: back on a. Before that: on a | on b"
    );
    let c = cb.get_conversation(&id, 0, "", 0).await.expect("get");
    assert_eq!((c.message_count, c.runs.len()), (6, 3));
    assert_eq!(
        ca.list_conversations(10, "")
            .await
            .expect("list")
            .conversations[0]
            .id,
        id
    );
    // Racing senders on two replicas: every turn once, pairs in order.
    let senders = (0..10).map(|i| {
        let client = if i % 2 == 0 { ca.clone() } else { cb.clone() };
        let id = id.clone();
        tokio::spawn(async move { run(&client, send("chat", &format!("r{i}"), &id)).await })
    });
    for r in futures::future::join_all(senders).await {
        output(&r.expect("joined"));
    }
    let c = ca.get_conversation(&id, 0, "", 0).await.expect("get");
    assert_eq!(c.message_count, 26);
    for pair in texts(&c).chunks(2) {
        assert_eq!((pair[0].0, pair[1].0), (USER, ASSISTANT));
        assert!(pair[1].1.starts_with(&format!("You said: {}.", pair[0].1)));
    }
    let deleted = cb.delete_conversation(&id).await.expect("delete");
    assert_eq!(deleted.runs_deleted, 13);
    assert_eq!(
        ca.get_run(&log[0].run_id).await.expect_err("gone").code(),
        Code::NotFound
    );
}

async fn drain(mut stream: baton_client::Events) -> Vec<pb::RunEvent> {
    let mut out = Vec::new();
    while let Some(e) = stream.next().await {
        out.push(e.expect("event"));
    }
    out
}

/// A fork of a run in a conversation branches it ("edit an answer and go
/// on from there", as chat apps do): the branch holds what the run began
/// with, then the fork's turns; the original is left as it was. A replay
/// appends to no conversation. Both begin with the group member the
/// original began with.
async fn forks_branch_and_replays_leave_alone(
    configure: impl Fn(&mut baton_orchestrator::config::Config),
) {
    let server = OrchestratorServer::start(AGENTS, None, configure)
        .await
        .expect("server");
    let client = server.client().await.expect("client");
    let log = run(&client, start("support", "refund please")).await;
    let id = started(&log).conversation_id;
    let second = run(&client, send("support", "order 12", &id)).await;
    let point = second
        .iter()
        .find(|e| matches!(e.payload, Some(Payload::MessageCompleted(_))))
        .expect("a model turn")
        .seq;
    let fork = drain(
        client
            .fork_run(pb::ForkRunRequest {
                run_id: second[0].run_id.clone(),
                at_seq: point,
                edit: Some(pb::ForkEdit {
                    edit: Some(pb::fork_edit::Edit::ModelTurn(pb::ModelTurnEdit {
                        text: "an edited answer".into(),
                        tool_calls: Vec::new(),
                    })),
                }),
                ..Default::default()
            })
            .await
            .expect("fork"),
    )
    .await;
    assert_eq!(output(&fork), "an edited answer");
    let branch = client
        .get_run(&fork[0].run_id)
        .await
        .expect("the fork")
        .conversation_id;
    assert!(!branch.is_empty() && branch != id, "{branch}");
    let b = client
        .get_conversation(&branch, 0, "", 0)
        .await
        .expect("branch");
    assert_eq!(b.branched_from, id);
    let said: Vec<String> = texts(&b).into_iter().map(|(_, t)| t).collect();
    // Run 1's four (the handoff's call and result among them), then the
    // fork's input and its edited answer.
    assert_eq!(said.len(), 6, "{said:?}");
    assert_eq!(said[0], "refund please");
    assert_eq!(
        (said[4].as_str(), said[5].as_str()),
        ("order 12", "an edited answer")
    );
    assert_eq!(b.agent, "billing");
    let original = client
        .get_conversation(&id, 0, "", 0)
        .await
        .expect("original");
    assert_eq!(original.message_count, 6, "the original is left as it was");
    assert_eq!(
        original.messages[5].message.as_ref().expect("m").content,
        "billing here: order 12. Before that: refund please"
    );

    let replay = drain(
        client
            .replay_run(pb::ReplayRunRequest {
                run_id: second[0].run_id.clone(),
                strict: true,
                ..Default::default()
            })
            .await
            .expect("replay"),
    )
    .await;
    assert_eq!(output(&replay), output(&second), "a strict replay matches");
    assert_eq!(
        client
            .get_run(&replay[0].run_id)
            .await
            .expect("replay")
            .conversation_id,
        ""
    );
    let original = client
        .get_conversation(&id, 0, "", 0)
        .await
        .expect("original");
    assert_eq!(original.message_count, 6, "a replay appends nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forks_branch_a_conversation_and_replays_leave_it_alone() {
    forks_branch_and_replays_leave_alone(|_| {}).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forks_branch_a_durable_conversation_and_replays_leave_it_alone() {
    let redis = RedisServer::start().expect("redis");
    forks_branch_and_replays_leave_alone(durable_runs(redis.url())).await;
}

/// `conversations.max_bytes` 20: a conversation of 10 bytes takes an input
/// of 10 (20 with it), and nothing more (21); a first input over it alone
/// is refused too; `conversation_ttl` at `conversations.max_ttl` is taken,
/// a second over it is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_byte_bound_is_kept_at_and_refused_just_over_and_the_ttl_bound_too() {
    let server = OrchestratorServer::start(AGENTS, None, |c| {
        c.conversations.max_bytes = 20;
        c.conversations.max_ttl = Duration::from_secs(3600);
        c.conversations.ttl = Duration::from_secs(60);
    })
    .await
    .expect("server");
    let client = server.client().await.expect("client");
    let log = run(&client, start("fixed", "12345678")).await;
    let id = started(&log).conversation_id;
    assert_eq!(
        client
            .get_conversation(&id, 0, "", 0)
            .await
            .expect("get")
            .bytes,
        10
    );
    let at = run(&client, send("fixed", "abcdefghij", &id)).await;
    assert_eq!(output(&at), "ok");
    let over = client
        .run_agent(send("fixed", "x", &id))
        .await
        .err()
        .expect("over max_bytes");
    assert_eq!(over.code(), Code::ResourceExhausted);
    assert!(over.message().contains("max_bytes"), "{over}");
    let alone = client
        .run_agent(start("fixed", &"y".repeat(21)))
        .await
        .err()
        .expect("an input over the bound alone");
    assert_eq!(alone.code(), Code::ResourceExhausted);
    assert!(alone.message().contains("max_bytes"), "{alone}");
    let listed = client.list_conversations(10, "").await.expect("list");
    assert_eq!(
        listed.conversations.len(),
        1,
        "the refused new conversation is not kept"
    );
    let c = client.get_conversation(&id, 0, "", 0).await.expect("get");
    assert_eq!((c.message_count, c.bytes), (4, 22), "nothing changed");

    let ttl = |seconds| Some(baton_client::wkt::Duration { seconds, nanos: 0 });
    let log = run(
        &client,
        pb::RunAgentRequest {
            conversation_ttl: ttl(3600),
            ..start("fixed", "a")
        },
    )
    .await;
    let c = client
        .get_conversation(&started(&log).conversation_id, 0, "", 0)
        .await
        .expect("get");
    let kept = c.expires_at.expect("expires").seconds - c.updated_at.expect("updated").seconds;
    assert!((3599..=3600).contains(&kept), "{kept}");
    let e = client
        .run_agent(pb::RunAgentRequest {
            conversation_ttl: ttl(3601),
            ..start("fixed", "b")
        })
        .await
        .err()
        .expect("over max_ttl");
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().starts_with("conversation_ttl"), "{e}");
}
