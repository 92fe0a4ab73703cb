//! What a caller's message says: checked into the run's input text, the
//! approval it gives, the approval or question it names, the trace its
//! context id is.

use baton_common::ids::TraceId;
use baton_proto::a2a::v1 as lf;
use opentelemetry::{
    Context,
    trace::{SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceState},
};

use super::{error::A2aError, names::EXTENSION};
use crate::run::record::ApprovalAnswer;

type Result<T> = std::result::Result<T, A2aError>;

/// Which approval or question a message names in the extension's
/// metadata.
pub enum Named {
    /// An approval, by id.
    Approval(String),
    /// A request for input, by id.
    Input(String),
}

/// The approval or question `message` names in Baton's extension's
/// metadata (`approvalId`, `inputId`), if it names one.
pub fn named_ask(message: &lf::Message) -> Option<Named> {
    use baton_proto::json_value::value::Kind;
    let meta = message.metadata.as_ref()?.fields.get(EXTENSION)?;
    let Some(Kind::StructValue(s)) = &meta.kind else {
        return None;
    };
    let text = |k: &str| match s.fields.get(k).and_then(|v| v.kind.as_ref()) {
        Some(Kind::StringValue(v)) if !v.is_empty() => Some(v.clone()),
        _ => None,
    };
    text("approvalId")
        .map(Named::Approval)
        .or_else(|| text("inputId").map(Named::Input))
}

/// A checked message and its text: what the run's input is.
pub fn checked_message(message: Option<lf::Message>) -> Result<(lf::Message, String)> {
    use lf::part::Content;
    let message = message.ok_or_else(|| A2aError::invalid("message", "is required"))?;
    if message.message_id.is_empty() {
        return Err(A2aError::invalid("message.messageId", "is required"));
    }
    match lf::Role::try_from(message.role) {
        Ok(lf::Role::User) => {}
        _ => {
            return Err(A2aError::invalid(
                "message.role",
                "must be ROLE_USER (a caller's message)",
            ));
        }
    }
    if message.parts.is_empty() {
        return Err(A2aError::invalid(
            "message.parts",
            "at least one part is required",
        ));
    }
    let mut texts = Vec::with_capacity(message.parts.len());
    for (i, part) in message.parts.iter().enumerate() {
        match &part.content {
            Some(Content::Text(t)) => texts.push(t.clone()),
            Some(Content::Data(v)) => texts.push(serde_json::to_string(v).unwrap_or_default()),
            // A Baton agent reads text: a file part becomes a line that
            // says what was attached.
            Some(Content::Raw(bytes)) => texts.push(format!(
                "[file{}: {}, {} bytes]",
                file_name(&part.filename),
                media_type(&part.media_type),
                bytes.len()
            )),
            Some(Content::Url(url)) => texts.push(format!(
                "[file{}: {}, at {url}]",
                file_name(&part.filename),
                media_type(&part.media_type)
            )),
            None => {
                return Err(A2aError::invalid(
                    &format!("message.parts[{i}]"),
                    "has no content (text, data, raw or url)",
                ));
            }
        }
    }
    let text = texts.join("\n");
    if text.trim().is_empty() {
        return Err(A2aError::invalid("message.parts", "hold no text"));
    }
    Ok((message, text))
}

fn file_name(name: &str) -> String {
    if name.is_empty() {
        String::new()
    } else {
        format!(" {name}")
    }
}

fn media_type(t: &str) -> &str {
    if t.is_empty() {
        "application/octet-stream"
    } else {
        t
    }
}

/// The approval a message gives: `approve`/`deny` (or yes/no) first, a
/// reason after; or a data part `{"approved": bool, "reason": "..."}`.
pub fn approval_answer(message: &lf::Message, text: &str) -> Result<ApprovalAnswer> {
    use lf::part::Content;
    for part in &message.parts {
        if let Some(Content::Data(v)) = &part.content
            && let Ok(serde_json::Value::Object(o)) = serde_json::to_value(v)
            && let Some(approved) = o.get("approved").and_then(|v| v.as_bool())
        {
            let reason = o.get("reason").and_then(|v| v.as_str()).unwrap_or_default();
            return Ok(ApprovalAnswer {
                approved,
                reason: reason.to_owned(),
            });
        }
    }
    let text = text.trim();
    let (word, rest) = text
        .split_once(|c: char| c.is_whitespace() || c == ':' || c == ',')
        .unwrap_or((text, ""));
    let approved = match word.to_ascii_lowercase().as_str() {
        "approve" | "approved" | "yes" | "y" | "ok" | "allow" => true,
        "deny" | "denied" | "no" | "n" | "reject" => false,
        _ => {
            return Err(A2aError::invalid(
                "message.parts",
                "the task waits for an approval: answer `approve` or `deny` (a reason may follow), or a data part {\"approved\": true|false, \"reason\": \"...\"}",
            ));
        }
    };
    Ok(ApprovalAnswer {
        approved,
        reason: rest.trim().to_owned(),
    })
}

