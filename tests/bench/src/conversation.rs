//! What a conversation costs (issue 47): the next run of a 50-message
//! conversation against the same run with the 50 messages sent in the
//! request (`history`) — time to its first event and to its end, in memory
//! and on Redis, alternated run by run on the same server; the Redis
//! commands a conversation run adds (target: at most one round trip); the
//! memory a stored message takes (the process's live heap in memory mode,
//! Redis's `used_memory` in durable mode); and 20 senders racing on one
//! conversation.

use std::time::{Duration, Instant};

use baton_client::{OrchestratorClient, pb, pb::run_event::Payload};
use baton_e2e::{OrchestratorServer, RedisServer};
use futures::StreamExt;

const AGENTS: &str = r#"
scripts:
  chat:
    - text: "You said: {{input}}"
agents:
  chat: {model: "scripted:chat"}
"#;

/// What to measure.
#[derive(clap::Args)]
pub struct Options {
    /// Conversations of 50 messages measured (each once, beside a run with
    /// the same history in its request).
    #[arg(long, default_value_t = 200)]
    conversations: usize,
    /// Messages of each conversation before the measured run.
    #[arg(long, default_value_t = 50)]
    messages: usize,
    /// Senders of the race.
    #[arg(long, default_value_t = 20)]
    senders: usize,
}

/// Time to the first event and to the end of one run.
async fn timed(client: &OrchestratorClient, r: pb::RunAgentRequest) -> anyhow::Result<(f64, f64)> {
    let t = Instant::now();
    let mut events = client.run_agent(r).await?;
    let mut first = None;
    let mut completed = false;
    while let Some(e) = events.next().await {
        let e = e?;
        first.get_or_insert_with(|| t.elapsed().as_secs_f64() * 1000.0);
        completed |= matches!(e.payload, Some(Payload::RunCompleted(_)));
    }
    anyhow::ensure!(completed, "a run did not complete");
    Ok((
        first.unwrap_or_default(),
        t.elapsed().as_secs_f64() * 1000.0,
    ))
}

fn send(input: &str, id: &str, new: bool) -> pb::RunAgentRequest {
    pb::RunAgentRequest {
        agent: "chat".into(),
        input: input.into(),
        conversation_id: id.into(),
        new_conversation: new,
        ..Default::default()
    }
}

/// A conversation `id` of `messages` messages (each run adds two).
async fn grow(client: &OrchestratorClient, id: &str, messages: usize) -> anyhow::Result<()> {
    for i in 0..messages / 2 {
        let text = format!("message {i} of a conversation, about as long as a person writes one");
        timed(client, send(&text, id, i == 0)).await?;
    }
    Ok(())
}

fn history_of(c: &pb::Conversation) -> Vec<pb::Message> {
    c.messages
        .iter()
        .filter_map(|m| m.message.clone())
        .collect()
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * p).round() as usize]
}

struct Figures {
    conv_first: Vec<f64>,
    hist_first: Vec<f64>,
    conv_end: Vec<f64>,
    hist_end: Vec<f64>,
}

async fn measure(
    server: &OrchestratorServer,
    o: &Options,
    tag: &str,
) -> anyhow::Result<(Figures, Vec<String>)> {
    let client = OrchestratorClient::connect(server.endpoint()).await?;
    let mut ids = Vec::new();
    for k in 0..o.conversations {
        let id = format!("{tag}-{k}");
        grow(&client, &id, o.messages)
            .await
            .map_err(|e| anyhow::anyhow!("growing {id}: {e:#}"))?;
        ids.push(id);
    }
    let mut f = Figures {
        conv_first: Vec::new(),
        hist_first: Vec::new(),
        conv_end: Vec::new(),
        hist_end: Vec::new(),
    };
    for (k, id) in ids.iter().enumerate() {
        let history = history_of(&client.get_conversation(id, 1000, "", 0).await?);
        anyhow::ensure!(
            history.len() == o.messages,
            "{id} holds {} messages",
            history.len()
        );
        let with_history = pb::RunAgentRequest {
            agent: "chat".into(),
            input: "and the next message".into(),
            history,
            ..Default::default()
        };
        // Alternated, one of each, the order switching.
        let conv = send("and the next message", id, false);
        let which =
            |what: &'static str| move |e: anyhow::Error| anyhow::anyhow!("{what} of {id}: {e:#}");
        let (c, h) = if k.is_multiple_of(2) {
            let c = timed(&client, conv).await.map_err(which("the next run"))?;
            (
                c,
                timed(&client, with_history)
                    .await
                    .map_err(which("the history run"))?,
            )
        } else {
            let h = timed(&client, with_history)
                .await
                .map_err(which("the history run"))?;
            (
                timed(&client, conv).await.map_err(which("the next run"))?,
                h,
            )
        };
        f.conv_first.push(c.0);
        f.conv_end.push(c.1);
        f.hist_first.push(h.0);
        f.hist_end.push(h.1);
    }
    Ok((f, ids))
}

