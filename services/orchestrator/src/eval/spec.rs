//! A dataset's cases as the file writes them (JSON Lines or YAML), and
//! what every case defaults to; `super::dataset` parses and checks them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::score::{Order, ScorerSpec};

/// Where a case's tool calls are answered from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolsMode {
    /// Tools run for real (the default for a case without a recording).
    #[default]
    Live,
    /// Tool calls outside Baton are answered from the case's recording; a
    /// call the recording lacks fails the case.
    Recorded,
    /// As `recorded`, and a call the recording lacks goes live.
    LiveWhenUnrecorded,
}

/// A case's recording: the run it was saved from, or the calls inline.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RecordingSpec {
    /// The run whose recording answers (read through the run store).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub run_id: String,
    /// The recorded calls, inline (the dataset outlives the run).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<RecordedCall>,
}

/// One recorded call of a tool outside Baton.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RecordedCall {
    /// The tool.
    pub tool: String,
    /// Its arguments.
    pub arguments: Value,
    /// What it returned.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub result: String,
    /// Its error, when it failed.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub error: String,
}

/// A tool's misbehaviour injected into a case (on top of its recording or
/// live tools).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Fault {
    /// The tool it hits.
    pub tool: String,
    /// The call fails with this error.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub error: String,
    /// The answer comes this much later.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    /// The call times out (after `delay_ms`, else at once).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub timeout: bool,
}

/// Which answers of a case of several messages are scored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scored {
    /// Only the last answer.
    #[default]
    Last,
    /// Each answer (the case passes when every one does).
    Each,
}

/// A case as the file writes it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CaseSpec {
    /// Its id; empty: `line-N`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub id: String,
    /// The user's input.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
    /// Several user messages, run as one conversation.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<String>,
    /// Which answers are scored.
    #[serde(skip_serializing_if = "is_default")]
    pub score: Scored,
    /// The run context (a JSON object).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<Map<String, Value>>,
    /// The expected answer (text, a number, or JSON).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected: Option<Value>,
    /// The expected tool calls.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_tools: Option<TrajectorySpec>,
    /// Labels, kept with its result.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Its target (agent or group); none: the experiment's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Its target when a pipeline: an object of a pipeline file's fields,
    /// its `input` slot the case's input.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<Value>,
    /// Scorers of this case, after the dataset's.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub scorers: Vec<ScorerSpec>,
    /// Where tool calls are answered from; none: `recorded` when the case
    /// has a recording, else `live`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<ToolsMode>,
    /// Its recording.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recording: Option<RecordingSpec>,
    /// Tools' misbehaviour injected.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<Fault>,
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

/// Expected tool calls: a list (in order), or the list with how it is
/// matched.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TrajectorySpec {
    /// The calls, in order.
    Calls(Vec<CallSpec>),
    /// The calls and how they are matched.
    Matched(MatchedSpec),
}

/// Expected calls with how they are matched.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MatchedSpec {
    /// `exact`, `in_order` (the default), `any_order` or `subset`.
    pub order: Order,
    /// The calls.
    pub calls: Vec<CallSpec>,
    /// Only the calls of the run's top-level agent count.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub top_level_only: bool,
}

/// An expected call.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CallSpec {
    /// The tool.
    pub tool: String,
    /// Argument matchers by argument name; arguments not named are not
    /// checked.
    #[serde(skip_serializing_if = "Map::is_empty")]
    pub args: Map<String, Value>,
    /// No argument besides those named.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub args_exact: bool,
}

/// What every case of a dataset defaults to.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Defaults {
    /// The target of cases that name none, unless the request names one.
    pub agent: Option<String>,
    /// Or a pipeline (a pipeline file's fields) as that target.
    pub pipeline: Option<Value>,
    /// Scorers of every case.
    pub scorers: Vec<ScorerSpec>,
    /// Where tool calls are answered from.
    pub tools: Option<ToolsMode>,
}
