//! Requests checked against this server, once, before anything starts: the
//! agent (and each pipeline step's agent) resolved with its model, limits
//! merged with the server's defaults and maxima, the run context parsed, the
//! filter bounded. A problem is `INVALID_ARGUMENT` (or `RESOURCE_EXHAUSTED`
//! for a size or count over a limit) naming the field, and nothing starts.

use std::collections::{BTreeSet, HashSet};

use serde_json::{Map, Value};

use super::{AgentRequest, PipelineRequest, RequestOptions, RequestedLimits, StoredRequest};
use crate::{
    catalog::names::parse_model_ref,
    config::RunDefaults,
    error::{Error, Result},
    model::ChatMessage,
    pipeline::Plan,
    run::shared::Shared,
    run::{
        events::Filter,
        state::{Limits, RunOptions},
        target::{Resolved, resolve},
    },
};

/// A RunAgent request checked: what the run is started with.
pub struct AgentRun {
    /// The agent or group, resolved with its model.
    pub target: Resolved,
    /// Earlier messages.
    pub history: Vec<ChatMessage>,
    /// The new input.
    pub input: String,
    /// The run's options.
    pub options: RunOptions,
    /// The request as the run store keeps it.
    pub stored: StoredRequest,
    /// What the face tagged the run with.
    pub labels: std::collections::BTreeMap<String, String>,
    /// The conversation it continues or starts.
    pub conversation: Option<super::ConversationAsk>,
}

/// A RunPipeline request checked: what the run is started with.
pub struct PipelineRun {
    /// The pipeline, planned (every step's agent has a model).
    pub plan: Plan,
    /// Slots written before the first step, sorted by key.
    pub initial: Vec<(String, String)>,
    /// Whether the slots the run wrote outlive it.
    pub keep_context: bool,
    /// The run's options.
    pub options: RunOptions,
    /// The request as the run store keeps it.
    pub stored: StoredRequest,
}

/// Checks a RunAgent request against `s` (see the module docs).
pub fn agent_run(s: &Shared, r: AgentRequest) -> Result<AgentRun> {
    if r.agent.is_empty() {
        return Err(Error::invalid("agent", "must name an agent or group"));
    }
    if !s.catalog.is_callable(&r.agent) {
        return Err(Error::invalid(
            "agent",
            format!("unknown agent or group {:?}", r.agent),
        ));
    }
    if r.input.is_empty() && r.history.is_empty() {
        return Err(Error::invalid(
            "input",
            "must not be empty when there is no history",
        ));
    }
    if let Some(c) = &r.conversation {
        if r.input.is_empty() {
            return Err(Error::invalid(
                "input",
                "must not be empty in a conversation",
            ));
        }
        let max = s.conversations.config.max_ttl;
        if c.ttl.is_some_and(|t| t > max) {
            return Err(Error::invalid(
                "conversation_ttl",
                format!("must be at most conversations.max_ttl ({max:?})"),
            ));
        }
    }
    let options = options(s, r.options)?;
    // An agent without any model is a bad request, not a failed run.
    let target = resolve(&s.catalog, &s.models, &options.default_model, &r.agent)
        .map_err(|e| Error::invalid("default_model", e.to_string()))?;
    Ok(AgentRun {
        target,
        history: r.history,
        input: r.input,
        options,
        stored: r.stored,
        labels: r.labels,
        conversation: r.conversation,
    })
}

/// Checks a request to run `target`, an agent made for the run (an
/// experiment's judge) rather than one of the catalog's, as [`agent_run`]
/// checks a catalog agent's.
pub fn agent_run_as(s: &Shared, r: AgentRequest, target: Resolved) -> Result<AgentRun> {
    let options = options(s, r.options)?;
    Ok(AgentRun {
        target,
        history: r.history,
        input: r.input,
        options,
        stored: r.stored,
        labels: r.labels,
        conversation: None,
    })
}

/// Checks a RunPipeline request against `s`, as [`agent_run`] does.
pub fn pipeline_run(s: &Shared, r: PipelineRequest) -> Result<PipelineRun> {
    let limits = s.store.limits();
    for (k, v) in &r.initial_slots {
        baton_store::Key::parse("initial_slots", k, limits.max_key_len).map_err(|e| {
            Error::invalid(
                "initial_slots",
                e.to_string()
                    .trim_start_matches("initial_slots: ")
                    .to_owned(),
            )
        })?;
        if v.len() as u64 > limits.max_value_bytes {
            return Err(Error::invalid(
                "initial_slots",
                format!(
                    "the value of {k:?} is over the store's limit of {} bytes",
                    limits.max_value_bytes
                ),
            ));
        }
    }
    let seeded: BTreeSet<String> = r.initial_slots.iter().map(|(k, _)| k.clone()).collect();
    let plan = Plan::validate(
        r.pipeline,
        &seeded,
        &s.catalog,
        &s.pipeline_limits,
        limits.max_key_len,
    )?;
    let options = options(s, r.options)?;
    // Every step's agent must have a model, checked before anything runs;
    // once per agent (a fan-out runs one agent in a thousand steps), the
    // error naming its first step.
    let mut checked = HashSet::new();
    for (i, step) in plan.steps.iter().enumerate() {
        if checked.insert(step.agent.as_str()) {
            resolve(&s.catalog, &s.models, &options.default_model, &step.agent)
                .map_err(|e| Error::invalid(format!("pipeline.steps[{i}].agent"), e.to_string()))?;
        }
    }
    Ok(PipelineRun {
        plan,
        initial: r.initial_slots,
        keep_context: r.keep_context,
        options,
        stored: r.stored,
    })
}

