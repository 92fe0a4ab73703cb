//! Webhooks (issue 57): deliveries per second from one replica to a local
//! receiver, and the latency a webhook adds to a run's end (from the
//! `RunCompleted` event's time to the receiver's arrival), p50 and p99 —
//! in memory mode and with durable runs on a `redis-server`.
//!
//! The receiver is an axum server in this process answering 200 to every
//! POST and noting when each delivery arrived; the runs are an instant
//! scripted agent's. Throughput: `runs` runs, 32 at once, each delivering
//! `run.started`, `event.message_completed` and `run.completed` to a
//! tenant webhook (so `3 × runs` deliveries, ordered per run); the figure
//! is deliveries over the time from the first run's start to the last
//! arrival. Latency: `latency_runs` runs one after another (an idle
//! server), each `run.completed`'s arrival minus its event's time.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime},
};

use baton_client::{OrchestratorClient, pb};
use baton_e2e::{OrchestratorServer, RedisServer, agent_request, durable_runs};
use futures::StreamExt;

const AGENTS: &str = r#"
scripts:
  echo:
    - text: "You said: {{input}}"
agents:
  echo: {model: "scripted:echo"}
"#;

/// What to measure.
#[derive(clap::Args)]
pub struct Options {
    /// Runs of the throughput part.
    #[arg(long, default_value_t = 2000)]
    runs: usize,
    /// Runs of the latency part (one at a time).
    #[arg(long, default_value_t = 300)]
    latency_runs: usize,
}

/// What the receiver saw: each delivery's arrival (wall clock and
/// monotonic) and body.
#[derive(Default)]
struct Seen {
    arrivals: Vec<(SystemTime, Instant, serde_json::Value)>,
}

async fn receiver() -> anyhow::Result<(String, Arc<Mutex<Seen>>)> {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let state = seen.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |body: axum::body::Bytes| {
            let state = state.clone();
            async move {
                let (wall, mono) = (SystemTime::now(), Instant::now());
                let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                state
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .arrivals
                    .push((wall, mono, v));
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/hook", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((url, seen))
}

async fn run_once(client: &OrchestratorClient) -> anyhow::Result<()> {
    let mut events = client.run_agent(agent_request("echo", "x")).await?;
    while let Some(e) = events.next().await {
        e?;
    }
    Ok(())
}

fn pct(h: &hdrhistogram::Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1000.0
}

async fn measure(label: &str, server: &OrchestratorServer, o: &Options) -> anyhow::Result<()> {
    let (url, seen) = receiver().await?;
    let client = OrchestratorClient::connect(server.endpoint()).await?;
    client
        .create_webhook(pb::CreateWebhookRequest {
            url,
            events: vec![
                "run.started".into(),
                "event.message_completed".into(),
                "run.completed".into(),
            ],
            ..Default::default()
        })
        .await?;
    // Warm up, then forget it.
    for _ in 0..20 {
        run_once(&client).await?;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    seen.lock()
        .unwrap_or_else(|p| p.into_inner())
        .arrivals
        .clear();

    // Throughput.
    let t = Instant::now();
    let sem = Arc::new(tokio::sync::Semaphore::new(32));
    let mut tasks = Vec::new();
    for _ in 0..o.runs {
        let permit = sem.clone().acquire_owned().await?;
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let r = run_once(&client).await;
            drop(permit);
            r
        }));
    }
    for task in tasks {
        task.await??;
    }
    let runs_done = t.elapsed();
    let want = 3 * o.runs;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let n = seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .arrivals
            .len();
        if n >= want || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (n, last) = {
        let s = seen.lock().unwrap_or_else(|p| p.into_inner());
        (s.arrivals.len(), s.arrivals.iter().map(|a| a.1).max())
    };
    let span = last.map_or(Duration::ZERO, |l| l.duration_since(t));
    println!(
        "{label}: {n} of {want} deliveries of {} runs (32 at once) in {:.2} s: {:.0} deliveries/s (the runs alone took {:.2} s)",
        o.runs,
        span.as_secs_f64(),
        n as f64 / span.as_secs_f64(),
        runs_done.as_secs_f64()
    );
    seen.lock()
        .unwrap_or_else(|p| p.into_inner())
        .arrivals
        .clear();

    // Latency: run.completed's arrival minus its event's time.
    for _ in 0..o.latency_runs {
        run_once(&client).await?;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut h = hdrhistogram::Histogram::<u64>::new(3)?;
    let s = seen.lock().unwrap_or_else(|p| p.into_inner());
    let mut by_type: HashMap<String, usize> = HashMap::new();
    for (wall, _, v) in &s.arrivals {
        let kind = v["type"].as_str().unwrap_or_default().to_owned();
        *by_type.entry(kind.clone()).or_default() += 1;
        if kind != "run.completed" {
            continue;
        }
        let Some(at) = v["data"]["event"]["time"].as_str() else {
            continue;
        };
        let Ok(at) = at.parse::<baton_proto::wkt::Timestamp>() else {
            continue;
        };
        let Ok(at) = SystemTime::try_from(at) else {
            continue;
        };
        let us = wall.duration_since(at).unwrap_or_default().as_micros() as u64;
        h.record(us.max(1))?;
    }
    println!(
        "{label}: run end -> webhook over {} runs one at a time: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        h.len(),
        pct(&h, 0.5),
        pct(&h, 0.99),
        h.max() as f64 / 1000.0
    );
    Ok(())
}

pub fn run(o: Options) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let fast = |c: &mut baton_orchestrator::config::Config| {
            c.runs.max_finished_runs = 1_000_000;
            c.webhooks.allowed_hosts = vec!["127.0.0.1".into()];
        };
        let memory = OrchestratorServer::start(AGENTS, None, fast).await?;
        measure("memory", &memory, &o).await?;
        memory.shutdown().await?;
        let redis = RedisServer::start()?;
        let durable = durable_runs(redis.url());
        let server = OrchestratorServer::start(AGENTS, None, move |c| {
            durable(c);
            fast(c);
        })
        .await?;
        measure("redis", &server, &o).await?;
        server.shutdown().await?;
        Ok(())
    })
}
