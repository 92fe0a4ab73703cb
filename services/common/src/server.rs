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
