//! Layer 1: budgets (the book is [`super::budget`]): reserve the call's
//! worst case on every budget above it, cap its `max_tokens` at what they
//! have left, settle after.

use super::budget::Need;
use super::request::{Answered, CallError, CallModel, CallSink, ModelCall, lock};

/// Layer 1: budgets.
pub struct Budgeted<I>(pub I);

#[async_trait::async_trait]
impl<I: CallModel> CallModel for Budgeted<I> {
    async fn call(&self, call: ModelCall<'_>, sink: &dyn CallSink) -> Result<Answered, CallError> {
        let Some(claim) = call.budget else {
            return self.0.call(call, sink).await;
        };
        // The dearest of the models it may go to prices the worst case;
        // one without a price leaves it unpriced.
        let mut price = None;
        let mut unpriced = "";
        for m in call.candidates.iter().chain(call.context_window) {
            match call.prices.of(m.reference()) {
                Some(p) => {
                    price = Some(price.map_or(*p, |q: crate::catalog::prices::Price| q.max(p)))
                }
                None if unpriced.is_empty() => unpriced = m.reference(),
                None => {}
            }
        }
        let price = if unpriced.is_empty() { price } else { None };
        let primary = &call.candidates[0];
        let need = Need {
            input_tokens: primary.estimate_input_tokens(call.messages, call.tools, call.turn),
            max_output: call.settings.max_tokens,
            price: price.as_ref(),
            unpriced,
            hold_back: call.hold_back,
        };
        let reservation = lock(claim.book)
            .reserve(claim.node, need)
            .map_err(CallError::Exhausted)?;
        let mut call = call;
        call.max_output = reservation.max_output;
        let answered = self.0.call(call, sink).await;
        let (tokens, cost) = match &answered {
            Ok(a) => {
                let u = &a.turn.usage;
                let cost = call.prices.of(a.model.reference()).map_or(0, |p| {
                    p.cost_nanos(u.input_tokens, u.cached_input_tokens, u.output_tokens)
                });
                (u.input_tokens + u.output_tokens, cost)
            }
            Err(_) => (0, 0),
        };
        lock(claim.book).settle(reservation, tokens, cost);
        answered
    }
}