/// The trace of the context `context_id` of `tenant`'s: a context id this
/// server gave out is a trace id; any other a caller chose is mapped to
/// one (a hash of the tenant and the id), so every task of a context is in
/// one trace, and `ListTasks` finds a context's tasks by their trace.
pub fn context_trace(tenant: &str, context_id: &str) -> String {
    if let Ok(trace) = TraceId::parse(context_id) {
        return trace.as_str().to_owned();
    }
    let hash = |seed: u64| {
        let bytes = tenant.bytes().chain([0]).chain(context_id.bytes());
        baton_common::ids::fnv1a(seed, bytes)
    };
    let (hi, lo) = (hash(0x9e37_79b9_7f4a_7c15), hash(0x2545_f491_4f6c_dd1d));
    format!("{hi:016x}{:016x}", lo | 1)
}

/// The parent context of a run in trace `trace` (32 hex digits).
pub fn trace_parent(trace: &str) -> Context {
    let Ok(trace_id) = opentelemetry::trace::TraceId::from_hex(trace) else {
        return Context::new();
    };
    let parent = SpanContext::new(
        trace_id,
        SpanId::from_bytes(rand_span()),
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    );
    Context::new().with_remote_span_context(parent)
}

fn rand_span() -> [u8; 8] {
    let id = uuid::Uuid::new_v4();
    let mut out = [0u8; 8];
    out.copy_from_slice(&id.as_bytes()[..8]);
    out[0] |= 1;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_message(parts: Vec<lf::part::Content>) -> lf::Message {
        lf::Message {
            message_id: "m".into(),
            role: lf::Role::User as i32,
            parts: parts
                .into_iter()
                .map(|c| lf::Part {
                    content: Some(c),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_message_is_checked_field_by_field_and_files_become_lines() {
        use lf::part::Content;
        let field = |m: Option<lf::Message>| match checked_message(m) {
            Err(A2aError::Invalid { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(field(None), "message");
        let mut m = text_message(vec![Content::Text("hi".into())]);
        m.message_id.clear();
        assert_eq!(field(Some(m)), "message.messageId");
        let mut m = text_message(vec![Content::Text("hi".into())]);
        m.role = lf::Role::Agent as i32;
        assert_eq!(field(Some(m)), "message.role");
        assert_eq!(field(Some(text_message(vec![]))), "message.parts");
        let (_, text) = checked_message(Some(text_message(vec![
            Content::Text("look".into()),
            Content::Raw(vec![1, 2, 3]),
            Content::Url("https://x/y.pdf".into()),
        ])))
        .expect("checked");
        assert_eq!(
            text,
            "look\n[file: application/octet-stream, 3 bytes]\n[file: application/octet-stream, at https://x/y.pdf]"
        );
    }

    #[test]
    fn an_approval_is_approve_or_deny_with_a_reason_or_a_data_part() {
        use lf::part::Content;
        let m = text_message(vec![Content::Text("x".into())]);
        let a = approval_answer(&m, "approve: looks fine").expect("answer");
        assert!(a.approved);
        assert_eq!(a.reason, "looks fine");
        let a = approval_answer(&m, "No").expect("answer");
        assert!(!a.approved);
        assert!(approval_answer(&m, "perhaps").is_err());
        let data: baton_proto::json_value::Value =
            serde_json::json!({"approved": true, "reason": "ok"}).into();
        let m = text_message(vec![Content::Data(data)]);
        let a = approval_answer(&m, "").expect("answer");
        assert!(a.approved);
        assert_eq!(a.reason, "ok");
    }

    #[test]
    fn a_context_id_is_a_trace_id_or_maps_to_one_per_tenant() {
        let trace = "0af7651916cd43dd8448eb211c80319c";
        assert_eq!(context_trace("t", trace), trace);
        let a = context_trace("t1", "my-conversation");
        assert_eq!(a, context_trace("t1", "my-conversation"));
        assert_ne!(a, context_trace("t2", "my-conversation"));
        assert!(TraceId::parse(&a).is_ok(), "{a}");
    }
}
