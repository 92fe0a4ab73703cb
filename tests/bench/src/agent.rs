//! The RunAgent benchmark: an instant scripted model, through gRPC with the
//! Rust client, in the shapes of the OpenAI Agents SDK 0.24 figures measured
//! on this machine (quoted by the orchestrator issue):
//!
//! (a) one agent, 100 sequential tool-call turns, then an answer (SDK:
//!     752 ms per run);
//! (b) nested agent-as-tool A→B→C, runs one after another (SDK: 8.6 ms);
//! (c) events per second on one stream (SDK: 878/s);
//! (d) 10,000 concurrent runs parked on an approval: memory per run.

use std::time::{Duration, Instant};

use baton_client::{OrchestratorClient, pb, pb::run_event::Payload};
use baton_e2e::OrchestratorServer;
use futures::StreamExt;

/// What to measure.
#[derive(clap::Args)]
pub struct Options {
    /// Runs of shape (a).
    #[arg(long, default_value_t = 50)]
    loop_runs: usize,
    /// Runs of shape (b).
    #[arg(long, default_value_t = 2000)]
    nested_runs: usize,
    /// Text deltas streamed in shape (c).
    #[arg(long, default_value_t = 1_000_000)]
    deltas: u32,
    /// Concurrent parked runs in shape (d).
    #[arg(long, default_value_t = 10_000)]
    parked: usize,
    /// Every model call reserves and settles against budgets: the run's
    /// (a request field), its agent's (the agents file) and its tenant's
    /// per day (the config), each far above what the runs spend — the
    /// cost of the checks, not of running out.
    #[arg(long)]
    budgets: bool,
}

/// Whether runs carry a budget of their own (`--budgets`).
static BUDGETS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub(crate) const AGENTS: &str = r#"
# Priced models: every model call is costed (c's is not: counted unpriced).
prices:
  scripted:looper: {input: 2.5, output: 10, cached_input: 1.25}
  scripted:a: {input: 0.15, output: 0.6}
  scripted:b: {input: 0.15, output: 0.6}
  scripted:chatty: {input: 1, output: 2}
scripts:
  looper:
    - {calls: [{tool: list_context, args: {}}], repeat: 100, usage: {input_tokens: 1, output_tokens: 1}}
    - {text: "done", usage: {input_tokens: 1, output_tokens: 1}}
  a: [{calls: [{tool: b, args: {task: x}}]}, {text: "a"}]
  b: [{calls: [{tool: c, args: {task: x}}]}, {text: "b"}]
  c: [{text: "c"}]
  chatty: [{text: "tok", deltas: DELTAS}]
  parked: [{calls: [{tool: list_context, args: {}}]}, {text: "never"}]
agents:
  looper: {model: "scripted:looper", tools: [list_context]}
  a: {model: "scripted:a", tools: [b]}
  b: {model: "scripted:b", tools: [c]}
  c: {model: "scripted:c"}
  chatty: {model: "scripted:chatty"}
  parked: {model: "scripted:parked", tools: [list_context], approvals: {list_context: always}}
"#;

/// `runs.park_after` of the bench's orchestrator: (d)'s detached runs
/// waiting for a person park after it.
const PARK_AFTER: Duration = Duration::from_secs(5);

