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
//! 3b. **rate limit** ([`limit::Limits`]): per provider (or model, or
//!    tenant), one sliding window for every replica; a call over it waits
//!    in a queue fair across tenants, at most the model timeout.
//! 4. **attempt** ([`attempt::Attempt`]): one model under the model
//!    timeout, its `chat` span and its metrics.
//! 5. **the provider** (`model::openai`, `model::anthropic`,
//!    `model::scripted`), whose HTTP retries (429 and 5xx with backoff,
//!    `Retry-After`) are in `model::http`.
//!
//! Layers 1–2 see the whole call ([`CallModel`]), 3–4 one model of it
//! ([`TryModel`]); each is tested alone below its file.

pub mod attempt;
pub mod breaker;
pub mod budget;
pub mod fallback;
pub mod limit;

use std::{sync::Arc, sync::Mutex, time::Duration};

use opentelemetry_sdk::trace::SdkTracer;

use super::{
    ChatMessage, DeltaSink, Model, ModelError, ModelErrorKind, ModelTurn, ToolDef,
    turn::ModelRequest,
};
use crate::catalog::{prices::Prices, settings::Settings};
use budget::{Book, Exhausted, Need};

/// What one call asks: the models it may go to and the request.
#[derive(Clone, Copy)]
pub struct ModelCall<'a> {
    /// The agent's model, then its fallbacks.
    pub candidates: &'a [Arc<dyn Model>],
    /// Where a context-window error moves the call.
    pub context_window: &'a [Arc<dyn Model>],
    /// The conversation so far.
    pub messages: &'a [ChatMessage],
    /// The tools it may call.
    pub tools: &'a [ToolDef],
    /// The agent's turns in this context before this one.
    pub turn: usize,
    /// The context's task.
    pub input: &'a str,
    /// Prefix of tool-call ids.
    pub call_id_prefix: &'a str,
    /// Generation settings of the first candidate (its provider's, the
    /// agent's, the request's).
    pub settings: &'a Settings,
    /// The agent's and the request's settings, over a fallback's own.
    pub over: &'a Settings,
    /// `max_tokens` at most this (what the budgets have left; set by the
    /// budget layer).
    pub max_output: Option<u32>,
    /// Deadline of one model's answer.
    pub timeout: Duration,
    /// The budgets the call draws from (`None`: none bounds it).
    pub budget: Option<Claim<'a>>,
    /// Tokens to leave in every budget (an agent's `finish` reserve; 0 for
    /// its last call).
    pub hold_back: u64,
    /// Prices of the models.
    pub prices: &'a Prices,
    /// The span the `chat` spans go under.
    pub trace: &'a opentelemetry::Context,
    /// The run's tenant (rate limits per tenant, and their fair queue).
    pub tenant: &'a str,
}

impl<'a> ModelCall<'a> {
    /// The request one model is asked, with `settings`.
    fn request<'s>(&'s self, settings: &'s Settings) -> ModelRequest<'s> {
        ModelRequest {
            messages: self.messages,
            tools: self.tools,
            turn: self.turn,
            input: self.input,
            call_id_prefix: self.call_id_prefix,
            settings,
        }
    }
}

/// A call's budgets: the run's book and the node it draws from.
#[derive(Clone, Copy)]
pub struct Claim<'a> {
    /// The run's budgets.
    pub book: &'a Mutex<Book>,
    /// The nearest node above the frame.
    pub node: usize,
}

/// Why a model was passed over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The model.
    pub model: String,
    /// `rate_limited`, `unavailable`, `timeout`, `breaker_open` or
    /// `context_window`.
    pub reason: &'static str,
    /// What it said.
    pub message: String,
}

/// A call's answer and who gave it.
pub struct Answered {
    /// The turn.
    pub turn: ModelTurn,
    /// The model that answered.
    pub model: Arc<dyn Model>,
    /// The models passed over before it, in order.
    pub skipped: Vec<Skipped>,
}

/// Why a call failed.
#[derive(Debug)]
pub enum CallError {
    /// Every model it went to failed; the last failure.
    Model(ModelError, Vec<Skipped>),
    /// A budget has too little left.
    Exhausted(Box<Exhausted>),
}

/// What a call tells its watchers besides its text.
#[async_trait::async_trait]
pub trait CallSink: DeltaSink {
    /// The call moves from `from` to `to` because `from` failed (`why`);
    /// `discarded`: `from` had streamed text, which is dropped.
    async fn fell_back(&self, from: &str, to: &str, why: &Skipped, discarded: bool);

    /// The call waits about `wait` for `provider`'s rate limit (to call
    /// `model`), behind `ahead` other calls of this replica.
    async fn waiting(&self, provider: &str, model: &str, wait: Duration, ahead: usize);
}

/// The whole call (layers 1–2).
#[async_trait::async_trait]
pub trait CallModel: Send + Sync {
    /// Answers `call`, streaming text to `sink`.
    async fn call(&self, call: ModelCall<'_>, sink: &dyn CallSink) -> Result<Answered, CallError>;
}

/// One model of the call (layers 3–4).
#[async_trait::async_trait]
pub trait TryModel: Send + Sync {
    /// `model`'s answer to `call`, streaming to `sink`.
    async fn try_model(
        &self,
        model: &Arc<dyn Model>,
        call: &ModelCall<'_>,
        sink: &dyn CallSink,
    ) -> Result<ModelTurn, ModelError>;
}

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

/// The book, even when a panicking call poisoned its lock.
pub fn lock(book: &Mutex<Book>) -> std::sync::MutexGuard<'_, Book> {
    book.lock().unwrap_or_else(|p| p.into_inner())
}

/// The model-call stack every run uses.
pub type Stack = Budgeted<fallback::Fallbacks<breaker::Breakers<attempt::Attempt>>>;

/// The stack, in its order: budget, fallback, breaker, attempt.
pub fn stack(breakers: breaker::Breakers<attempt::Attempt>) -> Stack {
    Budgeted(fallback::Fallbacks(breakers))
}

/// The tracer and metrics the attempt layer reports to.
pub struct Observe {
    /// Makes `chat` spans.
    pub tracer: SdkTracer,
    /// Model metrics.
    pub metrics: Arc<crate::metrics::Metrics>,
}

/// Whether a failure of a model may be answered by another.
pub fn moves(e: &ModelError) -> Option<&'static str> {
    match e.kind {
        ModelErrorKind::RateLimited => Some("rate_limited"),
        ModelErrorKind::Unavailable if e.error_type == breaker::OPEN => Some("breaker_open"),
        ModelErrorKind::Unavailable => Some("unavailable"),
        ModelErrorKind::Timeout => Some("timeout"),
        ModelErrorKind::ContextWindow => Some("context_window"),
        ModelErrorKind::Rejected | ModelErrorKind::ProviderKey => None,
    }
}
