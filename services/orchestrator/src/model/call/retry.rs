//! Layer 3b: a provider's retries (`providers.<name>.max_retries`, default
//! 3; `backoff`, default 500ms, doubled per retry, or as long as the
//! provider's `Retry-After` says). A try that failed in a way the same
//! request may not (a 429, a 5xx, a timeout or a connection failure before
//! an answer; see `model::http`) is made again, through the rate limit
//! below this layer, so **every try is counted** in the provider's shared
//! window, and the breaker above counts the call once, after its retries.
//! Retries stop when the next would end past the model timeout from the
//! first try. A stream broken after its answer began is not tried again
//! here (the fallback layer moves it on), nor is Baton's own refusal.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use super::request::{CallSink, ModelCall, TryModel};
use crate::model::{Model, ModelError, ModelTurn};

/// How a provider's failures are tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetrySpec {
    /// Tries after the first, at most.
    pub max_retries: u32,
    /// The first retry's wait when the provider names none; doubled per
    /// retry.
    pub backoff: Duration,
}

/// The retries of every provider entry (scripted models have none).
pub struct Retries<I> {
    inner: I,
    specs: HashMap<String, RetrySpec>,
}

impl<I> Retries<I> {
    /// Retries of the providers in `specs` around `inner`.
    pub fn new(inner: I, specs: HashMap<String, RetrySpec>) -> Self {
        Self { inner, specs }
    }
}

#[async_trait::async_trait]
impl<I: TryModel> TryModel for Retries<I> {
    async fn try_model(
        &self,
        model: &Arc<dyn Model>,
        call: &ModelCall<'_>,
        sink: &dyn CallSink,
    ) -> Result<ModelTurn, ModelError> {
        let reference = model.reference();
        let provider = reference.split_once(':').map_or(reference, |(p, _)| p);
        let Some(spec) = self.specs.get(provider).copied() else {
            return self.inner.try_model(model, call, sink).await;
        };
        let began = Instant::now();
        let mut attempt = 0u32;
        loop {
            let e = match self.inner.try_model(model, call, sink).await {
                Ok(turn) => return Ok(turn),
                Err(e) => e,
            };
            let Some(told) = e.retry else {
                return Err(tried(e, attempt));
            };
            let wait = told.unwrap_or_else(|| spec.backoff.saturating_mul(1 << attempt.min(10)));
            if attempt >= spec.max_retries || began.elapsed() + wait > call.timeout {
                return Err(tried(e, attempt));
            }
            tracing::warn!(model = %reference, error_type = %e.error_type, ?wait, attempt, "model call retried");
            tokio::time::sleep(wait).await;
            attempt += 1;
        }
    }
}

/// `e`, saying how many retries came before it.
fn tried(mut e: ModelError, retries: u32) -> ModelError {
    if retries > 0 {
        e.message = format!("{} (after {retries} retries)", e.message);
    }
    e
}
