//! The context store's config: defaults → TOML file → `BATON_STORE_*`
//! environment → `--set` flags (see `baton_common::config`), then
//! [`Config::validate`].

use std::{net::SocketAddr, time::Duration};

use baton_common::{
    logging::LogConfig,
    otel::{TelemetryConfig, TelemetryError},
    quota::QuotasError,
    server::{ServerOptions, ServerOptionsError},
    tls::TlsError,
};
use baton_store::{
    limits::{Limits, LimitsError},
    redis::config::{RedisConfig, RedisConfigError},
};
use serde::{Deserialize, Serialize};

use crate::{
    auth::{AuthConfig, AuthError},
    quota::StoreQuotaConfig,
};

/// Bounds on Watch streams (each holds a subscription and a buffer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WatchLimits {
    /// Most open watches of one trace; one more is `RESOURCE_EXHAUSTED`.
    pub per_trace: usize,
    /// Most open watches on one client connection; one more is
    /// `RESOURCE_EXHAUSTED`.
    pub per_connection: usize,
}

impl Default for WatchLimits {
    fn default() -> Self {
        Self {
            per_trace: 64,
            per_connection: 256,
        }
    }
}

impl WatchLimits {
    /// Checks the limits are usable.
    pub fn validate(&self) -> Result<(), InvalidConfig> {
        if self.per_trace == 0 || self.per_connection == 0 {
            return Err(InvalidConfig::Watches);
        }
        Ok(())
    }
}

/// Why the store's config is refused: the first problem, its message
/// naming the field (the sections' own errors keep their messages).
#[derive(Debug, thiserror::Error)]
pub enum InvalidConfig {
    /// `limits`.
    #[error(transparent)]
    Limits(#[from] LimitsError),
    /// `telemetry`.
    #[error(transparent)]
    Telemetry(#[from] TelemetryError),
    /// `server`.
    #[error(transparent)]
    Server(#[from] ServerOptionsError),
    /// `watches`.
    #[error("watches.per_trace and watches.per_connection must be at least 1")]
    Watches,
    /// `tls`.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// `quotas`.
    #[error(transparent)]
    Quotas(#[from] QuotasError),
    /// `redis` (backend `redis`).
    #[error(transparent)]
    Redis(#[from] RedisConfigError),
    /// `health_interval` is zero.
    #[error("health_interval must be positive")]
    HealthInterval,
    /// `auth`.
    #[error(transparent)]
    Auth(#[from] AuthError),
}

impl InvalidConfig {
    /// Whether the config is well-formed and only lacks a credential
    /// ([`AuthError::NoCredential`]).
    pub fn only_lacks_a_credential(&self) -> bool {
        matches!(self, Self::Auth(AuthError::NoCredential))
    }
}

/// Prefix of the environment variables the context store reads.
pub const ENV_PREFIX: &str = "BATON_STORE_";

/// Which storage backs the slots.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// Redis (single node or Cluster): production.
    #[default]
    Redis,
    /// In this process's memory: one replica only, lost on restart.
    Memory,
}

/// The context store's config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address the gRPC server listens on (gRPC, gRPC-web, health,
    /// reflection).
    pub listen: SocketAddr,
    /// `redis` or `memory`.
    pub backend: Backend,
    /// How to reach Redis (backend `redis`).
    pub redis: RedisConfig,
    /// Value size, quotas, key length and TTL bounds.
    pub limits: Limits,
    /// How long open calls may take to finish once shutdown begins.
    #[serde(with = "baton_common::config::duration")]
    pub shutdown_grace: Duration,
    /// How often readiness asks the backend whether it answers.
    #[serde(with = "baton_common::config::duration")]
    pub health_interval: Duration,
    /// Connection limits of the gRPC server (concurrent streams, HTTP/2
    /// keepalive).
    pub server: ServerOptions,
    /// Bounds on Watch streams.
    pub watches: WatchLimits,
    /// Who may call, as which tenant.
    pub auth: AuthConfig,
    /// TLS of the gRPC port (off unless `cert_file` and `key_file` are set).
    pub tls: baton_common::tls::TlsConfig,
    /// Per-tenant quotas across all of a tenant's traces:
    /// `quotas.default` and `quotas.tenants.<name>` (see [`crate::quota`]).
    pub quotas: StoreQuotaConfig,
    /// Runtime worker threads: 1 (the default) runs everything on one
    /// thread, 0 means one per core. A store call is one Redis round trip, so
    /// one thread per replica serves most; on 2 cores it measured 40% more
    /// throughput than a 2-worker runtime at the same latency. Scale out with
    /// replicas, or raise this on big nodes.
    pub worker_threads: usize,
    /// Logging.
    pub log: LogConfig,
    /// Traces (OTLP) and metrics (Prometheus).
    pub telemetry: TelemetryConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([0, 0, 0, 0], 50052)),
            backend: Backend::Redis,
            redis: RedisConfig::default(),
            limits: Limits::default(),
            shutdown_grace: Duration::from_secs(10),
            health_interval: Duration::from_secs(1),
            server: ServerOptions::default(),
            watches: WatchLimits::default(),
            auth: AuthConfig::default(),
            tls: Default::default(),
            quotas: Default::default(),
            worker_threads: 1,
            log: LogConfig::default(),
            telemetry: TelemetryConfig {
                metrics_listen: "0.0.0.0:9465".into(),
                ..TelemetryConfig::default()
            },
        }
    }
}

impl baton_common::service::ServiceConfig for Config {
    const ENV_PREFIX: &'static str = ENV_PREFIX;

