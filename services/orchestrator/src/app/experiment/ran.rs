//! What a run's stream came to, read to its end.

use baton_proto::v1::{self as pb, run_event::Payload};
use futures::StreamExt as _;
use serde_json::Value;

use crate::eval::score::ActualCall;

/// What a run's stream came to.
pub(super) struct Ran {
    /// `completed`, `failed`, `cancelled`, or `error` (the stream broke or
    /// ended without the run's end).
    pub(super) status: &'static str,
    /// A failure's code.
    pub(super) code: i32,
    pub(super) output: String,
    pub(super) error: String,
    pub(super) usage: pb::Usage,
    pub(super) calls: Vec<ActualCall>,
    pub(super) conversation: String,
    /// What each budget that refused a model call said (`BudgetExhausted`,
    /// at any depth): `(budget, message)`.
    pub(super) exhausted: Vec<(String, String)>,
}

/// Reads a run's events to its end.
pub(super) async fn collect(mut events: crate::run::events::EventStream) -> Ran {
    let mut ran = Ran {
        status: "error",
        code: 0,
        output: String::new(),
        error: "the run's stream ended without its end".into(),
        usage: pb::Usage::default(),
        calls: Vec::new(),
        conversation: String::new(),
        exhausted: Vec::new(),
    };
    while let Some(e) = events.next().await {
        let e = match e {
            Ok(e) => e,
            Err(err) => {
                ran.error = err.to_string();
                break;
            }
        };
        match e.payload {
            Some(Payload::RunStarted(s)) => ran.conversation = s.conversation_id,
            Some(Payload::ToolCallStarted(s)) => ran.calls.push(ActualCall {
                tool: s.tool,
                arguments: serde_json::from_str(&s.arguments_json).unwrap_or(Value::Null),
                depth: e.depth,
            }),
            Some(Payload::BudgetExhausted(x)) => ran.exhausted.push((x.budget, x.message)),
            Some(Payload::RunCompleted(c)) => {
                ran.status = "completed";
                ran.output = c.output;
                ran.error.clear();
                ran.usage = c.usage.unwrap_or_default();
                break;
            }
            Some(Payload::RunFailed(f)) => {
                ran.status = "failed";
                ran.code = f.code;
                ran.error = f.message;
                ran.usage = f.usage.unwrap_or_default();
                break;
            }
            Some(Payload::RunCancelled(c)) => {
                ran.status = "cancelled";
                ran.error = if c.reason.is_empty() {
                    "cancelled".into()
                } else {
                    c.reason
                };
                ran.usage = c.usage.unwrap_or_default();
                break;
            }
            _ => {}
        }
    }
    ran
}
