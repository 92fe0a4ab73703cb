//! The orchestrator's service config: defaults → TOML file →
//! `BATON_ORCH_*` environment → `--set` flags (see `baton_common::config`),
//! then [`Config::validate`]. Agents live in their own YAML file
//! (`agents_file`, see [`crate::catalog`]).

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use baton_common::quota::{Quotas, QuotasError};
use baton_common::{
    logging::LogConfig,
    otel::{TelemetryConfig, TelemetryError},
    server::{ServerOptions, ServerOptionsError},
    tls::TlsError,
};
use baton_store::{Limits as StoreLimits, LimitsError};

use baton_store::redis::{RedisConfig, RedisConfigError};

use crate::auth::{AuthConfig, AuthError};
pub use crate::client_tls::TlsClient;
pub use faces::{A2aConfig, ConsoleConfig, McpApprovalMode, McpConfig};

pub mod conversations;
mod faces;
pub mod quota;
pub mod schedules;
pub mod webhooks;

pub use quota::{Money, RunQuota};

/// `service.name` unless configured otherwise.
pub const SERVICE_NAME: &str = "baton-orchestrator";
use baton_client::balance::{DNS_SCHEME, Target, TargetError};
use serde::{Deserialize, Serialize};

/// Prefix of the environment variables the orchestrator reads.
pub const ENV_PREFIX: &str = "BATON_ORCH_";

/// Where the context store is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreMode {
    /// A `baton-context-store` service over gRPC (production).
    #[default]
    Remote,
    /// An in-memory store inside this process (one replica only).
    Memory,
}

/// The context store the orchestrator uses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// `remote` or `memory`.
    pub mode: StoreMode,
    /// The store's address (mode `remote`): `http://host:port` for one
    /// connection, or `dns:///host:port` to balance calls over every address
    /// the name resolves to (a Kubernetes headless Service), re-resolved
    /// every 5 s.
    pub endpoint: String,
    /// Deadline of one call to a remote store; a call that takes longer
    /// fails with `UNAVAILABLE`.
    #[serde(with = "baton_common::config::duration")]
    pub timeout: Duration,
    /// The store's limits (enforced here in mode `memory`; used to validate
    /// keys before calling a remote store).
    pub limits: StoreLimits,
    /// The service token presented to a remote store (its
    /// `auth.service_token_file`); re-read within 30 s of a change. Empty:
    /// none (a store with `auth.mode = "none"`).
    pub token_file: std::path::PathBuf,
    /// TLS towards a remote store (`https://` endpoints always speak it).
    pub tls: TlsClient,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            mode: StoreMode::Remote,
            endpoint: "http://127.0.0.1:50052".into(),
            timeout: Duration::from_secs(5),
            limits: StoreLimits::default(),
            token_file: std::path::PathBuf::new(),
            tls: TlsClient::default(),
        }
    }
}

