//! Logging set-up, in one function that returns a guard.

use serde::{Deserialize, Serialize};
use tracing_subscriber::{
    EnvFilter, filter::filter_fn, fmt, fmt::writer::BoxMakeWriter, prelude::*,
};

use crate::audit;

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
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
    /// Where the audit log goes (one JSON line per call that starts,
    /// answers or cancels a run or writes the store; see
    /// `baton_common::audit`): `stdout`, `stderr`, a file (appended), or
    /// `off`. Whatever `level` says, and never mixed into the other lines
    /// when it has a file of its own.
    pub audit: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            format: LogFormat::Text,
            level: "info".into(),
            audit: "stdout".into(),
        }
    }
}

/// Why logging cannot be set up; the message names the setting.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// `log.level` (or `RUST_LOG`) is not a filter directive.
    #[error("invalid log level directive: {0}")]
    Level(#[from] tracing_subscriber::filter::ParseError),
    /// The audit log's file cannot be opened.
    #[error("log.audit {path}: {source}")]
    Audit {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A logger is already installed.
    #[error("cannot install logger: {0}")]
    Install(#[from] tracing_subscriber::util::TryInitError),
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
///
/// Text lines are coloured only when stdout is a terminal and `NO_COLOR` is
/// not set.
pub fn init(service: &str, log: &LogConfig) -> Result<TelemetryGuard, LogError> {
    use std::io::IsTerminal;
    let ansi = std::io::stdout().is_terminal() && no_color_unset();
    install(service, log, std::io::stdout, ansi)
}

/// Like [`init`], writing to stderr (a command whose stdout is its output:
/// `baton up`), coloured only when stderr is a terminal.
pub fn init_stderr(service: &str, log: &LogConfig) -> Result<TelemetryGuard, LogError> {
    use std::io::IsTerminal;
    let ansi = std::io::stderr().is_terminal() && no_color_unset();
    install(service, log, std::io::stderr, ansi)
}

fn no_color_unset() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Like [`init_stderr`] for a person at a terminal of `width` columns
/// (`baton up`): with `log.format = "text"`, one line per event of at most
/// `width` columns — the time, the level, the message, then its fields
/// with ids shortened to their last 8 characters (`run_id=…9f3a6c21`) —
/// cut with `…` at the width; `json` stays JSON lines.
pub fn init_stderr_for_people(
    service: &str,
    log: &LogConfig,
    width: usize,
) -> Result<TelemetryGuard, LogError> {
    if log.format == LogFormat::Json {
        return init_stderr(service, log);
    }
    let filter = level_filter(log)?;
    let audit_layer = audit_layer(&log.audit)?;
    let not_audit = filter_fn(|m| m.target() != audit::TARGET);
    tracing_subscriber::registry()
        .with(audit_layer)
        .with(
            fmt::layer()
                .event_format(Person { width })
                .with_writer(std::io::stderr)
                .with_filter(not_audit)
                .with_filter(filter),
        )
        .try_init()?;
    tracing::debug!(service, "telemetry initialised");
    Ok(TelemetryGuard { _private: () })
}

/// Log lines for a person at a terminal (see [`init_stderr_for_people`]).
struct Person {
    width: usize,
}

/// An event's message and fields, as text.
#[derive(Default)]
struct Fields {
    message: String,
    fields: Vec<(&'static str, String)>,
}

impl tracing::field::Visit for Fields {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_owned();
        } else {
            self.fields.push((field.name(), value.to_owned()));
        }
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        let text = format!("{value:?}");
        let text = text
            .strip_prefix('"')
            .and_then(|t| t.strip_suffix('"'))
            .map_or(text.clone(), str::to_owned);
        self.record_str(field, &text);
    }
}

/// An id shortened to the part that tells ids apart: the last 8
/// characters of a UUID or of a 32-digit trace id (their start is a time,
/// or alike); anything else as it is.
fn short_id(value: &str) -> std::borrow::Cow<'_, str> {
    let hex = |s: &str| s.chars().all(|c| c.is_ascii_hexdigit() || c == '-');
    if (value.len() == 36 || value.len() == 32) && hex(value) {
        format!("…{}", &value[value.len() - 8..]).into()
    } else {
        value.into()
    }
}

impl<S, N> fmt::FormatEvent<S, N> for Person
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &fmt::FmtContext<'_, S, N>,
        mut writer: fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let (h, m, s) = ((secs / 3600) % 24, (secs / 60) % 60, secs % 60);
        let mut line = format!(
            "{h:02}:{m:02}:{s:02} {:<5} {}",
            event.metadata().level(),
            fields.message
        );
        for (k, v) in &fields.fields {
            line.push_str(&format!(" {k}={}", short_id(v)));
        }
        writeln!(writer, "{}", cut(&line, self.width))
    }
}

