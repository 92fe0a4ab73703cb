//! The agents file's `schedules:`: runs started at a cron expression's
//! ticks or every interval, by name (their ids are `file:<name>`). Kept
//! here as written; `crate::schedule::file` makes each the
//! CreateScheduleRequest the API would take, so both are checked the same
//! way.

use serde::Deserialize;

/// A schedule in the agents file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleSpec {
    /// Its tenant (`""`: the default tenant).
    #[serde(default)]
    pub tenant: String,
    /// What it is for.
    #[serde(default)]
    pub description: String,
    /// The agent or group it runs (or `pipeline`).
    #[serde(default)]
    pub agent: String,
    /// The agent's input at each tick.
    #[serde(default)]
    pub input: String,
    /// The pipeline it runs, as a pipeline file (or `agent`).
    #[serde(default)]
    pub pipeline: Option<serde_json::Value>,
    /// The run context, a map.
    #[serde(default)]
    pub run_context: Option<serde_json::Value>,
    /// A cron expression (five fields, or six with seconds first).
    #[serde(default)]
    pub cron: String,
    /// The IANA time zone of `cron` (default UTC).
    #[serde(default)]
    pub time_zone: String,
    /// Instead of `cron`: a run every this long (`15m`).
    #[serde(default)]
    pub every: Option<String>,
    /// No tick after this time (RFC 3339).
    #[serde(default)]
    pub end_at: Option<String>,
    /// `skip` (default), `queue_one` or `allow`.
    #[serde(default)]
    pub overlap: Option<String>,
    /// `skip` (default) or `run_once`.
    #[serde(default)]
    pub missed: Option<String>,
    /// Declared paused.
    #[serde(default)]
    pub paused: bool,
}
