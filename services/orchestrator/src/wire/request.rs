//! Requests into domain values ([`crate::request`]), field by field, with
//! `TryFrom`: what can be checked without the server's catalog or limits.
//! Every problem is `INVALID_ARGUMENT` naming the field; nothing starts.

use std::time::Duration;

use baton_proto::v1 as pb;
use prost::Message as _;

use crate::{
    catalog::{names::valid_name, settings::Settings},
    error::{Error, Result},
    model::{ChatMessage, Role, ToolCallRequest},
    request::{
        AgentRequest, DEFAULT_RUNS_PAGE, ForkRequest, MAX_RUNS_PAGE, PipelineRequest,
        ReplayRequest, RequestOptions, RequestedLimits, RunsQuery, StoredRequest,
    },
    run::{events::Filter, view::parse_page_token},
};

impl TryFrom<pb::RunAgentRequest> for AgentRequest {
    type Error = Error;

    fn try_from(r: pb::RunAgentRequest) -> Result<Self> {
        let stored = StoredRequest(r.encode_to_vec());
        let conversation = conversation(&r)?;
        Ok(Self {
            conversation,
            history: history(r.history)?,
            options: options(
                r.run_context_json,
                r.default_model,
                r.limits,
                r.approval_mode,
                r.filter,
                r.detach,
                r.settings,
                r.webhooks,
            )?,
            agent: r.agent,
            input: r.input,
            stored,
            labels: Default::default(),
        })
    }
}

impl TryFrom<pb::RunPipelineRequest> for PipelineRequest {
    type Error = Error;

    fn try_from(r: pb::RunPipelineRequest) -> Result<Self> {
        let stored = StoredRequest(r.encode_to_vec());
        let mut initial_slots: Vec<(String, String)> = r.initial_slots.into_iter().collect();
        initial_slots.sort();
        Ok(Self {
            pipeline: r.pipeline,
            initial_slots,
            keep_context: r.keep_context,
            options: options(
                r.run_context_json,
                r.default_model,
                r.limits,
                r.approval_mode,
                r.filter,
                r.detach,
                r.settings,
                r.webhooks,
            )?,
            stored,
        })
    }
}

impl TryFrom<&pb::ListRunsRequest> for RunsQuery {
    type Error = Error;

    /// AIP-158: a page size of 0 is the default, larger ones are lowered to
    /// the maximum.
    fn try_from(r: &pb::ListRunsRequest) -> Result<Self> {
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
            let id = parse_page_token(&r.page_token).ok_or_else(|| {
                Error::invalid(
                    "page_token",
                    "is not a token of a previous ListRuns page (use its next_page_token)",
                )
            })?;
            Some(id.to_owned())
        };
        Ok(Self {
            status,
            waiting: r.waiting,
            failing_scores: r.failing_scores,
            after,
            size,
        })
    }
}

/// The options RunAgent and RunPipeline share, converted (one argument a
/// field the two requests share).
#[allow(clippy::too_many_arguments)]
fn options(
    run_context_json: String,
    default_model: String,
    run_limits: Option<pb::RunLimits>,
    mode: i32,
    events: Option<pb::EventFilter>,
    detach: bool,
    generation: Option<pb::GenerationSettings>,
    webhooks: Vec<pb::RunWebhook>,
) -> Result<RequestOptions> {
    Ok(RequestOptions {
        run_context_json,
        default_model,
        limits: limits(run_limits)?,
        approval_mode: approval_mode(mode)?,
        filter: filter(events)?,
        detach,
        settings: settings(generation)?,
        webhooks,
    })
}

/// The request's generation settings, checked.
fn settings(settings: Option<pb::GenerationSettings>) -> Result<Settings> {
    Settings::from_request(settings).map_err(|e| Error::invalid(e.field, e.message))
}

fn limits(l: Option<pb::RunLimits>) -> Result<RequestedLimits> {
    let l = l.unwrap_or_default();
    let timeout = |field: &'static str, v: Option<baton_proto::wkt::Duration>| -> Result<_> {
        let Some(v) = v else { return Ok(None) };
        if v.seconds < 0 || v.nanos < 0 || v.nanos >= 1_000_000_000 {
            return Err(Error::invalid(field, "must be a positive duration"));
        }
        Ok(Some(Duration::new(v.seconds as u64, v.nanos as u32)))
    };
    Ok(RequestedLimits {
        max_depth: l.max_depth,
        max_turns: l.max_turns,
        run_timeout: timeout("limits.run_timeout", l.run_timeout)?,
        tool_timeout: timeout("limits.tool_timeout", l.tool_timeout)?,
        model_timeout: timeout("limits.model_timeout", l.model_timeout)?,
        approval_timeout: timeout("limits.approval_timeout", l.approval_timeout)?,
        budget: budget(l.budget)?,
    })
}

/// The run's budget: each bound set is more than 0.
fn budget(b: Option<pb::Budget>) -> Result<crate::model::call::budget::Limit> {
    let Some(b) = b else {
        return Ok(Default::default());
    };
    crate::catalog::budget::check_amount("limits.budget", b.tokens, b.cost).map_err(|e| {
        let (field, message) = e.split_once(": ").unwrap_or(("limits.budget", &e));
        Error::invalid(field.to_owned(), message.to_owned())
    })?;
    Ok(crate::model::call::budget::Limit {
        tokens: b.tokens,
        cost_nanos: b.cost.map(crate::catalog::budget::cost_nanos),
    })
}

