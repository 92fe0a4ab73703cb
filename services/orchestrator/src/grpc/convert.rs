//! Requests into domain values, validated once, before anything starts:
//! a bad field is `INVALID_ARGUMENT` (or `RESOURCE_EXHAUSTED` for a size or
//! count over a limit) naming it, and no run, event or store write happens.
//! The handlers and the fuzz targets call [`agent_run`] and
//! [`pipeline_run`]; the `run_pipeline` tool shares their pipeline checks
//! (`Plan::validate`).

use std::time::Duration;

use baton_proto::v1 as pb;
use serde_json::{Map, Value};

use crate::{
    catalog::names::{parse_model_ref, valid_name},
    config::RunDefaults,
    error::{Error, Result},
    model::{ChatMessage, Role, ToolCallRequest, settings::Settings},
    pipeline::Plan,
    run::{
        events::Filter,
        state::{Limits, RunOptions, check_target},
    },
    services::Services,
};

/// Validates a RunAgent request (nothing starts): every problem is
/// `INVALID_ARGUMENT` (or `RESOURCE_EXHAUSTED` for a size) naming the
/// field. Pure: the handler and the fuzz targets call it.
pub fn agent_run(s: &Services, r: pb::RunAgentRequest) -> Result<AgentRun> {
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
    let history = history(r.history)?;
    let mut options = options(
        s,
        &r.run_context_json,
        &r.default_model,
        r.limits,
        r.approval_mode,
        r.filter,
        r.detach,
    )?;
    options.settings = request_settings(r.settings)?;
    // An agent without any model is a bad request, not a failed run.
    check_target(&s.catalog, &s.models, &options.default_model, &r.agent)
        .map_err(|e| Error::invalid("default_model", e))?;
    Ok(AgentRun {
        agent: r.agent,
        history,
        input: r.input,
        options,
    })
}

/// Validates a RunPipeline request (nothing starts), as
/// [`agent_run`] does.
pub fn pipeline_run(s: &Services, r: pb::RunPipelineRequest) -> Result<PipelineRun> {
    let key_max = s.store.limits().max_key_len;
    let mut initial: Vec<(String, String)> = r.initial_slots.into_iter().collect();
    initial.sort();
    for (k, v) in &initial {
        baton_context_store::store::Key::parse("initial_slots", k, key_max).map_err(|e| {
            Error::invalid(
                "initial_slots",
                e.to_string()
                    .trim_start_matches("initial_slots: ")
                    .to_owned(),
            )
        })?;
        if v.len() as u64 > s.store.limits().max_value_bytes {
            return Err(Error::invalid(
                "initial_slots",
                format!(
                    "the value of {k:?} is over the store's limit of {} bytes",
                    s.store.limits().max_value_bytes
                ),
            ));
        }
    }
    let seeded = initial.iter().map(|(k, _)| k.clone()).collect();
    let plan = Plan::validate(r.pipeline, &seeded, &s.catalog, &s.pipeline_limits, key_max)?;
    let mut options = options(
        s,
        &r.run_context_json,
        &r.default_model,
        r.limits,
        r.approval_mode,
        r.filter,
        r.detach,
    )?;
    options.settings = request_settings(r.settings)?;
    // Every step's agent must have a model, checked before anything runs;
    // once per agent (a fan-out runs one agent in a thousand steps), the
    // error naming its first step.
    let mut checked = std::collections::HashSet::new();
    for (i, step) in plan.steps.iter().enumerate() {
        if checked.insert(step.agent.as_str()) {
            check_target(&s.catalog, &s.models, &options.default_model, &step.agent)
                .map_err(|e| Error::invalid(format!("pipeline.steps[{i}].agent"), e))?;
        }
    }
    Ok(PipelineRun {
        plan,
        initial,
        keep_context: r.keep_context,
        options,
    })
}

/// Validates the options RunAgent and RunPipeline share.
fn options(
    s: &Services,
    run_context_json: &str,
    default_model: &str,
    limits: Option<pb::RunLimits>,
    mode: i32,
    events: Option<pb::EventFilter>,
    detach: bool,
) -> Result<RunOptions> {
    let max_context = s.defaults.max_run_context_bytes;
    if run_context_json.len() > max_context {
        return Err(Error::Exhausted {
            field: "run_context_json".into(),
            message: format!(
                "{} bytes is over this server's limit of {max_context} bytes (runs.max_run_context_bytes)",
                run_context_json.len()
            ),
        });
    }
    Ok(RunOptions {
        run_context: run_context(run_context_json)?,
        default_model: model_or_default(s, default_model)?,
        limits: run_limits(s, limits)?,
        approval_mode: approval_mode(mode)?,
        filter: filter(events, &s.defaults)?,
        detach,
        replay: None,
        settings: Settings::default(),
    })
}

/// The request's generation settings, checked.
fn request_settings(settings: Option<pb::GenerationSettings>) -> Result<Settings> {
    Settings::from_request(settings).map_err(|(field, why)| Error::invalid(field, why))
}

