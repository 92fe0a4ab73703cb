//! A conversation's compaction summary (`summarize`): one model call
//! through the model-call stack, made as a run enters its conversation.

use std::time::Duration;

use baton_proto::v1 as pb;

use crate::{
    conversation::compact,
    error::{Error, Result},
    model::{ChatMessage, Role},
    run::{launch::Prepared, shared::Shared},
};

/// Asks `model` for a summary of `folded` (a compaction `summarize`)
/// through the model-call stack, as the run's first call: its budgets,
/// its tenant's period budgets, the provider's rate limit and breaker, the
/// model timeout; its tokens and cost count in the run's totals and the
/// tenant's model quota.
pub(super) async fn summarize(
    services: &Shared,
    prepared: &Prepared,
    model: &str,
    folded: &[pb::ConversationMessage],
) -> Result<String> {
    use crate::model::call::{CallError, CallModel as _, Claim, ModelCall, budget};
    let run = &prepared.run;
    let tenant = &prepared.record.tenant;
    let model = services
        .models
        .resolve(model)
        .map_err(|e| Error::Unavailable(format!("the summary model: {e}")))?;
    let messages = [
        ChatMessage::new(Role::System, compact::SUMMARY_INSTRUCTIONS),
        ChatMessage::new(Role::User, compact::summary_prompt(folded)),
    ];
    let candidates = [model];
    let settings = candidates[0].settings().clone();
    let periods = (!services.quotas.periods_of(tenant).is_empty())
        .then_some(&*services.quotas as &dyn crate::model::call::request::Periods);
    let call = ModelCall {
        candidates: &candidates,
        context_window: &[],
        messages: &messages,
        tools: &[],
        turn: 0,
        input: "",
        call_id_prefix: "summary",
        settings: &settings,
        over: &settings,
        max_output: None,
        timeout: services.defaults.model_timeout,
        budget: run.budgets.bounds(budget::RUN).then_some(Claim {
            budgets: &run.budgets,
            node: budget::RUN,
        }),
        hold_back: 0,
        prices: &services.catalog.prices,
        trace: &prepared.span,
        tenant,
        periods,
    };
    let answered = services
        .calls
        .call(call, &NoDeltas)
        .await
        .map_err(|e| match e {
            CallError::Model(e, _) => Error::Unavailable(format!("the summary model: {e}")),
            CallError::Exhausted(x) => Error::Exhausted {
                field: "limits.budget".into(),
                message: format!(
                    "the conversation's summary: {}",
                    x.describe(&services.catalog.prices.currency)
                ),
            },
            CallError::Period(m) => Error::Exhausted {
                field: "quotas".into(),
                message: format!("the conversation's summary: {m}"),
            },
            CallError::Unreachable(m) => Error::Unavailable(format!("the summary model: {m}")),
        })?;
    let u = &answered.turn.usage;
    let price = services.catalog.prices.of(answered.model.reference());
    run.add_usage(&pb::Usage {
        input_tokens: u.input_tokens,
        output_tokens: u.output_tokens,
        model_calls: 1,
        cached_input_tokens: u.cached_input_tokens,
        cost_nanos: price.map_or(0, |p| {
            p.cost_nanos(u.input_tokens, u.cached_input_tokens, u.output_tokens)
        }),
        currency: price
            .map(|_| services.catalog.prices.currency.clone())
            .unwrap_or_default(),
        unpriced_model_calls: u64::from(price.is_none()),
        ..Default::default()
    });
    services
        .quotas
        .spend_tokens(tenant, u.input_tokens + u.output_tokens)
        .await;
    Ok(answered.turn.text)
}

struct NoDeltas;

#[async_trait::async_trait]
impl crate::model::DeltaSink for NoDeltas {
    async fn delta(&self, _text: String) {}
}

#[async_trait::async_trait]
impl crate::model::call::CallSink for NoDeltas {
    async fn fell_back(&self, _: &str, _: &str, _: &crate::model::call::Skipped, _: bool) {}
    async fn waiting(&self, _: &str, _: &str, _: Duration, _: usize) {}
}
