//! Logging set-up, in one function that returns a guard.

use serde::{Deserialize, Serialize};
use tracing_subscriber::{EnvFilter, fmt, prelude::*};

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, for log pipelines.
    Json,
}

/// Logging settings shared by every service config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// `text` or `json`.
    pub format: LogFormat,
    /// An `EnvFilter` directive such as `info` or `baton=debug,info`.
    /// `RUST_LOG`, when set, wins.
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            format: LogFormat::Text,
            level: "info".into(),
        }
    }
}

/// Keeps telemetry alive; dropping it flushes what is buffered.
#[must_use = "telemetry stops when the guard is dropped"]
pub struct TelemetryGuard {
    _private: (),
}

/// Installs the global logger, writing to stdout. Call once, from `main`.
///
/// Returns an error when the filter directive is invalid or a logger is
/// already installed.
///
/// Lines logged inside a run carry the run's `run_id`, `trace_id` and the
/// `span_id` of the context they were logged in: as fields of the `span`
/// object in JSON, as `context{…}` in text.
pub fn init(service: &str, log: &LogConfig) -> Result<TelemetryGuard, String> {
    init_to(service, log, std::io::stdout)
}

/// Like [`init`], writing to `writer` (tests capture the lines).
pub fn init_to<W>(service: &str, log: &LogConfig, writer: W) -> Result<TelemetryGuard, String>
where
    W: for<'w> fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    let filter = match std::env::var("RUST_LOG") {
        Ok(v) if !v.is_empty() => EnvFilter::try_new(v),
        _ => EnvFilter::try_new(&log.level),
    }
    .map_err(|e| format!("invalid log level directive: {e}"))?;
    let registry = tracing_subscriber::registry().with(filter);
    let result = match log.format {
        LogFormat::Text => registry
            .with(fmt::layer().with_target(true).with_writer(writer))
            .try_init(),
        LogFormat::Json => registry
            .with(
                fmt::layer()
                    .with_writer(writer)
                    .json()
                    .flatten_event(true)
                    .with_current_span(true),
            )
            .try_init(),
    };
    result.map_err(|e| format!("cannot install logger: {e}"))?;
    tracing::debug!(service, "telemetry initialised");
    Ok(TelemetryGuard { _private: () })
}
