//! ForkRun: the time from the call to the fork's first live event, for runs
//! of 100, 1,000 and 10,000 tool-call turns (an instant scripted model and
//! a built-in tool) forked at their last tool result with an edit — the
//! whole run is replayed from its recording, one model turn is live — set
//! beside the time the run itself took (the target: replaying is at
//! least 2× faster than running, and grows linearly) and the time WatchRun
//! takes to stream the ended run from its first event (the stream alone: a
//! floor under the fork's time); then what a finished run's history costs: the heap it holds in memory mode (live bytes
//! counted by the allocator, over 1,000 runs of 100 turns) and its keys'
//! bytes in Redis (`MEMORY USAGE`), with events per run.

use std::time::Instant;

use baton_client::{OrchestratorClient, pb, pb::run_event::Payload};
use baton_e2e::{OrchestratorServer, RedisServer};
use futures::StreamExt as _;

/// What to measure.
#[derive(clap::Args)]
pub struct Options {
    /// The run lengths, in tool-call turns.
    #[arg(long, value_delimiter = ',', default_value = "100,1000,10000")]
    turns: Vec<u32>,
    /// Forks timed per length (the median is shown; as many runs and
    /// watches are timed beside them).
    #[arg(long, default_value_t = 15)]
    forks: usize,
    /// Replays timed per length (the median is shown).
    #[arg(long, default_value_t = 5)]
    replays: usize,
    /// Finished 100-turn runs whose heap is counted (memory mode).
    #[arg(long, default_value_t = 1000)]
    kept: usize,
}

fn agents(turns: &[u32]) -> String {
    let mut yaml = String::from("scripts:\n");
    for n in turns {
        yaml.push_str(&format!(
            "  loop{n}:\n    - {{calls: [{{tool: list_context, args: {{}}}}], repeat: {n}, usage: {{input_tokens: 1, output_tokens: 1}}}}\n    - {{text: \"done\", usage: {{input_tokens: 1, output_tokens: 1}}}}\n"
        ));
    }
    yaml.push_str("agents:\n");
    for n in turns {
        yaml.push_str(&format!(
            "  loop{n}: {{model: \"scripted:loop{n}\", tools: [list_context]}}\n"
        ));
    }
    yaml
}

/// Runs `agent` to its end: its events and how long it took (ms).
async fn run_agent(
    client: &OrchestratorClient,
    agent: &str,
) -> anyhow::Result<(Vec<pb::RunEvent>, f64)> {
    let t = Instant::now();
    let events = client
        .run_agent_to_end(pb::RunAgentRequest {
            agent: agent.into(),
            input: "go".into(),
            ..Default::default()
        })
        .await?;
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    anyhow::ensure!(
        matches!(
            events.last().and_then(|e| e.payload.as_ref()),
            Some(Payload::RunCompleted(_))
        ),
        "run of {agent} did not complete"
    );
    Ok((events, ms))
}

/// Forks `run_id` at `at` with an edited tool result: ms to the first live
/// event, and the events replayed before it.
async fn fork(client: &OrchestratorClient, run_id: &str, at: u64) -> anyhow::Result<(f64, usize)> {
    let t = Instant::now();
    let mut events = client
        .fork_run(pb::ForkRunRequest {
            run_id: run_id.into(),
            at_seq: at,
            edit: Some(pb::ForkEdit {
                edit: Some(pb::fork_edit::Edit::ToolResult(pb::ToolResultEdit {
                    result: "[]".into(),
                    is_error: false,
                })),
            }),
            ..Default::default()
        })
        .await?;
    let mut replayed = 0;
    let mut first_live = None;
    let mut completed = false;
    while let Some(e) = events.next().await {
        let e = e?;
        if e.replayed {
            replayed += 1;
        } else if first_live.is_none() {
            first_live = Some(t.elapsed().as_secs_f64() * 1000.0);
        }
        completed |= matches!(e.payload, Some(Payload::RunCompleted(_)));
    }
    anyhow::ensure!(completed, "the fork did not complete");
    Ok((first_live.unwrap_or(f64::NAN), replayed))
}

/// Replays `run_id` strictly to its end: ms, and its stats.
async fn replay(
    client: &OrchestratorClient,
    run_id: &str,
) -> anyhow::Result<(f64, pb::ReplayStats)> {
    let t = Instant::now();
    let mut events = client
        .replay_run(pb::ReplayRunRequest {
            run_id: run_id.into(),
            strict: true,
            ..Default::default()
        })
        .await?;
    let mut stats = None;
    while let Some(e) = events.next().await {
        if let Some(Payload::RunCompleted(c)) = e?.payload {
            stats = c.replay;
        }
    }
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    let stats = stats.ok_or_else(|| anyhow::anyhow!("the replay did not complete"))?;
    anyhow::ensure!(!stats.diverged, "the replay diverged: {stats:?}");
    Ok((ms, stats))
}

