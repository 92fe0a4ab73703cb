//! Plumbing shared by Baton's services, so each service's `main.rs` stays thin
//! and both behave the same at 3 a.m.:
//!
//! - [`config`]: one loader for every service config: defaults → file (TOML) →
//!   environment (`BATON_<SERVICE>_…`) → flags, then the service validates it.
//! - [`logging`]: logging set-up in one function that returns a guard
//!   (spans and their export are [`otel`]'s).
//! - [`otel`]: the tracer provider of a service instance, OTLP export and
//!   W3C trace context in gRPC metadata.
//! - [`metrics`]: Prometheus text on `/metrics`.
//! - [`shutdown`]: SIGTERM/SIGINT into a `CancellationToken`.
//! - [`service`]: the `main` of every service binary.
//! - [`server`]: the gRPC server every service runs: health, reflection (v1 and
//!   v1alpha), gRPC-web, TCP_NODELAY, graceful shutdown.
//! - [`auth`]: tenants, API keys files and service tokens (reloaded files).
//! - [`quota`]: per-tenant quotas in a config (a default, per-tenant overrides).
//! - [`ids`]: validated identifiers shared by the services (trace ids).
//! - [`tls`]: TLS for the gRPC servers, certificate files reloaded on change.
//! - [`runtime`]: the Tokio runtime a service runs on, sized by its config.

pub mod audit;
pub mod auth;
pub mod config;
pub mod ids;
pub mod logging;
pub mod metrics;
pub mod otel;
pub mod quota;
pub mod runtime;
pub mod server;
pub mod service;
pub mod shutdown;
pub mod tls;
