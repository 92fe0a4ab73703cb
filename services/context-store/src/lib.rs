//! Baton's context-store server: the `baton.v1.ContextStore` gRPC service
//! over a store backend of `baton_store` (the trait, its key and limit
//! types, the Redis and in-memory backends and their conformance suite live
//! there; the orchestrator uses that crate too, not this one).
//!
//! - [`grpc`]: the service: wire types in, domain types out, errors mapped
//!   once (by `baton_store::error`); audit records and Watch streams.
//! - [`auth`]: who may call, as which tenant (service token, client API
//!   keys, or `auth.mode = "none"`).
//! - [`quota`]: per-tenant quotas of bytes and keys across a tenant's
//!   traces (a ledger beside the backend, which wraps it as a decorator).
//! - [`metrics`]: the service's Prometheus metrics.
//! - [`config`]: the service's config.
//! - [`names`]: the names it goes by (a leaf every module may use).
//! - [`run`] / [`serve`]: serve the store on a listener until shutdown;
//!   `main.rs`, `baton up` and the tests all call them.
//!
//! Readiness: grpc.health.v1 reports `NOT_SERVING` (for `""` and for
//! `baton.v1.ContextStore`) until the backend answers a ping, again whenever
//! it stops answering, and for good once shutdown begins.

pub mod auth;
pub mod config;
pub mod grpc;
pub mod metrics;
pub mod names;
pub mod quota;

use std::sync::Arc;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tonic::service::Routes;

use baton_store::{ContextStore, memory::MemoryStore, redis::RedisStore};

use crate::{
    config::{Backend, Config},
    grpc::StoreService,
    names::{GRPC_SERVICE, SERVICE_NAME},
};

/// Builds the backend the config names.
pub fn build_store(config: &Config) -> anyhow::Result<Arc<dyn ContextStore>> {
    Ok(match config.backend {
        Backend::Memory => Arc::new(MemoryStore::new(config.limits.clone())),
        Backend::Redis => Arc::new(
            RedisStore::new(&config.redis, config.limits.clone())
                .context("cannot set up the Redis backend")?,
        ),
    })
}

/// Runs the context store on `listener` until `shutdown` is cancelled, then
/// drains within `config.shutdown_grace`.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let store = build_store(&config)?;
    serve(store, &config, listener, shutdown).await
}

/// Serves an existing store (so `baton up` can share one with the
/// orchestrator).
pub async fn serve(
    store: Arc<dyn ContextStore>,
    config: &Config,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let addr = listener.local_addr().context("listener has no address")?;
    let tasks = TaskTracker::new();
    let tracing = baton_common::otel::Tracing::new(&config.telemetry, SERVICE_NAME)?;
    if let Some(endpoint) = tracing.endpoint() {
        tracing::info!(endpoint, "exporting spans over OTLP");
    }
    let tenant_metrics = quota::TenantMetrics::default();
    // Calls through this service are held to the tenants' quotas (the
    // backend itself, shared with `baton up`'s orchestrator, is not).
    let served = quota::TenantQuotas::wrap(
        store.clone(),
        &config.quotas,
        (config.backend == Backend::Redis).then_some(&config.redis),
        tenant_metrics.clone(),
    )
    .map_err(|e| anyhow::anyhow!("quotas: {e}"))?;
    let service = StoreService::new(served, shutdown.clone(), tasks.clone())
        .with_tracing(tracing.clone())
        .with_watch_limits(config.watches.clone())
        .with_tenant_metrics(tenant_metrics);
    baton_common::metrics::serve(
        &config.telemetry.metrics_listen,
        service.metrics().registry.clone(),
        shutdown.clone(),
    )
    .await?;
    let tls = baton_common::tls::ServerTls::load(&config.tls)?;
    let client_certs = tls.as_ref().is_some_and(|t| t.verifies_clients());
    let credentials = auth::Credentials::load(&config.auth, client_certs, &shutdown, &tasks)?;
    let routes = Routes::new(service.into_server(credentials));
    tracing::info!(%addr, backend = ?config.backend, "context store listening");
    let ready = move || {
        let store = store.clone();
        async move { store.ping().await.is_ok() }
    };
    let readiness = baton_common::server::Readiness {
        service_name: GRPC_SERVICE,
        check: ready,
        every: config.health_interval,
    };
    let served = baton_common::server::serve_with_health(
        baton_common::server::Port { listener, tls },
        routes,
        &config.server,
        readiness,
        shutdown,
        tasks,
        config.shutdown_grace,
    )
    .await
    .context("gRPC server failed");
    tracing.shutdown().await;
    served
}

/// The `baton-context-store` binary's main: configuration from its file and
/// `BATON_…` variables, logs, then [`run`] until SIGTERM (every binary that
/// serves it — the service's own, the end-to-end tests' — calls this).
pub fn main() -> anyhow::Result<()> {
    baton_common::runtime::disable_transparent_huge_pages();
    baton_common::service::main::<config::Config, _, _>(
        "baton-context-store",
        env!("CARGO_PKG_VERSION"),
        "Baton's context store: trace-scoped key/value slots on Redis or in memory",
        run,
    )
}
