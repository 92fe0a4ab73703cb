//! A run's approvals and questions as MCP elicitation requests, and the
//! client's answers as the core's. What was decided:
//!
//! - an approval asks for a boolean `approve` (and an optional `reason`);
//!   accepting with `approve: true` grants it, anything else (`false`,
//!   decline, cancel, an error answer) denies it and the run goes on (the
//!   model sees the denial);
//! - a question asks for a string `answer` (one of its options when it
//!   has some); accepting answers it; declining, cancelling or an error
//!   answer fails the call: the run is cancelled, and the tool result says
//!   the question was not answered.

use baton_proto::v1 as pb;
use rmcp::{
    model::{ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema, EnumSchema},
    service::ServiceError,
};

use crate::run::record::ApprovalAnswer;

/// The property an approval's answer is in.
pub const APPROVE: &str = "approve";
/// The property a denial's reason is in.
pub const REASON: &str = "reason";
/// The property a question's answer is in.
pub const ANSWER: &str = "answer";

/// Where in the run something is asked: `agent` in context `context`.
pub struct Asker<'a> {
    /// The agent asking.
    pub agent: &'a str,
    /// Its context (`root`, `root.billing.1`).
    pub context: &'a str,
}

/// The elicitation request of an approval.
pub fn approval_request(at: &Asker<'_>, a: &pb::ApprovalRequested) -> ElicitRequestParams {
    let schema = ElicitationSchema::builder()
        .required_bool_property(APPROVE, |b| {
            b.title("Approve")
                .description(format!("whether {} may run", a.tool))
        })
        .string_property(REASON, |s| s.title("Reason").description("why (optional)"))
        .build()
        .unwrap_or_else(|_| ElicitationSchema::new(Default::default()));
    ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: format!(
            "{} (in {}) wants to call {} with {}. Approve?",
            at.agent, at.context, a.tool, a.arguments_json
        ),
        requested_schema: schema,
    }
}

/// The elicitation request of a question.
pub fn question_request(at: &Asker<'_>, q: &pb::InputRequested) -> ElicitRequestParams {
    let builder = ElicitationSchema::builder();
    let builder = if q.options.is_empty() {
        builder.required_string_property(ANSWER, |s| s.title("Answer"))
    } else {
        builder.required_enum_schema(
            ANSWER,
            EnumSchema::builder(q.options.clone())
                .title("Answer")
                .build(),
        )
    };
    let schema = builder
        .build()
        .unwrap_or_else(|_| ElicitationSchema::new(Default::default()));
    ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: format!("{} (in {}) asks: {}", at.agent, at.context, q.prompt),
        requested_schema: schema,
    }
}

/// What the client's answer to an approval decides.
pub fn approval_answer(answered: Result<ElicitResult, ServiceError>) -> ApprovalAnswer {
    let denied = |reason: String| ApprovalAnswer {
        approved: false,
        reason,
    };
    let result = match answered {
        Ok(result) => result,
        Err(e) => return denied(format!("the MCP client did not answer: {e}")),
    };
    match result.action {
        ElicitationAction::Accept => {
            let content = result.content.unwrap_or_default();
            let approved = content.get(APPROVE).and_then(|v| v.as_bool()) == Some(true);
            let reason = content
                .get(REASON)
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_owned();
            if approved {
                ApprovalAnswer { approved, reason }
            } else if reason.is_empty() {
                denied("denied by the MCP client".into())
            } else {
                denied(reason)
            }
        }
        ElicitationAction::Decline => denied("declined by the MCP client".into()),
        _ => denied("cancelled by the MCP client".into()),
    }
}

/// The client's answer to a question, or why the call fails without one.
pub fn question_answer(
    prompt: &str,
    answered: Result<ElicitResult, ServiceError>,
) -> Result<String, String> {
    let result = match answered {
        Ok(result) => result,
        Err(e) => {
            return Err(format!(
                "the question {prompt:?} was not answered: the MCP client failed to ({e})"
            ));
        }
    };
    match result.action {
        ElicitationAction::Accept => {
            let content = result.content.unwrap_or_default();
            match content.get(ANSWER) {
                Some(serde_json::Value::String(s)) => Ok(s.clone()),
                Some(other) if !other.is_null() => Ok(other.to_string()),
                _ => Err(format!(
                    "the question {prompt:?} was accepted without an `{ANSWER}`"
                )),
            }
        }
        refused => Err(refusal(prompt, &refused)),
    }
}

/// Why a call fails when its client refused to answer question `prompt`
/// (`action`: decline, or cancel).
pub fn refusal(prompt: &str, action: &ElicitationAction) -> String {
    let how = match action {
        ElicitationAction::Decline => "declined",
        _ => "cancelled",
    };
    format!("the question {prompt:?} was {how} by the MCP client, so the run was cancelled")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn result(action: ElicitationAction, content: Option<serde_json::Value>) -> ElicitResult {
        let mut r = ElicitResult::new(action);
        r.content = content;
        r
    }

    #[test]
    fn an_approval_is_a_boolean_form_granted_only_by_accepting_with_approve_true() {
        let at = Asker {
            agent: "billing",
            context: "root",
        };
        let asked = pb::ApprovalRequested {
            tool: "write_context".into(),
            arguments_json: "{}".into(),
            ..Default::default()
        };
        let wire = serde_json::to_value(approval_request(&at, &asked)).expect("json");
        assert_eq!(
            wire["requestedSchema"]["properties"][APPROVE]["type"],
            "boolean"
        );
        assert_eq!(wire["requestedSchema"]["required"], json!([APPROVE]));

        let yes = approval_answer(Ok(result(
            ElicitationAction::Accept,
            Some(json!({APPROVE: true})),
        )));
        assert!(yes.approved);
        let no = approval_answer(Ok(result(
            ElicitationAction::Accept,
            Some(json!({APPROVE: false, REASON: "too much"})),
        )));
        assert_eq!((no.approved, no.reason.as_str()), (false, "too much"));
        assert!(!approval_answer(Ok(result(ElicitationAction::Decline, None))).approved);
        assert!(!approval_answer(Ok(result(ElicitationAction::Cancel, None))).approved);
    }

    #[test]
    fn a_question_offers_its_options_and_only_an_accepted_answer_answers_it() {
        let at = Asker {
            agent: "interviewer",
            context: "root",
        };
        let asked = pb::InputRequested {
            prompt: "Which city?".into(),
            options: vec!["Paris".into(), "Lisbon".into()],
            ..Default::default()
        };
        let wire = serde_json::to_value(question_request(&at, &asked)).expect("json");
        assert_eq!(
            wire["requestedSchema"]["properties"][ANSWER]["enum"],
            json!(["Paris", "Lisbon"])
        );
        let open = pb::InputRequested {
            prompt: "Why?".into(),
            ..Default::default()
        };
        let wire = serde_json::to_value(question_request(&at, &open)).expect("json");
        assert_eq!(
            wire["requestedSchema"]["properties"][ANSWER]["type"],
            "string"
        );

        let answered = question_answer(
            "Which city?",
            Ok(result(
                ElicitationAction::Accept,
                Some(json!({ANSWER: "Lisbon"})),
            )),
        );
        assert_eq!(answered.as_deref(), Ok("Lisbon"));
        let declined = question_answer("Which city?", Ok(result(ElicitationAction::Decline, None)));
        assert!(declined.expect_err("declined").contains("declined"));
        let cancelled = question_answer("Which city?", Ok(result(ElicitationAction::Cancel, None)));
        assert!(cancelled.expect_err("cancelled").contains("cancelled"));
    }
}
