//! Prometheus metrics: each service instance owns a `prometheus_client`
//! [`Registry`] (no process-global recorder, so two services in one process
//! — `baton up`, the tests — keep their own), served as text on
//! `GET /metrics` of its own HTTP port.

use std::{net::SocketAddr, sync::Arc};

use axum::{Router, http::header, response::IntoResponse, routing::get};
use prometheus_client::{
    metrics::{
        family::Family,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The content type of the text exposition (OpenMetrics text, which
/// Prometheus scrapes natively).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Label sets of the services' metric families.
pub type Labels = Vec<(&'static str, String)>;

/// A family of latency histograms.
pub type Histograms = Family<Labels, Histogram, fn() -> Histogram>;

/// Latency buckets in seconds: 100 µs to ~100 s, ×4 apart.
pub fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 4.0, 11))
}

/// An empty family of latency histograms.
pub fn latency_histograms() -> Histograms {
    Histograms::new_with_constructor(latency_histogram)
}

/// The registry as exposition text.
pub fn render(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, registry);
    out
}

/// Binds `listen` (empty: no endpoint) and serves `/metrics` until
/// `shutdown`; returns the bound address.
pub async fn serve(
    listen: &str,
    registry: Arc<Registry>,
    shutdown: CancellationToken,
) -> anyhow::Result<Option<SocketAddr>> {
    if listen.is_empty() {
        return Ok(None);
    }
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|e| anyhow::anyhow!("telemetry.metrics_listen: cannot listen on {listen}: {e}"))?;
    let addr = listener.local_addr()?;
    let app =
        Router::new().route(
            "/metrics",
            get(move || {
                let registry = registry.clone();
                async move {
                    ([(header::CONTENT_TYPE, CONTENT_TYPE)], render(&registry)).into_response()
                }
            }),
        );
    tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown.cancelled_owned())
            .await;
        if let Err(e) = served {
            tracing::warn!(error = %e, "metrics endpoint failed");
        }
    });
    tracing::info!(%addr, "metrics on http://{addr}/metrics");
    Ok(Some(addr))
}

pub use baton_proto::code_name;
