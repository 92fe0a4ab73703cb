//! The plan of a pipeline: [`Plan::validate`] checks a whole spec before
//! anything runs and turns it into a graph of [`Step`]s; every problem is
//! `INVALID_ARGUMENT` naming the field (`pipeline.steps[2].agent`, …).

use crate::config::PipelineLimits;
use std::{
    collections::{BTreeSet, HashMap},
    time::Duration,
};

use baton_proto::v1 as pb;

/// The built-in tool through which an agent starts a pipeline.
pub const TOOL_NAME: &str = crate::catalog::builtin::RUN_PIPELINE;

use crate::{
    catalog::{Catalog, valid_name},
    error::{Error, Result},
};

/// One validated step.
#[derive(Debug, Clone)]
pub struct Step {
    /// Its id.
    pub id: String,
    /// The agent or group running it.
    pub agent: String,
    /// The task text, `{{key}}` not yet filled in.
    pub task: String,
    /// Slots handed to the agent as named inputs.
    pub input_from: Vec<String>,
    /// The slot receiving the output.
    pub output_to: Option<String>,
    /// Indices of the steps that must succeed first (`depends_on`, and the
    /// steps writing a slot it reads); when one does not, this step is
    /// skipped.
    pub deps: Vec<usize>,
    /// In sequential mode, the step before it in the list: it starts only
    /// after that one ended, whichever way. Order only, not a dependency.
    pub after: Option<usize>,
    /// The ids of the steps it waits for (`deps`, then `after`), sorted:
    /// what `StepStarted` tells a watcher, so any client can draw the
    /// graph from the run's events.
    pub waits_for: Vec<String>,
    /// Whether its failure can fail the pipeline.
    pub required: bool,
    /// Deadline of one attempt.
    pub timeout: Duration,
    /// Further attempts after a failure.
    pub retries: u32,
}

/// How a failed required step affects the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Cancel everything; the run fails.
    Fail,
    /// Go on with what does not depend on it; the run fails with partial
    /// results.
    Continue,
    /// Like continue; the run succeeds if any step succeeded.
    BestEffort,
}

/// A validated pipeline.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The pipeline's name (for events).
    pub name: String,
    /// Steps in list order.
    pub steps: Vec<Step>,
    /// What a failure does.
    pub policy: Policy,
    /// Most steps at once.
    pub concurrency: usize,
}

fn field(i: usize, name: &str) -> String {
    format!("pipeline.steps[{i}].{name}")
}

fn invalid(field: String, message: String) -> Error {
    Error::invalid(field, message)
}

/// The `{{key}}` names a task refers to.
pub fn template_keys(task: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let mut rest = task;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else { break };
        keys.push(after[..end].trim().to_owned());
        rest = &after[end + 2..];
    }
    keys
}

impl Plan {
    /// What the run is named after: the pipeline's name, else `pipeline`.
    pub fn target(&self) -> &str {
        if self.name.is_empty() {
            "pipeline"
        } else {
            &self.name
        }
    }

