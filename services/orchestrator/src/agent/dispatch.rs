//! The calls of one turn: planned in the model's order (so child context
//! ids are deterministic), then run concurrently, each in its `tool` span,
//! with tool-output policies applied to what they return.

use std::{sync::Arc, time::Instant};

use baton_proto::v1::{self as pb, run_event::Payload};
use opentelemetry::{
    KeyValue,
    context::FutureExt as _,
    trace::{SpanBuilder, Status, TraceContextExt, Tracer},
};
use serde_json::Value;

use super::call_sink::CallSink;
use super::frame::{CallFrame, CallOutput, CallResult, FrameView, RunFrame, duration};
use super::people::{self, approve};
use crate::run::context::ContextInfo;
use crate::run::guards::LiveGuard;
use crate::run::recording::rerun::Answer;
use crate::run::recording::unit;
use crate::run::state::Run;
use crate::{
    model::ToolCallRequest,
    pipeline::{self, RunStep},
    tools::{Resume, Tool, ToolCtx, ToolOutcome},
};

/// What one call of a turn is, decided before the calls run so that child
/// context ids follow the order of the calls in the model's answer.
pub(super) enum CallPlan {
    Handoff(String),
    Agent(Child, String),
    Remote(Child, Arc<crate::tools::a2a::RemoteAgent>),
    Pipeline(Child),
    Tool(Arc<dyn Tool>),
    Refused(String),
}

/// A child context a call will run in: its id is fixed when the call is
/// planned; the context (and its span) is made when the call runs, inside
/// the call's `execute_tool` span, so in a trace the call and the agent or
/// pipeline it runs nest.
pub(super) struct Child {
    /// The segment under the caller's context (`summarizer.1`).
    segment: String,
    /// The context's span name.
    name: String,
}

impl Child {
    fn of(segment: String, name: String) -> Self {
        Self { segment, name }
    }

    /// The child context, a span under the current one (the call's).
    fn open(self, rt: &Run, parent: &ContextInfo) -> Arc<ContextInfo> {
        rt.child_context_under(
            parent,
            &self.segment,
            self.name,
            &opentelemetry::Context::current(),
        )
    }
}

pub(super) fn plan(rt: &Run, frame: &mut CallFrame, call: &ToolCallRequest) -> CallPlan {
    let name = call.name.as_str();
    if let Some(target) = name.strip_prefix("transfer_to_") {
        return if frame.handoffs().any(|h| h == target) {
            CallPlan::Handoff(target.to_owned())
        } else {
            CallPlan::Refused(format!(
                "{} cannot hand off to {target:?}",
                frame.agent.name
            ))
        };
    }
    if !frame.agent.spec.tools.iter().any(|t| t == name) {
        return CallPlan::Refused(format!("{} has no tool {name:?}", frame.agent.name));
    }
    if name == pipeline::TOOL_NAME {
        // The pipeline gets a child context; its steps run one level below.
        let n = frame.children.entry(name.to_owned()).or_insert(0);
        *n += 1;
        let segment = format!("{name}.{n}");
        let steps_depth = frame.ctx.depth + 2;
        if steps_depth > rt.limits.max_depth {
            return CallPlan::Refused(format!(
                "cannot run a pipeline in context {}.{segment}: its steps would be at depth {steps_depth}, over max_depth {}",
                frame.ctx.id, rt.limits.max_depth
            ));
        }
        return CallPlan::Pipeline(Child::of(segment, "pipeline".into()));
    }
    if let Some(tool) = rt.services.tools.get(name) {
        return CallPlan::Tool(tool.clone());
    }
    let remote = rt.services.tools.remote_agent(name).cloned();
    if remote.is_some() || rt.services.catalog.is_callable(name) {
        let n = frame.children.entry(name.to_owned()).or_insert(0);
        *n += 1;
        let segment = format!("{name}.{n}");
        let depth = frame.ctx.depth + 1;
        if depth > rt.limits.max_depth {
            return CallPlan::Refused(format!(
                "cannot call agent {name}: context {}.{segment} would be at depth {depth}, over max_depth {}",
                frame.ctx.id, rt.limits.max_depth
            ));
        }
        let child = Child::of(segment, crate::run::context::invoke_agent_span_name(name));
        return match remote {
            Some(agent) => CallPlan::Remote(child, agent),
            None => CallPlan::Agent(child, name.to_owned()),
        };
    }
    CallPlan::Refused(format!("unknown tool {name:?}"))
}

