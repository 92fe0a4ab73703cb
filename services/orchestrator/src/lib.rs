//! Baton's orchestrator: runs agents and pipelines and streams their
//! events, each tagged with its place in the tree of nested contexts.
//!
//! - [`catalog`]: the agents file (agents, groups, scripts, tool servers),
//!   loaded from YAML and validated at start; `catalog::names` is the leaf of
//!   names, model references and durations that everyone uses.
//! - [`model`]: model providers (`scripted`, `openai`).
//! - [`run`]: a run's lifecycle whatever its body — what every run shares
//!   (`run::shared`, built once at start), launch, `drive`, the sequencers
//!   (in memory, or durable in Redis), the registry, the tenants' run
//!   quotas, and what the core answers about a run (`run::view`).
//! - [`agent`]: `CallFrame` (what a branch owns), the turn loop, a turn's
//!   calls, tool-output policies, people (approvals and input).
//! - [`pipeline`]: RunPipeline's validation (`Plan`), the pure scheduler
//!   (`schedule`), the executor (steps, their attempts) and the file form.
//! - [`tools`]: the tool interface, the built-in tools and their names
//!   (their names are `catalog::builtin`), remote ToolHost tools.
//! - [`app`]: the application core, [`app::Orchestrator`]: it owns the runs,
//!   their tasks, the peers and shutdown, and offers every face the same
//!   operations in domain values (start, watch, get, list, cancel, answer,
//!   resume, drain), with one error ([`error`]); it also keeps durable runs'
//!   leases.
//! - [`request`]: what callers ask, in domain values, and its validation
//!   against this server; [`wire`]: `baton.v1` messages into those values
//!   and answers back, shared by every face.
//! - [`grpc`]: the `baton.v1.Orchestrator` face: each handler converts,
//!   calls the core, converts back; errors map to `Status` once.
//! - [`http`]: the HTTP/JSON + SSE face on the same port, its routes
//!   declared once (the router and the OpenAPI document derive from them).
//! - [`a2a`] and [`mcp`]: the A2A face and the MCP server (`/mcp`), each
//!   serving the agents the operator chooses.
//! - [`peers`]: run-scoped calls of runs on another replica; [`auth`]: API
//!   keys and tenants.
//! - [`remote_store`]: the context store over gRPC behind the store trait.
//! - [`config`]: the service config.
//!
//! Layers, bottom to top; a module reads only the layers below it (checked
//! by `tests/layout`): `catalog` (the agents file, with the leaves it parses
//! with: `names`, `builtin` tool names, generation `settings`, tool-output
//! `policy`) and `config`; `metrics` and `model`; `tools`; `run` (knows no
//! agent or pipeline); `pipeline` and `peers`; `agent`; `request` and
//! `wire`; `app`; the faces (`grpc`, `http`, `a2a`, `mcp`); this file. Agents start pipelines and
//! pipelines run agents: the pipeline names the call it needs
//! (`pipeline::StepCall`) and is handed `agent::run_step_boxed` as a
//! `pipeline::RunStep` value, so the recursion is a value, not an import.
//!
//! Readiness: grpc.health.v1 reports `SERVING` (for `""` and
//! `baton.v1.Orchestrator`) while the context store's own health says
//! `SERVING` (it reads no slot, so nothing a client writes changes it), and
//! `NOT_SERVING` once shutdown begins. Shutdown refuses new runs at once
//! (`UNAVAILABLE`); with durable runs it hands every run over to the other
//! replicas (`app::drain`); the runs it keeps (memory mode, or Redis not
//! answering) may finish within `shutdown_grace`, then the rest are
//! cancelled (`RunCancelled`, "server shutting down") and their streams get
//! [`RUN_FLUSH`] to carry the terminal events out.

pub mod a2a;
pub mod agent;
pub mod agents_watch;
pub mod app;
pub mod auth;
pub mod catalog;
pub mod client_tls;
pub mod config;
pub mod conversation;
pub mod error;
pub mod eval;
pub mod grpc;
pub mod http;
pub mod mcp;
pub mod metrics;
pub mod model;
pub mod peers;
pub mod pipeline;
pub mod remote_store;
pub mod request;
pub mod run;
pub mod schedule;
pub mod shared_state;
pub mod tools;
pub mod webhook;
pub mod wire;

