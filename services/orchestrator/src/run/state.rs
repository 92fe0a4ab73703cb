//! What a run shares: the [`Run`] (the service's [`Shared`], the run's
//! record, limits, event sink, usage, run context), pending writes and the
//! scope a `final` tool output ends.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use baton_common::{auth::Tenant, ids::TraceId};
use baton_proto::v1::{self as pb, run_event::Payload};
use baton_store::Scope;
use opentelemetry::Context;
use opentelemetry_sdk::trace::SdkTracer;
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use super::context::ContextInfo;
use super::events::{Draft, Filter};
use super::record::RunRecord;
use super::recording::{Walk, pace::Pacer, rerun::Rerun};
use super::target::{Resolved, Unresolved, resolve};
use crate::catalog::settings::Settings;
use crate::{catalog::Agent, model::Model, run::shared::Shared};

/// The limits of one run, after request values and server defaults merged.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Deepest context (root is 0).
    pub max_depth: u32,
    /// Most model turns per context.
    pub max_turns: u32,
    /// Deadline of the whole run.
    pub run_timeout: Duration,
    /// Deadline of one tool call attempt (waits for people excluded).
    pub tool_timeout: Duration,
    /// Deadline of one model call.
    pub model_timeout: Duration,
    /// How long approvals and input requests wait for a person.
    pub approval_timeout: Duration,
    /// What the run may spend on models.
    pub budget: crate::model::call::budget::Limit,
}

#[derive(Default)]
pub(super) struct UsageCounters {
    pub(super) input_tokens: AtomicU64,
    pub(super) output_tokens: AtomicU64,
    pub(super) model_calls: AtomicU64,
    pub(super) tool_calls: AtomicU64,
    pub(super) cached_input_tokens: AtomicU64,
    pub(super) cost_nanos: AtomicU64,
    pub(super) unpriced_model_calls: AtomicU64,
    pub(super) currency: std::sync::OnceLock<String>,
}

/// What every branch of a run shares: the service's [`Shared`] and what
/// is the run's own. Immutable but for the run context and the counters,
/// which are synchronised.
pub struct Run {
    /// The service's catalog, models, tools, store, tracer and metrics.
    pub services: Arc<Shared>,
    /// The run's record (status, cancellation, pending questions).
    pub record: Arc<RunRecord>,
    /// The run's trace.
    pub trace_id: TraceId,
    /// The namespace of the run's slots: its tenant's trace.
    pub scope: Scope,
    /// Limits.
    pub limits: Limits,
    /// How approvals are answered.
    pub approval_mode: pb::ApprovalMode,
    /// The model of agents that name none: the request's, else the server's.
    pub default_model: String,
    /// The run-scoped context (a JSON object), persisting across handoffs.
    pub run_context: Mutex<Map<String, Value>>,
    /// The run's span: the parent of its root context.
    pub run_span: Context,
    /// Pipeline outputs being written behind (tools that may read the store
    /// wait for them).
    pub pending_writes: PendingWrites,
    pub(super) events: mpsc::Sender<Box<Draft>>,
    pub(super) usage: UsageCounters,
    /// Whether durable points are recorded (runs are durable).
    journaling: bool,
    /// What a resumed run or a fork walks through first (see [`Walk`]).
    pub walk: Option<Walk>,
    /// For a replay (ReplayRun): the recording it answers from.
    pub rerun: Option<Rerun>,
    /// The request's generation settings, over every agent's own.
    pub settings: Settings,
    /// When its walk through recorded points last let the worker go.
    pacer: Pacer,
    /// Its budgets (see `model::call::budget`).
    pub budgets: crate::model::call::budget::Budgets,
    /// What the steps of each pipeline run as a tool spent, by the
    /// pipeline's context (its caller's agent counts it as a sub-agent's).
    pipeline_usage: Mutex<HashMap<String, pb::Usage>>,
}

