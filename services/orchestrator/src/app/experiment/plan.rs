//! An experiment checked whole before anything runs.

use std::{
    collections::{BTreeSet, HashMap},
    sync::Arc,
};

use baton_proto::v1::{self as pb};

use crate::{
    app::orchestrator::{Caller, Orchestrator},
    error::{Error, Result},
    eval::{self, dataset::Dataset, score::How},
    model::call::budget::{Budgets, Limit},
    pipeline::PipelineFile,
    request::{PipelineRequest, validate::pipeline_run},
};

/// Most bytes of a dataset (a request carrying it fits gRPC's 4 MiB).
pub const MAX_DATASET_BYTES: usize = 3 << 20;
/// Most tries of a case.
pub const MAX_REPEAT: u32 = 20;
/// Most runs of an experiment at once.
pub const MAX_CONCURRENCY: u32 = 64;

/// An experiment checked, ready to run.
pub(super) struct Plan {
    pub(super) record: pb::Experiment,
    pub(super) dataset: Dataset,
    pub(super) target: String,
    pub(super) repeat: u32,
    pub(super) concurrency: usize,
    pub(super) default_model: String,
    /// Its budget, which every run and judge of it draws from (one
    /// reservation for all).
    pub(super) budget: Option<Arc<Budgets>>,
    /// By case: the pipeline it runs (checked; its `input` slot to fill),
    /// when its target is one.
    pub(super) pipelines: Vec<Option<Arc<pb::RunPipelineRequest>>>,
}

