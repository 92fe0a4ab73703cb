//! The `server` section of each service's config ([`ServerOptions`]):
//! connection limits (concurrent streams, HTTP/2 keepalive), the origins
//! gRPC-web may be called from (CORS) and the plaintext health port.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tower_http::cors::{AllowOrigin, CorsLayer};

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

/// Why a `server` section is refused; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServerOptionsError {
    /// `max_concurrent_streams` is 0.
    #[error("server.max_concurrent_streams must be at least 1")]
    MaxConcurrentStreams,
    /// A keepalive duration is zero.
    #[error("server.keepalive_interval and server.keepalive_timeout must be positive")]
    Keepalive,
    /// `health_listen` is not `host:port`.
    #[error("server.health_listen: {0:?} is not host:port")]
    HealthListen(String),
    /// An entry of `cors_allowed_origins` is not an origin.
    #[error(
        "server.cors_allowed_origins: {0:?} is not an origin (scheme://host[:port], no path), or *"
    )]
    CorsOrigin(String),
}

impl ServerOptions {
    /// Checks the options are usable.
    pub fn validate(&self) -> Result<(), ServerOptionsError> {
        if self.max_concurrent_streams == 0 {
            return Err(ServerOptionsError::MaxConcurrentStreams);
        }
        if self.keepalive_interval.is_zero() || self.keepalive_timeout.is_zero() {
            return Err(ServerOptionsError::Keepalive);
        }
        if !self.health_listen.is_empty()
            && self.health_listen.parse::<std::net::SocketAddr>().is_err()
        {
            return Err(ServerOptionsError::HealthListen(self.health_listen.clone()));
        }
        self.cors().map(|_| ())
    }

    /// The CORS layer of `cors_allowed_origins` (gRPC-web from browsers):
    /// `POST` with the headers gRPC-web, API keys and trace context use;
    /// gRPC's status headers readable by the page.
    pub fn cors(&self) -> Result<CorsLayer, ServerOptionsError> {
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
                list.push(value.ok_or_else(|| ServerOptionsError::CorsOrigin(origin.clone()))?);
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