/// Defaults and maxima of a run's limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunDefaults {
    /// max_depth when the request sets none.
    pub max_depth: u32,
    /// Largest max_depth a request may set.
    pub max_depth_limit: u32,
    /// max_turns when the request sets none.
    pub max_turns: u32,
    /// Largest max_turns a request may set.
    pub max_turns_limit: u32,
    /// Deadline of a run.
    #[serde(with = "baton_common::config::duration")]
    pub run_timeout: Duration,
    /// Deadline of one tool call.
    #[serde(with = "baton_common::config::duration")]
    pub tool_timeout: Duration,
    /// Deadline of one model call.
    #[serde(with = "baton_common::config::duration")]
    pub model_timeout: Duration,
    /// How long approvals and input requests wait.
    #[serde(with = "baton_common::config::duration")]
    pub approval_timeout: Duration,
    /// Longest any of the timeouts above (and a pipeline step's) may be set
    /// to by a request.
    #[serde(with = "baton_common::config::duration")]
    pub max_timeout: Duration,
    /// Most steps in one pipeline.
    pub max_pipeline_steps: usize,
    /// A pipeline's max_concurrency when the request sets none.
    pub pipeline_concurrency: usize,
    /// Largest max_concurrency a pipeline may set.
    pub max_pipeline_concurrency: usize,
    /// Most retries of one pipeline step.
    pub max_step_retries: u32,
    /// Largest `run_context_json` a request may send, in bytes (it is held
    /// for the whole run and, in the result, after it).
    pub max_run_context_bytes: usize,
    /// Most `filter.context_prefixes` (and `filter.kinds`) of one request.
    pub max_filter_entries: usize,
    /// Longest context prefix of a filter, in characters.
    pub max_filter_prefix_len: usize,
    /// Most WatchRun streams of one run open at once on a replica.
    pub max_watchers_per_run: usize,
    /// How long a finished run stays answerable by GetRun.
    #[serde(with = "baton_common::config::duration")]
    pub finished_retention: Duration,
    /// Most finished runs kept for GetRun; the oldest go first.
    pub max_finished_runs: usize,
    /// Most bytes of finished runs' results (output, run context, error
    /// message) kept for GetRun; the oldest go first.
    pub max_finished_bytes: u64,
    /// Most bytes one run's history may hold (its events, about as they
    /// are encoded, and, in memory mode, its recording): the event that
    /// takes a run over it is kept, then the run fails `RESOURCE_EXHAUSTED`
    /// naming this setting.
    pub max_history_bytes: u64,
    /// Where runs are kept: `memory` (in this process) or `redis` (their
    /// event logs and records in `runs.redis`, served by every replica).
    pub store: RunStoreMode,
    /// The Redis of `store = "redis"` (the orchestrator's own connection;
    /// it may be the context store's Redis).
    pub redis: RedisConfig,
    /// How long an ended run stays in Redis (GetRun, WatchRun, ListRuns).
    #[serde(with = "baton_common::config::duration")]
    pub retention: Duration,
    /// How long a replica owns a durable run without renewing its lease
    /// (renewed every third of it); a run whose lease lapsed is taken over
    /// by another replica.
    #[serde(with = "baton_common::config::duration")]
    pub lease: Duration,
    /// How long a run that only waits for people (a question open, no call
    /// working, no caller or watcher attached, no event) keeps its task
    /// before it is parked: a durable run then lives in Redis only, and an
    /// answer on any replica (or its deadline) resumes it; a memory-mode
    /// run keeps only its record, and an answer, a cancel or a deadline
    /// wakes it (see `run::park`).
    #[serde(with = "baton_common::config::duration")]
    pub park_after: Duration,
    /// This replica's name in the runs it owns; empty: the host name (the
    /// pod's, in Kubernetes) and a random suffix.
    pub replica: String,
}

impl RunDefaults {
    /// This replica's name in the runs it owns (see `replica`).
    pub fn replica_name(&self) -> String {
        if !self.replica.is_empty() {
            return self.replica.clone();
        }
        let host = std::env::var("HOSTNAME")
            .ok()
            .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "orchestrator".into());
        let suffix = uuid::Uuid::new_v4().simple().to_string();
        format!("{host}-{}", &suffix[..8])
    }
}

/// Where runs are kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStoreMode {
    /// In this process: a run and its events live and die with it.
    #[default]
    Memory,
    /// In Redis: every event is logged there before a client sees it, and
    /// any replica answers GetRun, ListRuns and WatchRun of any run.
    Redis,
}

impl Default for RunDefaults {
    fn default() -> Self {
        Self {
            max_depth: 4,
            max_depth_limit: 16,
            max_turns: 32,
            max_turns_limit: 1000,
            run_timeout: Duration::from_secs(3600),
            tool_timeout: Duration::from_secs(300),
            model_timeout: Duration::from_secs(120),
            approval_timeout: Duration::from_secs(600),
            max_timeout: Duration::from_secs(24 * 3600),
            max_pipeline_steps: 256,
            pipeline_concurrency: 8,
            max_pipeline_concurrency: 256,
            max_step_retries: 10,
            max_run_context_bytes: 1 << 20,
            max_filter_entries: 64,
            max_filter_prefix_len: 1024,
            max_watchers_per_run: 64,
            finished_retention: Duration::from_secs(3600),
            max_finished_runs: 10_000,
            max_finished_bytes: 256 << 20,
            max_history_bytes: 128 << 20,
            store: RunStoreMode::Memory,
            redis: RedisConfig::default(),
            retention: Duration::from_secs(24 * 3600),
            lease: Duration::from_secs(5),
            park_after: Duration::from_secs(60),
            replica: String::new(),
        }
    }
}