/// Runs one call of a turn in its `execute_tool <name>` span (the current
/// OpenTelemetry context while it runs, so store and ToolHost calls are its
/// children).
pub(super) async fn execute(
    rt: &Arc<Run>,
    view: &FrameView,
    call: &ToolCallRequest,
    plan: CallPlan,
    run_frame: RunFrame,
    run_step: RunStep,
) -> CallResult {
    let unit = unit::unit("c", &view.ctx.id, &call.id);
    // A resumed run (or a fork) does not make a call again that it had
    // made: it takes what the call returned, and the tool-output policies
    // apply again, as they did. The call is not made, so it has no span
    // and no metric here; its event was sent before.
    if let Some(record) = rt
        .journaled(&unit)
        .and_then(|r| serde_json::from_slice::<CallRecord>(r).ok())
    {
        let mut result = CallResult::default();
        result.output = record.taken(&mut result);
        // A fork's sub-agent that its origin ran: the origin spent that.
        // A resumed run's: its turns are not walked again, so what it
        // spent goes back into the run's totals here.
        if rt.walk.as_ref().is_some_and(|r| r.fork) {
            result.child_usage = None;
        } else if let Some(u) = &result.child_usage {
            rt.add_usage(u);
            // And into the budgets above the caller, as its turns would.
            let mut book = crate::model::call::lock(&rt.budgets);
            let node = book.node_of(&view.ctx.id);
            book.spend(node, u.input_tokens + u.output_tokens, u.cost_nanos);
        }
        let (_, final_text) = apply_policies(rt, view, call, &mut result);
        if let Some(text) = final_text {
            view.scope.end_with(text);
        }
        return result;
    }
    let span = rt.tracer().build_with_context(
        SpanBuilder::from_name(format!("execute_tool {}", call.name)).with_attributes([
            KeyValue::new("gen_ai.operation.name", "execute_tool"),
            KeyValue::new("gen_ai.tool.name", call.name.clone()),
            KeyValue::new("gen_ai.tool.call.id", call.id.clone()),
        ]),
        &view.ctx.otel,
    );
    let cx = view.ctx.otel.with_span(span);
    let began = Instant::now();
    let result = execute_call(rt, view, call, unit, plan, run_frame, run_step)
        .with_context(cx.clone())
        .await;
    let seconds = began.elapsed().as_secs_f64();
    rt.services
        .metrics
        .tool_call(&call.name, result.output.is_ok(), seconds);
    tracing::debug!(
        tool = %call.name,
        call_id = %call.id,
        ok = result.output.is_ok(),
        ms = seconds * 1000.0,
        "tool call finished"
    );
    if let Err(e) = &result.output {
        cx.span().set_status(Status::error(e.clone()));
    }
    cx.span().end();
    result
}