use std::{sync::Arc, time::Duration};

use anyhow::Context;
use baton_common::otel::Tracing;
use baton_proto::{
    a2a::v1::a2a_service_server::A2aServiceServer, v1::orchestrator_server::OrchestratorServer,
};
use baton_store::{ContextStore, memory::MemoryStore};
use tokio::net::TcpListener;
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tonic::service::Routes;

use crate::{
    app::Orchestrator,
    catalog::Catalog,
    config::{Config, StoreMode},
    grpc::OrchestratorService,
    run::shared::Shared,
};

/// Loads and validates the agents file the config names.
pub fn load_catalog(config: &Config) -> anyhow::Result<Arc<Catalog>> {
    let text = std::fs::read_to_string(&config.agents_file)
        .with_context(|| format!("cannot read agents file {}", config.agents_file.display()))?;
    let dir = config
        .agents_file
        .parent()
        .unwrap_or(std::path::Path::new("."));
    let catalog = Catalog::from_yaml_in(&text, dir)
        .map_err(|e| anyhow::anyhow!("{}: {e}", config.agents_file.display()))?;
    schedule::file::declared(&catalog)
        .map_err(|e| anyhow::anyhow!("{}: {e}", config.agents_file.display()))?;
    Ok(Arc::new(catalog))
}

/// Builds the store the config names; calls to a remote store are spans of
/// `tracing`.
pub fn build_store(config: &Config, tracing: &Tracing) -> anyhow::Result<Arc<dyn ContextStore>> {
    Ok(match config.store.mode {
        StoreMode::Memory => Arc::new(MemoryStore::new(config.store.limits.clone())),
        StoreMode::Remote => {
            let mut store = remote_store::RemoteStore::with_tls(
                &config.store.endpoint,
                &config.store.tls.client(),
                config.store.limits.clone(),
                config.store.timeout,
            )?
            .with_tracer(tracing.tracer().clone());
            if !config.store.token_file.as_os_str().is_empty() {
                let token = baton_common::auth::ServiceToken::refreshing(
                    "store.token_file",
                    &config.store.token_file,
                    baton_common::auth::parse_token,
                    STORE_TOKEN_REFRESH,
                )
                .map_err(|e| anyhow::anyhow!(e))?;
                store = store.with_token(token);
            }
            Arc::new(store)
        }
    })
}

/// How often a changed `store.token_file` is read again.
pub const STORE_TOKEN_REFRESH: Duration = Duration::from_secs(30);

/// The tracer provider the config and the standard `OTEL_*` variables
/// describe.
pub fn build_tracing(config: &Config) -> anyhow::Result<Tracing> {
    Tracing::new(&config.telemetry, SERVICE_NAME).map_err(|e| anyhow::anyhow!(e))
}

/// How long, after runs are cancelled at the end of `shutdown_grace`, their
/// streams may take to carry the terminal events to the clients.
pub const RUN_FLUSH: Duration = Duration::from_secs(5);

pub use config::SERVICE_NAME;

/// A model-provider key named `name` (the agents file's `api_key_env`): the
/// variable `name` itself, or else the content of the file that
/// `{name}_FILE` names (a Kubernetes or Docker secret mounted as a file;
/// trailing newline removed). `env` reads one variable.
pub fn secret_from_env(name: &str, env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    if let Some(value) = env(name).filter(|v| !v.is_empty()) {
        return Some(value);
    }
    let file = env(&format!("{name}_FILE")).filter(|f| !f.is_empty())?;
    match baton_common::config::read_secret_file(&file) {
        Ok(text) => Some(text),
        Err(e) => {
            tracing::warn!(variable = %format!("{name}_FILE"), file, error = %e, "cannot read the secret file");
            None
        }
    }
}

/// A model-provider key named `name`, from this process's environment (see
/// [`secret_from_env`]).
fn provider_key(name: &str) -> Option<String> {
    secret_from_env(name, &|k| std::env::var(k).ok())
}

/// Runs the orchestrator on `listener` until `shutdown` is cancelled.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let catalog = load_catalog(&config)?;
    let tracing = build_tracing(&config)?;
    let store = build_store(&config, &tracing)?;
    serve(catalog, store, tracing, &config, listener, shutdown).await
}

