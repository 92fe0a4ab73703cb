//! The cancellation sweep (issue 55): runs that each make model calls (a
//! provider with a rate limit and a breaker, a run budget and a tenant's
//! day budget), call a sub-agent and take a conversation's turn are
//! stopped at random moments — their caller hangs up, CancelRun, their
//! run_timeout — or left to end, many at once, in memory and on Redis.
//! Once they are all over, nothing they took is left, counted where it
//! lives: no tokens held of the tenant's budget and no breaker probing
//! (the server's `/metrics`; Redis's keys), no conversation turn held
//! (GetConversation; Redis), no run registered or running (`/metrics`,
//! ListRuns; the lease set in Redis).
//!
//! Seeded: `BATON_SWEEP_SEED=<n>` replays the same choices (timing aside);
//! the seed is printed first.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use baton_client::{OrchestratorClient, pb, pb::run_event::Payload};
use baton_e2e::{
    OrchestratorServer, RedisServer,
    chaos::Rng,
    openai::{FakeOpenAi, Reply, finish, text, tool_fragment, usage},
};
use futures::StreamExt;
use serde_json::Value;

/// Conversations the runs share (so turns are waited for, taken and given
/// back under cancellation).
const CONVERSATIONS: usize = 6;
/// Runs going at once.
const WORKERS: usize = 8;

fn agents(provider: &FakeOpenAi) -> String {
    format!(
        r#"
providers:
  fake:
    kind: openai
    base_url: "{}"
    api_key_env: ""
    max_retries: 0
    rate_limit: {{requests: 300, window: 1s}}
    breaker: {{failures: 3, window: 2s, cooldown: 150ms}}
scripts:
  helper:
    - text: "helped with {{{{input}}}}"
      delay: 4ms
      usage: {{input_tokens: 20, output_tokens: 5}}
agents:
  boss: {{model: "fake:m", tools: [helper], budget: {{tokens: 1000000}}}}
  helper: {{model: "scripted:helper"}}
"#,
        provider.base_url()
    )
}