/// What a run is started with, besides the service's [`Shared`]: its
/// record, span, limits and options (the request's, converted).
pub struct RunOptions {
    /// Limits after request values and server defaults merged.
    pub limits: Limits,
    /// How approvals are answered.
    pub approval_mode: pb::ApprovalMode,
    /// The model of agents that name none.
    pub default_model: String,
    /// The initial run context.
    pub run_context: Map<String, Value>,
    /// Which events the caller's stream carries.
    pub filter: Filter,
    /// Whether the run outlives its caller's stream.
    pub detach: bool,
    /// When the run is resumed on this replica, or a fork: what it walks
    /// through first.
    pub walk: Option<Walk>,
    /// For a replay (ReplayRun): the recording it answers from.
    pub rerun: Option<Rerun>,
    /// The request's generation settings.
    pub settings: Settings,
    /// A budget the run shares with others (an experiment's), drawn from
    /// with its own.
    pub shared_budget: Option<Arc<crate::model::call::budget::Budgets>>,
    /// The run's own webhooks, as its request gave them (the core checks
    /// them and gives the run its hooks: `crate::webhook`).
    pub webhooks: Vec<pb::RunWebhook>,
}

/// Store writes of a run that are in flight: a pipeline writes each step's
/// output behind (its dependents get it from memory), and whatever may read
/// the store waits until none is pending, so reads inside the run always
/// see earlier steps' outputs.
#[derive(Default)]
pub struct PendingWrites {
    pub(super) count: AtomicU64,
    pub(super) idle: tokio::sync::Notify,
}

impl PendingWrites {
    /// A write started.
    pub fn begin(&self) {
        self.count.fetch_add(1, Ordering::SeqCst);
    }

    /// A write ended (either way).
    pub fn end(&self) {
        if self.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.idle.notify_waiters();
        }
    }

    /// Returns once no write is pending.
    pub async fn settled(&self) {
        loop {
            let idle = self.idle.notified();
            if self.count.load(Ordering::SeqCst) == 0 {
                return;
            }
            idle.await;
        }
    }
}

/// What a `final` tool-output policy ends: a whole RunAgent, or one attempt
/// of a pipeline step. Agents called as tools share their caller's scope (a
/// final output deep down ends the whole RunAgent, or the whole step); a
/// step's attempt, and each step of a pipeline an agent starts, gets its own.
#[derive(Default)]
pub struct FinalScope {
    pub(super) ended: tokio_util::sync::CancellationToken,
    pub(super) output: Mutex<Option<String>>,
}

impl FinalScope {
    /// Ends the scope with `output` (the first final output wins).
    pub fn end_with(&self, output: String) {
        self.output
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(output);
        self.ended.cancel();
    }

    /// Whether a final output ended the scope.
    pub fn is_ended(&self) -> bool {
        self.ended.is_cancelled()
    }

    /// Resolves once a final output ended the scope.
    pub async fn ended(&self) {
        self.ended.cancelled().await;
    }

