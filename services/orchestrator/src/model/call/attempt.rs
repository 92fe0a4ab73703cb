//! Layer 4: one model's answer under the model timeout, in a `chat` span
//! with the GenAI semantic conventions' attributes, counted in the model
//! metrics (latency, tokens, cost; failures by kind).

use std::{borrow::Cow, sync::Arc, time::Instant};

use opentelemetry::{
    KeyValue,
    trace::{Span as _, SpanBuilder, SpanKind, Status, Tracer},
};

use super::request::{CallSink, ModelCall, Observe, TryModel};
use crate::catalog::settings::Settings;
use crate::model::{Model, ModelError, ModelErrorKind, ModelTurn};

/// Calls the model itself.
pub struct Attempt(pub Observe);

#[async_trait::async_trait]
impl TryModel for Attempt {
    async fn try_model(
        &self,
        model: &Arc<dyn Model>,
        call: &ModelCall<'_>,
        sink: &dyn CallSink,
    ) -> Result<ModelTurn, ModelError> {
        let reference = model.reference();
        // The model's own settings under the agent's and the request's
        // (the frame merged them for its first model), `max_tokens` capped
        // at what the budgets have left.
        let mut settings = if Arc::ptr_eq(model, &call.candidates[0]) {
            Cow::Borrowed(call.settings)
        } else {
            Cow::Owned(model.settings().merged(call.over))
        };
        // A budget's cap is what it reserved; never more than this model
        // writes (a fallback's limit may be lower than the first's).
        let cap = match (call.max_output, model.max_output_tokens()) {
            (Some(cap), Some(l)) if call.budget.is_some() || call.periods.is_some() => {
                Some(cap.min(l))
            }
            (cap, _) => cap,
        };
        if let Some(cap) = cap
            && settings.max_tokens.is_none_or(|m| m > cap)
        {
            settings.to_mut().max_tokens = Some(cap);
        }
        let settings = &*settings;
        let mut chat = chat_span(&self.0, call.trace, &**model, settings);
        let began = Instant::now();
        let answered =
            tokio::time::timeout(call.timeout, model.turn(call.request(settings), sink)).await;
        let seconds = began.elapsed().as_secs_f64();
        let metrics = &self.0.metrics;
        let e = match answered {
            Ok(Ok(turn)) => {
                let u = &turn.usage;
                let price = call.prices.of(reference);
                let cost = price
                    .map(|p| p.cost_nanos(u.input_tokens, u.cached_input_tokens, u.output_tokens));
                let currency = call.prices.currency.as_str();
                metrics.model_call(
                    reference,
                    true,
                    seconds,
                    u.input_tokens,
                    u.output_tokens,
                    cost.map(|c| (c, currency)),
                );
                tracing::debug!(
                    model = reference,
                    input_tokens = u.input_tokens,
                    output_tokens = u.output_tokens,
                    calls = turn.calls.len(),
                    ms = seconds * 1000.0,
                    "model turn"
                );
                end_chat_span(chat, reference, &turn, cost.map(|c| (c, currency)));
                return Ok(turn);
            }
            Ok(Err(e)) => e,
            Err(_) => ModelError::new(
                reference,
                ModelErrorKind::Timeout,
                "timeout",
                format!("did not answer within {:?}", call.timeout),
            ),
        };
        tracing::warn!(model = reference, code = ?e.code(), error_type = %e.error_type, error = %e, "model call failed");
        metrics.model_call(reference, false, seconds, 0, 0, None);
        metrics.model_error(reference, &e.error_type);
        chat.set_attribute(KeyValue::new("error.type", e.error_type.clone()));
        chat.set_status(Status::error(e.to_string()));
        chat.end();
        Err(e)
    }
}

/// The `chat <model>` span of one model call, with the GenAI semantic
/// conventions' request attributes.
fn chat_span(
    o: &Observe,
    parent: &opentelemetry::Context,
    model: &dyn Model,
    settings: &Settings,
) -> opentelemetry_sdk::trace::Span {
    let reference = model.reference();
    let name = reference.split_once(':').map_or(reference, |(_, m)| m);
    let mut attributes = vec![
        KeyValue::new("gen_ai.operation.name", "chat"),
        KeyValue::new("gen_ai.provider.name", model.system().to_owned()),
        KeyValue::new("gen_ai.request.model", name.to_owned()),
    ];
    if let Some(t) = settings.temperature {
        attributes.push(KeyValue::new("gen_ai.request.temperature", t));
    }
    if let Some(p) = settings.top_p {
        attributes.push(KeyValue::new("gen_ai.request.top_p", p));
    }
    if let Some(m) = settings.max_tokens {
        attributes.push(KeyValue::new("gen_ai.request.max_tokens", i64::from(m)));
    }
    if let Some(seed) = settings.seed {
        attributes.push(KeyValue::new("gen_ai.request.seed", seed));
    }
    if let Some(stop) = &settings.stop {
        attributes.push(KeyValue::new(
            "gen_ai.request.stop_sequences",
            opentelemetry::Value::Array(
                stop.iter()
                    .map(|s| opentelemetry::StringValue::from(s.clone()))
                    .collect::<Vec<_>>()
                    .into(),
            ),
        ));
    }
    if settings.response_format.is_some() {
        attributes.push(KeyValue::new("gen_ai.output.type", "json"));
    }
    o.tracer.build_with_context(
        SpanBuilder::from_name(format!("chat {name}"))
            .with_kind(SpanKind::Client)
            .with_attributes(attributes),
        parent,
    )
}

/// Ends a chat span with the response attributes.
fn end_chat_span(
    mut span: opentelemetry_sdk::trace::Span,
    reference: &str,
    turn: &ModelTurn,
    cost: Option<(u64, &str)>,
) {
    // No semantic convention names a call's cost yet: Baton's own, beside
    // the gen_ai usage (a model without a price has none).
    if let Some((nanos, currency)) = cost {
        span.set_attributes([
            KeyValue::new("baton.usage.cost", nanos as f64 / 1e9),
            KeyValue::new("baton.usage.currency", currency.to_owned()),
        ]);
    }
    let requested = reference.split_once(':').map_or(reference, |(_, m)| m);
    let model = if turn.model.is_empty() {
        requested.to_owned()
    } else {
        turn.model.clone()
    };
    span.set_attributes([
        KeyValue::new("gen_ai.response.model", model),
        KeyValue::new("gen_ai.usage.input_tokens", turn.usage.input_tokens as i64),
        KeyValue::new(
            "gen_ai.usage.output_tokens",
            turn.usage.output_tokens as i64,
        ),
        KeyValue::new(
            "gen_ai.response.finish_reasons",
            opentelemetry::Value::Array(
                vec![opentelemetry::StringValue::from(turn.finish_reason.clone())].into(),
            ),
        ),
    ]);
    span.end();
}
