//! One model call of a frame's turn: the model-call stack (budget,
//! fallbacks, breakers, rate limits; see `model::call`) asked with the
//! frame's models, and what the agent does when a budget runs out
//! (`fail`, `finish`, `ask`).

use std::sync::Arc;

use baton_proto::v1::{self as pb, run_event::Payload};
use tonic::Code;

use super::frame::{CallFrame, FrameSink};
use crate::catalog::budget::OnExhausted;
use crate::model::call::budget::{Exhausted, Limit, money};
use crate::model::call::request::Periods;
use crate::model::call::{Answered, CallError, CallModel as _, Claim, ModelCall};
use crate::model::{ChatMessage, Model, Role, ToolDef};
use crate::run::failure::Failure;
use crate::run::recording::unit;
use crate::run::state::Run;

/// Asks the frame's model (through the model-call stack: budget,
/// fallbacks, breakers) for its next turn. `None` when a budget ran out
/// and the agent finishes or was given more: the turn is taken again.
pub(super) async fn call_model(
    rt: &Arc<Run>,
    frame: &mut CallFrame,
    tools: &[ToolDef],
    sink: &FrameSink<'_>,
) -> Result<Option<Answered>, Failure> {
    let spec = &frame.agent.spec;
    let resolve = |refs: &[String]| -> Result<Vec<Arc<dyn Model>>, Failure> {
        refs.iter()
            .map(|r| {
                rt.services.models.resolve(r).map_err(|e| Failure {
                    code: Code::FailedPrecondition,
                    message: format!("agent {}: {e}", frame.agent.name),
                })
            })
            .collect()
    };
    let mut list;
    let candidates: &[Arc<dyn Model>] = if spec.fallbacks.is_empty() {
        std::slice::from_ref(&frame.model)
    } else {
        list = vec![frame.model.clone()];
        list.extend(resolve(&spec.fallbacks)?);
        &list
    };
    let wide = resolve(&spec.context_window_fallbacks)?;
    let over = (candidates.len() > 1 || !wide.is_empty()).then(|| frame.over_settings(rt));
    let budget = rt.budgets.bounds(frame.budget).then_some(Claim {
        budgets: &rt.budgets,
        node: frame.budget,
    });
    let prefix = format!("{}/{}/", frame.ctx.id, frame.turns);
    let call = ModelCall {
        candidates,
        context_window: &wide,
        messages: &frame.messages,
        // The last call of a spent budget calls no tool.
        tools: if frame.finishing { &[] } else { tools },
        turn: frame.agent_turns,
        input: &frame.input,
        call_id_prefix: &prefix,
        settings: &frame.settings,
        over: over.as_ref().unwrap_or(&frame.settings),
        max_output: None,
        timeout: rt.limits.model_timeout,
        budget,
        // An agent that finishes when a budget runs out leaves room for its
        // last answer.
        hold_back: match &spec.budget {
            Some(b) if b.on_exhausted == OnExhausted::Finish && !frame.finishing => b
                .finish_reserve
                .unwrap_or(crate::catalog::budget::FINISH_RESERVE),
            _ => 0,
        },
        prices: &rt.services.catalog.prices,
        trace: &frame.ctx.otel,
        tenant: &rt.record.tenant,
        // The tenant's budgets per period, when it has any.
        periods: (!rt.services.quotas.periods_of(&rt.record.tenant).is_empty())
            .then_some(&*rt.services.quotas as &dyn Periods),
    };
    // A fenced replica calls nothing more (see `Run::hold_lease`).
    rt.hold_lease().await;
    let working = rt.record.work();
    let mut answered = rt.services.calls.call(call, sink).await;
    // The tenant's budgets fail closed: while their shared counters do not
    // answer, the call waits and tries again, then fails UNAVAILABLE.
    for wait in [200, 800, 2000] {
        if !matches!(answered, Err(CallError::Unreachable(_))) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
        answered = rt.services.calls.call(call, sink).await;
    }
    drop(working);
    match answered {
        Ok(a) => Ok(Some(a)),
        Err(CallError::Model(e, skipped)) => {
            let mut message = e.to_string();
            if !skipped.is_empty() {
                let tried: Vec<String> = skipped
                    .iter()
                    .map(|s| format!("{} ({})", s.model, s.reason))
                    .collect();
                message.push_str(&format!("; passed over before it: {}", tried.join(", ")));
            }
            Err(Failure {
                code: e.code(),
                message,
            })
        }
        Err(CallError::Exhausted(x)) => exhausted(rt, frame, x).await.map(|()| None),
        Err(CallError::Period(message)) => {
            rt.services.metrics.budget_exhausted("fail");
            Err(Failure {
                code: Code::ResourceExhausted,
                message,
            })
        }
        Err(CallError::Unreachable(message)) => Err(Failure {
            code: Code::Unavailable,
            message,
        }),
    }
}

