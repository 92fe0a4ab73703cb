//! The gRPC server every Baton service runs.
//!
//! Besides the service's own routes it always serves grpc.health.v1 (added by
//! the caller, who owns the reporter), server reflection v1 and v1alpha (so
//! grpcurl-style tools and Python's reflection client both work) and gRPC-web
//! (browsers call the services without a proxy). Accepted sockets get
//! TCP_NODELAY: without it a unary call costs tens of milliseconds.

use std::{future::Future, time::Duration};

use tokio::net::TcpListener;
use tonic::{
    service::Routes,
    transport::{Server, server::TcpIncoming},
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
}

/// Serves `routes` plus reflection and gRPC-web on `listener` until `shutdown`
/// completes, then drains: open calls may finish for up to `grace`, after
/// which the server returns regardless (open streams are dropped).
///
/// Services end their own long-lived streams when shutdown starts, so a drain
/// normally finishes well within the grace period.
pub async fn serve(
    listener: TcpListener,
    routes: Routes,
    shutdown: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> Result<(), ServeError> {
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(baton_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(baton_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;
    let routes = routes
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha);

    let (drain_tx, drain_rx) = tokio::sync::oneshot::channel::<()>();
    let server = Server::builder()
        .accept_http1(true)
        .layer(tonic_web::GrpcWebLayer::new())
        .add_routes(routes)
        .serve_with_incoming_shutdown(
            TcpIncoming::from(listener).with_nodelay(Some(true)),
            async move {
                shutdown.await;
                let _ = drain_tx.send(());
            },
        );
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
    listener: TcpListener,
    routes: Routes,
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
    let served = serve(listener, routes.add_service(health_service), drain, grace).await;
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
