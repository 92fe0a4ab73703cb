//! `baton-bench a2a`: the A2A face against the `a2a-sdk` 1.3.0 server
//! (`tests/a2a/bench_echo.py`, from `.tools/a2a-venv`), in one run, with the
//! same Rust client (reqwest, JSON-RPC, the binding every A2A client
//! speaks) against both:
//!
//! - `SendMessage` round trip of an instant echo agent, sequential, p50 and
//!   p99 (Baton: a scripted agent; the SDK: an executor that completes at
//!   once with the same artifact);
//! - streamed updates per second: one `SendStreamingMessage` task that
//!   streams M text updates (Baton: a scripted agent with M deltas; the
//!   SDK: M artifact chunks), every SSE frame split out and parsed;
//! - what an A2A remote sub-agent costs over a local one: RunAgent (gRPC)
//!   of an agent that calls `echo` as a tool, local, and the same `echo`
//!   on another Baton over A2A.

use std::{
    io::{BufRead as _, BufReader},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use baton_client::{OrchestratorClient, pb};
use baton_e2e::OrchestratorServer;
use futures::StreamExt as _;
use hdrhistogram::Histogram;
use serde_json::{Value, json};

/// Options.
#[derive(clap::Args)]
pub struct Options {
    /// Sequential SendMessage calls measured on each server.
    #[arg(long, default_value_t = 2000)]
    calls: usize,
    /// Updates in the streamed task.
    #[arg(long, default_value_t = 20_000)]
    updates: u32,
    /// Streamed tasks on each server (the median is reported).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// RunAgent calls of each sub-agent shape.
    #[arg(long, default_value_t = 1000)]
    subagent_runs: usize,
}

const AGENTS: &str = r#"
scripts:
  echo: [{text: "Echo: {{input}}"}]
  chatty: [{text: "tok", deltas: DELTAS}]
agents:
  echo: {model: "scripted:echo", a2a: true}
  chatty: {model: "scripted:chatty", a2a: true}
"#;

const CALLERS: &str = r#"
scripts:
  echo: [{text: "Echo: {{input}}"}]
  caller_local: [{calls: [{tool: echo, args: {task: "{{input}}"}}]}, {text: "{{results}}"}]
  caller_remote: [{calls: [{tool: remote_echo, args: {task: "{{input}}"}}]}, {text: "{{results}}"}]
remote_agents:
  remote_echo: {card_url: "CARD", description: "echo over A2A"}
agents:
  echo: {model: "scripted:echo"}
  caller_local: {model: "scripted:caller_local", tools: [echo]}
  caller_remote: {model: "scripted:caller_remote", tools: [remote_echo]}
"#;

/// The `a2a-sdk` bench server, stopped on drop.
struct SdkServer {
    child: Child,
    port: u16,
}

impl SdkServer {
    fn start() -> anyhow::Result<Self> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let python = root.join(".tools/a2a-venv/bin/python");
        anyhow::ensure!(
            python.exists(),
            "{} is missing: python3 -m venv .tools/a2a-venv && .tools/a2a-venv/bin/pip install -r tests/a2a/requirements.txt",
            python.display()
        );
        let mut child = Command::new(python)
            .arg(root.join("tests/a2a/bench_echo.py"))
            .args(["--port", "0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let port = line
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| anyhow::anyhow!("bench_echo.py said {line:?}"))?;
        Ok(Self { child, port })
    }
}

impl Drop for SdkServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn send_body(text: &str, n: usize, method: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": n, "method": method, "params": {"message": {
        "messageId": format!("m{n}"), "role": "ROLE_USER", "parts": [{"text": text}]}}})
}

/// `calls` sequential SendMessage round trips (after a warm-up): the
/// latencies in µs.
async fn round_trips(
    http: &reqwest::Client,
    url: &str,
    calls: usize,
) -> anyhow::Result<Histogram<u64>> {
    let mut h = Histogram::<u64>::new(3)?;
    for i in 0..calls + 100 {
        let t = Instant::now();
        let answer: Value = http
            .post(url)
            .header("A2A-Version", "1.0")
            .json(&send_body("hello", i, "SendMessage"))
            .send()
            .await?
            .json()
            .await?;
        let state = &answer["result"]["task"]["status"]["state"];
        anyhow::ensure!(state == "TASK_STATE_COMPLETED", "answer: {answer}");
        if i >= 100 {
            h.record(t.elapsed().as_micros() as u64)?;
        }
    }
    Ok(h)
}

/// One streamed task of `text`: its updates per second (every frame
/// parsed), and how many.
async fn streamed(http: &reqwest::Client, url: &str, text: &str) -> anyhow::Result<(f64, usize)> {
    let t = Instant::now();
    let response = http
        .post(url)
        .header("A2A-Version", "1.0")
        .header("accept", "text/event-stream")
        .json(&send_body(text, 1, "SendStreamingMessage"))
        .send()
        .await?;
    let mut body = response.bytes_stream();
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 16);
    let (mut n, mut completed) = (0usize, false);
    while let Some(chunk) = body.next().await {
        // The SDK ends its lines with CRLF, Baton with LF.
        buf.extend(chunk?.iter().copied().filter(|b| *b != b'\r'));
        let mut start = 0;
        while let Some(end) = buf[start..].windows(2).position(|w| w == b"\n\n") {
            let frame = &buf[start..start + end];
            start += end + 2;
            let text = String::from_utf8_lossy(frame);
            let Some(data) = text
                .lines()
                .find_map(|l| l.trim_end_matches('\r').strip_prefix("data:"))
            else {
                continue;
            };
            let v: Value = serde_json::from_str(data.trim())?;
            n += 1;
            let state = &v["result"]["statusUpdate"]["status"]["state"];
            completed |= state == "TASK_STATE_COMPLETED";
        }
        buf.drain(..start);
    }
    anyhow::ensure!(completed, "the streamed task did not complete");
    Ok((n as f64 / t.elapsed().as_secs_f64(), n))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