/// Checks the options RunAgent and RunPipeline share.
fn options(s: &Shared, o: RequestOptions) -> Result<RunOptions> {
    let max_context = s.defaults.max_run_context_bytes;
    if o.run_context_json.len() > max_context {
        return Err(Error::Exhausted {
            field: "run_context_json".into(),
            message: format!(
                "{} bytes is over this server's limit of {max_context} bytes (runs.max_run_context_bytes)",
                o.run_context_json.len()
            ),
        });
    }
    check_filter(&o.filter, &s.defaults)?;
    Ok(RunOptions {
        run_context: run_context(&o.run_context_json)?,
        default_model: model_or_default(s, &o.default_model)?,
        limits: limits(&s.defaults, o.limits)?,
        approval_mode: o.approval_mode,
        filter: o.filter,
        detach: o.detach,
        walk: None,
        rerun: None,
        settings: o.settings,
        shared_budget: None,
        webhooks: o.webhooks,
    })
}

/// Checks a filter against the server's bounds on its entries.
pub fn check_filter(f: &Filter, limits: &RunDefaults) -> Result<()> {
    for (field, n) in [
        ("filter.context_prefixes", f.prefixes.len()),
        ("filter.kinds", f.listed_kinds.max(f.kinds.len())),
    ] {
        if n > limits.max_filter_entries {
            return Err(Error::Exhausted {
                field: field.into(),
                message: format!(
                    "{n} entries is over this server's limit of {} (runs.max_filter_entries)",
                    limits.max_filter_entries
                ),
            });
        }
    }
    if let Some(p) = f
        .prefixes
        .iter()
        .find(|p| p.len() > limits.max_filter_prefix_len)
    {
        return Err(Error::Exhausted {
            field: "filter.context_prefixes".into(),
            message: format!(
                "a prefix of {} characters is over this server's limit of {} (runs.max_filter_prefix_len)",
                p.len(),
                limits.max_filter_prefix_len
            ),
        });
    }
    Ok(())
}

fn limits(d: &RunDefaults, l: RequestedLimits) -> Result<Limits> {
    let max_depth = match l.max_depth {
        None => d.max_depth,
        Some(v) if v > d.max_depth_limit => {
            return Err(Error::invalid(
                "limits.max_depth",
                format!("{v} is over this server's maximum of {}", d.max_depth_limit),
            ));
        }
        Some(v) => v,
    };
    let max_turns = match l.max_turns {
        0 => d.max_turns,
        v if v > d.max_turns_limit => {
            return Err(Error::invalid(
                "limits.max_turns",
                format!("{v} is over this server's maximum of {}", d.max_turns_limit),
            ));
        }
        v => v,
    };
    let timeout = |field: &'static str, asked: Option<std::time::Duration>, default| match asked {
        None => Ok(default),
        Some(t) if t.is_zero() => Ok(default),
        Some(t) if t > d.max_timeout => Err(Error::invalid(
            field,
            format!("{t:?} is over this server's maximum of {:?}", d.max_timeout),
        )),
        Some(t) => Ok(t),
    };
    Ok(Limits {
        max_depth,
        max_turns,
        run_timeout: timeout("limits.run_timeout", l.run_timeout, d.run_timeout)?,
        tool_timeout: timeout("limits.tool_timeout", l.tool_timeout, d.tool_timeout)?,
        model_timeout: timeout("limits.model_timeout", l.model_timeout, d.model_timeout)?,
        approval_timeout: timeout(
            "limits.approval_timeout",
            l.approval_timeout,
            d.approval_timeout,
        )?,
        budget: l.budget,
    })
}

fn model_or_default(s: &Shared, requested: &str) -> Result<String> {
    if requested.is_empty() {
        return Ok(s.catalog.default_model.clone());
    }
    parse_model_ref(requested).map_err(|e| Error::invalid("default_model", e.to_string()))?;
    s.models
        .resolve(requested)
        .map_err(|e| Error::invalid("default_model", e.to_string()))?;
    Ok(requested.to_owned())
}

/// Parses the request's run context: empty is `{}`, otherwise a JSON object.
fn run_context(s: &str) -> Result<Map<String, Value>> {
    parse_run_context("run_context_json", s)
}

/// A run context given as `field`: empty is `{}`, otherwise a JSON object.
pub fn parse_run_context(field: &'static str, s: &str) -> Result<Map<String, Value>> {
    if s.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(s) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(other) => Err(Error::invalid(
            field,
            format!(
                "must be a JSON object, got {}",
                match other {
                    Value::Array(_) => "an array",
                    Value::String(_) => "a string",
                    Value::Number(_) => "a number",
                    Value::Bool(_) => "a boolean",
                    _ => "null",
                }
            ),
        )),
        Err(e) => Err(Error::invalid(field, format!("is not valid JSON: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_contexts_are_json_objects() {
        assert!(run_context("").expect("empty").is_empty());
        assert_eq!(run_context(r#"{"a":1}"#).expect("object").len(), 1);
        assert!(
            run_context("[1]")
                .expect_err("array")
                .to_string()
                .contains("an array")
        );
        assert!(
            run_context("{")
                .expect_err("bad")
                .to_string()
                .starts_with("run_context_json")
        );
    }

    #[test]
    fn filters_are_bounded_and_name_the_field() {
        let limits = RunDefaults::default();
        let over = Filter {
            kinds: (0..=limits.max_filter_entries as i32).collect(),
            ..Default::default()
        };
        assert!(matches!(
            check_filter(&over, &limits),
            Err(Error::Exhausted { field, .. }) if field == "filter.kinds"
        ));
        let at = Filter {
            kinds: (0..limits.max_filter_entries as i32).collect(),
            ..Default::default()
        };
        assert_eq!(check_filter(&at, &limits), Ok(()));
    }
}
