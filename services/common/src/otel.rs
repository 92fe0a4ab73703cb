//! OpenTelemetry: one tracer provider per service instance, W3C trace
//! context in gRPC metadata, and the `[telemetry]` config section.
//!
//! Every service always has a real tracer, so span and trace ids exist (the
//! orchestrator puts them in every event) whether or not anything is
//! exported. Export is OTLP over gRPC, batched on the SDK's own thread with
//! a bounded queue: a slow or unreachable collector costs dropped spans,
//! never a slower or failed call. Configuration follows the standard
//! variables — `OTEL_EXPORTER_OTLP_ENDPOINT` (unset: nothing is exported),
//! `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES` — and the config section
//! can set the same things (tests run several services in one process, each
//! with its own provider).

use std::time::Duration;

use opentelemetry::{
    Context, KeyValue,
    propagation::{Extractor, Injector, TextMapPropagator},
    trace::TracerProvider as _,
};
use opentelemetry_otlp::{WithExportConfig, WithTonicConfig};
use opentelemetry_sdk::{
    Resource,
    propagation::TraceContextPropagator,
    trace::{SdkTracer, SdkTracerProvider},
};
use serde::{Deserialize, Serialize};
use tonic::metadata::{KeyRef, MetadataKey, MetadataMap, MetadataValue};

/// The `[telemetry]` section of a service config.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// OTLP/gRPC collector, like `http://jaeger:4317` (or `https://…`,
    /// checked against the system's roots or `otlp_ca_file`). Empty: the
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` variable, and when that is unset too,
    /// nothing is exported.
    pub otlp_endpoint: String,
    /// The CA (PEM) an `https://` collector's certificate is checked
    /// against. Empty: the `OTEL_EXPORTER_OTLP_CERTIFICATE` variable, and
    /// when that is unset too, the system's roots.
    pub otlp_ca_file: std::path::PathBuf,
    /// `service.name` of the spans. Empty: `OTEL_SERVICE_NAME`, else the
    /// service's own name (`baton-orchestrator`, `baton-context-store`).
    pub service_name: String,
    /// Where Prometheus scrapes `/metrics`, like `0.0.0.0:9464`; empty turns
    /// the endpoint off.
    pub metrics_listen: String,
}

/// Why the `[telemetry]` section is refused, or the tracer provider it
/// describes cannot be built; the message names the field.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// `otlp_endpoint` is not an `http(s)://` URL.
    #[error("telemetry.otlp_endpoint: {0:?} is not http(s)://host:port")]
    OtlpEndpoint(String),
    /// `metrics_listen` is not `host:port`.
    #[error("telemetry.metrics_listen: {0:?} is not host:port")]
    MetricsListen(String),
    /// The collector's CA file cannot be read.
    #[error("telemetry.otlp_ca_file {}: {source}", path.display())]
    OtlpCaFile {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The OTLP exporter refused its settings.
    #[error("telemetry.otlp_endpoint: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
}

impl TelemetryConfig {
    /// Checks the section.
    pub fn validate(&self) -> Result<(), TelemetryError> {
        let e = &self.otlp_endpoint;
        if !(e.is_empty() || e.starts_with("http://") || e.starts_with("https://")) {
            return Err(TelemetryError::OtlpEndpoint(self.otlp_endpoint.clone()));
        }
        if !self.metrics_listen.is_empty()
            && self.metrics_listen.parse::<std::net::SocketAddr>().is_err()
        {
            return Err(TelemetryError::MetricsListen(self.metrics_listen.clone()));
        }
        Ok(())
    }
}

/// Largest number of finished spans waiting for export; more are dropped.
const MAX_QUEUE: usize = 8192;
/// How long one export may take before the SDK gives it up.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// A service instance's tracer provider. Call [`Tracing::shutdown`] at the
/// end to flush what is buffered.
#[derive(Clone)]
pub struct Tracing {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    endpoint: Option<String>,
}

