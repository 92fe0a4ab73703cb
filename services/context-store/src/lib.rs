//! Baton's context store: trace-scoped key/value slots with TTLs, size
//! limits, quotas and versions, shared by every agent of one request.
//!
//! - [`store`]: the [`store::ContextStore`] trait and its Redis and in-memory
//!   backends.
//! - [`conformance`]: the one suite both backends must pass.
//! - [`grpc`]: the `baton.v1.ContextStore` service: wire types in, domain
//!   types out, errors mapped once ([`error`]).
//! - [`config`]: the service's config.
//! - [`run`] / [`serve`]: serve the store on a listener until shutdown;
//!   `main.rs`, `baton up` and the tests all call them.
//!
//! Readiness: grpc.health.v1 reports `NOT_SERVING` (for `""` and for
//! `baton.v1.ContextStore`) until the backend answers a ping, again whenever
//! it stops answering, and for good once shutdown begins.

pub mod config;
pub mod conformance;
pub mod error;
pub mod grpc;
pub mod store;

use std::{sync::Arc, time::Duration};

use anyhow::Context;
use tokio::net::TcpListener;
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tonic::service::Routes;
use tonic_health::ServingStatus;

use crate::{
    config::{Backend, Config},
    grpc::StoreService,
    store::{ContextStore, memory::MemoryStore, redis::RedisStore},
};

/// The health service names the store reports on.
const HEALTH_NAMES: [&str; 2] = ["", "baton.v1.ContextStore"];

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
    let (reporter, health_service) = tonic_health::server::health_reporter();
    for name in HEALTH_NAMES {
        reporter
            .set_service_status(name, ServingStatus::NotServing)
            .await;
    }

    let tasks = TaskTracker::new();
    tasks.spawn(readiness(
        store.clone(),
        reporter.clone(),
        config.health_interval,
        shutdown.clone(),
    ));

    let service = StoreService::new(store, shutdown.clone(), tasks.clone());
    let routes = Routes::new(health_service).add_service(service.into_server());
    tracing::info!(%addr, backend = ?config.backend, "context store listening");

    let drain = {
        let shutdown = shutdown.clone();
        let reporter = reporter.clone();
        async move {
            shutdown.cancelled().await;
            for name in HEALTH_NAMES {
                reporter
                    .set_service_status(name, ServingStatus::NotServing)
                    .await;
            }
        }
    };
    let served = baton_common::server::serve(listener, routes, drain, config.shutdown_grace).await;
    // Whatever ended the server, stop the tasks it started.
    shutdown.cancel();
    tasks.close();
    if tokio::time::timeout(config.shutdown_grace, tasks.wait())
        .await
        .is_err()
    {
        tracing::warn!("context store tasks did not finish within the grace period");
    }
    tracing::info!("context store stopped");
    served.context("gRPC server failed")
}

/// Keeps the health status in line with whether the backend answers.
async fn readiness(
    store: Arc<dyn ContextStore>,
    reporter: tonic_health::server::HealthReporter,
    every: Duration,
    shutdown: CancellationToken,
) {
    let mut ready = false;
    loop {
        let ok = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = tokio::time::timeout(every.max(Duration::from_millis(500)), store.ping()) => matches!(r, Ok(Ok(()))),
        };
        if ok != ready && !shutdown.is_cancelled() {
            ready = ok;
            let status = if ok {
                ServingStatus::Serving
            } else {
                ServingStatus::NotServing
            };
            if ok {
                tracing::info!("backend answers, ready");
            } else {
                tracing::warn!("backend does not answer, not ready");
            }
            for name in HEALTH_NAMES {
                reporter.set_service_status(name, status).await;
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
    }
}