fn run_limits(s: &Services, l: Option<pb::RunLimits>) -> Result<Limits> {
    let d = &s.defaults;
    let l = l.unwrap_or_default();
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
    let timeout = |field: &'static str,
                   v: Option<prost_types::Duration>,
                   default: Duration|
     -> Result<Duration> {
        let Some(v) = v else { return Ok(default) };
        if v.seconds < 0 || v.nanos < 0 || v.nanos >= 1_000_000_000 {
            return Err(Error::invalid(field, "must be a positive duration"));
        }
        let t = Duration::new(v.seconds as u64, v.nanos as u32);
        if t.is_zero() {
            return Ok(default);
        }
        if t > d.max_timeout {
            return Err(Error::invalid(
                field,
                format!("{t:?} is over this server's maximum of {:?}", d.max_timeout),
            ));
        }
        Ok(t)
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
    })
}

fn model_or_default(s: &Services, requested: &str) -> Result<String> {
    if requested.is_empty() {
        return Ok(s.catalog.default_model.clone());
    }
    parse_model_ref(requested).map_err(|e| Error::invalid("default_model", e))?;
    s.models
        .resolve(requested)
        .map_err(|e| Error::invalid("default_model", e))?;
    Ok(requested.to_owned())
}

/// A validated RunAgent request.
pub struct AgentRun {
    pub(super) agent: String,
    pub(super) history: Vec<ChatMessage>,
    pub(super) input: String,
    pub(super) options: RunOptions,
}

/// A validated RunPipeline request.
pub struct PipelineRun {
    pub(super) plan: Plan,
    pub(super) initial: Vec<(String, String)>,
    pub(super) keep_context: bool,
    pub(super) options: RunOptions,
}

/// Most runs in a ListRuns page when the request names no size.
pub const DEFAULT_RUNS_PAGE: usize = 100;
/// Most runs in a ListRuns page.
pub const MAX_RUNS_PAGE: usize = 1000;

/// What a ListRuns request asks for: the status (none: any), the run after
/// which the page starts, and the page size (AIP-158: 0 is the default,
/// larger sizes are lowered to the maximum).
pub(super) fn list_runs_page(
    r: &pb::ListRunsRequest,
) -> Result<(Option<pb::RunStatus>, Option<String>, usize)> {
    let status = match pb::RunStatus::try_from(r.status) {
        Ok(pb::RunStatus::Unspecified) => None,
        Ok(s) => Some(s),
        Err(_) => {
            return Err(Error::invalid(
                "status",
                format!("{} is not a RunStatus", r.status),
            ));
        }
    };
    let size = match r.page_size {
        s if s < 0 => return Err(Error::invalid("page_size", "must not be negative")),
        0 => DEFAULT_RUNS_PAGE,
        s => (s as usize).min(MAX_RUNS_PAGE),
    };
    let after = if r.page_token.is_empty() {
        None
    } else {
        let id = r
            .page_token
            .strip_prefix("v1.")
            .filter(|id| uuid::Uuid::try_parse(id).is_ok())
            .ok_or_else(|| {
                Error::invalid(
                    "page_token",
                    "is not a token of a previous ListRuns page (use its next_page_token)",
                )
            })?;
        Some(id.to_owned())
    };
    Ok((status, after, size))
}