impl Tracing {
    /// Builds the provider `config` and the standard variables describe.
    /// Must run inside a Tokio runtime when exporting (the OTLP channel is
    /// created lazily on it).
    pub fn new(config: &TelemetryConfig, default_service: &str) -> Result<Self, TelemetryError> {
        Self::with_env(config, default_service, |k| std::env::var(k).ok())
    }

    /// As [`Tracing::new`], reading variables through `env`.
    pub fn with_env(
        config: &TelemetryConfig,
        default_service: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, TelemetryError> {
        let non_empty = |v: Option<String>| v.filter(|s| !s.trim().is_empty());
        let endpoint = if config.otlp_endpoint.is_empty() {
            non_empty(env("OTEL_EXPORTER_OTLP_ENDPOINT"))
        } else {
            Some(config.otlp_endpoint.clone())
        };
        let service = if !config.service_name.is_empty() {
            config.service_name.clone()
        } else {
            non_empty(env("OTEL_SERVICE_NAME")).unwrap_or_else(|| default_service.to_owned())
        };
        // Resource::builder reads OTEL_RESOURCE_ATTRIBUTES; the service name
        // is set last so the config wins.
        let resource = Resource::builder()
            .with_attributes([KeyValue::new("service.name", service)])
            .build();
        let mut builder = SdkTracerProvider::builder().with_resource(resource);
        if let Some(endpoint) = &endpoint {
            let mut exporter = opentelemetry_otlp::SpanExporter::builder().with_tonic();
            if endpoint.starts_with("https://") {
                let ca = if config.otlp_ca_file.as_os_str().is_empty() {
                    non_empty(env("OTEL_EXPORTER_OTLP_CERTIFICATE")).map(std::path::PathBuf::from)
                } else {
                    Some(config.otlp_ca_file.clone())
                };
                let tls = tonic::transport::ClientTlsConfig::new();
                let tls = match ca {
                    Some(path) => {
                        let pem = std::fs::read(&path)
                            .map_err(|source| TelemetryError::OtlpCaFile { path, source })?;
                        tls.ca_certificate(tonic::transport::Certificate::from_pem(pem))
                    }
                    None => tls.with_native_roots(),
                };
                exporter = exporter.with_tls_config(tls);
            }
            let exporter = exporter
                .with_endpoint(endpoint.clone())
                .with_timeout(EXPORT_TIMEOUT)
                .with_compression(opentelemetry_otlp::Compression::Gzip)
                .build()?;
            let batch = opentelemetry_sdk::trace::BatchSpanProcessor::builder(exporter)
                .with_batch_config(
                    opentelemetry_sdk::trace::BatchConfigBuilder::default()
                        .with_max_queue_size(MAX_QUEUE)
                        .with_scheduled_delay(Duration::from_millis(500))
                        .build(),
                )
                .build();
            builder = builder.with_span_processor(batch);
        }
        let provider = builder.build();
        let tracer = provider.tracer("baton");
        Ok(Self {
            provider,
            tracer,
            endpoint,
        })
    }

    /// The tracer of this service's spans.
    pub fn tracer(&self) -> &SdkTracer {
        &self.tracer
    }

    /// Where spans go, if anywhere.
    pub fn endpoint(&self) -> Option<&str> {
        self.endpoint.as_deref()
    }

    /// Exports what is buffered and stops the provider (the SDK blocks
    /// while it flushes, so this runs on a blocking thread).
    pub async fn shutdown(self) {
        if self.endpoint.is_none() {
            return;
        }
        let provider = self.provider;
        let flushed = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        if let Ok(Err(e)) = flushed {
            tracing::warn!(error = %e, "could not flush spans at shutdown");
        }
    }
}

struct MetadataInjector<'a>(&'a mut MetadataMap);