/// `line` cut to `width` characters, ending in `…` when it was longer.
fn cut(line: &str, width: usize) -> String {
    if line.chars().count() <= width {
        return line.to_owned();
    }
    let mut out: String = line.chars().take(width.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// Like [`init`], writing to `writer` (tests capture the lines).
pub fn init_to<W>(service: &str, log: &LogConfig, writer: W) -> Result<TelemetryGuard, LogError>
where
    W: for<'w> fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    install(service, log, writer, true)
}

fn install<W>(
    service: &str,
    log: &LogConfig,
    writer: W,
    ansi: bool,
) -> Result<TelemetryGuard, LogError>
where
    W: for<'w> fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    let filter = level_filter(log)?;
    let audit_layer = audit_layer(&log.audit)?;
    let not_audit = filter_fn(|m| m.target() != audit::TARGET);
    let registry = tracing_subscriber::registry().with(audit_layer);
    let result = match log.format {
        LogFormat::Text => registry
            .with(
                fmt::layer()
                    .with_target(true)
                    .with_ansi(ansi)
                    .with_writer(writer)
                    .with_filter(not_audit)
                    .with_filter(filter),
            )
            .try_init(),
        LogFormat::Json => registry
            .with(
                fmt::layer()
                    .with_writer(writer)
                    .json()
                    .flatten_event(true)
                    .with_current_span(true)
                    .with_filter(not_audit)
                    .with_filter(filter),
            )
            .try_init(),
    };
    result?;
    tracing::debug!(service, "telemetry initialised");
    Ok(TelemetryGuard { _private: () })
}

/// The level filter: `RUST_LOG` when set, else `log.level`.
fn level_filter(log: &LogConfig) -> Result<EnvFilter, LogError> {
    Ok(match std::env::var("RUST_LOG") {
        Ok(v) if !v.is_empty() => EnvFilter::try_new(v),
        _ => EnvFilter::try_new(&log.level),
    }?)
}

/// The audit lines' layer: JSON, their own filter (not the level's), their
/// own destination (none when `off`).
fn audit_layer<S>(
    destination: &str,
) -> Result<Option<impl tracing_subscriber::Layer<S> + Send + Sync + 'static>, LogError>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    Ok(audit_writer(destination)?.map(|w| {
        fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .with_writer(w)
            .with_filter(filter_fn(|m| m.target() == audit::TARGET))
    }))
}

/// The writer of the audit log's destination (see [`LogConfig::audit`]).
fn audit_writer(destination: &str) -> Result<Option<BoxMakeWriter>, LogError> {
    Ok(match destination {
        "off" => None,
        "" | "stdout" => Some(BoxMakeWriter::new(std::io::stdout)),
        "stderr" => Some(BoxMakeWriter::new(std::io::stderr)),
        path => {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|source| LogError::Audit {
                    path: path.to_owned(),
                    source,
                })?;
            Some(BoxMakeWriter::new(std::sync::Arc::new(file)))
        }
    })
}