/// Parses the request's run context: empty is `{}`, otherwise a JSON object.
fn run_context(s: &str) -> Result<Map<String, Value>> {
    if s.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(s) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(other) => Err(Error::invalid(
            "run_context_json",
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
        Err(e) => Err(Error::invalid(
            "run_context_json",
            format!("is not valid JSON: {e}"),
        )),
    }
}

/// Whether `s` is a context id: `root` then `.`-separated name segments.
fn valid_context_id(s: &str) -> bool {
    let mut parts = s.split('.');
    parts.next() == Some("root") && parts.all(valid_name)
}

/// Validates an event filter (the request's `filter`).
pub fn filter(f: Option<pb::EventFilter>, limits: &RunDefaults) -> Result<Filter> {
    let Some(f) = f else {
        return Ok(Filter::default());
    };
    for (field, n) in [
        ("filter.context_prefixes", f.context_prefixes.len()),
        ("filter.kinds", f.kinds.len()),
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
        .context_prefixes
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
    for p in &f.context_prefixes {
        if !valid_context_id(p) {
            return Err(Error::invalid(
                "filter.context_prefixes",
                format!("{p:?} is not a context id (root, root.agent.1, …)"),
            ));
        }
    }
    let mut kinds = std::collections::HashSet::new();
    for k in &f.kinds {
        match pb::EventKind::try_from(*k) {
            Ok(pb::EventKind::Unspecified) => {}
            Ok(kind) => {
                kinds.insert(kind as i32);
            }
            Err(_) => {
                return Err(Error::invalid(
                    "filter.kinds",
                    format!("{k} is not an EventKind"),
                ));
            }
        }
    }
    Ok(Filter {
        max_depth: f.max_depth,
        prefixes: f.context_prefixes,
        kinds,
    })
}

fn approval_mode(v: i32) -> Result<pb::ApprovalMode> {
    pb::ApprovalMode::try_from(v)
        .map_err(|_| Error::invalid("approval_mode", format!("{v} is not an ApprovalMode")))
}

fn history(messages: Vec<pb::Message>) -> Result<Vec<ChatMessage>> {
    messages
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            let role = match pb::Role::try_from(m.role) {
                Ok(pb::Role::System) => Role::System,
                Ok(pb::Role::User) => Role::User,
                Ok(pb::Role::Assistant) => Role::Assistant,
                Ok(pb::Role::Tool) => Role::Tool,
                _ => {
                    return Err(Error::invalid(
                        "history",
                        format!("message {i} has no valid role"),
                    ));
                }
            };
            let tool_calls = m
                .tool_calls
                .into_iter()
                .map(|c| {
                    let arguments = serde_json::from_str(&c.arguments_json).map_err(|e| {
                        Error::invalid(
                            "history",
                            format!("message {i}: arguments of {} are not JSON: {e}", c.call_id),
                        )
                    })?;
                    Ok(ToolCallRequest {
                        id: c.call_id,
                        name: c.tool,
                        arguments,
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            Ok(ChatMessage {
                role,
                content: m.content,
                tool_calls,
                tool_call_id: (!m.tool_call_id.is_empty()).then_some(m.tool_call_id),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_ids_and_run_contexts() {
        assert!(valid_context_id("root"));
        assert!(valid_context_id("root.researcher.1"));
        assert!(!valid_context_id("root."));
        assert!(!valid_context_id("Root"));
        assert!(!valid_context_id("root.a b"));
        assert!(!valid_context_id(""));
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

    fn field_of(e: &Error) -> String {
        match e {
            Error::InvalidArgument { field, .. } | Error::Exhausted { field, .. } => {
                field.to_string()
            }
            other => panic!("not a field error: {other:?}"),
        }
    }

    #[test]
    fn filters_convert_with_their_bounds_and_name_the_field() {
        let limits = RunDefaults::default();
        assert!(filter(None, &limits).expect("none").prefixes.is_empty());
        let f = filter(
            Some(pb::EventFilter {
                max_depth: Some(2),
                context_prefixes: vec!["root.a.1".into()],
                kinds: vec![
                    pb::EventKind::Unspecified as i32,
                    pb::EventKind::TextDelta as i32,
                    pb::EventKind::TextDelta as i32,
                ],
            }),
            &limits,
        )
        .expect("valid");
        assert_eq!(
            (f.max_depth, f.kinds.len()),
            (Some(2), 1),
            "unspecified dropped, deduplicated"
        );
        let bad = |f: pb::EventFilter| field_of(&filter(Some(f), &limits).expect_err("bad"));
        assert_eq!(
            bad(pb::EventFilter {
                context_prefixes: vec!["nope".into()],
                ..Default::default()
            }),
            "filter.context_prefixes"
        );
        assert_eq!(
            bad(pb::EventFilter {
                kinds: vec![9999],
                ..Default::default()
            }),
            "filter.kinds"
        );
        assert!(matches!(
            filter(
                Some(pb::EventFilter {
                    kinds: vec![1; limits.max_filter_entries + 1],
                    ..Default::default()
                }),
                &limits
            ),
            Err(Error::Exhausted { .. })
        ));
    }

    #[test]
    fn history_converts_roles_and_tool_calls() {
        let call = pb::ToolCall {
            call_id: "c1".into(),
            tool: "t".into(),
            arguments_json: r#"{"x":1}"#.into(),
        };
        let h = history(vec![
            pb::Message {
                role: pb::Role::User as i32,
                content: "hi".into(),
                ..Default::default()
            },
            pb::Message {
                role: pb::Role::Assistant as i32,
                tool_calls: vec![call.clone()],
                ..Default::default()
            },
            pb::Message {
                role: pb::Role::Tool as i32,
                content: "out".into(),
                tool_call_id: "c1".into(),
                ..Default::default()
            },
        ])
        .expect("valid");
        assert_eq!(h[0].role, Role::User);
        assert_eq!(h[1].tool_calls[0].arguments["x"], 1);
        assert_eq!(h[2].tool_call_id.as_deref(), Some("c1"));
        assert_eq!(h[0].tool_call_id, None);
        let no_role = history(vec![pb::Message::default()]).expect_err("no role");
        assert!(no_role.to_string().contains("message 0"), "{no_role}");
        let bad_args = history(vec![pb::Message {
            role: pb::Role::Assistant as i32,
            tool_calls: vec![pb::ToolCall {
                arguments_json: "{".into(),
                ..call
            }],
            ..Default::default()
        }])
        .expect_err("bad JSON");
        assert_eq!(field_of(&bad_args), "history");
        assert_eq!(
            approval_mode(99).map_err(|e| field_of(&e)),
            Err("approval_mode".into())
        );
    }
}
