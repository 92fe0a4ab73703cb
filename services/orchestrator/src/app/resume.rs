//! Resuming a durable run this replica claimed (its owner stopped, or it
//! was parked and an answer or its deadline woke it): the run is built
//! again from the request that started it and runs from the start with its
//! journal — every model turn, tool call, answer of a person and started
//! agent it had recorded is taken from there, not done again, and its
//! events are not sent again — so it picks up where it was: what was in
//! flight when its owner stopped is done again (model and tool calls are at
//! least once; ToolHost calls carry the same idempotency key). Its first
//! new event is `RunResumed`.
//!
//! Pipelines resume the same way: a step that had finished (each attempt's
//! end is recorded with its `StepCompleted` or `StepFailed`) is not run
//! again — its output comes from the journal — and a step that was running
//! runs again, its agents taking what they had recorded.

use baton_common::ids::TraceId;
use baton_proto::v1 as pb;
use opentelemetry::{
    Context, KeyValue,
    trace::{
        SpanBuilder, SpanContext, SpanId, SpanKind, TraceContextExt, TraceFlags, TraceState, Tracer,
    },
};
use prost::Message as _;

use super::{orchestrator::Orchestrator, start::Checked};
use crate::{
    error::{Error, Result},
    request::{
        AgentRequest, PipelineRequest,
        validate::{agent_run, pipeline_run},
    },
    run::{
        durable::{RedisRuns, sequencer::DurableLog},
        launch,
        record::RunRecord,
        recording::{Walk, rerun::Rerun},
        view::from_ms,
    },
};

/// A run this replica claimed.
pub struct Claimed {
    /// The run.
    pub run_id: String,
    /// The epoch this replica owns it with.
    pub epoch: u64,
    /// The seq of its last logged event.
    pub last_seq: u64,
    /// When the claim was sent (ms on [`crate::run::record::mono_ms`]'s
    /// clock): the lease runs from then.
    pub claimed_at: i64,
}

impl Orchestrator {
    /// Resumes a claimed run here (see the module docs); `false` when it
    /// cannot be (its request or journal is unreadable), and the caller
    /// ends it instead. A run that cannot be read now (the run store
    /// failed: a transient error must not end it, nor resume it from less
    /// than it recorded) is given up again: claimable at once, the next
    /// round of claims, here or anywhere, tries again.
    pub async fn resume(&self, claimed: Claimed) -> bool {
        let Some(durable) = self.services().durable.clone() else {
            return false;
        };
        let (run_id, epoch) = (claimed.run_id.clone(), claimed.epoch);
        // A replica shutting down resumes nothing: it hands runs over (a
        // claim made as the drain began would be cancelled with the
        // replica's runs, "server shutting down").
        if self.shutdown.is_cancelled() {
            tracing::info!(
                run_id,
                "shutting down: gave a claimed run up to another replica"
            );
            if let Err(e) = durable.release(&run_id, epoch).await {
                tracing::warn!(run_id, error = %e, "cannot give a claimed run up");
            }
            return true;
        }
        match self.try_resume(&durable, claimed).await {
            Ok(resumed) => resumed,
            Err(e) => {
                tracing::warn!(run_id, error = %e, "cannot resume a claimed run now; gave it up to be claimed again");
                if let Err(e) = durable.release(&run_id, epoch).await {
                    // Its lease lapses: claimable all the same, a lease later.
                    tracing::warn!(run_id, error = %e, "cannot give a claimed run up");
                }
                true
            }
        }
    }