pub(super) async fn execute_call(
    rt: &Arc<Run>,
    view: &FrameView,
    call: &ToolCallRequest,
    unit: String,
    plan: CallPlan,
    run_frame: RunFrame,
    run_step: RunStep,
) -> CallResult {
    let _live = LiveGuard::new(&rt.record);
    let started = Instant::now();
    let mut result = CallResult::default();
    // Whether the call leaves Baton (its record says so: a replay's
    // resume counts the calls it made from its journal).
    let mut external = match &plan {
        CallPlan::Remote(..) => true,
        CallPlan::Tool(tool) => tool.external(),
        _ => false,
    };
    let begin = Payload::ToolCallStarted(pb::ToolCallStarted {
        call_id: call.id.clone(),
        tool: call.name.clone(),
        arguments_json: call.arguments.to_string(),
    });
    // A fork's call in flight at its fork point was announced already.
    if !rt
        .walk
        .as_ref()
        .is_some_and(|r| r.announced.contains(&unit))
    {
        rt.emit(&view.ctx, &view.agent_name, begin).await;
    }
    result.output = match approve(rt, view, call).await {
        Err(denied) => {
            // Denied: nothing left Baton.
            external = false;
            Err(denied)
        }
        Ok(()) => match plan {
            CallPlan::Refused(why) => Err(why),
            CallPlan::Handoff(to) => {
                result.handoff = Some(to.clone());
                Ok(format!("transferred to {to}"))
            }
            CallPlan::Tool(tool) => {
                // Any tool may read the store (remote ones through the
                // store service): let written-behind outputs land first.
                rt.pending_writes.settled().await;
                let recorded = match tool.external() {
                    true => from_recording(rt, view, call, &unit).await,
                    false => None,
                };
                match recorded {
                    Some(record) => record.taken(&mut result),
                    None => run_tool(rt, view, call, tool.as_ref()).await,
                }
            }
            CallPlan::Remote(child, agent) => {
                let child_ctx = child.open(rt, &view.ctx);
                match from_recording(rt, view, call, &unit).await {
                    Some(record) => {
                        // What the remote agent said, in its context (and
                        // spent: the run this one replays did).
                        let _end = child_ctx.end_on_drop();
                        let said = rt.rerun.as_ref().map(|r| r.remote_events(&child_ctx.id));
                        for (agent, payload) in said.unwrap_or_default() {
                            rt.emit(&child_ctx, &Arc::from(agent.as_str()), payload.clone())
                                .await;
                        }
                        record.taken(&mut result)
                    }
                    None => super::remote::call(rt, view, call, child_ctx, &agent).await,
                }
            }
            CallPlan::Pipeline(child) => {
                let child_ctx = child.open(rt, &view.ctx);
                let output =
                    pipeline::tool::run_as_tool(rt, &child_ctx, &call.arguments, run_step).await;
                // Its steps count in the calling agent's usage, as a
                // sub-agent's do.
                result.child_usage = rt.take_step_usage(&child_ctx.id);
                output
            }
            CallPlan::Agent(child, target) => {
                let child_ctx = child.open(rt, &view.ctx);
                let _end = child_ctx.end_on_drop();
                let task = match call.arguments.get("task").and_then(Value::as_str) {
                    Some(t) => t.to_owned(),
                    None => call.arguments.to_string(),
                };
                let scope = view.scope.clone();
                match CallFrame::new(rt, child_ctx.clone(), &target, Vec::new(), task, scope) {
                    Err(f) => Err(f.message),
                    Ok(child) => match run_frame(rt, child).await {
                        Ok((output, usage)) => {
                            result.child_usage = Some(usage);
                            Ok(output)
                        }
                        Err(f) => {
                            child_ctx.set_error(f.code, f.message.clone());
                            Err(format!("agent {target} failed: {}", f.message))
                        }
                    },
                }
            }
        },
    };
    finish_call(rt, view, call, result, started, (unit, external)).await
}

/// What a call returned, before policies: the record of its durable point.
#[derive(serde::Serialize, serde::Deserialize)]
struct CallRecord {
    ok: bool,
    text: String,
    handoff: Option<String>,
    /// See `run::usage::to_record`.
    child_usage: Option<Vec<u64>>,
    /// Its currency, when it cost something.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cur: Option<String>,
    /// The call left Baton (a tool server, an MCP server, a remote agent).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    x: bool,
}

impl CallRecord {
    /// What the call returned, its handoff and usage set in `result`.
    fn taken(self, result: &mut CallResult) -> CallOutput {
        result.handoff = self.handoff;
        result.child_usage = self
            .child_usage
            .map(|r| crate::run::usage::from_record(&r, self.cur));
        if self.ok {
            Ok(self.text)
        } else {
            Err(self.text)
        }
    }
}

/// A replay's answer to `call` of a tool outside Baton (unit `unit`): the
/// recorded call's record, what it said while it ran said again, while the
/// replay calls what the recording called; `None` when the call goes live
/// (a strict replay's divergence ends the run instead).
async fn from_recording(
    rt: &Arc<Run>,
    view: &FrameView,
    call: &ToolCallRequest,
    unit: &str,
) -> Option<CallRecord> {
    let rerun = rt.rerun.as_ref()?;
    // An evaluation case's fault: the tool answers late, fails or times
    // out, whatever the recording says.
    if let Some(fault) = rerun.fault(&call.name) {
        if let Some(ms) = fault.delay_ms {
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        }
        let failed = if fault.timeout {
            Some(format!(
                "tool {} timed out (a fault the case injects)",
                call.name
            ))
        } else {
            Some(fault.error.clone()).filter(|e| !e.is_empty())
        };
        if let Some(text) = failed {
            return Some(CallRecord {
                ok: false,
                text,
                handoff: None,
                child_usage: None,
                cur: None,
                x: true,
            });
        }
    }
    match rerun.call(unit, &call.name, &call.arguments) {
        Answer::Recorded(recorded) => {
            for payload in &recorded.said {
                rt.emit(&view.ctx, &view.agent_name, payload.clone()).await;
            }
            serde_json::from_slice(&recorded.record).ok()
        }
        Answer::Live => None,
        Answer::Differs(diff) => {
            let diverged = pb::Diverged {
                point: "tool_call".into(),
                call_id: call.id.clone(),
                diff,
                ..Default::default()
            };
            rt.diverged(&view.ctx, &view.agent_name, diverged).await;
            None
        }
    }
}