/// A budget has too little left for the frame's next call: the agent's
/// `on_exhausted` decides. `Ok`: take the turn again (finishing, or with
/// more); else the run fails with `RESOURCE_EXHAUSTED` naming the budget.
async fn exhausted(rt: &Arc<Run>, frame: &mut CallFrame, x: Box<Exhausted>) -> Result<(), Failure> {
    let on = frame
        .agent
        .spec
        .budget
        .as_ref()
        .map_or(OnExhausted::Fail, |b| b.on_exhausted);
    let currency = rt.services.catalog.prices.currency.clone();
    let message = x.describe(&currency);
    // A model without a price under a cost budget cannot be helped by
    // one more call or more money: it fails. An agent may ask for more of
    // its own budget or an enclosing agent's, never of the run's: that is
    // its caller's cap (the request's `limits.budget`), which nobody in
    // the run may raise.
    let action = match on {
        OnExhausted::Finish if !frame.finishing && x.unpriced.is_none() => OnExhausted::Finish,
        OnExhausted::Ask if x.unpriced.is_none() && x.node() != crate::model::call::budget::RUN => {
            OnExhausted::Ask
        }
        _ => OnExhausted::Fail,
    };
    rt.services.metrics.budget_exhausted(action.as_str());
    let (spent_tokens, spent_cost) = (x.spent_tokens, x.spent_cost);
    let event = Payload::BudgetExhausted(pb::BudgetExhausted {
        budget: x.budget.clone(),
        tokens_limit: x.limit.tokens.unwrap_or(0),
        tokens_spent: spent_tokens,
        cost_limit_nanos: x.limit.cost_nanos.unwrap_or(0),
        cost_spent_nanos: spent_cost,
        currency: if x.limit.cost_nanos.is_some() {
            currency.clone()
        } else {
            String::new()
        },
        action: action.as_str().into(),
        message: message.clone(),
    });
    let unit = unit::numbered("x", &frame.ctx.id, frame.turns);
    rt.emit_point(&frame.ctx, &frame.agent_name, event, unit, Vec::new)
        .await;
    let fail = |message: String| Failure {
        code: Code::ResourceExhausted,
        message,
    };
    match action {
        OnExhausted::Fail => Err(fail(message)),
        OnExhausted::Finish => {
            frame.finishing = true;
            frame.messages.push(ChatMessage::new(
                Role::User,
                "Your budget for this task is spent. Answer now, from what you have, without calling tools.",
            ));
            Ok(())
        }
        OnExhausted::Ask => {
            let limit = x.limit;
            let asked = frame
                .agent
                .spec
                .budget
                .as_ref()
                .and_then(|b| b.ask_more)
                .unwrap_or_default();
            let more = Limit {
                tokens: limit.tokens.map(|t| asked.tokens.unwrap_or(t)),
                cost_nanos: limit
                    .cost_nanos
                    .map(|c| asked.cost.map_or(c, crate::catalog::budget::cost_nanos)),
            };
            let mut arguments = serde_json::json!({
                "budget": x.budget,
                "message": message,
            });
            if let (Some(t), Some(m)) = (limit.tokens, more.tokens) {
                arguments["tokens"] =
                    serde_json::json!({"limit": t, "spent": spent_tokens, "more": m});
            }
            if let (Some(c), Some(m)) = (limit.cost_nanos, more.cost_nanos) {
                arguments["cost"] = serde_json::json!({
                    "limit": money(c), "spent": money(spent_cost), "more": money(m), "currency": currency,
                });
            }
            let call = crate::model::ToolCallRequest {
                id: format!("{}/{}/budget", frame.ctx.id, frame.turns),
                name: RAISE_BUDGET.into(),
                arguments,
            };
            match super::people::ask_approval(rt, &frame.view(), &call).await {
                Ok(()) => {
                    rt.budgets.raise(x.node(), more);
                    Ok(())
                }
                Err(denied) => Err(fail(format!("{message}; a raise was not given: {denied}"))),
            }
        }
    }
}

/// The tool an approval to raise a budget names.
pub const RAISE_BUDGET: &str = "raise_budget";