async fn run_agent(
    client: &OrchestratorClient,
    agent: &str,
    runs: usize,
) -> anyhow::Result<Histogram<u64>> {
    let mut h = Histogram::<u64>::new(3)?;
    for i in 0..runs + 50 {
        let t = Instant::now();
        let request = pb::RunAgentRequest {
            agent: agent.into(),
            input: format!("hi {i}"),
            ..Default::default()
        };
        let mut events = client.run_agent(request).await?;
        let mut done = false;
        while let Some(e) = events.next().await {
            if let Some(pb::run_event::Payload::RunCompleted(c)) = e?.payload {
                anyhow::ensure!(c.output.contains("Echo: hi"), "output {:?}", c.output);
                done = true;
            }
        }
        anyhow::ensure!(done, "{agent} did not complete");
        if i >= 50 {
            h.record(t.elapsed().as_micros() as u64)?;
        }
    }
    Ok(h)
}

pub fn run(o: Options) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let sdk = SdkServer::start()?;
        let yaml = AGENTS.replace("DELTAS", &o.updates.to_string());
        let baton = OrchestratorServer::start(&yaml, None, |_| {}).await?;
        let http = reqwest::Client::builder()
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(60))
            .build()?;
        let baton_echo = format!("{}/a2a/echo", baton.endpoint());
        let baton_chatty = format!("{}/a2a/chatty", baton.endpoint());
        let sdk_url = format!("http://127.0.0.1:{}/a2a/bench-echo", sdk.port);

        println!("SendMessage round trip, {} sequential calls each (JSON-RPC, one reqwest client)", o.calls);
        let b = round_trips(&http, &baton_echo, o.calls).await?;
        let s = round_trips(&http, &sdk_url, o.calls).await?;
        println!("{:<28} {:>10} {:>10}", "", "p50 ms", "p99 ms");
        println!("{:<28} {:>10.3} {:>10.3}", "Baton", ms(b.value_at_quantile(0.5)), ms(b.value_at_quantile(0.99)));
        println!("{:<28} {:>10.3} {:>10.3}", "a2a-sdk 1.3.0 server", ms(s.value_at_quantile(0.5)), ms(s.value_at_quantile(0.99)));
        println!(
            "a2a-sdk / Baton: p50 {:.1}x, p99 {:.1}x",
            s.value_at_quantile(0.5) as f64 / b.value_at_quantile(0.5) as f64,
            s.value_at_quantile(0.99) as f64 / b.value_at_quantile(0.99) as f64
        );

        let sdk_text = format!("stream {}", o.updates);
        let (mut bv, mut sv, mut counts) = (Vec::new(), Vec::new(), (0, 0));
        for _ in 0..o.rounds {
            let (rate, n) = streamed(&http, &baton_chatty, "go").await?;
            bv.push(rate);
            counts.0 = n;
            let (rate, n) = streamed(&http, &sdk_url, &sdk_text).await?;
            sv.push(rate);
            counts.1 = n;
        }
        println!(
            "\nstreamed updates per second: one task of {} text updates, {} rounds each, alternating (median)",
            o.updates, o.rounds
        );
        println!("{:<28} {:>14} {:>10}", "", "updates/s", "frames");
        println!("{:<28} {:>14.0} {:>10}", "Baton", median(bv.clone()), counts.0);
        println!("{:<28} {:>14.0} {:>10}", "a2a-sdk 1.3.0 server", median(sv.clone()), counts.1);
        println!("Baton / a2a-sdk: {:.1}x", median(bv) / median(sv));

        // The sub-agent shapes: B calls echo, locally or on A over A2A.
        let card = format!("{}/a2a/echo", baton.endpoint());
        let callers = OrchestratorServer::start(&CALLERS.replace("CARD", &card), None, |_| {}).await?;
        let client = OrchestratorClient::connect(callers.endpoint()).await?;
        let local = run_agent(&client, "caller_local", o.subagent_runs).await?;
        let remote = run_agent(&client, "caller_remote", o.subagent_runs).await?;
        println!("\nRunAgent of an agent calling echo as a tool, {} runs each (gRPC)", o.subagent_runs);
        println!("{:<28} {:>10} {:>10}", "", "p50 ms", "p99 ms");
        println!("{:<28} {:>10.3} {:>10.3}", "echo local", ms(local.value_at_quantile(0.5)), ms(local.value_at_quantile(0.99)));
        println!("{:<28} {:>10.3} {:>10.3}", "echo remote over A2A", ms(remote.value_at_quantile(0.5)), ms(remote.value_at_quantile(0.99)));
        println!(
            "an A2A remote sub-agent adds {:.3} ms at p50",
            ms(remote.value_at_quantile(0.5)) - ms(local.value_at_quantile(0.5))
        );
        drop(sdk);
        Ok(())
    })
}
