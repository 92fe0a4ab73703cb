//! `baton-bench http`: the HTTP face's event stream against gRPC's, in one
//! run on one server: a run of N text deltas read to its end over gRPC
//! (the Rust client, decoding protobuf) and over SSE (`POST /v1/runs` with
//! `Accept: text/event-stream`, reqwest, every frame split out and its
//! `data:` parsed as a `RunEvent` from the JSON mapping), alternating, best
//! and median of the rounds.

use std::time::Instant;

use baton_client::{OrchestratorClient, pb};
use baton_e2e::OrchestratorServer;
use futures::StreamExt as _;

/// Options.
#[derive(clap::Args)]
pub struct Options {
    /// Text deltas in the streamed run.
    #[arg(long, default_value_t = 200_000)]
    deltas: u32,
    /// Rounds of each (alternating).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
}

/// Events of one run read over SSE, each parsed.
async fn over_sse(http: &reqwest::Client, base: &str) -> anyhow::Result<usize> {
    let response = http
        .post(format!("{base}/v1/runs"))
        .header("accept", "text/event-stream")
        .body(r#"{"agent":"chatty","input":"go"}"#)
        .send()
        .await?;
    anyhow::ensure!(response.status().is_success(), "{}", response.status());
    let mut body = response.bytes_stream();
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 16);
    let (mut n, mut completed) = (0, false);
    while let Some(chunk) = body.next().await {
        buf.extend_from_slice(&chunk?);
        let mut start = 0;
        while let Some(end) = buf[start..].windows(2).position(|w| w == b"\n\n") {
            let frame = &buf[start..start + end];
            start += end + 2;
            let Some(data) = frame
                .split(|b| *b == b'\n')
                .find_map(|line| line.strip_prefix(b"data: "))
            else {
                continue;
            };
            let event: pb::RunEvent = serde_json::from_slice(data)?;
            n += 1;
            completed |= matches!(event.payload, Some(pb::run_event::Payload::RunCompleted(_)));
        }
        buf.drain(..start);
    }
    anyhow::ensure!(completed, "the SSE run did not complete");
    Ok(n)
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
        let yaml = crate::agent::AGENTS.replace("DELTAS", &o.deltas.to_string());
        let server = OrchestratorServer::start(&yaml, None, |_| {}).await?;
        let client = OrchestratorClient::connect(server.endpoint()).await?;
        let http = reqwest::Client::new();
        let base = server.endpoint();
        // Warm both paths.
        crate::agent::run_once(&client, "chatty").await?;
        over_sse(&http, &base).await?;
        let (mut grpc, mut sse) = (Vec::new(), Vec::new());
        let mut events = 0;
        for _ in 0..o.rounds {
            let t = Instant::now();
            events = crate::agent::run_once(&client, "chatty").await?;
            grpc.push(events as f64 / t.elapsed().as_secs_f64());
            let t = Instant::now();
            let n = over_sse(&http, &base).await?;
            anyhow::ensure!(n == events, "SSE carried {n} events, gRPC {events}");
            sse.push(n as f64 / t.elapsed().as_secs_f64());
        }
        let best = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
        println!(
            "\none stream of {events} events, {} rounds each, alternating",
            o.rounds
        );
        println!("{:<34} {:>14} {:>14}", "", "median ev/s", "best ev/s");
        println!(
            "{:<34} {:>14.0} {:>14.0}",
            "gRPC (protobuf, Rust client)",
            median(grpc.clone()),
            best(&grpc)
        );
        println!(
            "{:<34} {:>14.0} {:>14.0}",
            "HTTP SSE (JSON mapping, reqwest)",
            median(sse.clone()),
            best(&sse)
        );
        println!(
            "SSE / gRPC (medians): {:.0}%",
            100.0 * median(sse) / median(grpc)
        );
        Ok(())
    })
}