    type Invalid = InvalidConfig;

    fn validate(&self) -> Result<(), InvalidConfig> {
        Config::validate(self)
    }

    fn incomplete(invalid: &InvalidConfig) -> bool {
        invalid.only_lacks_a_credential()
    }

    fn listen(&self) -> SocketAddr {
        self.listen
    }

    fn worker_threads(&self) -> usize {
        self.worker_threads
    }

    fn log(&self) -> &LogConfig {
        &self.log
    }
}

impl Config {
    /// Checks the whole config; returns the first problem, naming the field.
    /// The auth section comes last, so that a config which only lacks a
    /// credential has every other value checked
    /// ([`InvalidConfig::only_lacks_a_credential`]).
    pub fn validate(&self) -> Result<(), InvalidConfig> {
        self.limits.validate()?;
        self.telemetry.validate()?;
        self.server.validate()?;
        self.watches.validate()?;
        self.tls.validate()?;
        self.quotas.validate()?;
        if self.backend == Backend::Redis {
            self.redis.validate()?;
        }
        if self.health_interval.is_zero() {
            return Err(InvalidConfig::HealthInterval);
        }
        self.auth
            .validate(!self.tls.client_ca_file.as_os_str().is_empty())?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_products() {
        let c = Config::default();
        assert_eq!(c.limits.max_value_bytes, 1 << 20);
        assert_eq!(c.limits.max_trace_bytes, 64 << 20);
        assert_eq!(c.limits.max_trace_keys, 4096);
        assert_eq!(c.limits.max_key_len, 256);
        assert_eq!(c.limits.default_ttl, Duration::from_secs(3600));
        assert_eq!(c.limits.max_ttl, Duration::from_secs(7 * 86400));
        // Secure by default: a store must be told who may call it.
        let err = c.validate().expect_err("no credential");
        assert!(err.only_lacks_a_credential(), "{err}");
        assert!(err.to_string().contains("auth.service_token_file"), "{err}");
        let mut open = c.clone();
        open.auth.mode = crate::auth::AuthMode::None;
        open.validate().expect("explicitly open");
        let mut keyed = c;
        keyed.auth.service_token_file = "/run/secrets/token".into();
        keyed.validate().expect("with a token");
    }

    #[test]
    fn env_and_flags_override_and_bad_values_are_named() {
        let env = vec![
            ("BATON_STORE_BACKEND".to_owned(), "memory".to_owned()),
            (
                "BATON_STORE_LIMITS__DEFAULT_TTL".to_owned(),
                "10m".to_owned(),
            ),
        ];
        let c: Config =
            baton_common::config::load(None, ENV_PREFIX, env, &["limits.max_trace_keys=10".into()])
                .expect("load");
        assert_eq!(c.backend, Backend::Memory);
        assert_eq!(c.limits.default_ttl, Duration::from_secs(600));
        assert_eq!(c.limits.max_trace_keys, 10);

        let open = || {
            let mut c = Config::default();
            c.auth.mode = crate::auth::AuthMode::None;
            c
        };
        let mut bad = open();
        bad.limits.default_ttl = Duration::from_secs(8 * 86400);
        let err = bad.validate().expect_err("ttl");
        assert_eq!(
            err.to_string(),
            "limits.default_ttl must be positive and at most limits.max_ttl"
        );
        assert!(!err.only_lacks_a_credential());
        bad = open();
        bad.redis.url = "nope://x".into();
        assert!(
            bad.validate()
                .expect_err("url")
                .to_string()
                .contains("redis url")
        );
        // A bad value is named before a missing credential.
        bad.auth.mode = crate::auth::AuthMode::Keys;
        assert!(!bad.validate().expect_err("url").only_lacks_a_credential());
        bad = Config::default();
        bad.auth.reload = Duration::ZERO;
        assert_eq!(
            bad.validate().expect_err("reload").to_string(),
            "auth.reload must be positive"
        );
    }
}
