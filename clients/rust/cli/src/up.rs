//! `baton up`: the orchestrator and the context store in one process, on one
//! in-memory store, serving the example agents. No Redis, no API key.

use std::{net::SocketAddr, path::PathBuf, sync::Arc};

use anyhow::Context;
use baton_store::{ContextStore, memory::MemoryStore};
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
    /// A setting of either service, `orchestrator.<path>=value` or
    /// `store.<path>=value`, with the paths of their config files (e.g.
    /// `store.limits.max_value_bytes=2097152`,
    /// `orchestrator.runs.max_turns=20`); repeatable.
    #[arg(long = "set", value_name = "SERVICE.PATH=VALUE")]
    sets: Vec<String>,
    /// Print the effective config of both services (TOML) and exit.
    #[arg(long)]
    print_config: bool,
}

/// Runs both services until Ctrl-C or SIGTERM.
pub async fn run(args: UpArgs) -> anyhow::Result<()> {
    let _telemetry = baton_common::logging::init_stderr(
        "baton",
        &baton_common::logging::LogConfig {
            level: "warn,baton_orchestrator=info,baton_context_store=info,baton_store=info".into(),
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
    let (mut orch_sets, mut store_sets) = (Vec::new(), Vec::new());
    for set in &args.sets {
        if let Some(rest) = set.strip_prefix("orchestrator.") {
            orch_sets.push(rest.to_owned());
        } else if let Some(rest) = set.strip_prefix("store.") {
            store_sets.push(rest.to_owned());
        } else {
            anyhow::bail!("--set {set:?}: the path starts with orchestrator. or store.");
        }
    }
    let orch_config = baton_common::config::with_sets(&orch_config, &orch_sets)
        .context("--set orchestrator.…")?;
    let store_config =
        baton_common::config::with_sets(&store_config, &store_sets).context("--set store.…")?;
    orch_config
        .validate()
        .map_err(|e| anyhow::anyhow!("orchestrator config: {e}"))?;
    store_config
        .validate()
        .map_err(|e| anyhow::anyhow!("store config: {e}"))?;
    if args.print_config {
        let orch = baton_common::config::to_toml(&orch_config).map_err(|e| anyhow::anyhow!(e))?;
        let store = baton_common::config::to_toml(&store_config).map_err(|e| anyhow::anyhow!(e))?;
        crate::out::outln!("# baton up: the orchestrator (--set orchestrator.PATH=VALUE)\n{orch}")?;
        crate::out::outln!("# baton up: the context store (--set store.PATH=VALUE)\n{store}")?;
        return Ok(());
    }
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
    let summary = format!(
        "{}, {} from {source}",
        plural(catalog.agents.len(), "agent"),
        plural(catalog.groups.len(), "group")
    );
    // The hint names an agent of the loaded file: the walk-through's
    // researcher when it is there.
    let hint = if catalog.agents.contains_key("researcher") {
        Some(("researcher".to_owned(), "the history of Rust"))
    } else {
        catalog.agents.keys().next().map(|a| (a.clone(), "hello"))
    };

    let mut orchestrator = tokio::spawn({
        let (catalog, store, shutdown) = (catalog, store.clone(), shutdown.clone());
        async move {
            baton_orchestrator::serve(
                catalog,
                store,
                tracing,
                &orch_config,
                orch_listener,
                shutdown,
            )
            .await
        }
    });
    let mut context_store = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { baton_context_store::serve(store, &store_config, store_listener, shutdown).await }
    });
    // The banner only once both services answer their health checks; a
    // service that fails to start ends `baton up` at once, with its cause.
    let ready = async {
        tokio::join!(
            serving(orch_addr, "baton.v1.Orchestrator"),
            serving(store_addr, "baton.v1.ContextStore")
        )
    };
    tokio::select! {
        (a, b) = ready => {
            a.context("orchestrator")?;
            b.context("context store")?;
        }
        ended = &mut orchestrator => {
            shutdown.cancel();
            return stopped(ended).context("the orchestrator did not start");
        }
        ended = &mut context_store => {
            shutdown.cancel();
            return stopped(ended).context("the context store did not start");
        }
    }
    println!("Baton is up: {summary}");
    println!("  orchestrator   http://{orch_addr}   (baton agents / baton run AGENT \"input\")");
    println!("  web console    http://{orch_addr}/   (the HTTP API: /v1/openapi.json)");
    println!("  context store  http://{store_addr}   (baton store …)");
    println!("  store backend  in memory (lost on exit)");
    if let Some((agent, input)) = hint {
        println!("Try:  baton run {agent} \"{input}\"");
    }
    println!("Ctrl-C stops it.");

    // Either ending (an error, or Ctrl-C) stops the other.
    let (a, b) = tokio::join!(
        async {
            let r = stopped(orchestrator.await);
            shutdown.cancel();
            r
        },
        async {
            let r = stopped(context_store.await);
            shutdown.cancel();
            r
        }
    );
    a.context("orchestrator")?;
    b.context("context store")?;
    Ok(())
}

/// A service task's outcome: its own error, or its panic.
fn stopped(ended: Result<anyhow::Result<()>, tokio::task::JoinError>) -> anyhow::Result<()> {
    ended.map_err(|e| anyhow::anyhow!("it crashed: {e}"))?
}

/// Waits until the service at `addr` answers its health check `SERVING`
/// (up to 60 s).
async fn serving(addr: std::net::SocketAddr, service: &str) -> anyhow::Result<()> {
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    let endpoint = format!("http://{addr}");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let answer = async {
            let channel = tonic::transport::Endpoint::from_shared(endpoint.clone())?
                .connect()
                .await?;
            let status = HealthClient::new(channel)
                .check(HealthCheckRequest {
                    service: service.to_owned(),
                })
                .await?
                .into_inner()
                .status;
            anyhow::Ok(status)
        };
        if let Ok(1) = answer.await {
            return Ok(());
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "{service} on {addr} did not report SERVING within 60 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