/// The provider: a call to `helper` first, then an answer once its result
/// is in; each after a few milliseconds, and one request in twelve fails
/// (so the breaker opens, and probes are cancelled too).
async fn provider() -> FakeOpenAi {
    let n = Arc::new(AtomicU64::new(0));
    FakeOpenAi::answering(move |body: &Value| {
        let i = n.fetch_add(1, Ordering::Relaxed);
        let mut r = Rng::new(i);
        let after = Duration::from_millis(1 + r.below(12) as u64);
        if r.below(12) == 0 {
            return Reply::Slow(
                after,
                Box::new(Reply::Status {
                    code: 500,
                    retry_after: None,
                }),
            );
        }
        let last_is_tool = body["messages"]
            .as_array()
            .and_then(|m| m.last())
            .is_some_and(|m| m["role"] == "tool");
        let reply = if last_is_tool {
            Reply::Stream(vec![text("done"), finish("stop"), usage(40, 2)])
        } else {
            Reply::Stream(vec![
                tool_fragment(0, Some("c1"), Some("helper"), r#"{"task":"x"}"#),
                finish("tool_calls"),
                usage(30, 8),
            ])
        };
        Reply::Slow(after, Box::new(reply))
    })
    .await
    .expect("provider")
}

/// How a run is stopped.
#[derive(Debug, Clone, Copy)]
enum Stop {
    /// Its caller hangs up after this long.
    HangUp(Duration),
    /// CancelRun after this long.
    Cancel(Duration),
    /// Its run_timeout.
    Timeout(Duration),
    /// Not: it ends by itself.
    Never,
}

fn stop(rng: &mut Rng) -> Stop {
    let t = rng.between(Duration::ZERO, Duration::from_millis(45));
    match rng.below(4) {
        0 => Stop::HangUp(t),
        1 => Stop::Cancel(t),
        2 => Stop::Timeout(t.max(Duration::from_millis(1))),
        _ => Stop::Never,
    }
}

fn request(conversation: &str, stop: Stop) -> pb::RunAgentRequest {
    pb::RunAgentRequest {
        agent: "boss".into(),
        input: "go".into(),
        conversation_id: conversation.into(),
        limits: match stop {
            Stop::Timeout(t) => Some(pb::RunLimits {
                run_timeout: Some(baton_proto::wkt::Duration {
                    seconds: 0,
                    nanos: t.as_nanos() as i32,
                }),
                ..Default::default()
            }),
            _ => None,
        },
        ..Default::default()
    }
}

/// Reads `stream` to its end.
async fn drain<E>(stream: &mut (impl futures::Stream<Item = Result<pb::RunEvent, E>> + Unpin)) {
    while let Some(e) = stream.next().await {
        if e.is_err() {
            return;
        }
    }
}

/// One run, stopped as `stop` says.
async fn one(client: &OrchestratorClient, conversation: &str, stop: Stop) {
    // A turn waited for past conversations.max_wait is refused: fine.
    let Ok(mut stream) = client.run_agent(request(conversation, stop)).await else {
        return;
    };
    match stop {
        Stop::HangUp(t) => {
            let _ = tokio::time::timeout(t, drain(&mut stream)).await;
            drop(stream);
        }
        Stop::Cancel(t) => {
            let Some(Ok(first)) = stream.next().await else {
                return;
            };
            let reader = tokio::spawn(async move { drain(&mut stream).await });
            tokio::time::sleep(t).await;
            let _ = client.cancel(&first.run_id, "sweep").await;
            let _ = reader.await;
        }
        Stop::Timeout(_) | Stop::Never => drain(&mut stream).await,
    }
}

/// A metric's value on `/metrics` (0 when not reported).
async fn metric(addr: std::net::SocketAddr, line_start: &str) -> f64 {
    let body = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .expect("scrape")
        .text()
        .await
        .expect("body");
    body.lines()
        .filter(|l| l.starts_with(line_start))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// What is left once everything is over: each a line, empty when nothing.
async fn left(
    client: &OrchestratorClient,
    metrics: std::net::SocketAddr,
    conversations: &[String],
    redis: Option<&RedisServer>,
) -> Vec<String> {
    let mut left = Vec::new();
    for (name, value) in [
        (
            "tokens held of the tenant's budget",
            metric(metrics, "baton_tenant_model_tokens_held{").await,
        ),
        (
            "breaker probes",
            metric(metrics, "baton_model_breaker_probing{").await,
        ),
        (
            "calls waiting for the rate limit",
            metric(metrics, "baton_rate_limit_queue{").await,
        ),
        ("runs active", metric(metrics, "baton_runs_active ").await),
        (
            "runs of the tenant",
            metric(metrics, "baton_tenant_runs{").await,
        ),
    ] {
        if value != 0.0 {
            left.push(format!("{name}: {value}"));
        }
    }
    let running = client
        .list_runs(pb::RunStatus::Running, 100, "")
        .await
        .expect("list runs");
    if !running.runs.is_empty() {
        left.push(format!("{} runs listed running", running.runs.len()));
    }
    for id in conversations {
        let c = client.get_conversation(id, 0, "", 0).await.expect("get");
        if !c.running_run_id.is_empty() {
            left.push(format!(
                "conversation {id}'s turn held by {}",
                c.running_run_id
            ));
        }
    }
    if let Some(redis) = redis {
        let cli = |args: &[&str]| redis.cli(args).expect("redis-cli");
        let day = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_millis()
            / 86_400_000;
        let held = cli(&["HGET", &format!("baton:quota:{{-}}:spend:day:{day}"), "ht"]);
        if !matches!(held.trim(), "" | "0") {
            left.push(format!("Redis: {held} tokens held of the day's budget"));
        }
        for (key, what) in [
            ("baton:quota:{-}:holds", "holds of the day's budget"),
            ("baton:leases", "run leases"),
        ] {
            let n = cli(&["ZCARD", key]);
            if n.trim() != "0" {
                left.push(format!("Redis: {n} {what}"));
            }
        }
        if cli(&["EXISTS", "baton:breaker:{66616b65}:probe"]).trim() != "0" {
            left.push("Redis: a breaker probe".into());
        }
    }
    left
}

async fn sweep(seed: u64, runs: usize, redis: Option<&RedisServer>) {
    let provider = provider().await;
    let metrics = baton_e2e::free_addr().expect("port");
    let url = redis.map(RedisServer::url);
    let server = OrchestratorServer::start(&agents(&provider), None, |c| {
        if let Some(url) = url {
            baton_e2e::durable_runs(url)(c);
        }
        c.telemetry.metrics_listen = metrics.to_string();
        c.quotas.default.model_tokens_per_day = Some(1_000_000_000);
        c.conversations.max_wait = Duration::from_secs(5);
    })
    .await
    .expect("orchestrator");
    let client = server.client().await.expect("client");
    let mut conversations = Vec::new();
    for _ in 0..CONVERSATIONS {
        let mut stream = client
            .run_agent(pb::RunAgentRequest {
                agent: "helper".into(),
                input: "begin".into(),
                new_conversation: true,
                ..Default::default()
            })
            .await
            .expect("run");
        let first = stream.next().await.expect("event").expect("event");
        let Some(Payload::RunStarted(s)) = first.payload else {
            panic!("{first:?}")
        };
        drain(&mut stream).await;
        conversations.push(s.conversation_id);
    }
    let began = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for w in 0..WORKERS {
        let (client, conversations, next) = (client.clone(), conversations.clone(), next.clone());
        let mut rng = Rng::fork(seed, w as u64);
        workers.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < runs as u64 {
                let conversation = rng.pick(&conversations).clone();
                let how = stop(&mut rng);
                one(&client, &conversation, how).await;
            }
        }));
    }
    for w in workers {
        w.await.expect("worker");
    }
    let mode = if redis.is_some() { "redis" } else { "memory" };
    eprintln!(
        "{mode}: {runs} runs stopped at random in {:.1?}, {} model requests",
        began.elapsed(),
        provider.requests().len()
    );
    // Everything over: nothing left, within a bound.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let found = left(&client, metrics, &conversations, redis).await;
        if found.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{mode}, seed {seed} (BATON_SWEEP_SEED={seed} to replay): left behind: {found:#?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    server.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_stopped_at_random_moments_leave_nothing_held_in_memory_or_in_redis() {
    let seed = std::env::var("BATON_SWEEP_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    eprintln!("cancellation sweep seed: {seed} (BATON_SWEEP_SEED={seed} to replay)");
    sweep(seed, 1000, None).await;
    let redis = RedisServer::start().expect("redis-server");
    sweep(seed, 500, Some(&redis)).await;
}
