//! Layer 1: budgets (the book is [`super::budget`]): reserve the call's
//! worst case on every budget above it, cap its `max_tokens` at what they
//! have left, settle after.

use super::budget::Need;
use super::request::{Answered, CallError, CallModel, CallSink, ModelCall, PeriodRefusal, lock};

/// Layer 1: budgets.
pub struct Budgeted<I>(pub I);

#[async_trait::async_trait]
impl<I: CallModel> CallModel for Budgeted<I> {
    async fn call(&self, call: ModelCall<'_>, sink: &dyn CallSink) -> Result<Answered, CallError> {
        if call.budget.is_none() && call.periods.is_none() {
            return self.0.call(call, sink).await;
        }
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
        let reservation = match call.budget {
            Some(claim) => Some((
                claim,
                lock(claim.book)
                    .reserve(claim.node, need)
                    .map_err(CallError::Exhausted)?,
            )),
            None => None,
        };
        let mut call = call;
        call.max_output = match &reservation {
            Some((_, r)) => r.max_output,
            None => call.settings.max_tokens,
        };
        // Then the tenant's budgets per period, with what the run's left.
        let mut hold = None;
        if let Some(periods) = call.periods {
            match periods
                .reserve(call.tenant, need.input_tokens, call.max_output, need.price)
                .await
            {
                Ok((h, cap)) => {
                    call.max_output = cap;
                    hold = Some(h);
                }
                Err(refused) => {
                    if let Some((claim, r)) = reservation {
                        lock(claim.book).settle(r, 0, 0);
                    }
                    return Err(match refused {
                        PeriodRefusal::Exhausted(m) => CallError::Period(m),
                        PeriodRefusal::Unreachable(m) => CallError::Unreachable(m),
                    });
                }
            }
        }
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
        if let Some((claim, r)) = reservation {
            lock(claim.book).settle(r, tokens, cost);
        }
        if let (Some(periods), Some(h)) = (call.periods, hold) {
            periods.settle(h, tokens, cost).await;
        }
        answered
    }
}
