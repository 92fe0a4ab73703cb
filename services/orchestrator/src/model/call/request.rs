//! What the layers of a model call share (a leaf of `model::call`): the
//! call ([`ModelCall`]), its answer and failure, the sink of its events,
//! and the two layer interfaces ([`CallModel`] for the whole call,
//! [`TryModel`] for one model of it).

use std::{sync::Arc, time::Duration};

use opentelemetry_sdk::trace::SdkTracer;

use super::budget::{Book, Budgets, Exhausted};
use crate::catalog::{prices::Prices, settings::Settings};
use crate::model::{
    ChatMessage, DeltaSink, Model, ModelError, ModelErrorKind, ModelTurn, ToolDef,
    turn::ModelRequest,
};

/// The `error_type` of a call refused by an open breaker.
pub const OPEN: &str = "breaker_open";

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
    /// The tenant's period budgets, when it has any.
    pub periods: Option<&'a dyn Periods>,
}

impl<'a> ModelCall<'a> {
    /// The request one model is asked, with `settings`.
    pub(super) fn request<'s>(&'s self, settings: &'s Settings) -> ModelRequest<'s> {
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
    pub budgets: &'a Budgets,
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
    /// A budget of the tenant's for a period has too little left: the
    /// message names the quota.
    Period(String),
    /// The shared counters of the tenant's period budgets did not answer.
    Unreachable(String),
}

/// What a call holds of its tenant's period budgets (settle it with
/// [`Periods::release`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeriodHold {
    /// The tenant.
    pub tenant: String,
    /// Where it is held (the periods' counters).
    pub keys: Vec<String>,
    /// Tokens held.
    pub tokens: u64,
    /// Cost held, in billionths.
    pub cost: u64,
    /// Where the hold itself is kept, renewed while the call is in flight
    /// (Redis; empty in memory).
    pub holds: String,
    /// The hold's id there.
    pub id: String,
}

/// Why a tenant's period budgets refuse a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeriodRefusal {
    /// Too little left: the message names the quota.
    Exhausted(String),
    /// The counters did not answer.
    Unreachable(String),
}

/// A tenant's model budgets per period (`quotas.*.model_*_per_*`), counted
/// where every replica counts them.
#[async_trait::async_trait]
pub trait Periods: Send + Sync {
    /// Reserves `input` tokens and at most `cap` output tokens (priced at
    /// `price`) of `tenant`'s budgets; the hold, and the output tokens it
    /// allows (at most `cap`). While calls in flight keep it from `cap`
    /// it waits for them to settle, until `deadline`; then it takes what
    /// is left.
    async fn reserve(
        &self,
        tenant: &str,
        input: u64,
        cap: Option<u32>,
        price: Option<&crate::catalog::prices::Price>,
        deadline: std::time::Instant,
    ) -> Result<(PeriodHold, Option<u32>), PeriodRefusal>;

    /// Settles `hold` to what its call spent, without waiting (its call
    /// may be dropped, and a drop cannot wait): at once in memory, in the
    /// background in Redis.
    fn release(&self, hold: PeriodHold, tokens: u64, cost: u64);
}

/// A call's hold on its tenant's period budgets: settled with
/// [`PeriodGuard::settle`], or released when dropped at what `spent` says
/// the call spent.
pub struct PeriodGuard<'a> {
    periods: &'a dyn Periods,
    hold: Option<PeriodHold>,
    spent: super::budget::Spent<'a>,
}

impl<'a> PeriodGuard<'a> {
    /// Guards `hold`, taken of `periods`.
    pub fn new(
        periods: &'a dyn Periods,
        hold: PeriodHold,
        spent: super::budget::Spent<'a>,
    ) -> Self {
        Self {
            periods,
            hold: Some(hold),
            spent,
        }
    }

    /// Settles the hold to what the call spent, off the call's path (in
    /// Redis: in the background, so no drop of the call's future can cut
    /// it short).
    pub fn settle(mut self, tokens: u64, cost: u64) {
        if let Some(hold) = self.hold.take() {
            self.periods.release(hold, tokens, cost);
        }
    }
}

impl Drop for PeriodGuard<'_> {
    fn drop(&mut self) {
        if let Some(hold) = self.hold.take() {
            let (tokens, cost) = (self.spent)();
            self.periods.release(hold, tokens, cost);
        }
    }
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

/// The book, even when a panicking call poisoned its lock.
pub fn lock(budgets: &Budgets) -> std::sync::MutexGuard<'_, Book> {
    budgets.lock()
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
        ModelErrorKind::Unavailable if e.error_type == OPEN => Some("breaker_open"),
        ModelErrorKind::Unavailable => Some("unavailable"),
        ModelErrorKind::Timeout => Some("timeout"),
        ModelErrorKind::ContextWindow => Some("context_window"),
        ModelErrorKind::Rejected | ModelErrorKind::ProviderKey => None,
    }
}

/// What a unit test's [`ModelCall`] borrows: default settings, no prices,
/// an empty trace.
#[cfg(test)]
#[derive(Default)]
pub(crate) struct TestCall {
    settings: Settings,
    prices: Prices,
    trace: opentelemetry::Context,
}

#[cfg(test)]
impl TestCall {
    /// A call of `candidates` (then `wide` on a context-window error) for
    /// `tenant`, with no messages, tools or budget, timing out after
    /// `timeout`.
    pub(crate) fn call<'a>(
        &'a self,
        candidates: &'a [Arc<dyn Model>],
        wide: &'a [Arc<dyn Model>],
        tenant: &'a str,
        timeout: Duration,
    ) -> ModelCall<'a> {
        ModelCall {
            candidates,
            context_window: wide,
            messages: &[],
            tools: &[],
            turn: 0,
            input: "",
            call_id_prefix: "",
            settings: &self.settings,
            over: &self.settings,
            max_output: None,
            timeout,
            budget: None,
            hold_back: 0,
            prices: &self.prices,
            trace: &self.trace,
            tenant,
            periods: None,
        }
    }
}
