//! The text form of a pipeline: what `baton pipeline FILE.yaml` reads and
//! what an agent passes to the `run_pipeline` tool (as JSON). Both become a
//! [`pb::RunPipelineRequest`], so they validate the same way.

use std::{collections::HashMap, time::Duration};

use baton_common::config::duration::DurationError;
use baton_proto::v1 as pb;
use serde::Deserialize;
use serde_json::{Value, json};

/// Why a pipeline file makes no request; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PipelineFileError {
    /// `mode` is none of the modes.
    #[error("mode: {0:?} is not sequential, parallel or dag")]
    Mode(String),
    /// `policy` is none of the policies.
    #[error("policy: {0:?} is not fail, continue or best_effort")]
    Policy(String),
    /// A step's `timeout` is not a duration.
    #[error("steps[{step}].timeout: {source}")]
    StepTimeout {
        /// The step's index.
        step: usize,
        /// What is wrong with it.
        source: DurationError,
    },
}

/// A pipeline written as YAML or JSON.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineFile {
    /// Its name, for events.
    #[serde(default)]
    pub name: String,
    /// `sequential` (default), `parallel` or `dag`.
    #[serde(default)]
    pub mode: Option<String>,
    /// `fail` (default), `continue` or `best_effort`.
    #[serde(default)]
    pub policy: Option<String>,
    /// Most steps at once.
    #[serde(default)]
    pub max_concurrency: Option<u32>,
    /// Keep the pipeline's slots when it ends.
    #[serde(default)]
    pub keep_context: bool,
    /// Slots written before the first step.
    #[serde(default)]
    pub initial_slots: HashMap<String, String>,
    /// The steps.
    pub steps: Vec<StepFile>,
}

/// One step of a [`PipelineFile`].
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepFile {
    /// Unique id, `[a-z0-9_-]{1,64}`.
    pub id: String,
    /// The agent or group that runs it.
    pub agent: String,
    /// The task, `{{key}}` replaced by that slot's value.
    #[serde(default)]
    pub task: String,
    /// Slots handed to the agent as named inputs.
    #[serde(default)]
    pub input_from: Vec<String>,
    /// The slot receiving the output.
    #[serde(default)]
    pub output_to: String,
    /// Steps that must succeed first (mode dag).
    #[serde(default)]
    pub depends_on: Vec<String>,
    /// Whether its failure can fail the pipeline (default true).
    #[serde(default)]
    pub required: Option<bool>,
    /// Deadline of one attempt, like `30s` or `5m`.
    #[serde(default)]
    pub timeout: Option<String>,
    /// Further attempts after a failure.
    #[serde(default)]
    pub retries: u32,
}

impl PipelineFile {
    /// The request this file describes (approval mode, limits and filter
    /// left at their defaults). Errors name the field.
    pub fn into_request(self) -> Result<pb::RunPipelineRequest, PipelineFileError> {
        let mode = match self.mode.as_deref() {
            None | Some("sequential") => pb::PipelineMode::Sequential,
            Some("parallel") => pb::PipelineMode::Parallel,
            Some("dag") => pb::PipelineMode::Dag,
            Some(other) => return Err(PipelineFileError::Mode(other.to_owned())),
        };
        let policy = match self.policy.as_deref() {
            None | Some("fail") => pb::FailurePolicy::Fail,
            Some("continue") => pb::FailurePolicy::Continue,
            Some("best_effort") => pb::FailurePolicy::BestEffort,
            Some(other) => return Err(PipelineFileError::Policy(other.to_owned())),
        };
        let steps = self
            .steps
            .into_iter()
            .enumerate()
            .map(|(i, s)| {
                let timeout = s
                    .timeout
                    .map(|t| {
                        baton_common::config::duration::parse(&t)
                            .map_err(|source| PipelineFileError::StepTimeout { step: i, source })
                    })
                    .transpose()?
                    .map(|d: Duration| baton_proto::wkt::Duration {
                        seconds: d.as_secs() as i64,
                        nanos: d.subsec_nanos() as i32,
                    });
                Ok(pb::PipelineStep {
                    id: s.id,
                    agent: s.agent,
                    task: s.task,
                    input_from: s.input_from,
                    output_to: s.output_to,
                    depends_on: s.depends_on,
                    required: s.required,
                    timeout,
                    retries: s.retries,
                })
            })
            .collect::<Result<Vec<_>, PipelineFileError>>()?;
        Ok(pb::RunPipelineRequest {
            pipeline: Some(pb::PipelineSpec {
                name: self.name,
                steps,
                mode: mode as i32,
                policy: policy as i32,
                max_concurrency: self.max_concurrency,
            }),
            initial_slots: self.initial_slots,
            keep_context: self.keep_context,
            ..Default::default()
        })
    }

