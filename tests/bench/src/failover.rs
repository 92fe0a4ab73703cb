//! Durable runs' shapes (d) and (e): what a run parked on an approval
//! costs once it left memory, and how long a killed replica's runs pause
//! before another replica resumes them.

use std::{
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use baton_client::{
    OrchestratorClient,
    pb::{self, run_event::Payload},
};
use baton_e2e::{OrchestratorServer, RedisServer, free_addr};
use futures::StreamExt;

/// Runs started at once in shape (d).
const WAVE: usize = 5000;

/// (d): `n` detached runs that ask for an approval, their callers gone,
/// parked by `server` (`runs.park_after` short); the server's RSS per run
/// (the client shares the process) and Redis's memory per run.
pub async fn parked(
    server: &OrchestratorServer,
    redis: &RedisServer,
    n: usize,
) -> anyhow::Result<()> {
    let channels = 16;
    let mut clients = Vec::with_capacity(channels);
    for _ in 0..channels {
        clients.push(OrchestratorClient::connect(server.endpoint()).await?);
    }
    let start = |i: usize| {
        let client = clients[i % channels].clone();

        async move {
            let mut stream = client
                .run_agent(pb::RunAgentRequest {
                    agent: "parked".into(),
                    input: "go".into(),
                    detach: true,
                    ..Default::default()
                })
                .await?;
            while let Some(e) = stream.next().await {
                if matches!(e?.payload, Some(Payload::ApprovalRequested(_))) {
                    return anyhow::Ok(());
                }
            }
            anyhow::bail!("a parked run ended")
        }
    };
    // In waves of WAVE runs, each parked before the next starts: the
    // figure is what parked runs hold, not the transient of 100,000 runs
    // waiting in memory at once (their first park_after). The first wave
    // warms connections and the allocator up (which keeps a wave's peak
    // for the next) and is not counted.
    let wave = |from: usize, to: usize| {
        futures::stream::iter(from..to)
            .map(start)
            .buffer_unordered(256)
            .collect::<Vec<_>>()
    };
    let first: anyhow::Result<Vec<()>> = wave(0, WAVE).await.into_iter().collect();
    first?;
    until_parked(server, redis, WAVE).await?;
    // The first wave's runs, callers and streams wind down (tasks end,
    // buffers are freed) before the heap is counted; the same below.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_before = crate::agent::rss_kib()?;
    let live_before = crate::heap::live_bytes();
    let redis_before = used_memory(redis)?;
    let t = Instant::now();
    let mut done = 0;
    while done < n {
        let to = (done + WAVE).min(n);
        let started: anyhow::Result<Vec<()>> =
            wave(WAVE + done, WAVE + to).await.into_iter().collect();
        started?;
        done = to;
        until_parked(server, redis, WAVE + done).await?;
    }
    let all_parked = t.elapsed();
    // What is still allocated once every run left memory, after a moment
    // for the last runs' tasks and streams to be dropped.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let live_after = crate::heap::live_bytes();
    let rss_after = crate::agent::rss_kib()?;
    let redis_after = used_memory(redis)?;
    let live_per_run = live_after as f64 - live_before as f64;
    let live_per_run = live_per_run / n as f64;
    println!(
        "{:<52} {:>12} {:>9.2} KiB {:>8} {:>10}",
        format!("(d) {n} runs parked on an approval: heap per run"),
        "",
        live_per_run / 1024.0,
        "",
        "<= 4 KiB"
    );
    println!(
        "    live heap {live_before} → {live_after} bytes (allocated and not freed, counted by the allocator; server and client in this process); RSS {rss_before} → {rss_after} KiB ({:.2} KiB per run: pages the allocator keeps count there too); Redis used_memory {:.2} KiB per parked run ({redis_before} → {redis_after} bytes); all parked in waves of {WAVE} in {all_parked:.2?}",
        (rss_after as f64 - rss_before as f64) / n as f64,
        redis_after.saturating_sub(redis_before) as f64 / 1024.0 / n as f64,
    );
    anyhow::ensure!(
        live_per_run <= 4096.0,
        "(d): a parked run still holds {live_per_run:.0} bytes of this process's heap (target: at most 4 KiB)"
    );
    Ok(())
}

/// Waits until `n` runs are parked (in Redis, none in the server's memory).
async fn until_parked(
    server: &OrchestratorServer,
    redis: &RedisServer,
    n: usize,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let leased: usize = redis.cli(&["ZCARD", "baton:leases"])?.trim().parse()?;
        if server.core.runs().running() == 0 && leased >= n {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "runs not parked in 10 min");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn used_memory(redis: &RedisServer) -> anyhow::Result<u64> {
    let info = redis.cli(&["INFO", "memory"])?;
    let line = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .ok_or_else(|| anyhow::anyhow!("no used_memory"))?;
    Ok(line.trim().parse()?)
}

const FAILOVER_AGENTS: &str = r#"
scripts:
  slow: [{calls: [{tool: sleep, args: {ms: 60000, steps: 1}}]}, {text: "done"}]
agents:
  slow: {model: "scripted:slow", tools: [sleep]}
"#;

/// A `baton-orchestrator` process.
struct Replica(Child, String);

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn replica(
    name: &str,
    redis: &RedisServer,
    agents: &std::path::Path,
) -> anyhow::Result<Replica> {
    let binary = std::env::current_exe()?.with_file_name("baton-orchestrator");
    anyhow::ensure!(
        binary.exists(),
        "{} is missing: build it first (cargo build --release -p baton-orchestrator)",
        binary.display()
    );
    let addr = free_addr()?;
    let child = Command::new(binary)
        .env("BATON_ORCH_LISTEN", addr.to_string())
        .env("BATON_ORCH_TELEMETRY__METRICS_LISTEN", "")
        .env("BATON_ORCH_STORE__MODE", "memory")
        .env("BATON_ORCH_AGENTS_FILE", agents)
        .env("BATON_ORCH_RUNS__STORE", "redis")
        .env("BATON_ORCH_RUNS__REDIS__URL", redis.url())
        .env("BATON_ORCH_RUNS__REPLICA", name)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let replica = Replica(child, format!("http://{addr}"));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(c) = OrchestratorClient::connect(replica.1.clone()).await
            && c.list_agents().await.is_ok()
        {
            return Ok(replica);
        }
        anyhow::ensure!(Instant::now() < deadline, "{name} did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// (e): `n` runs in flight on replica A (the default 5 s lease); A is
/// SIGKILLed; the time until each run's next event (its `RunResumed`) as
/// watched on replica B.
pub async fn failover(redis: &RedisServer, n: usize) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("baton-bench-failover-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let agents = dir.join("agents.yaml");
    std::fs::write(&agents, FAILOVER_AGENTS)?;
    let a = replica("bench-a", redis, &agents).await?;
    let b = replica("bench-b", redis, &agents).await?;
    let on_a = OrchestratorClient::connect(a.1.clone()).await?;
    let on_b = OrchestratorClient::connect(b.1.clone()).await?;
    let mut runs = Vec::with_capacity(n);
    for _ in 0..n {
        let mut stream = on_a
            .raw()
            .run_agent(pb::RunAgentRequest {
                agent: "slow".into(),
                input: "go".into(),
                detach: true,
                ..Default::default()
            })
            .await?
            .into_inner();
        let (mut run_id, mut last) = (String::new(), 0);
        while let Some(e) = stream.next().await {
            let e = e?;
            run_id.clone_from(&e.run_id);
            last = e.seq;
            if matches!(e.payload, Some(Payload::ToolCallStarted(_))) {
                break;
            }
        }
        runs.push((run_id, last));
    }
    // Every run watched on B, from what its caller saw.
    let mut watches = Vec::with_capacity(n);
    for (run_id, last) in &runs {
        watches.push(on_b.watch_run(run_id, *last, None).await?);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let killed = Instant::now();
    drop(a);
    let waits = futures::future::join_all(watches.into_iter().map(|mut w| async move {
        while let Some(e) = w.next().await {
            if matches!(e.ok()?.payload, Some(Payload::RunResumed(_))) {
                return Some(killed.elapsed());
            }
        }
        None
    }))
    .await;
    let mut waits: Vec<Duration> = waits
        .into_iter()
        .collect::<Option<_>>()
        .ok_or_else(|| anyhow::anyhow!("a run was not resumed on replica B"))?;
    waits.sort();
    for (run_id, _) in &runs {
        on_b.cancel(run_id, "bench over").await?;
    }
    drop(b);
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "{:<52} {:>12} {:>9.2} s {:>8} {:>10}",
        format!("(e) failover, SIGKILL → next event, p50 of {n} runs"),
        "",
        waits[waits.len() / 2].as_secs_f64(),
        "",
        "<= 10 s"
    );
    println!(
        "{:<52} {:>12} {:>9.2} s {:>8} {:>10}",
        "    max (lease 5 s)",
        "",
        waits[waits.len() - 1].as_secs_f64(),
        "",
        "<= 10 s"
    );
    Ok(())
}