/// The orchestrator's config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// gRPC address (gRPC, gRPC-web, health, reflection).
    pub listen: SocketAddr,
    /// The agents file (YAML).
    pub agents_file: PathBuf,
    /// How often the agents file is looked at for changes (an edit, a
    /// Kubernetes ConfigMap update): a changed file is checked and, when
    /// valid, taken for the runs started from then on (see
    /// `agents_watch`); `0s` never looks again.
    #[serde(with = "baton_common::config::duration")]
    pub agents_reload: Duration,
    /// The context store.
    pub store: StoreConfig,
    /// Run limits.
    pub runs: RunDefaults,
    /// How long running runs may take to finish once shutdown begins (new
    /// runs are refused from the start); runs still going then are
    /// cancelled, and their streams get `RUN_FLUSH` more.
    #[serde(with = "baton_common::config::duration")]
    pub shutdown_grace: Duration,
    /// Runtime worker threads: 0 means one per core, 1 a current-thread
    /// runtime.
    pub worker_threads: usize,
    /// Logging.
    pub log: LogConfig,
    /// Traces (OTLP) and metrics (Prometheus).
    pub telemetry: TelemetryConfig,
    /// The other replicas, for run-scoped calls that land on the wrong one
    /// (see [`crate::peers`]).
    pub peers: PeersConfig,
    /// Client authentication (see [`crate::auth`]).
    pub auth: AuthConfig,
    /// TLS of the gRPC port (off unless `cert_file` and `key_file` are set).
    pub tls: baton_common::tls::TlsConfig,
    /// Per-tenant quotas: `quotas.default` and `quotas.tenants.<name>`
    /// (see `run::quota`).
    pub quotas: QuotaConfig,
    /// Connection limits of the gRPC server (concurrent streams, HTTP/2
    /// keepalive).
    pub server: ServerOptions,
    /// The web console (see `http::console`).
    pub console: ConsoleConfig,
    /// The A2A face: which agents other frameworks' agents may call (see
    /// `crate::a2a`).
    pub a2a: A2aConfig,
    /// The MCP face: which agents MCP clients may call as tools (see
    /// `crate::mcp`).
    pub mcp: McpConfig,
    /// Conversations (see `crate::conversation`).
    pub conversations: conversations::ConversationConfig,
    /// Webhooks: where deliveries may go and how they are tried (see
    /// `crate::webhook`).
    pub webhooks: webhooks::WebhookConfig,
    /// Scheduled runs: the shortest interval, when a tick is missed (see
    /// `crate::schedule`).
    pub schedules: schedules::ScheduleConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([0, 0, 0, 0], 50051)),
            agents_file: PathBuf::from("deploy/config/agents.yaml"),
            agents_reload: Duration::from_secs(1),
            store: StoreConfig::default(),
            runs: RunDefaults::default(),
            shutdown_grace: Duration::from_secs(30),
            worker_threads: 0,
            log: LogConfig::default(),
            telemetry: TelemetryConfig {
                metrics_listen: "0.0.0.0:9464".into(),
                ..TelemetryConfig::default()
            },
            peers: PeersConfig::default(),
            auth: AuthConfig::default(),
            tls: Default::default(),
            quotas: Default::default(),
            server: ServerOptions::default(),
            console: ConsoleConfig::default(),
            a2a: A2aConfig::default(),
            mcp: McpConfig::default(),
            conversations: Default::default(),
            webhooks: Default::default(),
            schedules: Default::default(),
        }
    }
}

impl baton_common::service::ServiceConfig for Config {
    const ENV_PREFIX: &'static str = ENV_PREFIX;

    type Invalid = InvalidConfig;

