//! Events as JSON lines (`--json`): the envelope plus `kind` and the
//! payload's fields, one object per event.

use baton_client::{pb, pb::run_event::Payload};
use serde_json::{Value, json};

fn usage(u: &Option<pb::Usage>) -> Value {
    let u = u.unwrap_or_default();
    json!({"input_tokens": u.input_tokens, "output_tokens": u.output_tokens, "model_calls": u.model_calls, "tool_calls": u.tool_calls})
}

fn millis(d: &Option<baton_client::wkt::Duration>) -> Value {
    d.map_or(Value::Null, |d| {
        json!(d.seconds * 1000 + i64::from(d.nanos) / 1_000_000)
    })
}

/// One event as a JSON object: the envelope plus `kind` and the payload's
/// fields.
pub fn event_json(e: &pb::RunEvent) -> Value {
    let (kind, body) = match e.payload.as_ref() {
        Some(Payload::RunStarted(r)) => (
            "run_started",
            json!({"target": r.target, "run_kind": r.kind().as_str_name()}),
        ),
        Some(Payload::RunCompleted(r)) => (
            "run_completed",
            json!({"output": r.output, "run_context_json": r.run_context_json, "usage": usage(&r.usage)}),
        ),
        Some(Payload::RunFailed(r)) => (
            "run_failed",
            json!({"code": r.code, "message": r.message, "usage": usage(&r.usage)}),
        ),
        Some(Payload::RunCancelled(r)) => (
            "run_cancelled",
            json!({"reason": r.reason, "usage": usage(&r.usage)}),
        ),
        Some(Payload::RunResumed(r)) => (
            "run_resumed",
            json!({"replica": r.replica, "checkpoint_seq": r.checkpoint_seq}),
        ),
        Some(Payload::AgentStarted(a)) => ("agent_started", json!({"model": a.model})),
        Some(Payload::TextDelta(d)) => ("text_delta", json!({"text": d.text})),
        Some(Payload::MessageCompleted(m)) => (
            "message_completed",
            json!({
                "text": m.text,
                "tool_calls": m.tool_calls.iter().map(|c| json!({"call_id": c.call_id, "tool": c.tool, "arguments_json": c.arguments_json})).collect::<Vec<_>>(),
                "usage": usage(&m.usage),
                "finish_reason": m.finish_reason,
            }),
        ),
        Some(Payload::AgentCompleted(a)) => (
            "agent_completed",
            json!({"output": a.output, "usage": usage(&a.usage)}),
        ),
        Some(Payload::Handoff(h)) => (
            "handoff",
            json!({"from_agent": h.from_agent, "to_agent": h.to_agent}),
        ),
        Some(Payload::ToolCallStarted(c)) => (
            "tool_call_started",
            json!({"call_id": c.call_id, "tool": c.tool, "arguments_json": c.arguments_json}),
        ),
        Some(Payload::ToolProgress(p)) => (
            "tool_progress",
            json!({"call_id": p.call_id, "tool": p.tool, "percent": p.percent, "message": p.message}),
        ),
        Some(Payload::ToolOptions(o)) => (
            "tool_options",
            json!({"call_id": o.call_id, "tool": o.tool, "question": o.question, "options": o.options}),
        ),
        Some(Payload::ToolCallCompleted(c)) => (
            "tool_call_completed",
            json!({"call_id": c.call_id, "tool": c.tool, "result": c.result, "error": c.error, "duration_ms": millis(&c.duration)}),
        ),
        Some(Payload::ToolBatchCompleted(b)) => (
            "tool_batch_completed",
            json!({"calls": b.calls, "failed": b.failed}),
        ),
        Some(Payload::ApprovalRequested(a)) => (
            "approval_requested",
            json!({"approval_id": a.approval_id, "call_id": a.call_id, "tool": a.tool, "arguments_json": a.arguments_json}),
        ),
        Some(Payload::ApprovalResolved(a)) => (
            "approval_resolved",
            json!({"approval_id": a.approval_id, "approved": a.approved, "reason": a.reason, "source": a.source().as_str_name()}),
        ),
        Some(Payload::InputRequested(i)) => (
            "input_requested",
            json!({"input_id": i.input_id, "call_id": i.call_id, "tool": i.tool, "prompt": i.prompt, "options": i.options}),
        ),
        Some(Payload::InputReceived(i)) => (
            "input_received",
            json!({"input_id": i.input_id, "input": i.input}),
        ),
        Some(Payload::ContextWritten(w)) => (
            "context_written",
            json!({"key": w.key, "version": w.version, "size_bytes": w.size_bytes}),
        ),
        Some(Payload::StepStarted(s)) => (
            "step_started",
            json!({"step_id": s.step_id, "agent": s.agent, "attempt": s.attempt}),
        ),
        Some(Payload::StepCompleted(s)) => (
            "step_completed",
            json!({"step_id": s.step_id, "attempt": s.attempt, "output": s.output, "duration_ms": millis(&s.duration)}),
        ),
        Some(Payload::StepFailed(s)) => (
            "step_failed",
            json!({"step_id": s.step_id, "attempt": s.attempt, "error": s.error, "will_retry": s.will_retry}),
        ),
        Some(Payload::StepSkipped(s)) => (
            "step_skipped",
            json!({"step_id": s.step_id, "reason": s.reason}),
        ),
        Some(Payload::PipelineCompleted(p)) => (
            "pipeline_completed",
            json!({"success": p.success, "succeeded": p.succeeded, "failed": p.failed, "skipped": p.skipped, "outputs": p.outputs}),
        ),
        None => ("unknown", json!({})),
    };
    let mut v = json!({
        "seq": e.seq,
        "kind": kind,
        "trace_id": e.trace_id,
        "run_id": e.run_id,
        "context_id": e.context_id,
        "parent_context_id": e.parent_context_id,
        "depth": e.depth,
        "agent": e.agent,
        "span_id": e.span_id,
    });
    if let (Value::Object(v), Value::Object(b)) = (&mut v, body) {
        v.extend(b);
    }
    v
}