fn report(mode: &str, f: &mut Figures) {
    let med = |v: &mut Vec<f64>| percentile(v, 0.5);
    let p99 = |v: &mut Vec<f64>| percentile(v, 0.99);
    println!(
        "{mode:<7} first event: conversation {:>6.3} ms (p99 {:>6.3}), history in the request {:>6.3} ms (p99 {:>6.3}): +{:.3} ms",
        med(&mut f.conv_first),
        p99(&mut f.conv_first),
        med(&mut f.hist_first),
        p99(&mut f.hist_first),
        med(&mut f.conv_first) - med(&mut f.hist_first)
    );
    println!(
        "{mode:<7} whole run:   conversation {:>6.3} ms (p99 {:>6.3}), history in the request {:>6.3} ms (p99 {:>6.3}): +{:.3} ms",
        med(&mut f.conv_end),
        p99(&mut f.conv_end),
        med(&mut f.hist_end),
        p99(&mut f.hist_end),
        med(&mut f.conv_end) - med(&mut f.hist_end)
    );
}

/// `redis-cli MONITOR` while a phase runs: the commands clients sent
/// (not those scripts ran), by name.
struct Monitor {
    child: std::process::Child,
    out: std::path::PathBuf,
}

/// What a phase sent.
struct Sent {
    total: usize,
    by_command: std::collections::BTreeMap<String, usize>,
}

