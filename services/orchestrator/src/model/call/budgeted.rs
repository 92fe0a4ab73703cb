//! Layer 1: budgets (the book is [`super::budget`]): reserve the call's
//! worst case on every budget above it, cap its `max_tokens` at what they
//! have left, settle after.
//!
//! The worst case is the call's `max_tokens`, else the largest output
//! limit of the models it may go to (`Model::max_output_tokens`); the cap
//! is sent as the call's `max_tokens`, so a provider cannot write more
//! than was reserved. A call that does not fit whole only because of what
//! calls in flight hold waits for them, at most the model timeout.
//!
//! Both holds — the run's budgets and the tenant's period budgets — are
//! guards: a call dropped before it settles (cancelled, its caller gone, a
//! timeout, fencing) gives them back at what it is known to have spent:
//! nothing before its model streamed; its input estimate and the text it
//! streamed (about 4 characters a token) after.

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

use super::budget::Need;
use super::request::{
    Answered, CallError, CallModel, CallSink, ModelCall, PeriodGuard, PeriodRefusal, Skipped,
};
use crate::catalog::prices::Price;
use crate::model::DeltaSink;

/// Layer 1: budgets.
pub struct Budgeted<I>(pub I);

/// The call's sink, counting the text streamed through it (what a dropped
/// call spent).
struct Metered<'a> {
    sink: &'a dyn CallSink,
    bytes: AtomicU64,
    input: u64,
    price: Option<&'a Price>,
}

impl Metered<'_> {
    /// What the call spent so far, as far as Baton can tell: nothing until
    /// its model streamed; then its input and what it streamed.
    fn spent(&self) -> (u64, u64) {
        let bytes = self.bytes.load(Ordering::Relaxed);
        if bytes == 0 {
            return (0, 0);
        }
        let output = bytes.div_ceil(4);
        let cost = self
            .price
            .map_or(0, |p| p.cost_nanos(self.input, 0, output));
        (self.input + output, cost)
    }
}

#[async_trait::async_trait]
impl DeltaSink for Metered<'_> {
    async fn delta(&self, text: String) {
        self.bytes.fetch_add(text.len() as u64, Ordering::Relaxed);
        self.sink.delta(text).await;
    }
}

#[async_trait::async_trait]
impl CallSink for Metered<'_> {
    async fn fell_back(&self, from: &str, to: &str, why: &Skipped, discarded: bool) {
        self.sink.fell_back(from, to, why, discarded).await;
    }

    async fn waiting(&self, provider: &str, model: &str, wait: Duration, ahead: usize) {
        self.sink.waiting(provider, model, wait, ahead).await;
    }
}

/// The most output tokens `call` may be answered with: its `max_tokens`,
/// at most the largest output limit of the models it may go to.
fn worst_output(call: &ModelCall<'_>) -> Option<u32> {
    let limit = call
        .candidates
        .iter()
        .chain(call.context_window)
        .map(|m| m.max_output_tokens())
        .try_fold(0u32, |most, l| l.map(|l| most.max(l)));
    match (call.settings.max_tokens, limit) {
        (Some(m), Some(l)) => Some(m.min(l)),
        (m, l) => m.or(l),
    }
}

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
            max_output: worst_output(&call),
            price: price.as_ref(),
            unpriced,
            hold_back: call.hold_back,
        };
        let metered = Metered {
            sink,
            bytes: AtomicU64::new(0),
            input: need.input_tokens,
            price: price.as_ref(),
        };
        let spent = || metered.spent();
        // Waiting for calls in flight is bounded by the model timeout.
        let deadline = Instant::now() + call.timeout;
        let held = match call.budget {
            Some(claim) => Some(
                claim
                    .budgets
                    .reserve(claim.node, need, deadline, &spent)
                    .await
                    .map_err(CallError::Exhausted)?,
            ),
            None => None,
        };
        let mut call = call;
        call.max_output = match &held {
            Some(h) => h.max_output(),
            None => need.max_output,
        };
        // Then the tenant's budgets per period, with what the run's left.
        let mut period = None;
        if let Some(periods) = call.periods {
            let reserved = periods
                .reserve(
                    call.tenant,
                    need.input_tokens,
                    call.max_output,
                    need.price,
                    deadline,
                )
                .await;
            match reserved {
                Ok((h, cap)) => {
                    call.max_output = cap;
                    period = Some(PeriodGuard::new(periods, h, &spent));
                }
                // The run's hold is released as `held` drops.
                Err(PeriodRefusal::Exhausted(m)) => return Err(CallError::Period(m)),
                Err(PeriodRefusal::Unreachable(m)) => return Err(CallError::Unreachable(m)),
            }
        }
        let answered = self.0.call(call, &metered).await;
        let (tokens, cost) = match &answered {
            Ok(a) => {
                let u = &a.turn.usage;
                let cost = call.prices.of(a.model.reference()).map_or(0, |p| {
                    p.cost_nanos(u.input_tokens, u.cached_input_tokens, u.output_tokens)
                });
                (u.input_tokens + u.output_tokens, cost)
            }
            // A failed call spent what it streamed before it failed.
            Err(_) => metered.spent(),
        };
        if let Some(h) = held {
            h.settle(tokens, cost);
        }
        if let Some(p) = period {
            p.settle(tokens, cost);
        }
        answered
    }
}
