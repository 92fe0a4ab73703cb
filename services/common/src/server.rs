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
//! reflection). Every connection is bounded ([`ServerOptions`]: concurrent
//! streams, HTTP/2 keepalive pings so half-open clients are noticed and
//! their streams freed). Statuses that tonic makes before a handler runs
//! are made to tell the client whether to retry ([`StatusLayer`]): an
//! undecodable message is `INVALID_ARGUMENT`, one over the size limit
//! `RESOURCE_EXHAUSTED`, both naming the field `request`; a method the port
//! does not serve is `UNIMPLEMENTED` saying what it serves.

use std::{
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use serde::{Deserialize, Serialize};
use tower_http::cors::{AllowOrigin, CorsLayer};

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
    /// A port could not be bound.
    #[error("{0}")]
    Bind(String),
}

/// Connection limits of a gRPC server (the `server` section of each
/// service's config).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerOptions {
    /// Most concurrent streams (calls) on one HTTP/2 connection; a client
    /// opening more waits for one to end.
    pub max_concurrent_streams: u32,
    /// How often an idle connection is pinged (HTTP/2 keepalive).
    #[serde(with = "crate::config::duration")]
    pub keepalive_interval: Duration,
    /// How long a ping may go unanswered before the connection (and every
    /// stream on it) is closed: a half-open client is noticed within
    /// `keepalive_interval + keepalive_timeout`.
    #[serde(with = "crate::config::duration")]
    pub keepalive_timeout: Duration,
    /// Origins browsers may call from with gRPC-web (CORS), e.g.
    /// `https://console.example.com`; `*` allows any origin. Empty (the
    /// default): no cross-origin call (preflights get no
    /// `Access-Control-Allow-Origin`, so browsers refuse).
    pub cors_allowed_origins: Vec<String>,
    /// A second, plaintext port serving only `grpc.health.v1`, like
    /// `0.0.0.0:50061`: for Kubernetes' gRPC probes (which cannot speak
    /// TLS) when the main port does. Empty (the default): none.
    pub health_listen: String,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            max_concurrent_streams: 1024,
            keepalive_interval: Duration::from_secs(30),
            keepalive_timeout: Duration::from_secs(20),
            cors_allowed_origins: Vec::new(),
            health_listen: String::new(),
        }
    }
}

impl ServerOptions {
    /// Checks the options are usable; returns what is wrong otherwise.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_concurrent_streams == 0 {
            return Err("server.max_concurrent_streams must be at least 1".into());
        }
        if self.keepalive_interval.is_zero() || self.keepalive_timeout.is_zero() {
            return Err(
                "server.keepalive_interval and server.keepalive_timeout must be positive".into(),
            );
        }
        if !self.health_listen.is_empty()
            && self.health_listen.parse::<std::net::SocketAddr>().is_err()
        {
            return Err(format!(
                "server.health_listen: {:?} is not host:port",
                self.health_listen
            ));
        }
        self.cors().map(|_| ())
    }

    /// The CORS layer of `cors_allowed_origins` (gRPC-web from browsers):
    /// `POST` with the headers gRPC-web, API keys and trace context use;
    /// gRPC's status headers readable by the page.
    pub fn cors(&self) -> Result<CorsLayer, String> {
        let origins = if self.cors_allowed_origins.iter().any(|o| o == "*") {
            AllowOrigin::any()
        } else {
            let mut list = Vec::with_capacity(self.cors_allowed_origins.len());
            for origin in &self.cors_allowed_origins {
                let valid = (origin.starts_with("https://") || origin.starts_with("http://"))
                    && !origin.ends_with('/')
                    && origin
                        .split("://")
                        .nth(1)
                        .is_some_and(|h| !h.is_empty() && !h.contains('/'));
                let value = http::HeaderValue::from_str(origin).ok().filter(|_| valid);
                list.push(value.ok_or_else(|| {
                    format!(
                        "server.cors_allowed_origins: {origin:?} is not an origin (scheme://host[:port], no path), or *"
                    )
                })?);
            }
            AllowOrigin::list(list)
        };
        let header = http::HeaderName::from_static;
        Ok(CorsLayer::new()
            .allow_origin(origins)
            .allow_methods([http::Method::POST, http::Method::OPTIONS])
            .allow_headers([
                header("content-type"),
                header("x-grpc-web"),
                header("x-user-agent"),
                header("grpc-timeout"),
                header("authorization"),
                header("traceparent"),
                header("tracestate"),
            ])
            .expose_headers([
                header("grpc-status"),
                header("grpc-message"),
                header("grpc-status-details-bin"),
                header("baton-field"),
            ])
            .max_age(Duration::from_secs(24 * 3600)))
    }
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
        .layer(tonic_web::GrpcWebLayer::new())
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
            .map_err(|e| {
                ServeError::Bind(format!(
                    "server.health_listen {}: {e}",
                    options.health_listen
                ))
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

/// Rewrites the statuses tonic answers before a handler runs, so their code
/// tells the client whether retrying can help (see the module docs).
#[derive(Clone)]
pub struct StatusLayer {
    served: Arc<str>,
}

impl StatusLayer {
    /// For a port serving `service_name`.
    pub fn new(service_name: &str) -> Self {
        Self {
            served: Arc::from(service_name),
        }
    }
}

impl<S> tower_layer::Layer<S> for StatusLayer {
    type Service = StatusService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        StatusService {
            inner,
            served: self.served.clone(),
        }
    }
}

/// The service [`StatusLayer`] makes.
#[derive(Clone)]
pub struct StatusService<S> {
    inner: S,
    served: Arc<str>,
}

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S, B, RB> tower_service::Service<http::Request<B>> for StatusService<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<StatusBody<RB>>;
    type Error = S::Error;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let path = request.uri().path().to_owned();
        let served = self.served.clone();
        let answer = self.inner.call(request);
        Box::pin(async move {
            let mut response = answer.await?;
            // A status is in the headers (trailers-only answers) or in the
            // trailers at the end of the body.
            rewrite_status(response.headers_mut(), &path, &served);
            Ok(response.map(|inner| StatusBody {
                inner,
                path,
                served,
            }))
        })
    }
}

