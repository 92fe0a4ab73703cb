//! An OTLP/gRPC trace receiver inside the test: a tonic server of
//! opentelemetry-proto's `TraceService` that keeps every span it is sent,
//! with the `service.name` of the resource that sent it.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use opentelemetry_proto::tonic::{
    collector::trace::v1::{
        ExportTraceServiceRequest, ExportTraceServiceResponse,
        trace_service_server::{TraceService, TraceServiceServer},
    },
    common::v1::{AnyValue, any_value::Value},
};
use tokio_util::sync::CancellationToken;

/// One received span, flattened.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    /// `service.name` of the sender.
    pub service: String,
    /// 32 hex.
    pub trace_id: String,
    /// 16 hex.
    pub span_id: String,
    /// 16 hex; empty for a root span.
    pub parent_span_id: String,
    /// The span's name.
    pub name: String,
    /// Its attributes, as text (numbers in decimal, arrays as JSON).
    pub attributes: HashMap<String, String>,
    /// Whether its status is an error.
    pub error: bool,
}

#[derive(Default, Clone)]
struct Collector {
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn text(v: Option<&AnyValue>) -> String {
    match v.and_then(|v| v.value.as_ref()) {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        Some(Value::ArrayValue(a)) => format!(
            "[{}]",
            a.values
                .iter()
                .map(|x| format!("{:?}", text(Some(x))))
                .collect::<Vec<_>>()
                .join(",")
        ),
        _ => String::new(),
    }
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut out = Vec::new();
        for rs in request.into_inner().resource_spans {
            let service = rs
                .resource
                .as_ref()
                .and_then(|r| r.attributes.iter().find(|a| a.key == "service.name"))
                .map(|a| text(a.value.as_ref()))
                .unwrap_or_default();
            for ss in rs.scope_spans {
                for s in ss.spans {
                    out.push(ReceivedSpan {
                        service: service.clone(),
                        trace_id: hex(&s.trace_id),
                        span_id: hex(&s.span_id),
                        parent_span_id: hex(&s.parent_span_id),
                        name: s.name,
                        attributes: s
                            .attributes
                            .iter()
                            .map(|a| (a.key.clone(), text(a.value.as_ref())))
                            .collect(),
                        // STATUS_CODE_ERROR = 2
                        error: s.status.is_some_and(|st| st.code == 2),
                    });
                }
            }
        }
        self.spans
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(out);
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// A running receiver; stops when dropped.
pub struct OtlpReceiver {
    addr: SocketAddr,
    collector: Collector,
    stop: CancellationToken,
}

impl OtlpReceiver {
    /// Starts a receiver on a free loopback port.
    pub async fn start() -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        Ok(Self::serve(
            addr,
            tokio_stream::wrappers::TcpListenerStream::new(listener),
        ))
    }

    /// A receiver speaking TLS only, with the server certificate of `pki`;
    /// its endpoint is `https://localhost:{port}`.
    pub async fn start_tls(pki: &crate::pki::TestPki) -> anyhow::Result<(Self, String)> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let tls = crate::pki::server_tls(pki, false)?;
        let endpoint = format!("https://localhost:{}", addr.port());
        Ok((
            Self::serve(addr, baton_common::tls::incoming(listener, tls)),
            endpoint,
        ))
    }

    /// Serves the collector on the connections of `incoming`.
    fn serve<I, IO, E>(addr: SocketAddr, incoming: I) -> Self
    where
        I: futures::Stream<Item = Result<IO, E>> + Send + 'static,
        IO: tonic::transport::server::Connected
            + tokio::io::AsyncRead
            + tokio::io::AsyncWrite
            + Unpin
            + Send
            + 'static,
        E: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
    {
        let collector = Collector::default();
        let stop = CancellationToken::new();
        let service = TraceServiceServer::new(collector.clone())
            .accept_compressed(tonic::codec::CompressionEncoding::Gzip);
        let s = stop.clone();
        tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(incoming, s.cancelled_owned())
                .await
        });
        Self {
            addr,
            collector,
            stop,
        }
    }

    /// `http://{addr}`, for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.collector
            .spans
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
