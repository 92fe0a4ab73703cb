//! The RunPipeline benchmark: no-op scripted steps through gRPC with the Rust
//! client, in the shapes of the LangGraph 1.2.22 figures quoted in
//! docs/performance.md (measured on the 2-core machine with its
//! in-memory checkpointer, not re-measured here):
//!
//! (a) a sequential chain of 200 steps (LangGraph: 101 ms per run);
//! (b) a fan-out to 1000 parallel steps, then one join step (730 ms).
//!
//! Like LangGraph's nodes passing state, every step writes its output to a
//! slot and reads its predecessors' (the join reads all 1000); slots are
//! cleared at the end. Each shape runs on the in-memory store, on Redis
//! directly, and on Redis through the context-store service (production).

use std::{sync::Arc, time::Instant};

use baton_client::{OrchestratorClient, pb, pb::run_event::Payload};
use baton_context_store::config::Backend;
use baton_e2e::{OrchestratorServer, RedisServer, StoreServer};
use baton_orchestrator::remote_store::RemoteStore;
use baton_store::{
    ContextStore,
    memory::MemoryStore,
    redis::{RedisConfig, RedisStore},
};
use futures::StreamExt;

/// What to measure.
#[derive(clap::Args)]
pub struct Options {
    /// Runs per shape and store (the table gives their median and mean).
    #[arg(long, default_value_t = 50)]
    runs: usize,
    /// Only this store: `memory`, `redis` or `service` (for profiling).
    #[arg(long)]
    only: Option<String>,
    /// Only this shape: `chain` or `fan-out` (for profiling; the other
    /// column reads 0).
    #[arg(long)]
    shape: Option<String>,
}

const AGENTS: &str = r#"
scripts:
  noop: [{text: "ok"}]
agents:
  noop: {model: "scripted:noop"}
"#;

fn step(id: String) -> pb::PipelineStep {
    pb::PipelineStep {
        id,
        agent: "noop".into(),
        task: "go".into(),
        ..Default::default()
    }
}

fn chain() -> pb::RunPipelineRequest {
    let steps = (0..200)
        .map(|i| {
            let mut s = step(format!("s{i}"));
            s.output_to = format!("s{i}");
            if i > 0 {
                s.input_from = vec![format!("s{}", i - 1)];
            }
            s
        })
        .collect();
    request(pb::PipelineMode::Sequential, steps, None)
}

fn fan_out() -> pb::RunPipelineRequest {
    let mut steps: Vec<pb::PipelineStep> = (0..1000)
        .map(|i| {
            let mut s = step(format!("f{i}"));
            s.output_to = format!("f{i}");
            s
        })
        .collect();
    let mut join = step("join".into());
    join.input_from = (0..1000).map(|i| format!("f{i}")).collect();
    steps.push(join);
    request(pb::PipelineMode::Dag, steps, Some(1000))
}

fn request(
    mode: pb::PipelineMode,
    steps: Vec<pb::PipelineStep>,
    concurrency: Option<u32>,
) -> pb::RunPipelineRequest {
    pb::RunPipelineRequest {
        pipeline: Some(pb::PipelineSpec {
            name: "bench".into(),
            steps,
            mode: mode as i32,
            policy: pb::FailurePolicy::Fail as i32,
            max_concurrency: concurrency,
        }),
        ..Default::default()
    }
}

async fn run_once(client: &OrchestratorClient, req: pb::RunPipelineRequest) -> anyhow::Result<()> {
    let mut events = client.run_pipeline(req).await?;
    let mut ok = false;
    while let Some(e) = events.next().await {
        ok |= matches!(e?.payload, Some(Payload::RunCompleted(_)));
    }
    anyhow::ensure!(ok, "the pipeline did not complete");
    Ok(())
}

/// Per-run times of one shape: median and mean, in ms.
#[derive(Clone, Copy, Default)]
struct Times {
    median: f64,
    mean: f64,
}

