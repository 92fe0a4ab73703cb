//! The gRPC server every Baton service runs.
//!
//! Besides the service's own routes it always serves grpc.health.v1 (added by
//! the caller, who owns the reporter), server reflection v1 and v1alpha (so
//! grpcurl-style tools and Python's reflection client both work) and gRPC-web
//! (browsers call the services without a proxy, from the origins
//! `server.cors_allowed_origins` allows). Accepted sockets get
//! TCP_NODELAY: without it a unary call costs tens of milliseconds.
//!
//! Reflection lists only the services the port serves (its own, health and
//! reflection). Every connection is bounded ([`options`]: concurrent
//! streams, HTTP/2 keepalive pings so half-open clients are noticed and
//! their streams freed). Statuses that tonic makes before a handler runs
//! are made to tell the client whether to retry ([`status`]).
//!
//! Here: [`serve`] (a port: the routes, reflection, gRPC-web, the drain)
//! and [`serve_with_health`] (the same with health and readiness, what
//! every service runs).

pub mod options;
pub mod status;
pub mod web;

use std::{future::Future, sync::Arc, time::Duration};

use tokio::net::TcpListener;
use tonic::{
    service::Routes,
    transport::{Server, server::TcpIncoming},
};

pub use self::{
    options::{ServerOptions, ServerOptionsError},
    status::StatusLayer,
};

/// Why the server stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The reflection service could not be built from the descriptor sets.
    #[error("cannot build the reflection service: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    /// The transport failed.
    #[error("gRPC transport: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// The plaintext health port (`server.health_listen`) could not be
    /// bound.
    #[error("server.health_listen {addr}: {source}")]
    HealthBind {
        /// The address.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
}

/// Where a server listens: a bound listener, and the TLS it speaks there
/// (`None`: plaintext).
pub struct Port {
    /// The bound listener.
    pub listener: TcpListener,
    /// TLS, when configured (see [`crate::tls`]).
    pub tls: Option<Arc<crate::tls::ServerTls>>,
}

/// The services a port answers besides its own.
const INFRASTRUCTURE: [&str; 3] = [
    "grpc.health.v1.Health",
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
];

