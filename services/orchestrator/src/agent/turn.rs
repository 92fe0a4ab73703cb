//! The turn loop: a frame's model turns until a final answer, handoffs,
//! and each turn's `chat` span.

use std::sync::Arc;

use baton_proto::v1::{self as pb, run_event::Payload};
use futures::future::{BoxFuture, join_all};
use tonic::Code;
use tracing::Instrument as _;

use super::dispatch::{CallPlan, execute, plan};
use super::frame::{CallFrame, FrameSink, pb_call};
use crate::model::call::lock;
use crate::model::{ChatMessage, DeltaSink as _, ModelTurn, Role, asked::Asked};
use crate::pipeline::StepCall;
use crate::run::failure::Failure;
use crate::run::guards::LiveGuard;
use crate::run::recording::rerun::Answer;
use crate::run::recording::unit;
use crate::run::state::Run;
use crate::run::usage::add as add_usage;

/// A model turn's record: the turn, and what the model was asked (a
/// replay compares it with what it asks; see `run::recording::rerun`).
#[derive(serde::Serialize)]
struct TurnRecord<'a> {
    #[serde(flatten)]
    turn: &'a ModelTurn,
    #[serde(skip_serializing_if = "Option::is_none")]
    asked: Option<&'a Asked>,
}

/// A replay's answer to model turn `unit` asked `now`: the recorded turn's
/// record (its deltas streamed again) while the replay asks what was
/// recorded; `None` when the turn goes live (a strict replay's divergence
/// ends the run instead).
async fn recorded_turn<'r>(
    rt: &'r Run,
    frame: &CallFrame,
    sink: &FrameSink<'_>,
    unit: &str,
    now: &Asked,
) -> Option<&'r [u8]> {
    let Some(rerun) = &rt.rerun else {
        return None;
    };
    match rerun.turn(unit, now, &frame.messages) {
        Answer::Recorded((record, deltas)) => {
            for d in deltas {
                sink.delta(d.clone()).await;
            }
            Some(record)
        }
        Answer::Live => None,
        Answer::Differs(diff) => {
            let diverged = pb::Diverged {
                point: "model_turn".into(),
                turn: frame.turns,
                diff,
                ..Default::default()
            };
            rt.diverged(&frame.ctx, &frame.agent_name, diverged).await;
            None
        }
    }
}

/// [`run_frame`] boxed, as a [`RunFrame`](super::frame::RunFrame) value.
pub fn run_frame_boxed(
    rt: &Arc<Run>,
    frame: CallFrame,
) -> BoxFuture<'_, Result<(String, pb::Usage), Failure>> {
    Box::pin(run_frame(rt, frame))
}

/// Runs a pipeline step's agent: its frame, then [`run_frame`]; boxed, as
/// the [`RunStep`](crate::pipeline::RunStep) value pipelines are handed.
pub fn run_step_boxed(
    rt: &Arc<Run>,
    call: StepCall,
) -> BoxFuture<'_, Result<(String, pb::Usage), Failure>> {
    Box::pin(async move {
        let StepCall {
            ctx,
            agent,
            task,
            scope,
            answers_request,
        } = call;
        let mut frame = CallFrame::new(rt, ctx, &agent, Vec::new(), task, scope)?;
        if answers_request {
            frame.answer_request(rt);
        }
        run_frame(rt, frame).await
    })
}

/// Runs the frame's agent (and whoever it hands off to) until a final
/// answer. Log lines inside carry the run, trace and span ids.
pub async fn run_frame(rt: &Arc<Run>, frame: CallFrame) -> Result<(String, pb::Usage), Failure> {
    let span = rt.log_span(&frame.ctx);
    run_frame_inner(rt, frame).instrument(span).await
}

