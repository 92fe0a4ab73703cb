//! Deleting a conversation is a user's "delete my data" (issue 55): once
//! DeleteConversation answers, none of the conversation's text is left —
//! not in its messages, its runs' events, journals and requests, a fork's
//! branch or a replay, a run still going when it was deleted, nor a
//! replica's own copy of a run's log — searched for in every key of Redis
//! and through every read of both replicas.

use std::time::Duration;

use baton_client::{OrchestratorClient, pb, pb::run_event::Payload};
use baton_e2e::{OrchestratorServer, RedisServer, eventually, free_addr};
use futures::StreamExt;

const AGENTS: &str = r#"
scripts:
  chat:
    - text: "You said: {{input}}. Before that: {{history}}"
  slow:
    - text: "slowly: {{input}}"
      delay: 20s
agents:
  chat: {model: "scripted:chat"}
  slow: {model: "scripted:slow"}
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

async fn drain<E>(
    mut stream: impl futures::Stream<Item = Result<pb::RunEvent, E>> + Unpin,
) -> Vec<pb::RunEvent> {
    let mut out = Vec::new();
    while let Some(Ok(e)) = stream.next().await {
        out.push(e);
    }
    out
}

async fn run(client: &OrchestratorClient, r: pb::RunAgentRequest) -> Vec<pb::RunEvent> {
    drain(client.run_agent(r).await.expect("run")).await
}

/// Every value in Redis that holds `text`: key by key, whatever its type.
async fn in_redis(redis: &RedisServer, text: &str) -> Vec<String> {
    let client = redis::Client::open(redis.url()).expect("client");
    let mut c = client
        .get_multiplexed_async_connection()
        .await
        .expect("connection");
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut c)
        .await
        .expect("KEYS");
    let mut found = Vec::new();
    for key in keys {
        let kind: String = redis::cmd("TYPE")
            .arg(&key)
            .query_async(&mut c)
            .await
            .expect("TYPE");
        let values: Vec<Vec<u8>> = match kind.as_str() {
            "string" => vec![
                redis::cmd("GET")
                    .arg(&key)
                    .query_async(&mut c)
                    .await
                    .expect("GET"),
            ],
            "hash" => redis::cmd("HGETALL")
                .arg(&key)
                .query_async(&mut c)
                .await
                .expect("HGETALL"),
            "list" => redis::cmd("LRANGE")
                .arg(&key)
                .arg(0)
                .arg(-1)
                .query_async(&mut c)
                .await
                .expect("LRANGE"),
            "set" => redis::cmd("SMEMBERS")
                .arg(&key)
                .query_async(&mut c)
                .await
                .expect("SMEMBERS"),
            "zset" => redis::cmd("ZRANGE")
                .arg(&key)
                .arg(0)
                .arg(-1)
                .query_async(&mut c)
                .await
                .expect("ZRANGE"),
            "stream" => {
                let entries: redis::Value = redis::cmd("XRANGE")
                    .arg(&key)
                    .arg("-")
                    .arg("+")
                    .query_async(&mut c)
                    .await
                    .expect("XRANGE");
                vec![format!("{entries:?}").into_bytes()]
            }
            _ => Vec::new(),
        };
        let needle = text.as_bytes();
        if values
            .iter()
            .any(|v| v.windows(needle.len()).any(|w| w == needle))
        {
            found.push(String::from_utf8_lossy(&key).into_owned());
        }
    }
    found
}

/// Every read of `client` that shows `text`: its runs (listed, got,
/// watched from their start) and conversations (listed, got).
async fn shown(client: &OrchestratorClient, text: &str, ids: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    let listed = client
        .list_runs(pb::RunStatus::Unspecified, 1000, "")
        .await
        .expect("list runs");
    let mut runs: Vec<String> = listed.runs.iter().map(|r| r.run_id.clone()).collect();
    runs.extend(ids.iter().cloned());
    for id in runs {
        if let Ok(r) = client.get_run(&id).await
            && format!("{r:?}").contains(text)
        {
            found.push(format!("GetRun {id}"));
        }
        if let Ok(stream) = client.watch_run(&id, 0, None).await {
            let read = tokio::time::timeout(Duration::from_secs(5), drain(stream)).await;
            if format!("{read:?}").contains(text) {
                found.push(format!("WatchRun {id}"));
            }
        }
    }
    let conversations = client.list_conversations(100, "").await.expect("list");
    for c in conversations.conversations {
        let whole = client.get_conversation(&c.id, 0, "", 0).await;
        if format!("{c:?}{whole:?}").contains(text) {
            found.push(format!("conversation {}", c.id));
        }
    }
    found
}

