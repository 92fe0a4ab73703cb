//! What durability costs: the RunAgent shapes (a) 100 tool-call turns,
//! (b) nested A→B→C and (c) one stream's event rate, each measured on an
//! orchestrator keeping runs in memory and on one keeping them in Redis
//! (`runs.store = "redis"`, a `redis-server` of the bench's own), in one
//! invocation; the durability issue's targets are (a) and (b) at most 3×
//! memory mode and (c) at least 200,000 events/s with every event in the
//! Redis log (checked: the log's length is the stream's); then (d) 100,000
//! runs parked on an approval (the heap a parked run still holds — live
//! allocations counted by the allocator, not RSS, which also counts pages
//! the allocator keeps — at most 4 KiB per run once they left
//! memory, and Redis's memory per run) and (e) the failover time of 20
//! runs of a SIGKILLed replica (target: at most twice the 5 s lease) — see
//! `failover.rs`; (e) runs two `baton-orchestrator` binaries built next to
//! this one.

use std::time::Instant;

use baton_client::OrchestratorClient;
use baton_e2e::{OrchestratorServer, RedisServer};

use crate::agent::{AGENTS, run_once};

/// What to measure.
#[derive(clap::Args)]
pub struct Options {
    /// Runs of shape (a) per mode.
    #[arg(long, default_value_t = 50)]
    loop_runs: usize,
    /// Runs of shape (b) per mode.
    #[arg(long, default_value_t = 1000)]
    nested_runs: usize,
    /// Text deltas streamed in shape (c).
    #[arg(long, default_value_t = 1_000_000)]
    deltas: u32,
    /// Runs parked on an approval in shape (d).
    #[arg(long, default_value_t = 100_000)]
    parked: usize,
    /// Runs in flight on the killed replica in shape (e).
    #[arg(long, default_value_t = 20)]
    failover_runs: usize,
}

struct Figures {
    loop_ms: f64,
    nested_ms: f64,
    rate: f64,
    events: usize,
    run_id: String,
}

async fn measure(server: &OrchestratorServer, o: &Options) -> anyhow::Result<Figures> {
    let client = OrchestratorClient::connect(server.endpoint()).await?;
    run_once(&client, "looper").await?;
    let t = Instant::now();
    for _ in 0..o.loop_runs {
        run_once(&client, "looper").await?;
    }
    let loop_ms = t.elapsed().as_secs_f64() * 1000.0 / o.loop_runs as f64;
    for _ in 0..20 {
        run_once(&client, "a").await?;
    }
    let t = Instant::now();
    for _ in 0..o.nested_runs {
        run_once(&client, "a").await?;
    }
    let nested_ms = t.elapsed().as_secs_f64() * 1000.0 / o.nested_runs as f64;
    let t = Instant::now();
    let events = run_once(&client, "chatty").await?;
    let rate = events as f64 / t.elapsed().as_secs_f64();
    let page = client
        .list_runs(baton_client::pb::RunStatus::Unspecified, 1, "")
        .await?;
    let run_id = page
        .runs
        .first()
        .map(|r| r.run_id.clone())
        .unwrap_or_default();
    Ok(Figures {
        loop_ms,
        nested_ms,
        rate,
        events,
        run_id,
    })
}

pub fn run(o: Options) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let yaml = AGENTS.replace("DELTAS", &o.deltas.to_string());
        let redis = RedisServer::start()?;
        let memory = OrchestratorServer::start(&yaml, None, |c| c.runs.max_turns = 200).await?;
        let url = redis.url();
        let durable = OrchestratorServer::start(&yaml, None, move |c| {
            c.runs.max_turns = 200;
            c.runs.store = baton_orchestrator::config::RunStoreMode::Redis;
            c.runs.redis.url = url;
            c.runs.lease = std::time::Duration::from_secs(3);
            c.runs.park_after = std::time::Duration::from_secs(1);
        })
        .await?;
        let m = measure(&memory, &o).await?;
        let d = measure(&durable, &o).await?;
        let logged: u64 = redis
            .cli(&["XLEN", &format!("baton:run:{{{}}}:log", d.run_id)])?
            .trim()
            .parse()?;
        anyhow::ensure!(
            logged as usize == d.events,
            "the Redis log of the (c) run holds {logged} events, the stream {}",
            d.events
        );
        println!(
            "\n{:<52} {:>12} {:>12} {:>8} {:>10}",
            "shape", "memory", "Redis", "ratio", "target"
        );
        println!(
            "{:<52} {:>9.2} ms {:>9.2} ms {:>7.2}x {:>10}",
            "(a) 100 tool-call turns then an answer, per run",
            m.loop_ms,
            d.loop_ms,
            d.loop_ms / m.loop_ms,
            "<= 3x"
        );
        println!(
            "{:<52} {:>9.3} ms {:>9.3} ms {:>7.2}x {:>10}",
            "(b) nested A→B→C, per run",
            m.nested_ms,
            d.nested_ms,
            d.nested_ms / m.nested_ms,
            "<= 3x"
        );
        println!(
            "{:<52} {:>7.0} ev/s {:>7.0} ev/s {:>7.2}x {:>10}",
            format!("(c) events/s on one stream ({} events)", d.events),
            m.rate,
            d.rate,
            d.rate / m.rate,
            ">= 200k/s"
        );
        println!("    (c) in Redis: the run's log holds all {logged} events");
        memory.shutdown().await?;
        crate::failover::parked(&durable, &redis, o.parked).await?;
        durable.shutdown().await?;
        crate::failover::failover(&redis, o.failover_runs).await?;
        Ok(())
    })
}
