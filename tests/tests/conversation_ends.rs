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
agents:
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
