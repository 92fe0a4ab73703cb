//! An experiment's record read (GetExperiment, ListExperiments), two
//! compared (CompareExperiments), and a recorded run made a case
//! (SaveCase).

use baton_proto::v1::{self as pb, run_event::Payload};
use serde_json::{Value, json};

use crate::{
    app::orchestrator::{Caller, Orchestrator},
    error::{Error, Result},
    eval::{self, dataset::RecordedCall},
    run::recording::rerun::Rerun,
};

impl Orchestrator {
    /// An experiment of the caller's tenant, by id or name.
    pub async fn get_experiment(&self, caller: &Caller, which: &str) -> Result<pb::Experiment> {
        if which.is_empty() {
            return Err(Error::invalid(
                "experiment",
                "must name an experiment (its id or name)",
            ));
        }
        self.experiments
            .get(&caller.tenant, which)
            .await?
            .ok_or_else(|| Error::NotFound {
                field: "experiment",
                message: format!("no experiment {which:?}"),
            })
    }

    /// A page of the caller's experiments, newest first.
    pub async fn list_experiments(
        &self,
        caller: &Caller,
        page_size: i32,
        page_token: &str,
    ) -> Result<pb::ListExperimentsResponse> {
        let size = match page_size {
            0 => 50,
            n if (1..=500).contains(&n) => n as usize,
            _ => return Err(Error::invalid("page_size", "must be 0 to 500")),
        };
        let offset = if page_token.is_empty() {
            0
        } else {
            page_token
                .parse::<usize>()
                .map_err(|_| Error::invalid("page_token", "not a token a listing gave"))?
        };
        let (experiments, next) = self.experiments.list(&caller.tenant, offset, size).await?;
        Ok(pb::ListExperimentsResponse {
            experiments,
            next_page_token: next.map(|n| n.to_string()).unwrap_or_default(),
        })
    }

    /// Two experiments compared (see `eval::compare`).
    pub async fn compare_experiments(
        &self,
        caller: &Caller,
        r: pb::CompareExperimentsRequest,
    ) -> Result<pb::ExperimentComparison> {
        let alpha = if r.alpha == 0.0 { 0.05 } else { r.alpha };
        if !(alpha > 0.0 && alpha < 1.0) {
            return Err(Error::invalid("alpha", "must be between 0 and 1"));
        }
        let field = |f: &'static str, e: Error| match e {
            Error::NotFound { message, .. } => Error::NotFound { field: f, message },
            Error::InvalidArgument { message, .. } => Error::InvalidArgument {
                field: f.into(),
                message,
            },
            e => e,
        };
        let a = self
            .get_experiment(caller, &r.baseline)
            .await
            .map_err(|e| field("baseline", e))?;
        let b = self
            .get_experiment(caller, &r.candidate)
            .await
            .map_err(|e| field("candidate", e))?;
        for (f, e) in [("baseline", &a), ("candidate", &b)] {
            if e.status == pb::ExperimentStatus::Running as i32 {
                return Err(Error::FailedPrecondition {
                    field: f,
                    message: format!(
                        "experiment {} is still running: compare it once it ends",
                        e.name
                    ),
                });
            }
        }
        Ok(eval::compare::compare(a, b, alpha))
    }

    /// A dataset case made of ended run `run_id` (see SaveCase).
    pub async fn save_case(
        &self,
        caller: &Caller,
        r: pb::SaveCaseRequest,
    ) -> Result<pb::SaveCaseResponse> {
        if r.run_id.is_empty() {
            return Err(Error::invalid("run_id", "must name a run"));
        }
        let view = self.get(caller, &r.run_id).await?;
        if view.status == pb::RunStatus::Running {
            return Err(Error::FailedPrecondition {
                field: "run_id",
                message: format!(
                    "run {} is still running: save it as a case once it ends",
                    r.run_id
                ),
            });
        }
        let (history, stored, kind) = self.history(caller, &r.run_id, u64::MAX).await?;
        if kind == pb::RunKind::Pipeline {
            return Err(Error::FailedPrecondition {
                field: "run_id",
                message: format!(
                    "run {} is a pipeline's: only an agent's or a group's run can be saved as a case",
                    r.run_id
                ),
            });
        }
        use prost::Message as _;
        let request = pb::RunAgentRequest::decode(stored.as_slice()).map_err(|_| {
            Error::FailedPrecondition {
                field: "run_id",
                message: format!(
                    "the request of run {} cannot be read by this version",
                    r.run_id
                ),
            }
        })?;
        let (events, recording) = history.into_events();
        let mut expected_calls = Vec::new();
        for e in &events {
            if let Some(Payload::ToolCallStarted(s)) = &e.payload {
                let args = serde_json::from_str::<Value>(&s.arguments_json).unwrap_or(Value::Null);
                let mut call = json!({"tool": s.tool});
                if let Value::Object(args) = args
                    && !args.is_empty()
                {
                    call["args"] = Value::Object(
                        args.into_iter()
                            .map(|(k, v)| match v {
                                // An object is matched exactly, said so.
                                Value::Object(_) => (k, json!({"exact": v})),
                                v => (k, v),
                            })
                            .collect(),
                    );
                }
                expected_calls.push(call);
            }
        }
        let recorded: Vec<RecordedCall> = if r.inline_recording {
            Rerun::tools(
                r.run_id.clone(),
                Some(crate::run::recording::fork::History {
                    packed: Vec::new(),
                    events,
                    recording,
                }),
                &[],
                false,
                Vec::new(),
            )
            .recorded_calls()
        } else {
            Vec::new()
        };
        let mut case = json!({
            "id": format!("run-{}", r.run_id.trim_start_matches("run-")),
            "agent": request.agent,
            "input": request.input,
            "labels": {"saved_from": r.run_id},
        });
        if !request.run_context_json.is_empty()
            && let Ok(Value::Object(c)) = serde_json::from_str::<Value>(&request.run_context_json)
            && !c.is_empty()
        {
            case["context"] = Value::Object(c);
        }
        if view.status == pb::RunStatus::Completed {
            case["expected"] = Value::String(view.output.clone());
        }
        if !expected_calls.is_empty() {
            // Calls of branches running at once interleave differently run
            // to run: matched in any order (edit to `in_order` to check it).
            case["expected_tools"] = json!({"order": "any_order", "calls": expected_calls});
        }
        case["tools"] = json!("recorded");
        case["recording"] = if r.inline_recording {
            json!({"calls": recorded})
        } else {
            json!({"run_id": r.run_id})
        };
        if view.status != pb::RunStatus::Completed && expected_calls.is_empty() {
            return Err(Error::FailedPrecondition {
                field: "run_id",
                message: format!(
                    "run {} has no answer and made no tool call: nothing to expect of a case",
                    r.run_id
                ),
            });
        }
        Ok(pb::SaveCaseResponse {
            case_json: case.to_string(),
        })
    }
}
