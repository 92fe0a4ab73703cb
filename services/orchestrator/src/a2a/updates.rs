//! How Baton's events and outputs become A2A's parts, messages, artifacts
//! and update metadata (the lines a progress event shows, Baton's context
//! extension), for `task`'s fold.

use std::collections::BTreeMap;

use baton_proto::{
    a2a::v1 as lf,
    json_value::{Struct, Value, value::Kind},
    v1::{self as pb, run_event::Payload},
};

use super::names::{EXTENSION, OUTPUT_ARTIFACT};

/// A one-text-part message.
pub fn message(
    message_id: String,
    task_id: &str,
    context_id: &str,
    role: lf::Role,
    text: String,
) -> lf::Message {
    lf::Message {
        message_id,
        context_id: context_id.to_owned(),
        task_id: task_id.to_owned(),
        role: role as i32,
        parts: vec![text_part(text)],
        metadata: None,
        extensions: Vec::new(),
        reference_task_ids: Vec::new(),
    }
}

/// A text part.
pub fn text_part(text: String) -> lf::Part {
    lf::Part {
        content: Some(lf::part::Content::Text(text)),
        metadata: None,
        filename: String::new(),
        media_type: String::new(),
    }
}

/// What an agent in A2A messages mode answered: a message, or artifacts.
pub enum NativeOutput {
    /// A direct message.
    Message(lf::Message),
    /// The task's artifacts.
    Artifacts(Vec<lf::Artifact>),
}

/// An output `{"message": Message}` or `{"artifacts": [Artifact]}`; `None`
/// for any other (a text answer).
pub fn native_output(output: &str) -> Option<NativeOutput> {
    #[derive(serde::Deserialize)]
    struct Native {
        message: Option<lf::Message>,
        artifacts: Option<Vec<lf::Artifact>>,
    }
    let native: Native = serde_json::from_str(output.trim()).ok()?;
    match (native.message, native.artifacts) {
        (Some(mut m), None) => {
            m.role = lf::Role::Agent as i32;
            if m.message_id.is_empty() {
                m.message_id = uuid::Uuid::new_v4().to_string();
            }
            Some(NativeOutput::Message(m))
        }
        (None, Some(a)) if !a.is_empty() => Some(NativeOutput::Artifacts(a)),
        _ => None,
    }
}

/// The text artifact `output` of a completed run.
pub fn output_artifact(output: &str) -> lf::Artifact {
    lf::Artifact {
        artifact_id: OUTPUT_ARTIFACT.to_owned(),
        name: OUTPUT_ARTIFACT.to_owned(),
        description: "The run's final output.".to_owned(),
        parts: vec![text_part(output.to_owned())],
        metadata: None,
        extensions: Vec::new(),
    }
}

/// A failure as a status message says it: `CODE: message`.
pub fn failure_text(code: i32, message: &str) -> String {
    format!(
        "{}: {message}",
        baton_proto::code_name(tonic::Code::from_i32(code))
    )
}