/// The record of a call that returned `text` (`ok`) or failed with it, as
/// a fork's edit of a tool's result puts it in the fork's journal.
pub fn call_record(ok: bool, text: String) -> Vec<u8> {
    serde_json::to_vec(&CallRecord {
        ok,
        text,
        handoff: None,
        child_usage: None,
        cur: None,
        x: false,
    })
    .unwrap_or_default()
}

/// Applies the tool-output policies to what a call returned and sends
/// ToolCallCompleted (with the call's record, before policies).
async fn finish_call(
    rt: &Arc<Run>,
    view: &FrameView,
    call: &ToolCallRequest,
    mut result: CallResult,
    started: Instant,
    (unit, external): (String, bool),
) -> CallResult {
    let record = CallRecord {
        x: external,
        ok: result.output.is_ok(),
        text: match &result.output {
            Ok(s) | Err(s) => s.clone(),
        },
        handoff: result.handoff.clone(),
        child_usage: result
            .child_usage
            .as_ref()
            .map(crate::run::usage::to_record),
        cur: result
            .child_usage
            .as_ref()
            .map(|u| u.currency.clone())
            .filter(|c| !c.is_empty()),
    };
    let (policies, final_text) = apply_policies(rt, view, call, &mut result);
    let (output, error) = match &result.output {
        Ok(s) => (s.clone(), String::new()),
        Err(e) => (String::new(), e.clone()),
    };
    let done = Payload::ToolCallCompleted(pb::ToolCallCompleted {
        call_id: call.id.clone(),
        tool: call.name.clone(),
        result: output,
        error,
        duration: Some(duration(started.elapsed())),
        policies,
    });
    rt.emit_point(&view.ctx, &view.agent_name, done, unit, || {
        serde_json::to_vec(&record).unwrap_or_default()
    })
    .await;
    if let Some(text) = final_text {
        // The first Final wins; the scope ends with its output.
        view.scope.end_with(text);
    }
    result
}

/// Applies the tool-output policies, run-scoped first, then the agent's, to
/// what a call returned (in `result`): the policies that applied, and the
/// text the scope ends with when one was Final.
fn apply_policies(
    rt: &Run,
    view: &FrameView,
    call: &ToolCallRequest,
    result: &mut CallResult,
) -> (Vec<pb::PolicyOutcome>, Option<String>) {
    let mut policies = Vec::new();
    let (mut text, is_error) = match &result.output {
        Ok(s) => (s.clone(), false),
        Err(e) => (e.clone(), true),
    };
    let mut ends_run = {
        let mut run_context = rt.run_context.lock().unwrap_or_else(|p| p.into_inner());
        crate::catalog::policy::apply_all(
            &rt.services.catalog.run_policies,
            "run",
            &call.name,
            &mut text,
            &mut run_context,
            &mut policies,
        )
    };
    if !ends_run {
        let mut agent_context = view.agent_context.lock().unwrap_or_else(|p| p.into_inner());
        ends_run = crate::catalog::policy::apply_all(
            &view.agent.policies,
            "agent",
            &call.name,
            &mut text,
            &mut agent_context,
            &mut policies,
        );
    }
    let final_text = ends_run.then(|| text.clone());
    result.output = if is_error { Err(text) } else { Ok(text) };
    (policies, final_text)
}