impl Injector for MetadataInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(k), Ok(v)) = (
            MetadataKey::from_bytes(key.as_bytes()),
            MetadataValue::try_from(value.as_str()),
        ) {
            self.0.insert(k, v);
        }
    }
}

struct MetadataExtractor<'a>(&'a MetadataMap);

impl Extractor for MetadataExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0
            .keys()
            .map(|k| match k {
                KeyRef::Ascii(k) => k.as_str(),
                KeyRef::Binary(k) => k.as_str(),
            })
            .collect()
    }
}

/// Writes `cx`'s span as W3C `traceparent` (and `tracestate`) into gRPC
/// metadata.
pub fn inject(cx: &Context, metadata: &mut MetadataMap) {
    TraceContextPropagator::new().inject_context(cx, &mut MetadataInjector(metadata));
}

/// `cx`'s span as a W3C `traceparent` value (none when `cx` has no valid
/// span), for protocols that carry it in their own fields (MCP's `_meta`).
pub fn traceparent(cx: &Context) -> Option<String> {
    let mut fields = std::collections::HashMap::new();
    TraceContextPropagator::new().inject_context(cx, &mut fields);
    fields.remove("traceparent")
}

/// The remote parent a request's `traceparent` names (an empty context
/// when there is none or it is malformed).
pub fn extract(metadata: &MetadataMap) -> Context {
    TraceContextPropagator::new().extract(&MetadataExtractor(metadata))
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::{TraceContextExt, Tracer};

    use super::*;

    #[test]
    fn traceparent_round_trips_through_metadata() {
        let tracing =
            Tracing::with_env(&TelemetryConfig::default(), "t", |_| None).expect("provider");
        assert_eq!(tracing.endpoint(), None, "nothing exported when unset");
        let span = tracing.tracer().start("x");
        let cx = Context::current_with_span(span);
        let mut md = MetadataMap::new();
        inject(&cx, &mut md);
        let tp = md
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            .expect("traceparent");
        let sc = cx.span().span_context().clone();
        assert_eq!(tp, format!("00-{}-{}-01", sc.trace_id(), sc.span_id()));
        let back = extract(&md);
        assert_eq!(back.span().span_context().trace_id(), sc.trace_id());
        assert!(back.span().span_context().is_remote());
        assert!(
            !extract(&MetadataMap::new())
                .span()
                .span_context()
                .is_valid()
        );
    }

    #[tokio::test]
    async fn the_standard_variables_turn_export_on_and_the_config_wins() {
        let env = |k: &str| {
            (k == "OTEL_EXPORTER_OTLP_ENDPOINT").then(|| "http://collector:4317".to_owned())
        };
        let t = Tracing::with_env(&TelemetryConfig::default(), "t", env).expect("provider");
        assert_eq!(t.endpoint(), Some("http://collector:4317"));
        let configured = TelemetryConfig {
            otlp_endpoint: "http://jaeger:4317".into(),
            ..Default::default()
        };
        let t = Tracing::with_env(&configured, "t", env).expect("provider");
        assert_eq!(t.endpoint(), Some("http://jaeger:4317"));
        let blank = |_: &str| Some("  ".to_owned());
        let t = Tracing::with_env(&TelemetryConfig::default(), "t", blank).expect("provider");
        assert_eq!(t.endpoint(), None, "a blank variable exports nothing");
    }

    #[test]
    fn config_is_checked() {
        let bad = TelemetryConfig {
            otlp_endpoint: "jaeger:4317".into(),
            ..Default::default()
        };
        assert_eq!(
            bad.validate().expect_err("bad").to_string(),
            r#"telemetry.otlp_endpoint: "jaeger:4317" is not http(s)://host:port"#
        );
        let bad = TelemetryConfig {
            metrics_listen: "nine".into(),
            ..Default::default()
        };
        assert_eq!(
            bad.validate().expect_err("bad").to_string(),
            r#"telemetry.metrics_listen: "nine" is not host:port"#
        );
    }
}
