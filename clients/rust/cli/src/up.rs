//! `baton up`: the orchestrator and the context store in one process, on one
//! in-memory store, serving the example agents. No Redis, no API key.

use std::{net::SocketAddr, path::PathBuf, sync::Arc};

use anyhow::Context;
use baton_context_store::store::{ContextStore, memory::MemoryStore};
use clap::Args;

/// The example agents, used when no agents file is given or found.
const EXAMPLE_AGENTS: &str = include_str!("../../../../deploy/config/agents.yaml");

/// `baton up` arguments.
#[derive(Args)]
pub struct UpArgs {
    /// The orchestrator's address.
    #[arg(long, default_value = "127.0.0.1:50051")]
    listen: SocketAddr,
    /// The context store's address.
    #[arg(long, default_value = "127.0.0.1:50052")]
    store_listen: SocketAddr,
    /// An agents file; default: deploy/config/agents.yaml when it exists,
    /// else the built-in copy of it.
    #[arg(long)]
    agents: Option<PathBuf>,
    /// Serve the orchestrator's Prometheus metrics here (`/metrics`).
    #[arg(long, default_value = "")]
    metrics_listen: String,
    /// Serve the context store's Prometheus metrics here.
    #[arg(long, default_value = "")]
    store_metrics_listen: String,
    /// Require API keys from this file (lines of `<tenant> <key>`; see the
    /// orchestrator's `auth.api_keys_file`). Default: no authentication.
    #[arg(long)]
    api_keys_file: Option<PathBuf>,
}

/// Runs both services until Ctrl-C or SIGTERM.
pub async fn run(args: UpArgs) -> anyhow::Result<()> {
    let _telemetry = baton_common::telemetry::init(
        "baton",
        &baton_common::telemetry::LogConfig {
            level: "warn,baton_orchestrator=info,baton_context_store=info".into(),
            // One process on a developer's machine: no audit trail.
            audit: "off".into(),
            ..Default::default()
        },
    )
    .map_err(|e| anyhow::anyhow!(e))?;
    let default_file = PathBuf::from("deploy/config/agents.yaml");
    let (source, yaml) = match args.agents {
        Some(p) => (
            p.display().to_string(),
            std::fs::read_to_string(&p).with_context(|| format!("cannot read {}", p.display()))?,
        ),
        None if default_file.is_file() => (
            default_file.display().to_string(),
            std::fs::read_to_string(&default_file)?,
        ),
        None => (
            "the built-in example agents".to_owned(),
            EXAMPLE_AGENTS.to_owned(),
        ),
    };
    let catalog = Arc::new(
        baton_orchestrator::catalog::Catalog::from_yaml(&yaml)
            .map_err(|e| anyhow::anyhow!("{source}: {e}"))?,
    );

    let mut orch_config = baton_orchestrator::config::Config {
        listen: args.listen,
        ..Default::default()
    };
    orch_config.store.mode = baton_orchestrator::config::StoreMode::Memory;
    orch_config.telemetry.metrics_listen = args.metrics_listen;
    if let Some(file) = args.api_keys_file {
        orch_config.auth.api_keys_file = file;
    }
    let mut store_config = baton_context_store::config::Config {
        listen: args.store_listen,
        backend: baton_context_store::config::Backend::Memory,
        ..Default::default()
    };
    // One process on a developer's machine, listening on loopback: the
    // store's port takes calls without credentials (its start warns).
    store_config.auth.mode = baton_context_store::auth::AuthMode::None;
    store_config.telemetry.metrics_listen = args.store_metrics_listen;
    // Spans go where OTEL_EXPORTER_OTLP_ENDPOINT says, when it is set.
    let tracing = baton_orchestrator::build_tracing(&orch_config)?;
    let store: Arc<dyn ContextStore> = Arc::new(MemoryStore::new(store_config.limits.clone()));

    let orch_listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {} (is Baton already up?)", args.listen))?;
    let store_listener = tokio::net::TcpListener::bind(args.store_listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.store_listen))?;
    let shutdown = baton_common::shutdown::on_signal();
    let orch_addr = orch_listener.local_addr()?;
    let store_addr = store_listener.local_addr()?;

    let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    println!(
        "Baton is up: {}, {} from {source}",
        plural(catalog.agents.len(), "agent"),
        plural(catalog.groups.len(), "group")
    );
    println!("  orchestrator   http://{orch_addr}   (baton agents / baton run AGENT \"input\")");
    println!("  context store  http://{store_addr}   (baton store …)");
    println!("  store backend  in memory (lost on exit)");
    println!("Try:  baton run researcher \"the history of Rust\"");
    println!("Ctrl-C stops it.");

    let orchestrator = baton_orchestrator::serve(
        catalog,
        store.clone(),
        tracing,
        &orch_config,
        orch_listener,
        shutdown.clone(),
    );
    let context_store =
        baton_context_store::serve(store, &store_config, store_listener, shutdown.clone());
    let (a, b) = tokio::join!(orchestrator, context_store);
    a.context("orchestrator")?;
    b.context("context store")?;
    Ok(())
}