impl Sent {
    /// The commands per run this phase sent beyond `other`'s, by name.
    fn extra_over(&self, other: &Sent, runs: usize) -> String {
        self.by_command
            .iter()
            .filter_map(|(k, v)| {
                let diff = *v as f64 - *other.by_command.get(k).unwrap_or(&0) as f64;
                (diff.abs() >= 0.5 * runs as f64).then(|| format!("{k} {:+.1}", diff / runs as f64))
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl Monitor {
    fn start(redis: &RedisServer) -> anyhow::Result<Self> {
        let out = std::env::temp_dir().join(format!("baton-bench-monitor-{}", std::process::id()));
        let child = std::process::Command::new("redis-cli")
            .arg("-p")
            .arg(redis.port().to_string())
            .arg("monitor")
            .stdout(std::fs::File::create(&out)?)
            .spawn()?;
        std::thread::sleep(Duration::from_millis(300));
        Ok(Self { child, out })
    }

    async fn stop(mut self) -> anyhow::Result<Sent> {
        tokio::time::sleep(Duration::from_millis(300)).await;
        self.child.kill()?;
        self.child.wait()?;
        let text = std::fs::read_to_string(&self.out)?;
        let _ = std::fs::remove_file(&self.out);
        let mut by_command = std::collections::BTreeMap::new();
        let mut total = 0;
        for line in text
            .lines()
            .filter(|l| l.contains(" \"") && !l.contains(" lua]"))
        {
            let Some(name) = line.split('"').nth(1) else {
                continue;
            };
            total += 1;
            *by_command.entry(name.to_ascii_uppercase()).or_insert(0) += 1;
        }
        Ok(Sent { total, by_command })
    }
}

fn used_memory(redis: &RedisServer) -> anyhow::Result<u64> {
    let info = redis.cli(&["INFO", "memory"])?;
    let line = info
        .lines()
        .find(|l| l.starts_with("used_memory:"))
        .ok_or_else(|| anyhow::anyhow!("no used_memory"))?;
    Ok(line.split(':').nth(1).unwrap_or("0").trim().parse()?)
}

/// What a stored message takes: 1,000 conversations of 50 messages (a
/// user's and an answer's, as the bench's runs write them) put in the
/// memory store (the process's live heap before and after) and in the
/// Redis store (Redis's `used_memory`); and the text each message holds.
async fn stored_bytes(redis: &RedisServer) -> anyhow::Result<(f64, f64, usize)> {
    use baton_orchestrator::conversation::{
        memory::MemoryStore,
        redis::RedisStore,
        store::{Begin, Key, Open, Store},
    };
    let (conversations, per) = (1000, 50);
    let message = |i: usize| pb::ConversationMessage {
        message: Some(pb::Message {
            role: if i.is_multiple_of(2) {
                pb::Role::User
            } else {
                pb::Role::Assistant
            } as i32,
            content: format!("message {i} of a conversation, about as long as a person writes one"),
            ..Default::default()
        }),
        run_id: "01a22702-b49a-764d-9036-56c5999e42e1".into(),
        agent: if i % 2 == 1 {
            "chat".into()
        } else {
            String::new()
        },
        ..Default::default()
    };
    let base: Vec<pb::ConversationMessage> = (0..per).map(message).collect();
    let text = base
        .iter()
        .map(|m| m.message.as_ref().map_or(0, |m| m.content.len()))
        .sum::<usize>()
        / per;
    async fn fill(
        store: &dyn Store,
        base: &[pb::ConversationMessage],
        n: usize,
    ) -> anyhow::Result<()> {
        for k in 0..n {
            let key = Key {
                tenant: String::new(),
                id: format!("bytes-{k}"),
            };
            let begin = Begin {
                run_id: format!("r{k}"),
                open: Open::New,
                hold_ms: 60_000,
                ttl_ms: 3_600_000,
                base: base.to_vec(),
                branched_from: String::new(),
            };
            store.begin(&key, &begin).await?;
            store.release(&key, &begin.run_id).await?;
        }
        Ok(())
    }
    let memory = MemoryStore::new(100_000);
    let before = crate::heap::live_bytes();
    fill(&memory, &base, conversations).await?;
    let heap = crate::heap::live_bytes().saturating_sub(before);
    let config = baton_store::redis::RedisConfig {
        url: redis.url(),
        key_prefix: "bytes".into(),
        ..Default::default()
    };
    let before = used_memory(redis)?;
    let shared = baton_orchestrator::shared_state::SharedState::open(
        &config,
        "bench",
        std::time::Duration::from_secs(60),
    )?;
    fill(&RedisStore::new(shared), &base, conversations).await?;
    let used = used_memory(redis)?.saturating_sub(before);
    let n = (conversations * per) as f64;
    drop(memory);
    Ok((heap as f64 / n, used as f64 / n, text))
}

/// `senders` messages at once on one conversation: how long until every
/// one was answered, and that the conversation holds each once.
async fn race(server: &OrchestratorServer, senders: usize, id: &str) -> anyhow::Result<f64> {
    let client = OrchestratorClient::connect(server.endpoint()).await?;
    timed(&client, send("the first", id, true)).await?;
    let t = Instant::now();
    let runs = (0..senders).map(|i| {
        let client = client.clone();
        let id = id.to_owned();
        tokio::spawn(async move { timed(&client, send(&format!("racer {i}"), &id, false)).await })
    });
    for r in futures::future::join_all(runs).await {
        r??;
    }
    let wall = t.elapsed().as_secs_f64() * 1000.0;
    let c = client.get_conversation(id, 1000, "", 0).await?;
    anyhow::ensure!(
        c.message_count as usize == 2 * (senders + 1),
        "the race left {} messages",
        c.message_count
    );
    Ok(wall)
}

pub fn run(o: Options) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let redis = RedisServer::start()?;
        let memory = OrchestratorServer::start(AGENTS, None, |c| {
            c.conversations.max_kept = 100_000;
        })
        .await?;
        let url = redis.url();
        let durable = OrchestratorServer::start(AGENTS, None, move |c| {
            c.runs.store = baton_orchestrator::config::RunStoreMode::Redis;
            c.runs.redis.url = url;
        })
        .await?;

        let client = OrchestratorClient::connect(memory.endpoint()).await?;
        // Warm up: the first runs build what every run shares.
        grow(&client, "warm", 10).await?;
        let (mut m, _) = measure(&memory, &o, "mem").await?;
        let (mut d, ids) = measure(&durable, &o, "dur").await?;
        let (heap_per, redis_per, text) = stored_bytes(&redis).await?;

        // The commands one run sends Redis (its scripts and standalone
        // commands, read off MONITOR; the commands a script runs are not
        // counted), with the history in the request and in a conversation.
        let dclient = OrchestratorClient::connect(durable.endpoint()).await?;
        let id = &ids[0];
        let history = history_of(&dclient.get_conversation(id, 1000, "", 0).await?);
        let n = 50;
        let monitor = Monitor::start(&redis)?;
        for _ in 0..n {
            timed(
                &dclient,
                pb::RunAgentRequest {
                    agent: "chat".into(),
                    input: "a message".into(),
                    history: history.clone(),
                    ..Default::default()
                },
            )
            .await?;
        }
        let with_history = monitor.stop().await?;
        let probe = format!("{id}-probe");
        grow(&dclient, &probe, 2).await?;
        let monitor = Monitor::start(&redis)?;
        for _ in 0..n {
            timed(&dclient, send("a message", &probe, false)).await?;
        }
        let in_conversation = monitor.stop().await?;
        println!(
            "\nconversations of {} messages, {} each, the next run alternated with the same run sending the history",
            o.messages, o.conversations
        );
        report("memory", &mut m);
        report("Redis", &mut d);
        println!(
            "Redis commands per run: {:.1} with the history in the request, {:.1} in a conversation (+{:.1}: {})",
            with_history.total as f64 / n as f64,
            in_conversation.total as f64 / n as f64,
            (in_conversation.total as f64 - with_history.total as f64) / n as f64,
            in_conversation.extra_over(&with_history, n)
        );
        println!(
            "memory per stored message ({text} B of text each): {heap_per:.0} B of heap in memory mode, {redis_per:.0} B of Redis's used_memory in durable mode"
        );
        for (mode, server) in [("memory", &memory), ("Redis", &durable)] {
            let wall = race(server, o.senders, &format!("race-{mode}")).await?;
            println!(
                "race: {} senders on one conversation ({mode}): every one answered in {:.1} ms, {:.2} ms a turn, each once and in order",
                o.senders,
                wall,
                wall / o.senders as f64
            );
        }
        Ok(())
    })
}