impl Orchestrator {
    /// Checks a request whole (see the module docs).
    pub(super) async fn plan(&self, caller: &Caller, r: pb::RunExperimentRequest) -> Result<Plan> {
        if r.dataset.len() > MAX_DATASET_BYTES {
            return Err(Error::Exhausted {
                field: "dataset".into(),
                message: format!("over {MAX_DATASET_BYTES} bytes"),
            });
        }
        let file = if r.dataset_name.is_empty() {
            "dataset".to_owned()
        } else {
            r.dataset_name.clone()
        };
        let dataset = eval::dataset::parse(&file, &r.dataset)
            .map_err(|b| Error::invalid("dataset", b.said(&file)))?;
        let repeat = if r.repeat == 0 { 1 } else { r.repeat };
        if repeat > MAX_REPEAT {
            return Err(Error::invalid("repeat", format!("at most {MAX_REPEAT}")));
        }
        let concurrency = if r.concurrency == 0 { 8 } else { r.concurrency };
        if concurrency > MAX_CONCURRENCY {
            return Err(Error::invalid(
                "concurrency",
                format!("at most {MAX_CONCURRENCY}"),
            ));
        }
        if let Some(b) = &r.budget
            && !(b.cost >= 0.0 && b.cost.is_finite())
        {
            return Err(Error::invalid("budget.cost", "must be a number ≥ 0"));
        }
        let services = self.services();
        let target = dataset.agent.clone().unwrap_or_default();
        let target = if r.agent.is_empty() {
            target
        } else {
            r.agent.clone()
        };
        if !r.default_model.is_empty() {
            services
                .models
                .resolve(&r.default_model)
                .map_err(|e| Error::invalid("default_model", e.to_string()))?;
        }
        let bad = |line: u32, field: &str, message: String| {
            Error::invalid(
                "dataset",
                eval::dataset::Bad::new(line, field, message).said(&file),
            )
        };
        let mut models = BTreeSet::new();
        let default_model = if r.default_model.is_empty() {
            services.catalog.default_model.clone()
        } else {
            r.default_model.clone()
        };
        if !default_model.is_empty() {
            models.insert(default_model.clone());
        }
        let mut runs_read = HashMap::new();
        let mut judges = BTreeSet::new();
        let mut pipelines = Vec::with_capacity(dataset.cases.len());
        for case in &dataset.cases {
            // The case's pipeline, else (no target of its own, none in the
            // request) the dataset's.
            let pipeline = match (&case.pipeline, &dataset.pipeline) {
                (Some(p), _) => Some((p, "pipeline")),
                (None, Some(p)) if case.agent.is_empty() && r.agent.is_empty() => {
                    Some((p, "dataset.pipeline"))
                }
                _ => None,
            };
            if let Some((spec, field)) = pipeline {
                let line = if field == "pipeline" { case.line } else { 0 };
                if case.messages.len() > 1 {
                    return Err(bad(
                        case.line,
                        "messages",
                        "a pipeline case takes one `input` (its `input` slot)".into(),
                    ));
                }
                let request = checked_pipeline(&services, spec, &r.default_model)
                    .map_err(|(f, m)| bad(line, &format!("{field}{f}"), m))?;
                for step in request.pipeline.iter().flat_map(|p| &p.steps) {
                    if let Some(a) = services.catalog.entry(&step.agent)
                        && !a.spec.model.is_empty()
                    {
                        models.insert(a.spec.model.clone());
                    }
                }
                pipelines.push(Some(Arc::new(request)));
            } else {
                pipelines.push(None);
            }
            let agent = if case.agent.is_empty() {
                &target
            } else {
                &case.agent
            };
            if pipeline.is_some() {
                // Its pipeline's agents were checked with it.
            } else if agent.is_empty() {
                return Err(Error::invalid(
                    "agent",
                    format!(
                        "{}:{}: the case names no agent, and neither do the dataset nor the request",
                        file, case.line
                    ),
                ));
            } else if !services.catalog.is_callable(agent) {
                let unknown = format!("unknown agent or group {agent:?}");
                return Err(if !case.agent.is_empty() {
                    bad(case.line, "agent", unknown)
                } else if !r.agent.is_empty() {
                    Error::invalid("agent", unknown)
                } else {
                    bad(0, "dataset.agent", unknown)
                });
            }
            if pipeline.is_none()
                && let Some(a) = services.catalog.entry(agent)
                && !a.spec.model.is_empty()
            {
                models.insert(a.spec.model.clone());
            }
            for (i, s) in case.scorers.iter().enumerate() {
                match &s.how {
                    How::Judge { model, .. } => {
                        services.models.resolve(model).map_err(|e| {
                            bad(case.line, &format!("scorers[{i}].model"), e.to_string())
                        })?;
                        judges.insert(model.clone());
                    }
                    How::Tool(tool) if services.tools.get(tool).is_none() => {
                        return Err(bad(
                            case.line,
                            &format!("scorers[{i}].tool"),
                            format!(
                                "no tool server or MCP server of this orchestrator has a tool {tool:?}"
                            ),
                        ));
                    }
                    _ => {}
                }
            }
            if let Some(rec) = &case.recording
                && !rec.run_id.is_empty()
                && !runs_read.contains_key(&rec.run_id)
            {
                match self.get(caller, &rec.run_id).await {
                    Ok(view) if view.history_gone => {
                        return Err(bad(
                            case.line,
                            "recording.run_id",
                            format!(
                                "run {} has no recording any more (evicted for room): save the case with its recording inline",
                                rec.run_id
                            ),
                        ));
                    }
                    Ok(view) if view.status == pb::RunStatus::Running => {
                        return Err(bad(
                            case.line,
                            "recording.run_id",
                            format!("run {} is still running", rec.run_id),
                        ));
                    }
                    Ok(_) => {
                        runs_read.insert(rec.run_id.clone(), ());
                    }
                    Err(Error::InvalidArgument { message, .. }) => {
                        return Err(bad(case.line, "recording.run_id", message));
                    }
                    Err(Error::NotFound { .. }) => {
                        return Err(bad(
                            case.line,
                            "recording.run_id",
                            format!(
                                "no run {} (ended past its retention?): save the case with its recording inline",
                                rec.run_id
                            ),
                        ));
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        // A cost budget cannot bound a model without a price: the targets'
        // and judges' models are checked here (a model only a sub-agent
        // or a fallback uses is refused at its call, and the try says so).
        if r.budget.as_ref().is_some_and(|b| b.cost > 0.0) {
            let unpriced: Vec<&String> = models
                .iter()
                .chain(&judges)
                .filter(|m| services.catalog.prices.of(m).is_none())
                .collect();
            if !unpriced.is_empty() {
                return Err(Error::invalid(
                    "budget.cost",
                    format!(
                        "{} no price, so a cost budget cannot bound {}: give {} a price, or set a token budget only",
                        match unpriced.as_slice() {
                            [one] => format!("model {one} has"),
                            many => format!(
                                "models {} have",
                                many.iter()
                                    .map(|m| m.as_str())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        },
                        if unpriced.len() == 1 { "it" } else { "them" },
                        if unpriced.len() == 1 { "it" } else { "them" },
                    ),
                ));
            }
        }
        let id = format!("exp-{}", uuid::Uuid::new_v4().simple());
        let now = std::time::SystemTime::now();
        let name = if r.name.is_empty() {
            let at = serde_json::to_value(baton_proto::wkt::Timestamp::from(now))
                .ok()
                .and_then(|v| v.as_str().map(|s| s.chars().take(19).collect::<String>()))
                .unwrap_or_default();
            format!("{file} {at}")
        } else {
            r.name.clone()
        };
        if name.len() > 200 {
            return Err(Error::invalid("name", "at most 200 bytes"));
        }
        if name.starts_with("exp-") {
            return Err(Error::invalid(
                "name",
                "must not start with `exp-` (experiments' ids do)",
            ));
        }
        let record = pb::Experiment {
            id,
            name,
            target: target.clone(),
            dataset_name: file,
            agents_digest: services.catalog.digest.clone(),
            models: models.into_iter().collect(),
            status: pb::ExperimentStatus::Running as i32,
            started_at: Some(now.into()),
            repeat,
            case_count: dataset.cases.len() as u32,
            ..Default::default()
        };
        // One budget for all its runs and judges, named as the experiment.
        let shown = if record.name.is_empty() {
            &record.id
        } else {
            &record.name
        };
        let budget = r.budget.filter(|b| b.tokens > 0 || b.cost > 0.0).map(|b| {
            Budgets::shared(
                format!("experiment {shown}"),
                Limit {
                    tokens: (b.tokens > 0).then_some(b.tokens),
                    cost_nanos: (b.cost > 0.0).then(|| crate::catalog::budget::cost_nanos(b.cost)),
                },
            )
        });
        Ok(Plan {
            record,
            dataset,
            target,
            repeat,
            concurrency: concurrency as usize,
            default_model: r.default_model,
            budget,
            pipelines,
        })
    }
}

impl Plan {
    /// What case `c` runs, as its result names it: its agent, or
    /// `pipeline <name>`.
    pub(super) fn target_of(&self, c: usize) -> String {
        let case = &self.dataset.cases[c];
        match &self.pipelines[c] {
            Some(p) => {
                let name = p.pipeline.as_ref().map_or("", |p| p.name.as_str());
                format!(
                    "pipeline {}",
                    if name.is_empty() { "(unnamed)" } else { name }
                )
            }
            None if case.agent.is_empty() => self.target.clone(),
            None => case.agent.clone(),
        }
    }
}

/// A dataset's pipeline (an object of a pipeline file's fields) as a
/// request, checked as RunPipeline checks one — its `input` slot seeded,
/// so a step may read it; or the field (after `pipeline`) and what is
/// wrong.
fn checked_pipeline(
    services: &crate::run::shared::Shared,
    spec: &serde_json::Value,
    default_model: &str,
) -> std::result::Result<pb::RunPipelineRequest, (String, String)> {
    let file: PipelineFile = serde_path_to_error::deserialize(spec.clone()).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." {
            String::new()
        } else {
            format!(".{path}")
        };
        (path, e.inner().to_string())
    })?;
    if file.initial_slots.contains_key(CASE_INPUT_SLOT) {
        return Err((
            format!(".initial_slots.{CASE_INPUT_SLOT}"),
            "is the case's input: a pipeline case's `input` fills it".into(),
        ));
    }
    let mut request = file
        .into_request()
        .map_err(|e| (String::new(), e.to_string()))?;
    request
        .initial_slots
        .insert(CASE_INPUT_SLOT.to_owned(), "-".to_owned());
    // Checked with the model the runs will have.
    request.default_model = default_model.to_owned();
    let checked =
        PipelineRequest::try_from(request.clone()).and_then(|r| pipeline_run(services, r));
    if let Err(e) = checked {
        return Err(match e {
            // Its fields are named as RunPipeline's (`pipeline.steps[1].agent`).
            Error::InvalidArgument { field, message } => (
                field
                    .strip_prefix("pipeline")
                    .map_or_else(|| format!(".{field}"), str::to_owned),
                message,
            ),
            e => (String::new(), e.to_string()),
        });
    }
    Ok(request)
}

/// The slot a pipeline case's input is written to.
pub(super) const CASE_INPUT_SLOT: &str = "input";