async fn deleting_leaves_none_of_its_text(durable: Option<&RedisServer>) {
    let secret = format!("zebra-{}", uuid::Uuid::new_v4().simple());
    let (a_addr, b_addr) = (free_addr().expect("port"), free_addr().expect("port"));
    let start = |listen| {
        let url = durable.map(RedisServer::url);
        OrchestratorServer::start(AGENTS, None, move |c| {
            c.listen = listen;
            if let Some(url) = url {
                baton_e2e::durable_runs(url)(c);
            }
        })
    };
    let a = start(a_addr).await.expect("replica a");
    let b = match durable {
        Some(_) => Some(start(b_addr).await.expect("replica b")),
        None => None,
    };
    let on_a = a.client().await.expect("client a");
    let on_b = match &b {
        Some(b) => b.client().await.expect("client b"),
        None => on_a.clone(),
    };
    // Its first run on b (b keeps its own copy of the run's log a while).
    let first = run(&on_b, send("chat", &format!("my secret is {secret}"), "")).await;
    let id = first
        .iter()
        .find_map(|e| match &e.payload {
            Some(Payload::RunStarted(s)) => Some(s.conversation_id.clone()),
            _ => None,
        })
        .expect("a conversation");
    let second = run(&on_a, send("chat", &format!("more of {secret}"), &id)).await;
    // A fork of its second run (a branch), and a replay of it.
    let point = second
        .iter()
        .find(|e| matches!(e.payload, Some(Payload::MessageCompleted(_))))
        .expect("a model turn")
        .seq;
    let fork = drain(
        on_a.fork_run(pb::ForkRunRequest {
            run_id: second[0].run_id.clone(),
            at_seq: point,
            edit: Some(pb::ForkEdit {
                edit: Some(pb::fork_edit::Edit::ModelTurn(pb::ModelTurnEdit {
                    text: format!("an edited {secret}"),
                    tool_calls: Vec::new(),
                })),
            }),
            ..Default::default()
        })
        .await
        .expect("fork"),
    )
    .await;
    let replay = drain(
        on_a.replay_run(pb::ReplayRunRequest {
            run_id: second[0].run_id.clone(),
            ..Default::default()
        })
        .await
        .expect("replay"),
    )
    .await;
    // A run still going when the conversation is deleted.
    let mut going = on_a
        .run_agent(pb::RunAgentRequest {
            detach: true,
            ..send("slow", &format!("still {secret}"), &id)
        })
        .await
        .expect("run");
    let going_id = going.next().await.expect("event").expect("event").run_id;
    drop(going);
    let ids = vec![
        first[0].run_id.clone(),
        second[0].run_id.clone(),
        fork[0].run_id.clone(),
        replay[0].run_id.clone(),
        going_id.clone(),
    ];
    assert!(
        !shown(&on_a, &secret, &[]).await.is_empty(),
        "the text is there before"
    );

    let deleted = on_a.delete_conversation(&id).await.expect("delete");
    assert!(deleted.runs_deleted >= 5, "{deleted:?}");
    eventually("the running run has stopped", || async {
        !matches!(on_a.get_run(&going_id).await, Ok(r) if r.status == pb::RunStatus::Running as i32)
    })
    .await;
    for (name, client) in [("a", &on_a), ("b", &on_b)] {
        let left = shown(client, &secret, &ids).await;
        assert!(left.is_empty(), "replica {name} still shows it: {left:?}");
    }
    if let Some(redis) = durable {
        let left = in_redis(redis, &secret).await;
        assert!(left.is_empty(), "Redis still holds it in {left:?}");
    }
    a.shutdown().await.expect("a");
    if let Some(b) = b {
        b.shutdown().await.expect("b");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_conversation_leaves_none_of_its_text_in_memory() {
    deleting_leaves_none_of_its_text(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_conversation_leaves_none_of_its_text_in_redis_or_on_either_replica() {
    let redis = RedisServer::start().expect("redis-server");
    deleting_leaves_none_of_its_text(Some(&redis)).await;
}