/// Runs a tool until it ends, asking a person whenever it needs input.
pub(super) async fn run_tool(
    rt: &Arc<Run>,
    view: &FrameView,
    call: &ToolCallRequest,
    tool: &dyn Tool,
) -> CallOutput {
    let events = CallSink::new(rt, view, call);
    let ctx = ToolCtx {
        store: &rt.services.store,
        scope: &rt.scope,
        run_id: &rt.record.run_id,
        context_id: &view.ctx.id,
        depth: view.ctx.depth,
        agent: &view.agent_name,
        call_id: &call.id,
        tool: &call.name,
        events: &events,
        cancelled_calls: &rt.record.cancelled_tool_calls,
    };
    let mut resume = None;
    loop {
        // Working while the tool runs, not while it waits for input.
        // A fenced replica calls nothing more (see `Run::hold_lease`).
        rt.hold_lease().await;
        let working = rt.record.work();
        let outcome = tokio::time::timeout(
            rt.limits.tool_timeout,
            tool.call(&ctx, &call.arguments, resume.take()),
        )
        .await
        .map_err(|_| {
            format!(
                "tool {} timed out after {:?}",
                call.name, rt.limits.tool_timeout
            )
        })?;
        match outcome {
            ToolOutcome::Ok(s) => return Ok(s),
            ToolOutcome::Err(e) => return Err(e),
            ToolOutcome::NeedInput {
                prompt,
                options,
                resume_token,
            } => {
                drop(working);
                let n = events.next_question();
                let input = people::input(rt, view, call, n, prompt, options).await?;
                resume = Some(Resume {
                    token: resume_token,
                    input,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use baton_proto::v1 as pb;
    use serde_json::json;

    use super::*;
    use crate::run::testing;

    const AGENTS: &str = r#"
default_model: scripted:quiet
scripts:
  quiet:
    - text: ok
agents:
  lead:
    tools: [helper, run_pipeline, sleep]
    handoffs: [other]
  helper: {}
  other: {}
"#;

    fn call(name: &str) -> ToolCallRequest {
        ToolCallRequest {
            id: format!("call-{name}"),
            name: name.into(),
            arguments: json!({}),
        }
    }

    /// What a plan is, as text: `agent <context id>`, `pipeline <id>`, …
    fn describe(plan: &CallPlan) -> String {
        match plan {
            CallPlan::Handoff(to) => format!("handoff {to}"),
            CallPlan::Agent(child, name) => format!("agent {name} root.{} d1", child.segment),
            CallPlan::Remote(child, _) => format!("remote root.{} d1", child.segment),
            CallPlan::Pipeline(child) => format!("pipeline root.{} d1", child.segment),
            CallPlan::Tool(_) => "tool".into(),
            CallPlan::Refused(why) => format!("refused: {why}"),
        }
    }

    #[tokio::test]
    async fn calls_are_planned_in_the_models_order_with_numbered_child_contexts() {
        let (rt, _events) = testing::run(AGENTS, testing::limits(), pb::ApprovalMode::Ask);
        let mut frame = CallFrame::root(
            &rt,
            rt.resolve("lead").expect("resolves"),
            Vec::new(),
            "go".into(),
        );
        let names = [
            "helper",
            "sleep",
            "helper",
            "run_pipeline",
            "run_pipeline",
            "transfer_to_other",
            "transfer_to_helper",
            "read_context",
            "nobody",
        ];
        let plans: Vec<String> = names
            .iter()
            .map(|n| describe(&plan(&rt, &mut frame, &call(n))))
            .collect();
        assert_eq!(
            plans,
            [
                "agent helper root.helper.1 d1",
                "tool",
                "agent helper root.helper.2 d1",
                "pipeline root.run_pipeline.1 d1",
                "pipeline root.run_pipeline.2 d1",
                "handoff other",
                "refused: lead cannot hand off to \"helper\"",
                "refused: lead has no tool \"read_context\"",
                "refused: lead has no tool \"nobody\"",
            ]
        );
        // A second turn of the same frame goes on numbering.
        assert_eq!(
            describe(&plan(&rt, &mut frame, &call("helper"))),
            "agent helper root.helper.3 d1"
        );
    }

    #[tokio::test]
    async fn a_call_past_max_depth_is_refused_and_numbered_all_the_same() {
        let limits = crate::run::state::Limits {
            max_depth: 1,
            ..testing::limits()
        };
        let (rt, _events) = testing::run(AGENTS, limits, pb::ApprovalMode::Ask);
        let mut frame = CallFrame::root(
            &rt,
            rt.resolve("lead").expect("resolves"),
            Vec::new(),
            "go".into(),
        );
        // An agent at depth 1 is within the limit; a pipeline's steps would
        // be at depth 2.
        assert_eq!(
            describe(&plan(&rt, &mut frame, &call("helper"))),
            "agent helper root.helper.1 d1"
        );
        assert_eq!(
            describe(&plan(&rt, &mut frame, &call("run_pipeline"))),
            "refused: cannot run a pipeline in context root.run_pipeline.1: its steps would be at depth 2, over max_depth 1"
        );
        let limits = crate::run::state::Limits {
            max_depth: 0,
            ..testing::limits()
        };
        let (rt, _events) = testing::run(AGENTS, limits, pb::ApprovalMode::Ask);
        let mut frame = CallFrame::root(
            &rt,
            rt.resolve("lead").expect("resolves"),
            Vec::new(),
            "go".into(),
        );
        assert_eq!(
            describe(&plan(&rt, &mut frame, &call("helper"))),
            "refused: cannot call agent helper: context root.helper.1 would be at depth 1, over max_depth 0"
        );
        // The refused call still took its number: the next is .2.
        assert_eq!(
            describe(&plan(&rt, &mut frame, &call("helper"))),
            "refused: cannot call agent helper: context root.helper.2 would be at depth 1, over max_depth 0"
        );
    }
}