pub(super) async fn run_frame_inner(
    rt: &Arc<Run>,
    mut frame: CallFrame,
) -> Result<(String, pb::Usage), Failure> {
    let _live = LiveGuard::new(&rt.record);
    let started = Payload::AgentStarted(pb::AgentStarted {
        agent: frame.agent.name.clone(),
        model: frame.model.reference().to_owned(),
    });
    // The record of an agent's start is its context's span id, which the
    // context keeps when the run is resumed.
    let unit = unit::numbered("a", &frame.ctx.id, frame.turns);
    let span_id = frame.ctx.span_id.clone();
    rt.emit_point(&frame.ctx, &frame.agent_name, started, unit, || {
        span_id.into_bytes()
    })
    .await;
    loop {
        if frame.turns >= rt.limits.max_turns {
            return Err(Failure {
                code: Code::ResourceExhausted,
                message: format!(
                    "context {} reached max_turns ({})",
                    frame.ctx.id, rt.limits.max_turns
                ),
            });
        }
        frame.turns += 1;
        // Its own handles: the model call may change the frame (a spent
        // budget's last call).
        let (ctx, agent) = (frame.ctx.clone(), frame.agent_name.clone());
        let sink = FrameSink {
            rt,
            ctx: &ctx,
            agent: &agent,
        };
        // A resumed run does not ask the model again for a turn it had.
        let unit = unit::numbered("t", &frame.ctx.id, frame.turns);
        let mut asked = None;
        // The agent's tool definitions, made once per agent for the whole
        // process (see `Shared::tool_defs`) and rebuilt only when a tool
        // server lists its tools again (an MCP server's
        // `tools/list_changed` shows from the next turn on): a turn loop of
        // a hundred calls does not rebuild every JSON schema a hundred
        // times, and a run parked on a person holds no copy of its own.
        // Taken when the model is asked: a turn from the journal needs none.
        let mut tools = None;
        let journaled = rt.journaled(&unit);
        let recorded = match journaled {
            Some(record) => Some(record),
            None => {
                let tools = tools.insert(frame.tools(&rt.services));
                let now = Asked::of(
                    frame.model.reference(),
                    &frame.messages,
                    tools,
                    &frame.settings,
                    &mut frame.conversation,
                    frame.agent_turns == 0,
                );
                let answer = recorded_turn(rt, &frame, &sink, &unit, &now).await;
                asked = Some(now);
                answer
            }
        };
        let mut skipped = Vec::new();
        let mut turn = match recorded {
            Some(record) => serde_json::from_slice::<ModelTurn>(record).map_err(|e| {
                Failure::new(Code::Internal, format!("the record of turn {unit}: {e}"))
            })?,
            None => {
                // Quota `model_tokens_per_hour`: refused before it asks.
                if let Err(e) = rt.services.quotas.may_call_model(&rt.record.tenant).await {
                    return Err(Failure {
                        code: e.code(),
                        message: e.to_string(),
                    });
                }
                let tools = tools.as_deref().unwrap_or_default();
                let Some(answered) = super::ask::call_model(rt, &mut frame, tools, &sink).await?
                else {
                    // A budget ran out and the agent finishes or got more:
                    // the turn is taken again.
                    continue;
                };
                rt.services
                    .quotas
                    .spend_tokens(
                        &rt.record.tenant,
                        answered.turn.usage.input_tokens + answered.turn.usage.output_tokens,
                    )
                    .await;
                skipped = answered.skipped;
                let mut turn = answered.turn;
                if !Arc::ptr_eq(&answered.model, &frame.model) {
                    turn.answered_by = answered.model.reference().to_owned();
                }
                turn
            }
        };
        if frame.finishing {
            // The last call of a spent budget answers; it calls nothing.
            turn.calls.clear();
        }
        frame.agent_turns += 1;
        // What this run spent on the turn: nothing when a replay answered
        // it from the recording (the run it replays spent that) or a fork
        // took it from its origin's recording.
        let inherited = match journaled {
            Some(_) => rt.walk.as_ref().is_some_and(|r| r.fork),
            None => recorded.is_some(),
        };
        let answered_by = if turn.answered_by.is_empty() {
            frame.model.reference()
        } else {
            turn.answered_by.as_str()
        };
        // The answering model's price (none: its calls are unpriced, see
        // `catalog::prices`).
        let prices = &rt.services.catalog.prices;
        let (price, currency) = (prices.of(answered_by), prices.currency.as_str());
        let turn_usage = if inherited {
            pb::Usage {
                tool_calls: turn.calls.len() as u64,
                ..Default::default()
            }
        } else {
            // Priced at today's prices (a resumed run's turns taken from
            // its journal too: the run's totals are made again as it walks).
            let u = &turn.usage;
            let cost = price.map_or(0, |p| {
                p.cost_nanos(u.input_tokens, u.cached_input_tokens, u.output_tokens)
            });
            if journaled.is_some() {
                // A resumed run's budgets count what it spent before.
                lock(&rt.budgets).spend(frame.budget, u.input_tokens + u.output_tokens, cost);
            }
            pb::Usage {
                input_tokens: u.input_tokens,
                output_tokens: u.output_tokens,
                model_calls: 1,
                tool_calls: turn.calls.len() as u64,
                cached_input_tokens: u.cached_input_tokens,
                cost_nanos: cost,
                currency: price.map(|_| currency.to_owned()).unwrap_or_default(),
                unpriced_model_calls: u64::from(price.is_none()),
            }
        };
        rt.add_usage(&turn_usage);
        add_usage(&mut frame.usage, &turn_usage);
        // A turn taken from the journal was sent before.
        if journaled.is_none() {
            let completed = Payload::MessageCompleted(pb::MessageCompleted {
                text: turn.text.clone(),
                tool_calls: turn.calls.iter().map(pb_call).collect(),
                usage: Some(turn_usage),
                finish_reason: turn.finish_reason.clone(),
                model: answered_by.to_owned(),
                skipped: skipped
                    .into_iter()
                    .map(|s| pb::SkippedModel {
                        model: s.model,
                        reason: s.reason.into(),
                        error: s.message,
                    })
                    .collect(),
            });
            rt.emit_point(&frame.ctx, &frame.agent_name, completed, unit, || {
                serde_json::to_vec(&TurnRecord {
                    turn: &turn,
                    asked: asked.as_ref(),
                })
                .unwrap_or_default()
            })
            .await;
        }

        if turn.calls.is_empty()
            && let Some(format) = &frame.settings.response_format
            && let Err(why) = format.check(&turn.text)
        {
            if frame.format_retries >= format.retries {
                return Err(Failure {
                    code: Code::FailedPrecondition,
                    message: format!(
                        "agent {}: the final answer does not match response_format {:?}{}: {why}",
                        frame.agent.name,
                        format.name,
                        if format.retries > 0 {
                            format!(" after {} retries", format.retries)
                        } else {
                            String::new()
                        }
                    ),
                });
            }
            frame.format_retries += 1;
            tracing::warn!(agent = %frame.agent.name, retry = frame.format_retries, %why, "answer sent back: it does not match response_format");
            frame
                .messages
                .push(ChatMessage::new(Role::Assistant, turn.text));
            frame.messages.push(ChatMessage::new(
                Role::User,
                format!(
                    "Your answer was rejected: {why}. Answer again with only a JSON value matching this JSON Schema: {}",
                    format.schema
                ),
            ));
            continue;
        }
        if turn.calls.is_empty() {
            let done = Payload::AgentCompleted(pb::AgentCompleted {
                output: turn.text.clone(),
                usage: Some(frame.usage.clone()),
            });
            let unit = unit::numbered("d", &frame.ctx.id, frame.turns);
            // Its record is what the frame spent (a resumed pipeline reads
            // it for a step that had finished; records from before are
            // empty).
            let usage = &frame.usage;
            rt.emit_point(&frame.ctx, &frame.agent_name, done, unit, || {
                let currency = (!usage.currency.is_empty()).then(|| usage.currency.clone());
                serde_json::to_vec(&(crate::run::usage::to_record(usage), currency))
                    .unwrap_or_default()
            })
            .await;
            if let Some((t, base)) = &frame.transcript {
                t.answered(&frame.messages[*base..], &turn.text, &frame.agent.name);
            }
            return Ok((turn.text, frame.usage));
        }

        let plans: Vec<CallPlan> = turn.calls.iter().map(|c| plan(rt, &mut frame, c)).collect();
        let view = frame.view();
        let mut calls =
            turn.calls.iter().zip(plans).map(|(call, plan)| {
                execute(rt, &view, call, plan, run_frame_boxed, run_step_boxed)
            });
        // One call (most turns) is awaited as it is; more, side by side.
        let results = match (calls.next(), turn.calls.len()) {
            (Some(only), 1) => vec![only.await],
            (first, _) => join_all(first.into_iter().chain(calls)).await,
        };
        let failed = results.iter().filter(|r| r.output.is_err()).count() as u32;
        let batch = Payload::ToolBatchCompleted(pb::ToolBatchCompleted {
            calls: results.len() as u32,
            failed,
        });
        let unit = unit::numbered("b", &frame.ctx.id, frame.turns);
        rt.emit_point(&frame.ctx, &frame.agent_name, batch, unit, Vec::new)
            .await;

        let mut replies = Vec::with_capacity(results.len());
        let mut handoff = None;
        for (call, r) in turn.calls.iter().zip(results) {
            if let Some(u) = &r.child_usage {
                add_usage(&mut frame.usage, u);
            }
            let content = match r.output {
                Ok(s) => s,
                Err(e) => format!("error: {e}"),
            };
            let mut msg = ChatMessage::new(Role::Tool, content);
            msg.tool_call_id = Some(call.id.clone());
            replies.push(msg);
            handoff = handoff.or(r.handoff);
        }
        // The model's turn (its calls moved, not copied), then the replies.
        let mut assistant = ChatMessage::new(Role::Assistant, turn.text);
        assistant.tool_calls = turn.calls;
        frame.messages.push(assistant);
        frame.messages.extend(replies);
        frame.sync_transcript();
        if frame.scope.is_ended() {
            // A Final policy ended the scope: no further turns, here or above.
            return Err(Failure {
                code: Code::Ok,
                message: "ended by a final tool output".into(),
            });
        }
        if let Some(to) = handoff {
            switch_agent(rt, &mut frame, &to).await?;
            frame.sync_transcript();
        }
    }
}