    /// Validates a spec against the catalog, the pre-seeded slots and the
    /// server's limits.
    pub fn validate(
        spec: Option<pb::PipelineSpec>,
        seeded: &BTreeSet<String>,
        catalog: &Catalog,
        limits: &PipelineLimits,
        key_max_len: usize,
    ) -> Result<Self> {
        let spec = spec.ok_or_else(|| Error::invalid("pipeline", "is required"))?;
        if spec.steps.is_empty() {
            return Err(Error::invalid(
                "pipeline.steps",
                "must have at least one step",
            ));
        }
        if spec.steps.len() > limits.max_steps {
            return Err(Error::invalid(
                "pipeline.steps",
                format!(
                    "{} steps is over this server's maximum of {}",
                    spec.steps.len(),
                    limits.max_steps
                ),
            ));
        }
        let mode = pb::PipelineMode::try_from(spec.mode).map_err(|_| {
            Error::invalid(
                "pipeline.mode",
                format!("{} is not a PipelineMode", spec.mode),
            )
        })?;
        let policy = match pb::FailurePolicy::try_from(spec.policy) {
            Ok(pb::FailurePolicy::Unspecified | pb::FailurePolicy::Fail) => Policy::Fail,
            Ok(pb::FailurePolicy::Continue) => Policy::Continue,
            Ok(pb::FailurePolicy::BestEffort) => Policy::BestEffort,
            Err(_) => {
                return Err(Error::invalid(
                    "pipeline.policy",
                    format!("{} is not a FailurePolicy", spec.policy),
                ));
            }
        };
        let concurrency = match spec.max_concurrency {
            None => limits.default_concurrency,
            Some(0) => {
                return Err(Error::invalid(
                    "pipeline.max_concurrency",
                    "must be at least 1",
                ));
            }
            Some(n) if n as usize > limits.max_concurrency => {
                return Err(Error::invalid(
                    "pipeline.max_concurrency",
                    format!(
                        "{n} is over this server's maximum of {}",
                        limits.max_concurrency
                    ),
                ));
            }
            Some(n) => n as usize,
        };

        let mut index: HashMap<String, usize> = HashMap::new();
        let mut producers: HashMap<String, usize> = HashMap::new();
        for (i, s) in spec.steps.iter().enumerate() {
            if !valid_name(&s.id) {
                return Err(invalid(
                    field(i, "id"),
                    format!("{:?} must match [a-z0-9_-]{{1,64}}", s.id),
                ));
            }
            if index.insert(s.id.clone(), i).is_some() {
                return Err(invalid(
                    field(i, "id"),
                    format!("{:?} is used by an earlier step", s.id),
                ));
            }
            if !catalog.is_callable(&s.agent) {
                return Err(invalid(
                    field(i, "agent"),
                    format!("unknown agent or group {:?}", s.agent),
                ));
            }
            if !s.output_to.is_empty() {
                baton_store::Key::parse("output_to", &s.output_to, key_max_len).map_err(|e| {
                    invalid(
                        field(i, "output_to"),
                        e.to_string().trim_start_matches("output_to: ").to_owned(),
                    )
                })?;
                if let Some(other) = producers.insert(s.output_to.clone(), i) {
                    return Err(invalid(
                        field(i, "output_to"),
                        format!(
                            "{:?} is already written by step {:?}",
                            s.output_to, spec.steps[other].id
                        ),
                    ));
                }
            }
        }

        let mut steps = Vec::with_capacity(spec.steps.len());
        let ids: Vec<String> = spec.steps.iter().map(|s| s.id.clone()).collect();
        for (i, s) in spec.steps.into_iter().enumerate() {
            let mut deps = BTreeSet::new();
            for d in &s.depends_on {
                let j = *index.get(d).ok_or_else(|| {
                    invalid(field(i, "depends_on"), format!("no step has the id {d:?}"))
                })?;
                if j == i {
                    return Err(invalid(
                        field(i, "depends_on"),
                        "a step cannot depend on itself".into(),
                    ));
                }
                deps.insert(j);
            }
            for k in &s.input_from {
                match producers.get(k) {
                    Some(&j) if j != i => {
                        deps.insert(j);
                    }
                    _ if seeded.contains(k) => {}
                    _ => {
                        return Err(invalid(
                            field(i, "input_from"),
                            format!("no step writes {k:?} and the request does not seed it"),
                        ));
                    }
                }
            }
            for k in template_keys(&s.task) {
                match producers.get(&k) {
                    Some(&j) if j != i => {
                        deps.insert(j);
                    }
                    _ if seeded.contains(&k) => {}
                    _ => {
                        return Err(invalid(
                            field(i, "task"),
                            format!(
                                "{{{{{k}}}}} names a slot no step writes and the request does not seed"
                            ),
                        ));
                    }
                }
            }
            let timeout = match s.timeout {
                None => limits.max_step_timeout,
                Some(t) if t.seconds < 0 || t.nanos < 0 || (t.seconds == 0 && t.nanos == 0) => {
                    return Err(invalid(
                        field(i, "timeout"),
                        "must be a positive duration".into(),
                    ));
                }
                Some(t) => {
                    let d = Duration::new(t.seconds as u64, t.nanos.clamp(0, 999_999_999) as u32);
                    if d > limits.max_step_timeout {
                        return Err(invalid(
                            field(i, "timeout"),
                            format!(
                                "{d:?} is over this server's maximum of {:?}",
                                limits.max_step_timeout
                            ),
                        ));
                    }
                    d
                }
            };
            if s.retries > limits.max_retries {
                return Err(invalid(
                    field(i, "retries"),
                    format!(
                        "{} is over this server's maximum of {}",
                        s.retries, limits.max_retries
                    ),
                ));
            }
            // Modes decide the edges. Sequential: list order is the order
            // of execution (each step starts after the one before it ended)
            // and only real dependencies, which must come earlier, skip a
            // step. Parallel: none. DAG: depends_on and data flow.
            let (deps, after): (Vec<usize>, Option<usize>) = match mode {
                pb::PipelineMode::Unspecified | pb::PipelineMode::Sequential => {
                    if let Some(&later) = deps.iter().find(|&&j| j > i) {
                        return Err(invalid(
                            field(i, "depends_on"),
                            format!(
                                "in sequential mode steps run in list order, and step {:?} comes after this one; reorder the steps or use mode dag",
                                ids[later]
                            ),
                        ));
                    }
                    (deps.into_iter().collect(), i.checked_sub(1))
                }
                pb::PipelineMode::Parallel => {
                    if !deps.is_empty() {
                        return Err(invalid(
                            field(i, "input_from"),
                            "parallel steps cannot depend on each other; use mode dag".into(),
                        ));
                    }
                    (Vec::new(), None)
                }
                pb::PipelineMode::Dag => (deps.into_iter().collect(), None),
            };
            steps.push(Step {
                id: s.id,
                agent: s.agent,
                task: s.task,
                input_from: s.input_from,
                output_to: (!s.output_to.is_empty()).then_some(s.output_to),
                deps,
                after,
                waits_for: Vec::new(),
                required: s.required.unwrap_or(true),
                timeout,
                retries: s.retries,
            });
        }
        if let Some(cycle) = find_cycle(&steps) {
            let names: Vec<&str> = cycle.iter().map(|&i| steps[i].id.as_str()).collect();
            return Err(Error::invalid(
                "pipeline.steps",
                format!("dependency cycle: {}", names.join(" → ")),
            ));
        }
        let ids: Vec<String> = steps.iter().map(|s| s.id.clone()).collect();
        for step in &mut steps {
            let mut waits: Vec<String> = step
                .deps
                .iter()
                .chain(step.after.iter())
                .map(|&j| ids[j].clone())
                .collect();
            waits.sort();
            waits.dedup();
            step.waits_for = waits;
        }
        Ok(Self {
            name: spec.name,
            steps,
            policy,
            concurrency,
        })
    }
}

/// A cycle in the dependency graph, as step indices ending where it began.
fn find_cycle(steps: &[Step]) -> Option<Vec<usize>> {
    // 0 = unvisited, 1 = on the current path, 2 = done.
    fn visit(
        i: usize,
        steps: &[Step],
        state: &mut [u8],
        path: &mut Vec<usize>,
    ) -> Option<Vec<usize>> {
        state[i] = 1;
        path.push(i);
        for &d in &steps[i].deps {
            if state[d] == 1 {
                let start = path.iter().position(|&p| p == d).unwrap_or(0);
                let mut cycle: Vec<usize> = path[start..].to_vec();
                cycle.push(d);
                return Some(cycle);
            }
            if state[d] == 0
                && let Some(c) = visit(d, steps, state, path)
            {
                return Some(c);
            }
        }
        path.pop();
        state[i] = 2;
        None
    }
    let mut state = vec![0u8; steps.len()];
    for i in 0..steps.len() {
        if state[i] == 0
            && let Some(c) = visit(i, steps, &mut state, &mut Vec::new())
        {
            return Some(c);
        }
    }
    None
}