fn req(agent: &str) -> pb::RunAgentRequest {
    let budget = BUDGETS
        .load(std::sync::atomic::Ordering::Relaxed)
        .then_some(pb::Budget {
            tokens: Some(1_000_000_000_000),
            cost: None,
        });
    pb::RunAgentRequest {
        agent: agent.into(),
        input: "go".into(),
        limits: budget.map(|b| pb::RunLimits {
            budget: Some(b),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Runs one agent run to its end; returns the number of events and whether
/// it completed.
pub(crate) async fn run_once(client: &OrchestratorClient, agent: &str) -> anyhow::Result<usize> {
    let mut events = client.run_agent(req(agent)).await?;
    let mut n = 0;
    let mut completed = false;
    while let Some(e) = events.next().await {
        let e = e?;
        n += 1;
        completed |= matches!(e.payload, Some(Payload::RunCompleted(_)));
    }
    anyhow::ensure!(completed, "run of {agent} did not complete");
    Ok(n)
}

pub(crate) fn rss_kib() -> anyhow::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .ok_or_else(|| anyhow::anyhow!("no VmRSS"))?;
    Ok(line.split_whitespace().nth(1).unwrap_or("0").parse()?)
}

pub fn run(o: Options) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let mut yaml = AGENTS.replace("DELTAS", &o.deltas.to_string());
        if o.budgets {
            BUDGETS.store(true, std::sync::atomic::Ordering::Relaxed);
            yaml = yaml.replace(
                "tools: [list_context]}",
                "tools: [list_context], budget: {tokens: 1000000000000}}",
            );
        }
        let budgets = o.budgets;
        let server = OrchestratorServer::start(&yaml, None, move |c| {
            c.runs.max_turns = 200;
            // (d): detached runs waiting for a person park after this.
            c.runs.park_after = PARK_AFTER;
            if budgets {
                c.quotas.default.model_tokens_per_day = Some(1_000_000_000_000_000);
            }
        })
        .await?;
        let client = OrchestratorClient::connect(server.endpoint()).await?;
        println!("\n{:<62} {:>14} {:>14}", "shape", "Baton", "Agents SDK");

        // (a)
        run_once(&client, "looper").await?;
        let t = Instant::now();
        let mut events = 0;
        for _ in 0..o.loop_runs {
            events += run_once(&client, "looper").await?;
        }
        let per_run = t.elapsed().as_secs_f64() * 1000.0 / o.loop_runs as f64;
        println!(
            "{:<62} {:>11.2} ms {:>11} ms",
            format!("(a) 100 tool-call turns then an answer, per run ({} ev)", events / o.loop_runs),
            per_run,
            752
        );

        // (b)
        for _ in 0..20 {
            run_once(&client, "a").await?;
        }
        let t = Instant::now();
        for _ in 0..o.nested_runs {
            run_once(&client, "a").await?;
        }
        let per_run = t.elapsed().as_secs_f64() * 1000.0 / o.nested_runs as f64;
        println!("{:<62} {:>11.3} ms {:>11} ms", "(b) nested A→B→C, runs one after another, per run", per_run, 8.6);

        // (c), and what the finished run's history holds (its chunks
        // packed as they filled, the last at its end).
        tokio::time::sleep(Duration::from_millis(200)).await;
        let heap_before = crate::heap::live_bytes();
        let t = Instant::now();
        let n = run_once(&client, "chatty").await?;
        let rate = n as f64 / t.elapsed().as_secs_f64();
        println!("{:<62} {:>10.0} ev/s {:>9} ev/s", format!("(c) events per second on one stream ({n} events)"), rate, 878);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let held = crate::heap::live_bytes().saturating_sub(heap_before);
        println!(
            "    the finished run's history holds {:.1} MiB of heap, {:.1} bytes an event (bound: runs.max_history_bytes = {} MiB)",
            held as f64 / (1 << 20) as f64,
            held as f64 / n as f64,
            baton_orchestrator::config::Config::default().runs.max_history_bytes >> 20
        );

        // (d) parked runs: open them over many connections (HTTP/2 limits
        // concurrent streams per connection), wait until each is parked.
        let channels = (o.parked / 100).max(1);
        let mut clients = Vec::with_capacity(channels);
        for _ in 0..channels {
            clients.push(OrchestratorClient::connect(server.endpoint()).await?);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let before = rss_kib()?;
        let mut streams = Vec::with_capacity(o.parked);
        let t = Instant::now();
        for i in 0..o.parked {
            streams.push(clients[i % channels].run_agent(req("parked")).await?);
        }
        let mut parked = 0;
        for s in &mut streams {
            while let Some(e) = s.next().await {
                if matches!(e?.payload, Some(Payload::ApprovalRequested(_))) {
                    parked += 1;
                    break;
                }
            }
        }
        let took = t.elapsed();
        anyhow::ensure!(parked == o.parked, "only {parked} runs parked");
        let after = rss_kib()?;
        let running = server.core.runs().running();
        println!(
            "{:<62} {:>10.1} KiB {:>14}",
            format!("(d) {parked} runs parked on an approval: RSS per run"),
            (after.saturating_sub(before)) as f64 / parked as f64,
            "-"
        );
        println!(
            "    RSS {before} KiB before, {after} KiB with {running} runs parked (server and client in this process); parked in {took:.2?}"
        );
        drop(streams);

        // (d) the server's share: as many runs started detached, waiting
        // for the same approval with no caller attached (their streams
        // dropped once asked): the heap they hold, counted by the
        // allocator, is the server's alone.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let heap_before = crate::heap::live_bytes();
        let mut waiting = 0;
        for i in 0..o.parked {
            let mut stream = clients[i % channels]
                .run_agent(pb::RunAgentRequest {
                    detach: true,
                    ..req("parked")
                })
                .await?;
            while let Some(e) = stream.next().await {
                if matches!(e?.payload, Some(Payload::ApprovalRequested(_))) {
                    waiting += 1;
                    break;
                }
            }
        }
        anyhow::ensure!(waiting == o.parked, "only {waiting} runs waiting");
        tokio::time::sleep(Duration::from_secs(1)).await;
        let held = crate::heap::live_bytes().saturating_sub(heap_before);
        let asleep = |server: &OrchestratorServer| {
            server
                .core
                .runs()
                .running_runs()
                .iter()
                .filter(|r| r.is_asleep())
                .count()
        };
        println!(
            "{:<62} {:>10.2} KiB {:>14}",
            format!("(d) the server's share: heap per detached run waiting"),
            held as f64 / 1024.0 / o.parked as f64,
            "-"
        );
        println!(
            "    in their tasks ({} of {} parked yet; runs.park_after = {PARK_AFTER:?})",
            asleep(&server),
            o.parked
        );
        // Parked: their tasks gone, their records kept (see `run::park`).
        let t = Instant::now();
        while asleep(&server) < o.parked && t.elapsed() < PARK_AFTER * 12 {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let parked_now = asleep(&server);
        anyhow::ensure!(parked_now == o.parked, "only {parked_now} runs parked");
        tokio::time::sleep(Duration::from_secs(1)).await;
        let held = crate::heap::live_bytes().saturating_sub(heap_before);
        let per_run = held as f64 / 1024.0 / o.parked as f64;
        println!(
            "{:<62} {:>10.2} KiB {:>14}",
            format!("(d) the server's share: heap per detached run parked"),
            per_run,
            "<= 4 KiB"
        );
        anyhow::ensure!(
            per_run <= 4.0,
            "a parked run holds {per_run:.2} KiB of the server's heap, over 4 KiB"
        );
        server.shutdown().await?;
        anyhow::Ok(())
    })
}