    async fn try_resume(&self, durable: &RedisRuns, claimed: Claimed) -> Result<bool> {
        let id = claimed.run_id.as_str();
        let Some(meta) = durable.meta(id).await? else {
            return Ok(false);
        };
        // A case of an experiment goes on only with its experiment, which
        // ended with the replica that drove it: resumed here, nobody would
        // score it, and its tool calls would no longer be answered from
        // its case's recording (they would reach the real tools). It ends.
        if let Some(experiment) = &meta.experiment {
            tracing::info!(
                run_id = id,
                experiment,
                "a case's run is not resumed: its experiment ended with its replica"
            );
            return Ok(false);
        }
        let Some(request) = durable.request(id).await? else {
            return Ok(false);
        };
        // A fork whose history was never all written: its caller was told
        // it failed, and it ends so (see `RedisRuns::started`).
        if meta.forked_from.is_some() && durable.is_starting(id).await? {
            return Ok(false);
        }
        let Ok(trace_id) = TraceId::parse(&meta.trace_id) else {
            return Ok(false);
        };
        // A request this replica can never start (its agent is no longer in
        // the agents file) ends the run, instead of its claim going round.
        let mut checked = match self.check_stored(meta.kind, &request) {
            Ok(Some(checked)) => checked,
            Ok(None) => return Ok(false),
            Err(e @ (Error::InvalidArgument { .. } | Error::NotFound { .. })) => {
                tracing::warn!(run_id = id, error = %e, "a claimed run's request is refused now: it ends");
                return Ok(false);
            }
            Err(e) => return Err(e),
        };
        let journal = durable.journal(id).await?;
        // A replay goes on answering from the recording of the run it
        // replays (gone: an empty one, where every request differs; not
        // readable now: resumed later, never from an empty one, which
        // would make every call live).
        if let Some(origin) = meta.replay_of.clone() {
            let history = super::fork::stored_history(durable, &origin, u64::MAX).await?;
            let rerun = Rerun::new(origin, meta.replay_strict, history).resumed(&journal);
            checked.options.rerun = Some(rerun);
        }
        let inbox = durable.inbox(id).await?;
        let cancel = inbox
            .get("cancel")
            .map(|r| String::from_utf8_lossy(r).into_owned());
        checked.options.walk = Some(Walk::resumed(
            journal,
            durable.owner().to_owned(),
            claimed.last_seq,
            inbox,
        ));
        let record = RunRecord::resumed(
            claimed.run_id.clone(),
            from_ms(meta.started_ms.max(0)),
            claimed.last_seq,
            trace_id.clone(),
            meta.kind,
            meta.target.clone(),
            meta.tenant.clone(),
            &self.runs_stop,
        );
        record
            .epoch
            .store(claimed.epoch, std::sync::atomic::Ordering::Relaxed);
        // It keeps the deadline it started with: its run_timeout is what is
        // left of it.
        record.set_run_timeout(checked.options.limits.run_timeout);
        checked.options.limits.run_timeout = record
            .run_time_left()
            .max(std::time::Duration::from_millis(1));
        if let Some(origin) = meta.replay_of.clone() {
            let _ = record.replay_of.set((origin, meta.replay_strict));
        }
        if let Some(origin) = meta.forked_from.clone() {
            let _ = record.forked_from.set(origin);
        }
        if let Some(schedule) = meta.schedule.clone() {
            let _ = record.schedule.set(schedule);
        }
        checked.begin_with(&self.services(), meta.conversation.as_ref());
        if let Some(link) = meta.conversation.clone() {
            let _ = record.conversation.set(std::sync::Arc::new(link));
        }
        record.lease_holds_until(claimed.claimed_at + durable.lease().as_millis() as i64);
        let span = self
            .resumed_span(durable, &claimed.run_id, &trace_id, &meta.target)
            .await;
        // Its own webhooks: its request's (a fork's or a replay's request
        // is its origin's, whose webhooks are not its own) and those added
        // since it started.
        let from_request = std::mem::take(&mut checked.options.webhooks);
        let from_request = if meta.forked_from.is_some() || meta.replay_of.is_some() {
            Vec::new()
        } else {
            from_request
        };
        let own_hooks = self
            .webhooks
            .resumed_own(&claimed.run_id, from_request)
            .await;
        let prepared = launch::prepare_record(&self.services(), record, span, checked.options);
        self.webhooks.attach(&prepared.record, own_hooks);
        let body = checked.body.future(&prepared.run);
        let record = prepared.record.clone();
        let log = DurableLog {
            runs: self
                .services()
                .durable
                .clone()
                .ok_or_else(|| Error::Internal("runs are not durable".into()))?,
            epoch: claimed.epoch,
        };
        tracing::info!(run_id = %claimed.run_id, from_seq = claimed.last_seq, "resuming a claimed run");
        // Nobody is attached: clients follow it with WatchRun.
        let to_score = self.to_score(&prepared.record, &request);
        let scored = prepared.record.clone();
        drop(launch::launch(
            prepared,
            Some(log),
            &self.runs,
            &self.tasks,
            body,
        ));
        // Scored live by whichever replica ends it.
        if let Some(what) = to_score {
            self.score_when_ended(scored, what);
        }
        // A CancelRun given while the run was away.
        if let Some(reason) = cancel {
            record.cancel_by_request(&reason);
        }
        // Shutdown began while it was being resumed: the drain may have
        // looked for runs to hand over before this one was here.
        // (Redis not answering: it stays, and gets the grace period.)
        if self.shutdown.is_cancelled()
            && matches!(
                durable.release(&record.run_id, claimed.epoch).await,
                Ok(true)
            )
        {
            self.runs
                .drop_run(&record, "handed over to another replica");
            tracing::info!(run_id = %record.run_id, "handed a run over");
        }
        Ok(true)
    }