/// Hands the frame over to `to`: same context and messages, new agent, new
/// model, per-agent state reset.
pub(super) async fn switch_agent(
    rt: &Arc<Run>,
    frame: &mut CallFrame,
    to: &str,
) -> Result<(), Failure> {
    let next = rt
        .services
        .catalog
        .agents
        .get(to)
        .cloned()
        .ok_or_else(|| Failure {
            code: Code::Internal,
            message: format!("handoff to unknown agent {to:?}"),
        })?;
    let model = rt.model_for(&next).map_err(|e| Failure {
        code: Code::InvalidArgument,
        message: e.to_string(),
    })?;
    let from = std::mem::replace(&mut frame.agent, next);
    frame.agent_name = Arc::from(frame.agent.name.as_str());
    frame.model = model;
    frame.settings = frame.settings_for(rt);
    frame.format_retries = 0;
    frame.agent_turns = 0;
    frame.agent_context = Arc::default();
    frame.budget = super::frame::enter_budget(rt, &frame.ctx, &frame.agent);
    frame.finishing = false;
    // The instructions (message 1) change: the conversation is hashed
    // again from the start for what the next turn is asked.
    frame.conversation = Default::default();
    if let Some(system) = frame
        .messages
        .first_mut()
        .filter(|m| m.role == Role::System)
    {
        system.content = frame.agent.spec.instructions.clone();
    }
    let payload = Payload::Handoff(pb::Handoff {
        from_agent: from.name.clone(),
        to_agent: frame.agent.name.clone(),
    });
    let unit = unit::numbered("h", &frame.ctx.id, frame.turns);
    rt.emit_point(&frame.ctx, &frame.agent_name, payload, unit, Vec::new)
        .await;
    let started = Payload::AgentStarted(pb::AgentStarted {
        agent: frame.agent.name.clone(),
        model: frame.model.reference().to_owned(),
    });
    let unit = unit::numbered("a", &frame.ctx.id, frame.turns);
    rt.emit_point(&frame.ctx, &frame.agent_name, started, unit, Vec::new)
        .await;
    Ok(())
}
