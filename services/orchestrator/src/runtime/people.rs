//! People: approvals before a tool runs (asked, answered, or timed out).

use std::sync::Arc;

use baton_proto::v1::{self as pb, run_event::Payload};
use opentelemetry::{
    Context, KeyValue,
    trace::{Span as _, SpanBuilder, Tracer},
};

use super::frame::{FrameView, deadline};
use super::shared::RuntimeConfig;
use crate::{catalog::ApprovalPolicy, model::ToolCallRequest};

/// A span around a wait for a person, under the current tool call's span.
pub(super) fn wait_span(
    rt: &RuntimeConfig,
    name: &'static str,
    id_key: &'static str,
    id: &str,
) -> opentelemetry_sdk::trace::Span {
    rt.tracer.build_with_context(
        SpanBuilder::from_name(name).with_attributes([KeyValue::new(id_key, id.to_owned())]),
        &Context::current(),
    )
}

/// Asks for approval when the agent's policy for this tool wants it.
pub(super) async fn approve(
    rt: &Arc<RuntimeConfig>,
    view: &FrameView,
    call: &ToolCallRequest,
) -> Result<(), String> {
    let policy = view
        .agent
        .spec
        .approvals
        .get(&call.name)
        .copied()
        .unwrap_or_default();
    let needed = match policy {
        ApprovalPolicy::Never => false,
        ApprovalPolicy::Always => true,
        ApprovalPolicy::Nested => view.ctx.depth >= 1,
    };
    if !needed {
        return Ok(());
    }
    let approval_id = format!("approval:{}", call.id);
    let resolved = |approved: bool, reason: &str, source: pb::ApprovalSource| {
        Payload::ApprovalResolved(pb::ApprovalResolved {
            approval_id: approval_id.clone(),
            approved,
            reason: reason.to_owned(),
            source: source as i32,
        })
    };
    match rt.approval_mode {
        pb::ApprovalMode::AutoApprove => {
            rt.emit(
                &view.ctx,
                &view.agent_name,
                resolved(true, "auto_approve", pb::ApprovalSource::Mode),
            )
            .await;
            Ok(())
        }
        pb::ApprovalMode::AutoDeny => {
            rt.emit(
                &view.ctx,
                &view.agent_name,
                resolved(false, "auto_deny", pb::ApprovalSource::Mode),
            )
            .await;
            Err(format!(
                "{} was denied by the run's approval mode",
                call.name
            ))
        }
        pb::ApprovalMode::Ask | pb::ApprovalMode::Unspecified => {
            let rx = rt.record.await_approval(&approval_id);
            let requested = Payload::ApprovalRequested(pb::ApprovalRequested {
                approval_id: approval_id.clone(),
                call_id: call.id.clone(),
                tool: call.name.clone(),
                arguments_json: call.arguments.to_string(),
                deadline: Some(deadline(rt.limits.approval_timeout)),
            });
            rt.emit(&view.ctx, &view.agent_name, requested).await;
            let mut wait = wait_span(rt, "wait approval", "baton.approval.id", &approval_id);
            let answered = tokio::time::timeout(rt.limits.approval_timeout, rx).await;
            if let Ok(Ok(answer)) = &answered {
                wait.set_attribute(KeyValue::new("baton.approval.approved", answer.approved));
            }
            wait.set_attribute(KeyValue::new(
                "baton.wait.answered",
                matches!(answered, Ok(Ok(_))),
            ));
            wait.end();
            match answered {
                Ok(Ok(answer)) => {
                    rt.emit(
                        &view.ctx,
                        &view.agent_name,
                        resolved(answer.approved, &answer.reason, pb::ApprovalSource::Person),
                    )
                    .await;
                    if answer.approved {
                        Ok(())
                    } else if answer.reason.is_empty() {
                        Err(format!("{} was denied", call.name))
                    } else {
                        Err(format!("{} was denied: {}", call.name, answer.reason))
                    }
                }
                _ => {
                    rt.record.close_approval(&approval_id);
                    let reason = "no answer before the deadline";
                    rt.emit(
                        &view.ctx,
                        &view.agent_name,
                        resolved(false, reason, pb::ApprovalSource::Deadline),
                    )
                    .await;
                    Err(format!("{} was denied: {reason}", call.name))
                }
            }
        }
    }
}