    /// The stored request of a run of `kind`, checked again as when it
    /// started; `None` when it cannot be read (a version that no longer
    /// reads it).
    pub(super) fn check_stored(
        &self,
        kind: pb::RunKind,
        request: &[u8],
    ) -> Result<Option<Checked>> {
        Ok(Some(match kind {
            pb::RunKind::Pipeline => {
                let Ok(request) = pb::RunPipelineRequest::decode(request) else {
                    return Ok(None);
                };
                pipeline_run(&self.services(), PipelineRequest::try_from(request)?)?.into()
            }
            _ => {
                let Ok(request) = pb::RunAgentRequest::decode(request) else {
                    return Ok(None);
                };
                agent_run(&self.services(), AgentRequest::try_from(request)?)?.into()
            }
        }))
    }

    /// The span of a resumed run: in its trace, a child of its root
    /// context's span (from its first event), so the trace shows both
    /// replicas' work.
    async fn resumed_span(
        &self,
        durable: &RedisRuns,
        run_id: &str,
        trace_id: &TraceId,
        target: &str,
    ) -> Context {
        let parent_span = match durable.events_after(run_id, 0, 1).await {
            Ok(first) => first
                .first()
                .and_then(|e| SpanId::from_hex(&e.span_id).ok())
                .filter(|s| *s != SpanId::INVALID),
            Err(_) => None,
        };
        let trace = opentelemetry::trace::TraceId::from_hex(&trace_id.to_string())
            .unwrap_or(opentelemetry::trace::TraceId::INVALID);
        let parent = SpanContext::new(
            trace,
            parent_span.unwrap_or(SpanId::from_bytes(rand_span())),
            TraceFlags::SAMPLED,
            true,
            TraceState::default(),
        );
        let parent = Context::new().with_remote_span_context(parent);
        let span = self.services().tracing.tracer().build_with_context(
            SpanBuilder::from_name(format!("run {target} (resumed)"))
                .with_kind(SpanKind::Server)
                .with_attributes([
                    KeyValue::new("baton.run.id", run_id.to_owned()),
                    KeyValue::new("baton.run.resumed", true),
                ]),
            &parent,
        );
        parent.with_span(span)
    }
}

fn rand_span() -> [u8; 8] {
    let id = uuid::Uuid::new_v4();
    let mut out = [0u8; 8];
    out.copy_from_slice(&id.as_bytes()[..8]);
    out[0] |= 1;
    out
}