/// Watches `run_id` (ended) from its first event to its end: ms, and the
/// events read — what streaming a recorded history alone costs, the floor
/// under a fork that sends it all before its first live event.
async fn watch(client: &OrchestratorClient, run_id: &str) -> anyhow::Result<(f64, usize)> {
    let t = Instant::now();
    let mut events = client.watch_run(run_id, 0, None).await?;
    let mut n = 0;
    while let Some(e) = events.next().await {
        e?;
        n += 1;
    }
    Ok((t.elapsed().as_secs_f64() * 1000.0, n))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub fn run(o: Options) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let max = o.turns.iter().copied().max().unwrap_or(100);
        let yaml = agents(&o.turns);
        let server = OrchestratorServer::start(&yaml, None, |c| {
            c.runs.max_turns_limit = c.runs.max_turns_limit.max(max + 10);
            c.runs.max_turns = max + 10;
            c.runs.max_finished_bytes = 8 << 30;
            c.runs.max_finished_runs = 1_000_000;
        })
        .await?;
        let client = OrchestratorClient::connect(server.endpoint()).await?;
        println!(
            "\n{:<34} {:>10} {:>16} {:>12} {:>9} {:>12}",
            "run", "run (ms)", "fork→live (ms)", "replayed ev", "speed-up", "watch (ms)"
        );
        let mut replays = Vec::new();
        for n in &o.turns {
            let agent = format!("loop{n}");
            run_agent(&client, &agent).await?;
            // The run's own time: the median of as many runs as forks.
            let mut run_times = Vec::new();
            let mut events = Vec::new();
            for _ in 0..o.forks.max(1) {
                let (e, ms) = run_agent(&client, &agent).await?;
                run_times.push(ms);
                events = e;
            }
            let run_ms = median(run_times);
            let at = events
                .iter()
                .rev()
                .find(|e| matches!(e.payload, Some(Payload::ToolCallCompleted(_))))
                .map(|e| e.seq)
                .ok_or_else(|| anyhow::anyhow!("no tool result"))?;
            let mut times = Vec::new();
            let mut replayed = 0;
            for _ in 0..o.forks {
                let (ms, r) = fork(&client, &events[0].run_id, at).await?;
                times.push(ms);
                replayed = r;
            }
            let live = median(times);
            let mut watches = Vec::new();
            for _ in 0..o.forks.max(1) {
                let (ms, read) = watch(&client, &events[0].run_id).await?;
                anyhow::ensure!(read == events.len(), "watched {read} of {} events", events.len());
                watches.push(ms);
            }
            println!(
                "{:<34} {:>10.2} {:>16.2} {:>12} {:>8.1}x {:>12.2}",
                format!("{n} turns ({} events)", events.len()),
                run_ms,
                live,
                replayed,
                run_ms / live,
                median(watches)
            );
            replays.push((*n, events[0].run_id.clone(), run_ms));
        }

        // ReplayRun of the same runs, strict (every call matched): the
        // whole run again, its model turns answered from the recording.
        println!(
            "\n{:<34} {:>10} {:>16} {:>16}",
            "run", "run (ms)", "replay (ms)", "matched calls"
        );
        for (n, run_id, run_ms) in replays {
            let mut times = Vec::new();
            let mut matched = String::new();
            for _ in 0..o.replays.max(1) {
                let (ms, stats) = replay(&client, &run_id).await?;
                times.push(ms);
                matched = format!("{} of {}", stats.matched_calls, stats.calls);
            }
            println!(
                "{:<34} {:>10.2} {:>16.2} {:>16}",
                format!("{n} turns"),
                run_ms,
                median(times),
                matched
            );
        }

        // The heap a finished 100-turn run's history holds (memory mode).
        let small = OrchestratorServer::start(&agents(&[100]), None, |c| {
            c.runs.max_turns = 110;
            c.runs.max_finished_bytes = 8 << 30;
            c.runs.max_finished_runs = 1_000_000;
        })
        .await?;
        let client = OrchestratorClient::connect(small.endpoint()).await?;
        let (events, _) = run_agent(&client, "loop100").await?;
        let before = crate::heap::live_bytes();
        for _ in 0..o.kept {
            run_agent(&client, "loop100").await?;
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        let per_run = (crate::heap::live_bytes().saturating_sub(before)) as f64 / o.kept as f64;
        println!(
            "\nmemory mode: a finished 100-turn run ({} events) holds {:.1} KiB of heap, {:.0} bytes per event ({} runs kept)",
            events.len(),
            per_run / 1024.0,
            per_run / events.len() as f64,
            o.kept
        );

        // Its keys in Redis.
        let redis = RedisServer::start()?;
        let url = redis.url();
        let durable = OrchestratorServer::start(&agents(&[100]), None, move |c| {
            c.runs.max_turns = 110;
            c.runs.store = baton_orchestrator::config::RunStoreMode::Redis;
            c.runs.redis.url = url;
        })
        .await?;
        let client = OrchestratorClient::connect(durable.endpoint()).await?;
        let (events, _) = run_agent(&client, "loop100").await?;
        let id = &events[0].run_id;
        let mut bytes = 0u64;
        for key in ["meta", "log", "journal", "inbox"] {
            // SAMPLES 0: every field counted, not an estimate.
            let key = format!("baton:run:{{{id}}}:{key}");
            let out = redis.cli(&["MEMORY", "USAGE", &key, "SAMPLES", "0"])?;
            bytes += out.trim().parse::<u64>().unwrap_or(0);
        }
        println!(
            "durable: a finished 100-turn run ({} events) holds {:.1} KiB in Redis (meta, log, journal), {:.0} bytes per event",
            events.len(),
            bytes as f64 / 1024.0,
            bytes as f64 / events.len() as f64
        );
        Ok(())
    })
}