    /// The JSON schema of a pipeline, as the `run_pipeline` tool's arguments.
    pub fn json_schema() -> Value {
        let strings = json!({"type": "array", "items": {"type": "string"}});
        json!({
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "mode": {"type": "string", "enum": ["sequential", "parallel", "dag"]},
                "policy": {"type": "string", "enum": ["fail", "continue", "best_effort"]},
                "max_concurrency": {"type": "integer", "minimum": 1},
                "keep_context": {"type": "boolean"},
                "initial_slots": {"type": "object", "additionalProperties": {"type": "string"}},
                "steps": {"type": "array", "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string", "pattern": "^[a-z0-9_-]{1,64}$"},
                        "agent": {"type": "string"},
                        "task": {"type": "string", "description": "{{key}} is replaced by that slot's value"},
                        "input_from": strings,
                        "output_to": {"type": "string"},
                        "depends_on": strings,
                        "required": {"type": "boolean"},
                        "timeout": {"type": "string", "description": "like 30s or 5m"},
                        "retries": {"type": "integer", "minimum": 0}
                    },
                    "required": ["id", "agent"],
                    "additionalProperties": false
                }}
            },
            "required": ["steps"],
            "additionalProperties": false
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dag_file_becomes_a_request() {
        let file: PipelineFile = serde_json::from_value(json!({
            "mode": "dag",
            "policy": "best_effort",
            "initial_slots": {"topic": "tides"},
            "steps": [
                {"id": "a", "agent": "researcher", "task": "{{topic}}", "output_to": "notes", "timeout": "30s"},
                {"id": "b", "agent": "writer", "input_from": ["notes"], "retries": 2}
            ]
        }))
        .expect("valid");
        let r = file.into_request().expect("valid");
        let spec = r.pipeline.expect("valid");
        assert_eq!(spec.mode, pb::PipelineMode::Dag as i32);
        assert_eq!(spec.policy, pb::FailurePolicy::BestEffort as i32);
        assert_eq!(spec.steps[0].timeout.expect("valid").seconds, 30);
        assert_eq!(spec.steps[1].retries, 2);
        assert_eq!(r.initial_slots["topic"], "tides");
    }

    #[test]
    fn bad_fields_are_named() {
        let bad_mode: PipelineFile =
            serde_json::from_value(json!({"mode": "loop", "steps": []})).expect("valid");
        assert_eq!(
            bad_mode.into_request().expect_err("invalid").to_string(),
            r#"mode: "loop" is not sequential, parallel or dag"#
        );
        let bad_timeout: PipelineFile = serde_json::from_value(
            json!({"steps": [{"id": "a", "agent": "x", "timeout": "soon"}]}),
        )
        .expect("valid");
        assert_eq!(
            bad_timeout.into_request().expect_err("invalid").to_string(),
            r#"steps[0].timeout: "soon" is not a duration like 30s, 5m, 1h or 7d"#
        );
        assert!(serde_json::from_value::<PipelineFile>(json!({"steps": [], "colour": 1})).is_err());
    }
}
