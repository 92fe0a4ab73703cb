//! One model call, as a stack of small layers around "call this model".
//!
//! The path of one call, outermost first (the order is set once, in
//! [`Stack::new`]):
//!
//! 1. **budget** ([`Budgeted`], the book in [`budget`]): reserves the call's
//!    worst case on every budget above it and caps its `max_tokens` at what
//!    they have left, or refuses it ([`CallError::Exhausted`]); settles the
//!    reservation to the real usage after.
//! 2. **fallback** ([`fallback::Fallbacks`]): tries the agent's model, then
//!    its `fallbacks` in order, while a call fails in a way another model
//!    may not (a rate limit, a server error, a timeout, a connection
//!    failure, an open breaker); a context-window error moves to the
//!    `context_window_fallbacks`. A 400, a refused key, a content filter
//!    or a structured-output failure ends the call. A model whose text had
//!    begun streaming is abandoned too: its partial text is discarded and
//!    the next model starts the turn again, with an event saying so.
//! 3. **breaker** ([`breaker::Breakers`]): per provider; after `failures`
//!    failures within `window` the provider is skipped for `cooldown`, then
//!    one call probes it.
//! 4. **retry** ([`retry::Retries`]): per provider, a try that failed in a
//!    way the same request may not (429, 5xx, a timeout or a connection
//!    failure before an answer) is made again with backoff or as
//!    `Retry-After` says, within the model timeout — each try through the
//!    rate limit below.
//! 5. **rate limit** ([`limit::Limits`]): per provider (or model, or
//!    tenant), one sliding window for every replica; a call over it waits
//!    in a queue fair across tenants, at most the model timeout.
//! 6. **attempt** ([`attempt::Attempt`]): one try of one model under the
//!    model timeout, its `chat` span and its metrics.
//! 7. **the provider** (`model::openai`, `model::anthropic`,
//!    `model::scripted`): one HTTP request, which says whether it may be
//!    tried again (`model::http`).
//!
//! Layers 1–2 see the whole call ([`CallModel`]), 3–6 one model of it
//! ([`TryModel`]); each is tested alone below its file.

pub mod attempt;
pub mod breaker;
pub mod budget;
pub mod budgeted;
pub mod fallback;
pub mod limit;
pub mod period;
pub mod request;
pub mod retry;

use std::sync::Arc;

pub use budgeted::Budgeted;
pub use request::{
    Answered, CallError, CallModel, CallSink, Claim, ModelCall, Observe, Skipped, TryModel, lock,
    moves,
};

/// The model-call stack every run uses.
pub type Stack = Budgeted<
    fallback::Fallbacks<breaker::Breakers<retry::Retries<limit::Limits<attempt::Attempt>>>>,
>;

/// The stack of `catalog`'s providers, in its order: budget, fallback,
/// breaker, retry, rate limit, attempt; rate limits counted in `window`, breakers
/// shared through `shared` (durable runs).
pub fn stack(
    catalog: &crate::catalog::Catalog,
    observe: Observe,
    window: Arc<dyn limit::Window>,
    shared: Option<Arc<dyn breaker::SharedBreakers>>,
) -> Stack {
    let metrics = observe.metrics.clone();
    let limits = catalog
        .providers
        .iter()
        .filter_map(|(name, p)| Some((name.clone(), p.rate_limit?)))
        .collect();
    let breakers = catalog
        .providers
        .iter()
        .map(|(name, p)| (name.clone(), p.breaker))
        .collect();
    let retries = catalog
        .providers
        .iter()
        .filter(|(_, p)| p.kind != Some(crate::catalog::models::ProviderKind::Scripted))
        .map(|(name, p)| {
            let spec = retry::RetrySpec {
                max_retries: p.max_retries.unwrap_or(3),
                backoff: p.backoff.unwrap_or(std::time::Duration::from_millis(500)),
            };
            (name.clone(), spec)
        })
        .collect();
    let attempt = attempt::Attempt(observe);
    let limited = limit::Limits::new(attempt, limits, window, metrics.clone());
    let retried = retry::Retries::new(limited, retries);
    let mut breakers = breaker::Breakers::new(retried, breakers, metrics);
    if let Some(shared) = shared {
        breakers = breakers.shared(shared);
    }
    Budgeted(fallback::Fallbacks(breakers))
}