/// Whether `s` is a context id: `root` then `.`-separated name segments.
fn valid_context_id(s: &str) -> bool {
    let mut parts = s.split('.');
    parts.next() == Some("root") && parts.all(valid_name)
}

/// A ForkRun request: its filter converted; the run, the point and the
/// edit are checked by the core.
pub fn fork(r: pb::ForkRunRequest) -> Result<ForkRequest> {
    Ok(ForkRequest {
        filter: filter(r.filter)?,
        run_id: r.run_id,
        at_seq: r.at_seq,
        edit: r.edit.and_then(|e| e.edit),
        detach: r.detach,
    })
}

/// A ReplayRun request: its filter converted; the run is checked by the
/// core.
pub fn replay(r: pb::ReplayRunRequest) -> Result<ReplayRequest> {
    Ok(ReplayRequest {
        filter: filter(r.filter)?,
        run_id: r.run_id,
        strict: r.strict,
        detach: r.detach,
    })
}

/// An event filter (a request's `filter`); its bounds are the server's,
/// checked by the core (`request::validate::check_filter`).
pub fn filter(f: Option<pb::EventFilter>) -> Result<Filter> {
    let Some(f) = f else {
        return Ok(Filter::default());
    };
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
        listed_kinds: f.kinds.len(),
    })
}

impl From<&Filter> for pb::EventFilter {
    /// A filter as a request carries it (a watch forwarded to a peer).
    fn from(f: &Filter) -> Self {
        let mut kinds: Vec<i32> = f.kinds.iter().copied().collect();
        kinds.sort_unstable();
        Self {
            max_depth: f.max_depth,
            context_prefixes: f.prefixes.clone(),
            kinds,
        }
    }
}

fn approval_mode(v: i32) -> Result<pb::ApprovalMode> {
    pb::ApprovalMode::try_from(v)
        .map_err(|_| Error::invalid("approval_mode", format!("{v} is not an ApprovalMode")))
}

/// The conversation a RunAgent asks for (none: neither `conversation_id`
/// nor `new_conversation`).
fn conversation(r: &pb::RunAgentRequest) -> Result<Option<crate::request::ConversationAsk>> {
    use crate::conversation::{Busy, check_id, store::Open};
    if r.conversation_id.is_empty() && !r.new_conversation {
        if r.conversation_ttl.is_some() {
            return Err(Error::invalid(
                "conversation_ttl",
                "is only read with conversation_id or new_conversation",
            ));
        }
        return Ok(None);
    }
    if !r.conversation_id.is_empty() {
        check_id("conversation_id", &r.conversation_id)?;
    }
    if !r.history.is_empty() {
        return Err(Error::invalid(
            "history",
            "must be empty with conversation_id or new_conversation: the conversation holds the history",
        ));
    }
    let busy = match pb::ConversationBusy::try_from(r.conversation_busy) {
        Ok(pb::ConversationBusy::Refuse) => Busy::Refuse,
        Ok(_) => Busy::Wait,
        Err(_) => {
            return Err(Error::invalid(
                "conversation_busy",
                format!("{} is not a ConversationBusy", r.conversation_busy),
            ));
        }
    };
    let ttl = match &r.conversation_ttl {
        None => None,
        Some(d) if d.seconds < 0 || d.nanos < 0 || d.nanos >= 1_000_000_000 => {
            return Err(Error::invalid(
                "conversation_ttl",
                "must be a positive duration",
            ));
        }
        Some(d) => Some(Duration::new(d.seconds as u64, d.nanos as u32)),
    };
    if ttl.is_some_and(|t| t.is_zero()) {
        return Err(Error::invalid("conversation_ttl", "must be positive"));
    }
    Ok(Some(crate::request::ConversationAsk {
        id: r.conversation_id.clone(),
        open: if r.new_conversation {
            Open::New
        } else {
            Open::Existing
        },
        busy,
        ttl,
    }))
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

    fn field_of(e: &Error) -> String {
        e.field().expect("a field error").to_owned()
    }

    #[test]
    fn context_ids() {
        assert!(valid_context_id("root"));
        assert!(valid_context_id("root.researcher.1"));
        assert!(!valid_context_id("root."));
        assert!(!valid_context_id("Root"));
        assert!(!valid_context_id("root.a b"));
        assert!(!valid_context_id(""));
    }

    #[test]
    fn filters_convert_and_name_the_field() {
        assert!(filter(None).expect("none").prefixes.is_empty());
        let f = filter(Some(pb::EventFilter {
            max_depth: Some(2),
            context_prefixes: vec!["root.a.1".into()],
            kinds: vec![
                pb::EventKind::Unspecified as i32,
                pb::EventKind::TextDelta as i32,
                pb::EventKind::TextDelta as i32,
            ],
        }))
        .expect("valid");
        assert_eq!(
            (f.max_depth, f.kinds.len()),
            (Some(2), 1),
            "unspecified dropped, deduplicated"
        );
        let bad = |f: pb::EventFilter| field_of(&filter(Some(f)).expect_err("bad"));
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