    fn validate(&self) -> Result<(), InvalidConfig> {
        Config::validate(self)
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

/// Why the orchestrator's config is refused: the first problem, its
/// message naming the field (the sections' own errors keep their
/// messages).
#[derive(Debug, thiserror::Error)]
pub enum InvalidConfig {
    /// `store.limits`.
    #[error("store.{0}")]
    StoreLimits(#[source] LimitsError),
    /// `telemetry`.
    #[error(transparent)]
    Telemetry(#[from] TelemetryError),
    /// `peers`.
    #[error(transparent)]
    Peers(#[from] PeersError),
    /// `auth`.
    #[error(transparent)]
    Auth(#[from] AuthError),
    /// `tls`.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// `quotas`.
    #[error(transparent)]
    Quotas(#[from] QuotasError),
    /// `server`.
    #[error(transparent)]
    Server(#[from] ServerOptionsError),
    /// `conversations`.
    #[error(transparent)]
    Conversations(#[from] conversations::ConversationConfigError),
    /// `webhooks`.
    #[error(transparent)]
    Webhooks(#[from] webhooks::WebhookConfigError),
    /// `schedules`.
    #[error(transparent)]
    Schedules(#[from] schedules::ScheduleConfigError),
    /// `store.timeout` is zero.
    #[error("store.timeout must be positive")]
    StoreTimeout,
    /// `console.trace_url` names no `{trace_id}`.
    #[error(
        "console.trace_url must contain {{trace_id}} (e.g. https://jaeger.example/trace/{{trace_id}})"
    )]
    TraceUrl,
    /// `store.endpoint` is not a target (store `remote`).
    #[error("store.endpoint: {0}")]
    StoreEndpoint(#[source] TargetError),
    /// `runs.redis` (run store `redis`).
    #[error("runs.{0}")]
    RunsRedis(#[source] RedisConfigError),
    /// `runs.retention` is zero (run store `redis`).
    #[error("runs.retention must be positive")]
    Retention,
    /// `runs.lease` is not longer than a Redis call may take.
    #[error(
        "runs.lease ({lease:?}) must be longer than runs.redis.timeout ({timeout:?}): a renewal may take that long"
    )]
    Lease {
        /// `runs.lease`.
        lease: Duration,
        /// `runs.redis.timeout`.
        timeout: Duration,
    },
    /// `runs.max_depth` over its limit.
    #[error("runs.max_depth must be at most runs.max_depth_limit")]
    MaxDepth,
    /// Pipeline steps or concurrency zero, or concurrency over its limit.
    #[error(
        "runs.max_pipeline_steps and runs.pipeline_concurrency must be positive, and pipeline_concurrency at most max_pipeline_concurrency"
    )]
    Pipelines,
    /// One of the bounds on filters, watchers and finished runs is zero.
    #[error(
        "runs.max_filter_entries, max_filter_prefix_len, max_watchers_per_run, max_finished_runs, max_history_bytes and finished_retention must be positive"
    )]
    RunBounds,
    /// `runs.max_turns` is zero or over its limit.
    #[error("runs.max_turns must be between 1 and runs.max_turns_limit")]
    MaxTurns,
    /// A run timeout (`run_timeout`, `tool_timeout`, `model_timeout`,
    /// `approval_timeout`) is zero or over `runs.max_timeout`.
    #[error("runs.{0} must be positive and at most runs.max_timeout")]
    Timeout(&'static str),
}

impl Config {
    /// Checks the config; returns the first problem, naming the field.
    pub fn validate(&self) -> Result<(), InvalidConfig> {
        self.store
            .limits
            .validate()
            .map_err(InvalidConfig::StoreLimits)?;
        self.telemetry.validate()?;
        self.peers.validate()?;
        self.auth.validate()?;
        self.tls.validate()?;
        self.quotas.validate()?;
        self.conversations.validate()?;
        self.webhooks.validate()?;
        self.schedules.validate()?;
        self.server.validate()?;
        if !self.console.trace_url.is_empty() && !self.console.trace_url.contains("{trace_id}") {
            return Err(InvalidConfig::TraceUrl);
        }
        if self.store.timeout.is_zero() {
            return Err(InvalidConfig::StoreTimeout);
        }
        if self.store.mode == StoreMode::Remote {
            baton_client::balance::check_target(&self.store.endpoint)
                .map_err(InvalidConfig::StoreEndpoint)?;
        }
        let r = &self.runs;
        if r.store == RunStoreMode::Redis {
            r.redis.validate().map_err(InvalidConfig::RunsRedis)?;
            if r.retention.is_zero() {
                return Err(InvalidConfig::Retention);
            }
            if r.lease <= r.redis.timeout {
                return Err(InvalidConfig::Lease {
                    lease: r.lease,
                    timeout: r.redis.timeout,
                });
            }
        }
        if r.max_depth > r.max_depth_limit {
            return Err(InvalidConfig::MaxDepth);
        }
        if r.max_pipeline_steps == 0
            || r.pipeline_concurrency == 0
            || r.pipeline_concurrency > r.max_pipeline_concurrency
        {
            return Err(InvalidConfig::Pipelines);
        }
        if r.max_filter_entries == 0
            || r.max_filter_prefix_len == 0
            || r.max_watchers_per_run == 0
            || r.max_finished_runs == 0
            || r.max_history_bytes == 0
            || r.finished_retention.is_zero()
        {
            return Err(InvalidConfig::RunBounds);
        }
        if r.max_turns == 0 || r.max_turns > r.max_turns_limit {
            return Err(InvalidConfig::MaxTurns);
        }
        for (name, d) in [
            ("run_timeout", r.run_timeout),
            ("tool_timeout", r.tool_timeout),
            ("model_timeout", r.model_timeout),
            ("approval_timeout", r.approval_timeout),
        ] {
            if d.is_zero() || d > r.max_timeout {
                return Err(InvalidConfig::Timeout(name));
            }
        }
        Ok(())
    }
}

/// The quotas section of the config.
pub type QuotaConfig = Quotas<RunQuota>;

/// The `peers` section of the config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PeersConfig {
    /// The replicas of this orchestrator, this one included (it is asked
    /// too, harmlessly): `host:port` or `dns:///host:port`, each resolved to
    /// every address of the name at every forwarded call. Empty: off (one
    /// replica, or a balancer that keeps a run's calls on its replica).
    pub endpoints: Vec<String>,
    /// How long a peer may take to answer a forwarded call (for WatchRun,
    /// to start the stream; the stream itself lasts as long as the run).
    #[serde(with = "baton_common::config::duration")]
    pub timeout: Duration,
    /// TLS towards the replicas (when their port speaks TLS, `tls.*`): on
    /// (`enabled`), each address is checked against the endpoint's name,
    /// with `ca_file` (or the system's roots); `cert_file`/`key_file`
    /// present a client certificate.
    pub tls: crate::client_tls::TlsClient,
}

impl Default for PeersConfig {
    fn default() -> Self {
        Self {
            endpoints: Vec::new(),
            timeout: Duration::from_secs(2),
            tls: Default::default(),
        }
    }
}

/// Why the `peers` section is refused; the message names the field.
#[derive(Debug, thiserror::Error)]
pub enum PeersError {
    /// An endpoint is not a target with a host and a port.
    #[error("peers.endpoints[{index}]: {source}")]
    Endpoint {
        /// Its index in `peers.endpoints`.
        index: usize,
        /// What is wrong with it.
        source: TargetError,
    },
    /// `peers.timeout` is zero.
    #[error("peers.timeout must be positive")]
    Timeout,
}

impl PeersConfig {
    /// Checks the section.
    pub fn validate(&self) -> Result<(), PeersError> {
        for (index, e) in self.endpoints.iter().enumerate() {
            host_port(e).map_err(|source| PeersError::Endpoint { index, source })?;
        }
        if self.timeout.is_zero() {
            return Err(PeersError::Timeout);
        }
        Ok(())
    }
}

/// The name and port of a peers endpoint, parsed as the client parses
/// targets; a bare `host:port` is a name to resolve (as `dns:///`).
pub fn host_port(endpoint: &str) -> Result<(String, u16), TargetError> {
    let target = if endpoint.contains("://") {
        Target::parse(endpoint)?
    } else {
        Target::parse(&format!("{DNS_SCHEME}{endpoint}"))?
    };
    target.host_port().map_err(|source| TargetError::HostPort {
        target: endpoint.to_owned(),
        source,
    })
}

/// Server limits on pipeline specs.
#[derive(Debug, Clone, Copy, Default)]
pub struct PipelineLimits {
    /// Most steps in one pipeline.
    pub max_steps: usize,
    /// max_concurrency when the request sets none.
    pub default_concurrency: usize,
    /// Largest max_concurrency.
    pub max_concurrency: usize,
    /// Most retries of one step.
    pub max_retries: u32,
    /// Longest step timeout; also the default.
    pub max_step_timeout: Duration,
}

#[cfg(test)]
mod tests {
    use super::{Config, InvalidConfig};

    #[test]
    fn a_runs_history_bound_is_refused_at_zero_and_taken_at_one_byte() {
        let mut config = Config::default();
        config.runs.max_history_bytes = 0;
        let err = config.validate().expect_err("zero");
        assert!(matches!(err, InvalidConfig::RunBounds));
        assert!(err.to_string().contains("max_history_bytes"), "{err}");
        config.runs.max_history_bytes = 1;
        config.validate().expect("one byte");
    }
}