/// Serves `routes` (the service `service_name`) plus reflection and
/// gRPC-web on `listener` until `shutdown` completes, then drains: open
/// calls may finish for up to `grace`, after which the server returns
/// regardless (open streams are dropped).
///
/// Services end their own long-lived streams when shutdown starts, so a drain
/// normally finishes well within the grace period.
///
/// With `port.tls`, the port speaks TLS only (see [`crate::tls`]).
pub async fn serve(
    port: Port,
    routes: Routes,
    service_name: &'static str,
    options: &ServerOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> Result<(), ServeError> {
    let reflection = || {
        let mut builder = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(baton_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .with_service_name(service_name);
        for name in INFRASTRUCTURE {
            builder = builder.with_service_name(name);
        }
        builder
    };
    let routes = routes
        .add_service(reflection().build_v1()?)
        .add_service(reflection().build_v1alpha()?);

    let cors = options.cors().unwrap_or_else(|e| {
        // validate() refused this config before it got here.
        tracing::error!(error = %e, "no cross-origin calls");
        ServerOptions::default().cors().unwrap_or_default()
    });
    let (drain_tx, drain_rx) = tokio::sync::oneshot::channel::<()>();
    let router = Server::builder()
        .accept_http1(true)
        .max_concurrent_streams(options.max_concurrent_streams)
        .http2_keepalive_interval(Some(options.keepalive_interval))
        .http2_keepalive_timeout(Some(options.keepalive_timeout))
        .layer(cors)
        .layer(web::WebLayer)
        .layer(StatusLayer::new(service_name))
        .add_routes(routes);
    let signal = async move {
        shutdown.await;
        let _ = drain_tx.send(());
    };
    let Port { listener, tls } = port;
    let server: std::pin::Pin<
        Box<dyn Future<Output = Result<(), tonic::transport::Error>> + Send>,
    > = match tls {
        None => Box::pin(router.serve_with_incoming_shutdown(
            TcpIncoming::from(listener).with_nodelay(Some(true)),
            signal,
        )),
        Some(tls) => Box::pin(
            router.serve_with_incoming_shutdown(crate::tls::incoming(listener, tls), signal),
        ),
    };
    tokio::pin!(server);
    tokio::select! {
        result = &mut server => return result.map_err(Into::into),
        Ok(()) = drain_rx => {}
    }
    // Shutdown began: give open calls the grace period, then stop waiting.
    match tokio::time::timeout(grace, &mut server).await {
        Ok(result) => result.map_err(Into::into),
        Err(_) => {
            tracing::warn!(
                grace_ms = grace.as_millis() as u64,
                "drain grace period over, dropping open calls"
            );
            Ok(())
        }
    }
}

/// How a service tells whether it is ready.
pub struct Readiness<R> {
    /// The gRPC service name health reports on (besides `""`).
    pub service_name: &'static str,
    /// Answers whether the service's dependencies answer.
    pub check: R,
    /// How often to ask.
    pub every: Duration,
}

/// The grpc.health.v1 service name a liveness probe asks for (see
/// [`serve_with_health`]).
pub const LIVENESS: &str = "liveness";

/// Serves a service the way every Baton service runs: `routes` plus
/// grpc.health.v1, reflection and gRPC-web (see [`serve`]).
///
/// Health (for `""` and the service's name) is `NOT_SERVING` until the
/// readiness check answers true, follows it after that, and turns
/// `NOT_SERVING` for good once `shutdown` is cancelled. When the server has
/// stopped, the service's `tasks` are closed and awaited for up to `grace`.
///
/// A third name, [`LIVENESS`], is `SERVING` for as long as the server answers
/// at all, ready or not, draining or not: it is what a liveness probe asks,
/// so that a dependency outage (which only makes the service unready) never
/// gets the process restarted.
pub async fn serve_with_health<R, Fut>(
    port: Port,
    routes: Routes,
    options: &ServerOptions,
    readiness: Readiness<R>,
    shutdown: tokio_util::sync::CancellationToken,
    tasks: tokio_util::task::TaskTracker,
    grace: Duration,
) -> Result<(), ServeError>
where
    R: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = bool> + Send,
{
    use tonic_health::ServingStatus;
    let Readiness {
        service_name,
        check: ready,
        every,
    } = readiness;
    let names = ["", service_name];
    let (reporter, health_service) = tonic_health::server::health_reporter();
    reporter
        .set_service_status(LIVENESS, ServingStatus::Serving)
        .await;
    for name in names {
        reporter
            .set_service_status(name, ServingStatus::NotServing)
            .await;
    }
    {
        let reporter = reporter.clone();
        let shutdown = shutdown.clone();
        tasks.spawn(async move {
            let mut current = None;
            loop {
                let ok = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    r = tokio::time::timeout(every.max(Duration::from_millis(500)), ready()) => r.unwrap_or(false),
                };
                if current != Some(ok) && !shutdown.is_cancelled() {
                    current = Some(ok);
                    if ok {
                        tracing::info!(service = service_name, "dependencies answer, ready");
                    } else {
                        tracing::warn!(service = service_name, "dependencies do not answer, not ready");
                    }
                    let status = if ok { ServingStatus::Serving } else { ServingStatus::NotServing };
                    for name in names {
                        reporter.set_service_status(name, status).await;
                    }
                }
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(every) => {}
                }
            }
        });
    }

    // The plaintext health port (probes), up until the main server ends.
    let health_stop = tokio_util::sync::CancellationToken::new();
    if !options.health_listen.is_empty() {
        let listener = tokio::net::TcpListener::bind(&options.health_listen)
            .await
            .map_err(|source| ServeError::HealthBind {
                addr: options.health_listen.clone(),
                source,
            })?;
        tracing::info!(service = service_name, addr = %options.health_listen, "health port listening (plaintext, grpc.health.v1 only)");
        let health = health_service.clone();
        let stop = health_stop.clone();
        tokio::spawn(async move {
            let served = tonic::transport::Server::builder()
                .add_service(health)
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::TcpListenerStream::new(listener),
                    stop.cancelled_owned(),
                )
                .await;
            if let Err(e) = served {
                tracing::warn!(error = %e, "health port failed");
            }
        });
    }
    let drain = {
        let shutdown = shutdown.clone();
        async move {
            shutdown.cancelled().await;
            for name in names {
                reporter
                    .set_service_status(name, ServingStatus::NotServing)
                    .await;
            }
        }
    };
    let served = serve(
        port,
        routes.add_service(health_service),
        service_name,
        options,
        drain,
        grace,
    )
    .await;
    health_stop.cancel();
    // Whatever ended the server, stop what the service started.
    shutdown.cancel();
    tasks.close();
    if tokio::time::timeout(grace, tasks.wait()).await.is_err() {
        tracing::warn!(
            service = service_name,
            "tasks did not finish within the grace period"
        );
    }
    tracing::info!(service = service_name, "stopped");
    served
}