    /// The final output, once the scope ended.
    pub fn output(&self) -> Option<String> {
        self.output
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl Run {
    /// A run of `services` whose events go to `events`.
    pub fn new(
        services: Arc<Shared>,
        record: Arc<RunRecord>,
        run_span: Context,
        options: RunOptions,
        events: mpsc::Sender<Box<Draft>>,
    ) -> Arc<Self> {
        Arc::new(Self {
            // Every run records its durable points: forks replay them.
            journaling: true,
            services,
            trace_id: record.trace_id.clone(),
            scope: Scope::new(Tenant(record.tenant.clone()), record.trace_id.clone()),
            record,
            limits: options.limits,
            approval_mode: options.approval_mode,
            default_model: options.default_model,
            run_context: Mutex::new(options.run_context),
            run_span,
            pending_writes: PendingWrites::default(),
            events,
            usage: UsageCounters::default(),
            walk: options.walk,
            rerun: options.rerun,
            settings: options.settings,
            pacer: Pacer::default(),
            budgets: crate::model::call::budget::Budgets::under(
                options.limits.budget,
                options.shared_budget,
            ),
            pipeline_usage: Mutex::default(),
        })
    }

    /// Makes the run's spans.
    pub fn tracer(&self) -> &SdkTracer {
        self.services.tracing.tracer()
    }

    /// Sends an event of `agent` in `ctx` (waits while the client is slow).
    pub async fn emit(&self, ctx: &Arc<ContextInfo>, agent: &Arc<str>, payload: Payload) {
        // The sequencer outlives every sender; a failed send means the run is
        // being torn down, when events no longer matter.
        let _ = self
            .events
            .send(Box::new(Draft {
                ctx: ctx.clone(),
                agent: agent.clone(),
                payload,
                journal: None,
                record_span: false,
            }))
            .await;
    }

    /// The record of `unit` when the run walks through a journal that has
    /// it (resumed, or a fork): see [`Walk::take`].
    pub fn journaled(&self, unit: &str) -> Option<&[u8]> {
        self.walk.as_ref()?.take(unit, &self.run_context)
    }

    /// An answer to question `id` given while the run was away (parked, or
    /// its replica gone), when the run is being resumed: a durable run's
    /// from its inbox as it was claimed; a memory-mode run's from its
    /// record, taken (see `run::park`: it may come while the run walks).
    /// A replay takes the answer recorded.
    pub fn inbox(&self, id: &str) -> Option<std::borrow::Cow<'_, [u8]>> {
        if let Some(answer) = self.rerun.as_ref().and_then(|r| r.answer(id)) {
            return Some(answer.into());
        }
        let walk = self.walk.as_ref()?;
        if let Some(answer) = walk.inbox.get(id) {
            return Some(Vec::as_slice(answer).into());
        }
        self.record.take_parked_answer(id).map(Into::into)
    }

    /// Called at each point taken from a resumed run's or a fork's
    /// journal: nothing there waits, so the walk lets the worker go once
    /// in a while (see `run::recording::pace`). A replay (ReplayRun) does not: its
    /// matched calls are answered like an instant model's, whose live runs
    /// do not pause either (pausing there too made the benchmark's
    /// 10,000-turn replay slower: about 440 ms against 360).
    pub async fn pace(&self) {
        self.pacer.pace().await;
    }

    /// Sends the event that ends the durable point `unit`, with its record
    /// (`record()`) when runs are durable — unless the run is resumed and
    /// had done `unit` already, when the event was sent before.
    pub async fn emit_point(
        &self,
        ctx: &Arc<ContextInfo>,
        agent: &Arc<str>,
        payload: Payload,
        unit: String,
        record: impl FnOnce() -> Vec<u8>,
    ) {
        if self.journaled(&unit).is_some() {
            self.pace().await;
            return;
        }
        // An agent's start in a context records its span id already.
        let record_span = self.journaling
            && !ctx.span_recorded.swap(true, Ordering::Relaxed)
            && !(unit.starts_with("a/") && unit.ends_with("/0"));
        let journal = self.journaling.then(|| (unit, record()));
        let _ = self
            .events
            .send(Box::new(Draft {
                ctx: ctx.clone(),
                agent: agent.clone(),
                payload,
                journal,
                record_span,
            }))
            .await;
    }

    /// Stops the run here (see `RunRecord::drop_here`): it never goes on,
    /// and its end is nobody's here (the replica that resumes it ends it).
    /// The run's body is dropped at once (`run::drive` waits on the run's
    /// cancellation first).
    pub async fn stop_here(&self, reason: &str) -> std::convert::Infallible {
        tracing::warn!(run_id = %self.record.run_id, reason, "stopped a run here");
        self.record.drop_here(reason);
        std::future::pending().await
    }

    /// Called before every side effect of a durable run (a model call, a
    /// tool call, a write to the context store): a replica whose lease
    /// has lapsed (paused past it, or cut off from the run store) may have
    /// been fenced, and another replica may be doing the same work, so it
    /// stops the run here instead. Its writes to the run store are fenced
    /// by the epoch already; this stops what is not.
    pub async fn hold_lease(&self) {
        if self.record.lease_lapsed() {
            match self
                .stop_here("this replica's lease of the run lapsed: another replica may run it")
                .await {}
        }
    }

    /// Adds what a model turn consumed to the run's totals.
    pub fn add_usage(&self, usage: &pb::Usage) {
        let u = &self.usage;
        u.input_tokens
            .fetch_add(usage.input_tokens, Ordering::Relaxed);
        u.output_tokens
            .fetch_add(usage.output_tokens, Ordering::Relaxed);
        u.model_calls
            .fetch_add(usage.model_calls, Ordering::Relaxed);
        u.tool_calls.fetch_add(usage.tool_calls, Ordering::Relaxed);
        u.cached_input_tokens
            .fetch_add(usage.cached_input_tokens, Ordering::Relaxed);
        u.cost_nanos.fetch_add(usage.cost_nanos, Ordering::Relaxed);
        u.unpriced_model_calls
            .fetch_add(usage.unpriced_model_calls, Ordering::Relaxed);
        if !usage.currency.is_empty() && u.currency.get().is_none() {
            let _ = u.currency.set(usage.currency.clone());
        }
        self.record.add_usage(usage);
    }

    /// A step of the pipeline in context `pipeline` spent `usage`.
    pub fn add_step_usage(&self, pipeline: &str, usage: &pb::Usage) {
        let mut all = self
            .pipeline_usage
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        super::usage::add(all.entry(pipeline.to_owned()).or_default(), usage);
    }

    /// What the steps of the pipeline in context `pipeline` spent, once.
    pub fn take_step_usage(&self, pipeline: &str) -> Option<pb::Usage> {
        self.pipeline_usage
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(pipeline)
    }

    /// Usage totals so far.
    pub fn usage(&self) -> pb::Usage {
        pb::Usage {
            input_tokens: self.usage.input_tokens.load(Ordering::Relaxed),
            output_tokens: self.usage.output_tokens.load(Ordering::Relaxed),
            model_calls: self.usage.model_calls.load(Ordering::Relaxed),
            tool_calls: self.usage.tool_calls.load(Ordering::Relaxed),
            cached_input_tokens: self.usage.cached_input_tokens.load(Ordering::Relaxed),
            cost_nanos: self.usage.cost_nanos.load(Ordering::Relaxed),
            unpriced_model_calls: self.usage.unpriced_model_calls.load(Ordering::Relaxed),
            currency: self.usage.currency.get().cloned().unwrap_or_default(),
        }
    }

    /// The run context as JSON text.
    pub fn run_context_json(&self) -> String {
        Value::Object(
            self.run_context
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        )
        .to_string()
    }

    /// The model `agent` runs on: its own, else the run's default.
    pub fn model_for(&self, agent: &Agent) -> Result<Arc<dyn Model>, Unresolved> {
        super::target::model_of(&self.services.models, &self.default_model, agent)
    }

    /// Resolves `target` (an agent or group) for a frame of this run.
    pub fn resolve(&self, target: &str) -> Result<Resolved, Unresolved> {
        resolve(
            &self.services.catalog,
            &self.services.models,
            &self.default_model,
            target,
        )
    }

    /// The root context of the run: a span named `name` under the run's.
    pub fn root_context(&self, name: String) -> Arc<ContextInfo> {
        let span = self.replayed_span("root");
        ContextInfo::root_with(self.tracer(), &self.run_span, name, span)
    }

    /// A child context `{parent}.{segment}` whose span is named `name`.
    pub fn child_context(
        &self,
        parent: &ContextInfo,
        segment: &str,
        name: String,
    ) -> Arc<ContextInfo> {
        let span = self.replayed_span(&format!("{}.{segment}", parent.id));
        parent.child_with(self.tracer(), segment, name, span)
    }

    /// [`Self::child_context`] whose span is a child of `otel`, a span inside
    /// `parent` (the `execute_tool` span of the call that starts it).
    pub fn child_context_under(
        &self,
        parent: &ContextInfo,
        segment: &str,
        name: String,
        otel: &Context,
    ) -> Arc<ContextInfo> {
        let span = self.replayed_span(&format!("{}.{segment}", parent.id));
        parent.child_under(self.tracer(), segment, name, span, otel)
    }

    /// The span id a resumed run's context `id` had: its events keep it.
    fn replayed_span(&self, id: &str) -> Option<opentelemetry::trace::SpanId> {
        let record = self
            .journaled(&format!("sp/{id}"))
            .or_else(|| self.journaled(&format!("a/{id}/0")))?;
        opentelemetry::trace::SpanId::from_hex(std::str::from_utf8(record).ok()?).ok()
    }

    /// A tracing span for log lines inside `ctx`: they carry the run id,
    /// trace id and the context's span id.
    pub fn log_span(&self, ctx: &ContextInfo) -> tracing::Span {
        tracing::info_span!(
            "context",
            run_id = %self.record.run_id,
            trace_id = %self.trace_id,
            span_id = %ctx.span_id,
            context = %ctx.id,
        )
    }
}

impl Run {
    /// Says that this replay's request differs from the recording
    /// (`diverged`, in `ctx`), the first time only. A strict replay ends
    /// here: this never returns, and the run ends failed (`run::drive`
    /// waits on `Rerun::failed`) before anything goes live.
    pub async fn diverged(
        &self,
        ctx: &Arc<ContextInfo>,
        agent: &Arc<str>,
        mut diverged: pb::Diverged,
    ) {
        let Some(rerun) = self.rerun.as_ref() else {
            return;
        };
        diverged.strict = rerun.strict;
        if rerun.diverge() {
            tracing::info!(run_id = %self.record.run_id, origin = %rerun.origin, context = %ctx.id, diff = %diverged.diff, "replay diverged");
            let failure = rerun.strict_failure(&ctx.id, &diverged);
            // A point (`dv`, its record the failure's message): a resumed
            // replay knows it diverged, when, and a strict one how it ends.
            // Told before a strict replay ends, which drops the run's body.
            let said = failure.message.clone().into_bytes();
            self.emit_point(ctx, agent, Payload::Diverged(diverged), "dv".into(), || {
                said
            })
            .await;
            if rerun.strict {
                rerun.end(failure);
            }
        }
        if rerun.strict {
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{
        pin::pin,
        task::{Context, Waker},
    };

    use super::*;
    use crate::run::{recording::pace::SLICE, testing};

    /// A point of a resumed run's (or a fork's) journal is not sent again,
    /// and a walk through them lets the worker go once a slice has passed
    /// (`run::recording::pace`); a live point is sent, unpaced.
    #[tokio::test]
    async fn a_walk_through_the_journal_lets_the_worker_go_and_sends_nothing() {
        let journal = [(Arc::from("b/root/1"), Arc::from(&b""[..]))]
            .into_iter()
            .collect();
        let walk = Walk {
            journal,
            checkpoint_seq: 4,
            fork: true,
            ..Walk::default()
        };
        let (rt, mut events) = testing::run_with(
            "default_model: scripted:quiet\nscripts:\n  quiet:\n    - text: ok\nagents:\n  a: {}\n",
            testing::limits(),
            pb::ApprovalMode::Ask,
            Some(walk),
        );
        let root = rt.root_context("agent a".into());
        let agent: Arc<str> = Arc::from("a");
        let batch = || {
            Payload::ToolBatchCompleted(pb::ToolBatchCompleted {
                calls: 1,
                failed: 0,
            })
        };
        let mut cx = Context::from_waker(Waker::noop());
        std::thread::sleep(SLICE);
        // Recorded, a slice after the run was made: it lets the worker go
        // (its first poll is pending), then ends without sending.
        let mut walked = pin!(rt.emit_point(&root, &agent, batch(), "b/root/1".into(), Vec::new));
        assert!(walked.as_mut().poll(&mut cx).is_pending());
        walked.await;
        assert!(
            events.try_recv().is_err(),
            "a recorded point is not sent again"
        );
        // Live, a slice later: sent at once.
        std::thread::sleep(SLICE);
        let live = pin!(rt.emit_point(&root, &agent, batch(), "b/root/2".into(), Vec::new));
        assert!(live.poll(&mut cx).is_ready());
        let sent = events.try_recv().expect("a live point is sent");
        assert_eq!(
            sent.journal.map(|(unit, _)| unit).as_deref(),
            Some("b/root/2")
        );
    }
}
