//! `baton-bench mcp`: the MCP face's `tools/call` round trip to an agent
//! with an instant (scripted) model, beside the same run through gRPC
//! (`RunAgent` read to its end), in one run on one server, alternating
//! call by call: p50 and p99 of each. The MCP client is `rmcp`'s
//! (Streamable HTTP, reqwest with TCP_NODELAY) on both revisions Baton
//! serves that differ: 2025-11-25 (`initialize`, one session) and
//! 2026-07-28 (`server/discover`, every request on its own); the gRPC
//! client Baton's Rust client.

use std::time::Instant;

use baton_client::OrchestratorClient;
use baton_e2e::OrchestratorServer;
use hdrhistogram::Histogram;
use rmcp::{
    ServiceExt as _,
    model::{CallToolRequestParams, JsonObject, ProtocolVersion},
    service::{ClientLifecycleMode, ClientServiceExt as _},
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};

/// Options.
#[derive(clap::Args)]
pub struct Options {
    /// Sequential calls measured on each face.
    #[arg(long, default_value_t = 2000)]
    calls: usize,
}

const AGENTS: &str = r#"
scripts:
  echo: [{text: "Echo: {{input}}"}]
agents:
  echo: {model: "scripted:echo", mcp: true}
"#;

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

pub fn run(o: Options) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let server = OrchestratorServer::start(AGENTS, None, |_| {}).await?;
        let grpc = OrchestratorClient::connect(server.endpoint()).await?;
        let transport = || -> anyhow::Result<_> {
            Ok(StreamableHttpClientTransport::with_client(
                reqwest::Client::builder().tcp_nodelay(true).build()?,
                StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", server.endpoint())),
            ))
        };
        let session = ().serve(transport()?).await?;
        let discover = ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        };
        let stateless = ().serve_with_lifecycle(transport()?, discover).await?;
        anyhow::ensure!(
            session.peer_info().map(|i| i.protocol_version.clone())
                == Some(ProtocolVersion::V_2025_11_25),
            "the session's revision"
        );
        let mut arguments = JsonObject::new();
        arguments.insert("input".into(), "hi".into());
        let call = || CallToolRequestParams::new("echo").with_arguments(arguments.clone());
        let mut over_session = Histogram::<u64>::new(3)?;
        let mut over_stateless = Histogram::<u64>::new(3)?;
        let mut over_grpc = Histogram::<u64>::new(3)?;
        // Warm every path.
        for _ in 0..50 {
            session.call_tool(call()).await?;
            stateless.call_tool(call()).await?;
            crate::agent::run_once(&grpc, "echo").await?;
        }
        for _ in 0..o.calls {
            for (mcp, h) in [
                (&session, &mut over_session),
                (&stateless, &mut over_stateless),
            ] {
                let t = Instant::now();
                let result = mcp.call_tool(call()).await?;
                h.record(t.elapsed().as_micros() as u64)?;
                anyhow::ensure!(result.is_error != Some(true), "{result:?}");
            }
            let t = Instant::now();
            crate::agent::run_once(&grpc, "echo").await?;
            over_grpc.record(t.elapsed().as_micros() as u64)?;
        }
        let _ = session.cancel().await;
        let _ = stateless.cancel().await;
        println!(
            "\nan instant agent's round trip, {} sequential calls each, alternating",
            o.calls
        );
        println!("{:<44} {:>10} {:>10}", "", "p50 ms", "p99 ms");
        for (name, h) in [
            ("MCP tools/call, 2025-11-25 session (rmcp)", &over_session),
            (
                "MCP tools/call, 2026-07-28 stateless (rmcp)",
                &over_stateless,
            ),
            ("gRPC RunAgent (Rust client)", &over_grpc),
        ] {
            println!(
                "{:<44} {:>10.3} {:>10.3}",
                name,
                ms(h.value_at_quantile(0.5)),
                ms(h.value_at_quantile(0.99))
            );
        }
        server.shutdown().await?;
        Ok(())
    })
}
