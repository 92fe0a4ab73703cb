//! What an experiment costs (issue 56): 1,000 cases on an instant scripted
//! model with four non-judge scorers (exact, contains, regex, numeric) at
//! concurrency 64 — the experiment's time and its time per case against
//! plain runs of the same agent (1,000 RunAgent runs, 64 at once, read to
//! their ends), alternated round by round on one server (target: at most
//! 2× a plain run per case); then what one experiment holds: its record's
//! bytes (what memory mode keeps) and, on Redis, its key's `MEMORY USAGE`.

use std::time::Instant;

use baton_client::{OrchestratorClient, pb};
use baton_e2e::{OrchestratorServer, RedisServer};
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
    /// Cases of the dataset.
    #[arg(long, default_value_t = 1000)]
    cases: usize,
    /// Runs at once (the experiment's concurrency, and the plain runs').
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Rounds, each a set of plain runs then an experiment.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

/// The dataset: case `i` asks "case i" and is scored four ways.
fn dataset(cases: usize) -> String {
    (0..cases)
        .map(|i| {
            serde_json::json!({
                "id": format!("case-{i}"),
                "input": format!("case {i}"),
                "expected": format!("You said: case {i}"),
                "scorers": [
                    {"kind": "exact"},
                    {"kind": "contains", "value": format!("case {i}")},
                    {"kind": "regex", "pattern": "^You said: case \\d+$"},
                    {"kind": "numeric", "name": "number"},
                ],
            })
            .to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// 1,000 plain runs, `concurrency` at once: seconds.
async fn plain(client: &OrchestratorClient, o: &Options) -> anyhow::Result<f64> {
    let t = Instant::now();
    let runs = futures::stream::iter(0..o.cases)
        .map(|i| {
            let client = client.clone();
            async move {
                let r = pb::RunAgentRequest {
                    agent: "echo".into(),
                    input: format!("case {i}"),
                    ..Default::default()
                };
                let mut events = client.run_agent(r).await?;
                while let Some(e) = events.next().await {
                    e?;
                }
                anyhow::Ok(())
            }
        })
        .buffer_unordered(o.concurrency);
    futures::pin_mut!(runs);
    while let Some(r) = runs.next().await {
        r?;
    }
    Ok(t.elapsed().as_secs_f64())
}

/// One experiment of the dataset: seconds, and its record.
async fn experiment(
    client: &OrchestratorClient,
    o: &Options,
    text: &str,
) -> anyhow::Result<(f64, pb::Experiment)> {
    let t = Instant::now();
    let events = client
        .run_experiment(pb::RunExperimentRequest {
            dataset: text.into(),
            dataset_name: "bench.jsonl".into(),
            agent: "echo".into(),
            concurrency: o.concurrency as u32,
            ..Default::default()
        })
        .await?;
    futures::pin_mut!(events);
    while let Some(e) = events.next().await {
        if let Some(pb::experiment_event::Event::Ended(e)) = e?.event {
            let took = t.elapsed().as_secs_f64();
            let totals = e.totals.unwrap_or_default();
            anyhow::ensure!(
                totals.passed as usize == o.cases,
                "{} of {} cases passed",
                totals.passed,
                o.cases
            );
            return Ok((took, e));
        }
    }
    anyhow::bail!("the experiment did not end")
}

/// Runs the benchmark.
pub fn run(o: Options) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let text = dataset(o.cases);
        let memory = OrchestratorServer::start(AGENTS, None, |c| {
            c.runs.max_finished_runs = 1_000_000;
        })
        .await?;
        let client = OrchestratorClient::connect(memory.endpoint()).await?;
        // Warm up.
        plain(&client, &Options { cases: 200, ..o }).await?;
        let mut plains = Vec::new();
        let mut exps = Vec::new();
        let mut record = pb::Experiment::default();
        for _ in 0..o.rounds {
            plains.push(plain(&client, &o).await?);
            let (s, r) = experiment(&client, &o, &text).await?;
            exps.push(s);
            record = r;
        }
        let n = o.cases as f64;
        println!(
            "eval: {} cases, 4 scorers each (exact, contains, regex, numeric), concurrency {}, {} rounds alternated",
            o.cases, o.concurrency, o.rounds
        );
        println!(
            "{:<44} {:>12} {:>12} {:>8} {:>8}",
            "", "plain runs", "experiment", "ratio", "target"
        );
        for (i, (p, e)) in plains.iter().zip(&exps).enumerate() {
            println!(
                "{:<44} {:>9.3} ms {:>9.3} ms {:>7.2}x {:>8}",
                format!("round {}: time per case (total {:.2} s / {:.2} s)", i + 1, p, e),
                p * 1000.0 / n,
                e * 1000.0 / n,
                e / p,
                "<= 2x"
            );
        }
        let bytes = prost::Message::encoded_len(&record);
        println!(
            "the experiment's record: {bytes} bytes ({:.0} bytes a case), what memory mode keeps of it",
            bytes as f64 / n
        );
        memory.shutdown().await?;

        // Redis: the record's key.
        let redis = RedisServer::start()?;
        let url = redis.url();
        let durable = OrchestratorServer::start(AGENTS, None, move |c| {
            c.runs.store = baton_orchestrator::config::RunStoreMode::Redis;
            c.runs.redis.url = url;
        })
        .await?;
        let client = OrchestratorClient::connect(durable.endpoint()).await?;
        let (s, r) = experiment(&client, &o, &text).await?;
        let keys = redis.cli(&["--scan", "--pattern", "*:exp:*"])?;
        let mut usage = 0u64;
        for key in keys.lines().filter(|k| !k.is_empty()) {
            usage += redis
                .cli(&["MEMORY", "USAGE", key])?
                .trim()
                .parse::<u64>()
                .unwrap_or(0);
        }
        println!(
            "durable (Redis): the experiment took {:.2} s ({:.3} ms a case); its keys hold {usage} bytes in Redis (MEMORY USAGE; record {} bytes)",
            s,
            s * 1000.0 / n,
            prost::Message::encoded_len(&r)
        );
        durable.shutdown().await?;
        Ok(())
    })
}