/// Serves a catalog on a store (so `baton up` can share one store with the
/// context-store service).
pub async fn serve(
    catalog: Arc<Catalog>,
    store: Arc<dyn ContextStore>,
    tracing: Tracing,
    config: &Config,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let tasks = TaskTracker::new();
    let services = Shared::new(
        catalog,
        store.clone(),
        config.runs.clone(),
        tracing,
        // The one place the orchestrator reads the environment outside its
        // config: model-provider keys, by the variable the agents file names.
        &|name| secret_from_env(name, &|k| std::env::var(k).ok()),
    )
    .map_err(|e| anyhow::anyhow!(e))?
    .with_quotas(config.quotas.clone())
    .with_conversations(config.conversations.clone());
    let core = Orchestrator::new(services, shutdown.clone(), tasks.clone());
    serve_core(core, store, config, listener, shutdown, tasks).await
}

/// Serves an application core (tests keep a clone to inspect its runs)
/// through its faces, with its metrics endpoint and its background work;
/// flushes its spans at the end.
pub async fn serve_core(
    core: Orchestrator,
    store: Arc<dyn ContextStore>,
    config: &Config,
    listener: TcpListener,
    shutdown: CancellationToken,
    tasks: TaskTracker,
) -> anyhow::Result<()> {
    let addr = listener.local_addr().context("listener has no address")?;
    let core = core.with_peers(peers::Peers::new(&config.peers));
    // Webhooks: kept in Redis beside durable runs; this replica's worker
    // delivers its share.
    let webhooks =
        webhook::Webhooks::new(&config.webhooks, core.durable().map(|d| d.shared().clone()))
            .map_err(|e| anyhow::anyhow!(e))?;
    let core = core.with_webhooks(webhooks.clone());
    // Schedules: kept in Redis beside durable runs; this replica's
    // scheduler fires its share of the ticks due until shutdown begins.
    // (The core's own, so a clone taken before serving shares them.)
    core.schedules().configure(&config.schedules);
    tasks.spawn(app::schedules::declare_from_file(core.clone()));
    tasks.spawn(app::schedules::scheduler(&core, shutdown.clone()));
    // The worker outlives the runs' grace period: what they deliver as
    // they end is delivered (see `webhook::Webhooks::drain`).
    let webhooks_stop = CancellationToken::new();
    tasks.spawn(webhooks.clone().run(webhooks_stop.clone()));
    // Durable runs: renew this replica's leases, claim lapsed ones.
    if let Some(durable) = core.durable() {
        tasks.spawn(app::upkeep::keep(
            core.clone(),
            durable,
            shutdown.clone(),
            config.runs.park_after,
        ));
    } else {
        // Memory mode: runs that only wait for people leave their task.
        tasks.spawn(app::park::keep(core.clone(), config.runs.park_after));
    }
    // The agents file, read again when it changes.
    if !config.agents_file.as_os_str().is_empty() && !config.agents_reload.is_zero() {
        let loaded = std::fs::read_to_string(&config.agents_file).unwrap_or_default();
        tasks.spawn(agents_watch::watch(
            core.clone(),
            config.clone(),
            loaded,
            provider_key,
            shutdown.clone(),
        ));
    }
    // Running runs get `shutdown_grace` to finish once shutdown begins.
    tasks.spawn({
        let core = core.clone();
        let grace = config.shutdown_grace;
        async move {
            core.finish_runs(grace).await;
            webhooks.drain(RUN_FLUSH, || core.runs().running()).await;
            webhooks_stop.cancel();
        }
    });
    let keys = auth::load(&config.auth).map_err(|e| anyhow::anyhow!(e))?;
    if let Some(keys) = &keys {
        keys.watch(config.auth.reload, shutdown.clone(), &tasks);
        tracing::info!(file = %config.auth.api_keys_file.display(), "clients authenticate with API keys");
    }
    baton_common::metrics::serve(
        &config.telemetry.metrics_listen,
        core.metrics().registry.clone(),
        shutdown.clone(),
    )
    .await?;
    if let Some(endpoint) = core.tracing().endpoint() {
        tracing::info!(endpoint, "exporting spans over OTLP");
    }
    let tracing = core.tracing().clone();
    let durable = core.durable();
    core.list_remote_tools();
    // One port: gRPC (and gRPC-web), the HTTP/JSON + SSE face, the A2A
    // face's three bindings and the MCP endpoint.
    let a2a = a2a::A2a::new(
        core.clone(),
        &config.a2a,
        keys.clone(),
        !config.tls.cert_file.as_os_str().is_empty(),
    )?;
    let mcp = mcp::Mcp::new(core.clone(), &config.mcp, keys.clone(), shutdown.clone())?;
    let face = OrchestratorService::new(core.clone());
    let grpc = Routes::new(OrchestratorServer::with_interceptor(
        face.clone(),
        auth::Authenticate(keys.clone()),
    ))
    .add_service(A2aServiceServer::with_interceptor(
        a2a::grpc::A2aGrpc::new(a2a.clone()),
        auth::Authenticate(keys.clone()),
    ));
    let routes = Routes::from(
        grpc.into_axum_router()
            // The streaming RPCs (each event sent as encoded once): ahead
            // of the generated routes.
            .merge(grpc::outgoing::routes(
                face,
                auth::Authenticate(keys.clone()),
            ))
            .merge(http::router(core, keys, config.console.clone()))
            .merge(a2a::router(a2a))
            .merge(mcp::router(mcp)),
    );
    tracing::info!(%addr, "orchestrator listening");
    // Ready while the context store answers, and, when runs are durable,
    // the run store's Redis too (no run can start without it).
    let ready = move || {
        let store = store.clone();
        let durable = durable.clone();
        async move {
            let runs_ok = match &durable {
                Some(runs) => runs.ping().await,
                None => true,
            };
            runs_ok && store.ping().await.is_ok()
        }
    };
    let readiness = baton_common::server::Readiness {
        service_name: "baton.v1.Orchestrator",
        check: ready,
        every: Duration::from_secs(1),
    };
    let tls = baton_common::tls::ServerTls::load(&config.tls).map_err(|e| anyhow::anyhow!(e))?;
    let served = baton_common::server::serve_with_health(
        baton_common::server::Port { listener, tls },
        routes,
        &config.server,
        readiness,
        shutdown,
        tasks,
        // Runs may take the grace period, then their terminal events need
        // a moment to reach the clients.
        config.shutdown_grace + RUN_FLUSH,
    )
    .await
    .context("gRPC server failed");
    tracing.shutdown().await;
    served
}