/// A response body whose trailers get their status rewritten, as the
/// headers are ([`StatusLayer`]).
pub struct StatusBody<B> {
    inner: B,
    path: String,
    served: Arc<str>,
}

impl<B> http_body::Body for StatusBody<B>
where
    B: http_body::Body + Unpin,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let frame = match frame.into_trailers() {
                    Ok(mut trailers) => {
                        rewrite_status(&mut trailers, &this.path, &this.served);
                        http_body::Frame::trailers(trailers)
                    }
                    Err(frame) => frame,
                };
                Poll::Ready(Some(Ok(frame)))
            }
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The status a trailers-only answer should carry instead of tonic's.
fn rewrite_status(headers: &mut http::HeaderMap, path: &str, served: &str) {
    use tonic::Code;
    let Some(code) = headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i32>().ok())
        .map(Code::from_i32)
    else {
        return;
    };
    let message = headers
        .get("grpc-message")
        .map(|v| percent_decode(v.as_bytes()))
        .unwrap_or_default();
    let (code, field, message) = match code {
        Code::Internal
            if message.starts_with("failed to decode Protobuf message")
                || message.starts_with("Missing request message") =>
        {
            (
                Code::InvalidArgument,
                Some("request"),
                format!("request: not a valid protobuf message for {path} ({message})"),
            )
        }
        Code::OutOfRange if message.starts_with("Error, decoded message length too large") => {
            let detail = message.trim_start_matches("Error, decoded message length too large: ");
            (
                Code::ResourceExhausted,
                Some("request"),
                format!("request: the message is over this server's size limit ({detail})"),
            )
        }
        Code::Unimplemented if message.is_empty() => (
            Code::Unimplemented,
            None,
            format!("{path} is not served on this port, which serves {served}"),
        ),
        _ => return,
    };
    let _ = tonic::Status::new(code, message).add_header(headers);
    if let Some(field) = field {
        headers.insert("baton-field", http::HeaderValue::from_static(field));
    }
}

/// A `grpc-message` header as text (it is percent-encoded on the wire).
fn percent_decode(raw: &[u8]) -> String {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            raw[i],
            raw.get(i + 1).copied().and_then(hex),
            raw.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Headers as tonic writes them (message percent-encoded).
    fn answer(code: i32, message: &str) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        tonic::Status::new(tonic::Code::from_i32(code), message)
            .add_header(&mut h)
            .expect("headers");
        h
    }

    fn status(h: &http::HeaderMap) -> (String, String, Option<String>) {
        let get = |k: &str| h.get(k).map(|v| percent_decode(v.as_bytes()));
        (
            get("grpc-status").unwrap_or_default(),
            get("grpc-message").unwrap_or_default(),
            get("baton-field"),
        )
    }

    #[test]
    fn statuses_made_before_a_handler_tell_whether_to_retry() {
        let mut h = answer(
            13,
            "failed to decode Protobuf message: PutRequest.trace_id: invalid wire type",
        );
        rewrite_status(
            &mut h,
            "/baton.v1.ContextStore/Put",
            "baton.v1.ContextStore",
        );
        let (code, message, field) = status(&h);
        assert_eq!((code.as_str(), field.as_deref()), ("3", Some("request")));
        assert!(message.contains("/baton.v1.ContextStore/Put"), "{message}");
        assert!(
            message.contains("invalid wire type"),
            "the cause is kept: {message}"
        );

        let mut h = answer(
            11,
            "Error, decoded message length too large: found 5 bytes, the limit is: 4 bytes",
        );
        rewrite_status(&mut h, "/p", "s");
        assert_eq!(status(&h).0, "8");

        let mut h = answer(12, "");
        rewrite_status(
            &mut h,
            "/baton.v1.ToolHost/Execute",
            "baton.v1.Orchestrator",
        );
        let (code, message, _) = status(&h);
        assert_eq!(code, "12");
        assert!(message.contains("baton.v1.Orchestrator"), "{message}");

        // Anything else is left alone.
        let mut h = answer(13, "a handler's own internal error");
        rewrite_status(&mut h, "/p", "s");
        assert_eq!(status(&h).0, "13");
        let mut h = answer(5, "");
        rewrite_status(&mut h, "/p", "s");
        assert_eq!(status(&h), ("5".into(), String::new(), None));
    }
}