/// The line a progress event shows a client that does not know the
/// extension; `None` for events that say nothing new.
pub fn progress_line(event: &pb::RunEvent, payload: &Payload) -> Option<String> {
    let at = if event.agent.is_empty() {
        String::new()
    } else {
        format!("{}: ", event.agent)
    };
    Some(match payload {
        Payload::AgentStarted(a) if event.depth > 0 => {
            format!("{}: sub-agent started at depth {}", a.agent, event.depth)
        }
        Payload::AgentStarted(_) => return None,
        Payload::AgentCompleted(_) if event.depth > 0 => format!("{at}sub-agent done"),
        Payload::AgentCompleted(_) => return None,
        Payload::Handoff(h) => format!("handoff from {} to {}", h.from_agent, h.to_agent),
        Payload::ToolCallStarted(t) => format!("{at}calling tool {}", t.tool),
        Payload::ToolProgress(p) if p.message.is_empty() => {
            format!("{at}tool {}: {}%", p.tool, p.percent)
        }
        Payload::ToolProgress(p) => format!("{at}tool {}: {}% {}", p.tool, p.percent, p.message),
        Payload::ToolOptions(o) => format!("{at}tool {} offers: {}", o.tool, o.options.join(", ")),
        Payload::ToolCallCompleted(t) if t.error.is_empty() => format!("{at}tool {} done", t.tool),
        Payload::ToolCallCompleted(t) => format!("{at}tool {} failed: {}", t.tool, t.error),
        Payload::StepStarted(s) => format!("step {} started ({})", s.step_id, s.agent),
        Payload::StepCompleted(s) => format!("step {} done", s.step_id),
        Payload::StepFailed(s) => format!("step {} failed: {}", s.step_id, s.error),
        Payload::StepSkipped(s) => format!("step {} skipped", s.step_id),
        Payload::PipelineCompleted(_) => "pipeline done".to_owned(),
        Payload::ModelFallback(f) => format!(
            "{at}{} failed ({}), {} answers instead{}",
            f.from_model,
            f.reason,
            f.to_model,
            if f.discarded_text {
                "; the text so far is discarded"
            } else {
                ""
            }
        ),
        Payload::BudgetExhausted(b) => format!("{at}{} ({})", b.message, b.action),
        Payload::RateLimitWait(w) => format!(
            "{at}waiting for {}'s rate limit, {:.1} s",
            w.provider,
            w.wait
                .map_or(0.0, |d| d.seconds as f64 + f64::from(d.nanos) / 1e9)
        ),
        _ => return None,
    })
}

/// The extension's metadata of an update made from `event`.
pub fn extension_meta(event: &pb::RunEvent, payload: &Payload) -> Struct {
    let kind = crate::run::events::kind_of(payload);
    let kind = kind
        .as_str_name()
        .strip_prefix("EVENT_KIND_")
        .unwrap_or(kind.as_str_name());
    let detail = [
        ("contextId", string(&event.context_id)),
        ("parentContextId", string(&event.parent_context_id)),
        ("depth", number(f64::from(event.depth))),
        ("agent", string(&event.agent)),
        ("kind", string(kind)),
        ("seq", number(event.seq as f64)),
    ];
    let mut ids = BTreeMap::new();
    match payload {
        Payload::ApprovalRequested(a) => {
            ids.insert("approvalId".to_owned(), string(&a.approval_id));
        }
        Payload::InputRequested(q) => {
            ids.insert("inputId".to_owned(), string(&q.input_id));
        }
        _ => {}
    }
    let mut fields: BTreeMap<String, Value> =
        detail.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
    fields.extend(ids);
    let mut outer = BTreeMap::new();
    outer.insert(
        EXTENSION.to_owned(),
        Value {
            kind: Some(Kind::StructValue(Struct { fields })),
        },
    );
    Struct { fields: outer }
}

fn string(s: &str) -> Value {
    Value {
        kind: Some(Kind::StringValue(s.to_owned())),
    }
}

fn number(n: f64) -> Value {
    Value {
        kind: Some(Kind::NumberValue(n)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_a2a_messages_output_is_a_message_artifacts_or_text() {
        let m = native_output(r#"{"message": {"parts": [{"text": "hi"}]}}"#);
        match m {
            Some(NativeOutput::Message(m)) => {
                assert_eq!(m.role, lf::Role::Agent as i32);
                assert!(!m.message_id.is_empty());
            }
            _ => panic!("a message"),
        }
        let a = native_output(
            r#"{"artifacts": [{"artifactId": "a", "parts": [{"url": "https://x/o.txt", "filename": "o.txt", "mediaType": "text/plain"}]}]}"#,
        );
        assert!(matches!(a, Some(NativeOutput::Artifacts(a)) if a.len() == 1));
        assert!(native_output("plain text").is_none());
        assert!(native_output(r#"{"artifacts": []}"#).is_none());
    }
}