/// The `baton-orchestrator` binary's main: configuration from its file and
/// `BATON_…` variables, logs, then [`run`] until SIGTERM (every binary that
/// serves it — the service's own, the end-to-end tests' — calls this).
pub fn main() -> anyhow::Result<()> {
    baton_common::runtime::disable_transparent_huge_pages();
    baton_common::service::main::<config::Config, _, _>(
        "baton-orchestrator",
        env!("CARGO_PKG_VERSION"),
        "Baton's orchestrator: runs agents and streams their events",
        run,
    )
}

#[cfg(test)]
mod tests {
    use super::secret_from_env;

    #[test]
    fn a_provider_key_comes_from_its_variable_or_the_file_its_file_variable_names() {
        let dir = std::env::temp_dir().join(format!("baton-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let file = dir.join("OPENAI_API_KEY");
        std::fs::write(&file, "sk-from-file\n").expect("write");
        let path = file.display().to_string();
        let missing = dir.join("nope").display().to_string();

        let env = |vars: Vec<(&'static str, String)>| {
            move |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
        };
        let both = env(vec![
            ("OPENAI_API_KEY", "sk-env".into()),
            ("OPENAI_API_KEY_FILE", path.clone()),
        ]);
        assert_eq!(
            secret_from_env("OPENAI_API_KEY", &both).as_deref(),
            Some("sk-env")
        );
        let file_only = env(vec![("OPENAI_API_KEY_FILE", path)]);
        assert_eq!(
            secret_from_env("OPENAI_API_KEY", &file_only).as_deref(),
            Some("sk-from-file")
        );
        let unreadable = env(vec![("OPENAI_API_KEY_FILE", missing)]);
        assert_eq!(secret_from_env("OPENAI_API_KEY", &unreadable), None);
        assert_eq!(secret_from_env("OPENAI_API_KEY", &env(vec![])), None);
    }
}