impl Times {
    fn of(mut ms: Vec<f64>) -> Self {
        ms.sort_by(f64::total_cmp);
        let n = ms.len();
        let median = if n % 2 == 1 {
            ms[n / 2]
        } else {
            (ms[n / 2 - 1] + ms[n / 2]) / 2.0
        };
        Self {
            median,
            mean: ms.iter().sum::<f64>() / n as f64,
        }
    }
}

async fn measure(
    store: Arc<dyn ContextStore>,
    runs: usize,
    shape: Option<&str>,
) -> anyhow::Result<(Times, Times)> {
    let server = OrchestratorServer::start(AGENTS, Some(store), |c| {
        c.runs.max_pipeline_steps = 2000;
        c.runs.max_pipeline_concurrency = 1000;
    })
    .await?;
    let client = OrchestratorClient::connect(server.endpoint()).await?;
    let mut out = [Times::default(); 2];
    for (slot, (name, make)) in [
        ("chain", chain as fn() -> pb::RunPipelineRequest),
        ("fan-out", fan_out),
    ]
    .into_iter()
    .enumerate()
    {
        if shape.is_some_and(|s| s != name) {
            continue;
        }
        run_once(&client, make()).await?;
        let mut ms = Vec::with_capacity(runs);
        for _ in 0..runs {
            let t = Instant::now();
            run_once(&client, make()).await?;
            ms.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        out[slot] = Times::of(ms);
    }
    server.shutdown().await?;
    Ok((out[0], out[1]))
}

pub fn run(o: Options) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let redis = RedisServer::start()?;
        let memory: Arc<dyn ContextStore> = Arc::new(MemoryStore::new(Default::default()));
        let direct: Arc<dyn ContextStore> = Arc::new(RedisStore::new(
            &RedisConfig {
                url: redis.url(),
                ..Default::default()
            },
            Default::default(),
        )?);
        let store_server =
            StoreServer::start(StoreServer::config(Backend::Redis, Some(redis.url()))).await?;
        let remote: Arc<dyn ContextStore> = Arc::new(RemoteStore::new(
            &store_server.endpoint(),
            Default::default(),
            std::time::Duration::from_secs(5),
        )?);

        println!(
            "\n{:<50} {:>20} {:>20}",
            format!("per run, ms: median (mean) of {}", o.runs),
            "(a) chain",
            "(b) fan-out"
        );
        let mut medians = std::collections::HashMap::new();
        for (key, name, store) in [
            ("memory", "memory store", memory),
            ("redis", "Redis, directly", direct),
            ("service", "Redis through the context-store service", remote),
        ] {
            if o.only.as_deref().is_some_and(|only| only != key) {
                continue;
            }
            let (a, b) = measure(store, o.runs, o.shape.as_deref()).await?;
            let cell = |t: Times| format!("{:.2} ({:.2})", t.median, t.mean);
            println!("{name:<50} {:>20} {:>20}", cell(a), cell(b));
            medians.insert(key, (a.median, b.median));
        }
        println!(
            "{:<50} {:>20} {:>20}",
            "LangGraph 1.2.22, in-memory checkpointer (quoted)", "101", "730"
        );
        // The ratios the production path is held to, from the medians of
        // this one run.
        for (over, under, target, what) in [
            ("service", "redis", 1.3, "service / Redis directly"),
            ("redis", "memory", 2.5, "Redis directly / memory"),
        ] {
            if let (Some(o), Some(u)) = (medians.get(over), medians.get(under)) {
                let ratio = |x: f64, y: f64| format!("{:.2}x", x / y);
                println!(
                    "{:<50} {:>20} {:>20}",
                    format!("{what} (target <= {target})"),
                    ratio(o.0, u.0),
                    ratio(o.1, u.1)
                );
            }
        }
        store_server.shutdown().await?;
        anyhow::Ok(())
    })
}
