//! Memory mode: the keeper that parks runs that only wait for people and
//! wakes them (see `run::park` for what parking keeps and the states).
//!
//! Every half of `runs.park_after` (at most every second) it looks for
//! runs quiet that long and asks each to park. A parked run wakes when an
//! answer is given to it or it is cancelled (sent here at once), or at its
//! earliest question's deadline or its `run_timeout` (timers here). Woken,
//! it is built again from the request it started with and walks its
//! recording (`Walk::woken`): `RunResumed` ("this server" unless
//! `runs.replica` names it), then its open questions asked again with
//! their ids and deadlines, an answer given meanwhile taken at once. A run
//! cancelled or past its `run_timeout` while parked ends without starting
//! again; one that cannot start again (its agent gone from the agents
//! file) fails `FAILED_PRECONDITION` saying why. At shutdown every parked
//! run ends cancelled with the reason its record has ("server shutting
//! down").

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use baton_proto::v1::{self as pb, run_event::Payload};
use opentelemetry::{
    Context, KeyValue,
    trace::{
        SpanBuilder, SpanContext, SpanId, SpanKind, TraceContextExt, TraceFlags, TraceState, Tracer,
    },
};
use tokio::sync::mpsc;

use super::orchestrator::Orchestrator;
use crate::{
    error::{Error, Result},
    run::{clock::now_ms, launch, log::LogRead, park::Ending, record::RunRecord, recording::Walk},
};

/// Parks and wakes this process's memory-mode runs until runs stop.
pub async fn keep(core: Orchestrator, park_after: Duration) {
    let (tx, mut wakes) = mpsc::unbounded_channel::<String>();
    let every = (park_after / 2).clamp(Duration::from_millis(20), Duration::from_secs(1));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // (when, run): runs that wake by themselves then.
    let mut timers: BTreeSet<(i64, String)> = BTreeSet::new();
    let stop = core.runs_stop.clone();
    loop {
        let next = timers.first().map(|(at, _)| *at);
        let until_next = next.map(|at| Duration::from_millis((at - now_ms()).max(0) as u64));
        tokio::select! {
            biased;
            () = stop.cancelled() => break,
            Some(run_id) = wakes.recv() => core.wake_parked(&run_id).await,
            () = sleep_for(until_next) => {
                let now = now_ms();
                while let Some((at, run_id)) = timers.first().cloned() && at <= now {
                    timers.pop_first();
                    if let Ok(run) = core.runs.get(&run_id)
                        && run.is_asleep()
                        && run.wake_due()
                    {
                        run.wake();
                    }
                }
            }
            _ = tick.tick() => {
                for run in core.runs.running_runs() {
                    if let Some(at) = run.park_in_memory(park_after, &tx) {
                        timers.insert((at, run.run_id.clone()));
                    }
                }
            }
        }
    }
    // Shutting down: every parked run ends cancelled ("server shutting
    // down"), whether asleep or already sent here.
    wakes.close();
    while let Ok(run_id) = wakes.try_recv() {
        core.wake_parked(&run_id).await;
    }
    for run in core.runs.running_runs() {
        if run.take_to_wake() {
            core.wake_parked(&run.run_id).await;
        }
    }
}

async fn sleep_for(d: Option<Duration>) {
    match d {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

impl Orchestrator {
    /// Wakes parked run `run_id` (sent to be woken): it ends, or starts
    /// again from its recording.
    async fn wake_parked(&self, run_id: &str) {
        let Ok(run) = self.runs.get(run_id) else {
            return;
        };
        if !run.is_waking() {
            return;
        }
        let services = self.services();
        let ending = match run.ending() {
            Some(Ending::Cancelled) => Some(match run.failure() {
                Some(f) => Payload::RunFailed(pb::RunFailed {
                    code: f.code as i32,
                    message: f.message,
                    usage: Some(run.usage()),
                    replay: None,
                }),
                None => Payload::RunCancelled(pb::RunCancelled {
                    reason: run.cancel_reason(),
                    usage: Some(run.usage()),
                    replay: None,
                }),
            }),
            Some(Ending::TimedOut) => Some(failed(
                &run,
                tonic::Code::DeadlineExceeded,
                "the run did not finish within its run_timeout (it waited for a person)".into(),
            )),
            None => None,
        };
        let ending = match ending {
            Some(ending) => ending,
            None => match self.start_again(&run).await {
                Ok(()) => return,
                Err(e) => failed(
                    &run,
                    tonic::Code::FailedPrecondition,
                    format!("the run was parked waiting for a person and cannot go on: {e}"),
                ),
            },
        };
        tracing::info!(run_id, "a parked run ended");
        // What it added to its conversation goes there before anyone sees
        // it end, as an awake run's does.
        self.end_in_conversation(&run, &ending).await;
        run.end_parked(ending);
        let state = run.snapshot();
        let status = match state.status {
            pb::RunStatus::Completed => "completed",
            pb::RunStatus::Failed => "failed",
            _ => "cancelled",
        };
        let kind = match run.kind {
            pb::RunKind::Pipeline => "pipeline",
            _ => "agent",
        };
        services.metrics.run_finished(kind, status);
        services
            .quotas
            .stopped(&run.tenant, &run.run_id, true)
            .await;
        run.pack_history().await;
    }

    /// Appends what parked run `run`, ending with `ending` while asleep,
    /// added to its conversation (marked interrupted).
    async fn end_in_conversation(&self, run: &Arc<RunRecord>, ending: &Payload) {
        let Some(link) = run.conversation.get().filter(|l| !l.id.is_empty()) else {
            return;
        };
        let transcript = run
            .transcript
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let Some(transcript) = transcript else {
            return;
        };
        let status = match ending {
            Payload::RunCancelled(_) => pb::RunStatus::Cancelled,
            _ => pb::RunStatus::Failed,
        };
        let services = self.services();
        if let Err(e) = link
            .finish(
                &services.conversations,
                &run.tenant,
                &run.run_id,
                transcript.added(),
                status,
            )
            .await
        {
            tracing::warn!(run_id = %run.run_id, conversation = %link.id, error = %e, "a parked run's messages were not appended to its conversation");
        }
    }

    /// Builds parked run `run` again from its request and starts it with
    /// its recording to walk.
    async fn start_again(&self, run: &Arc<RunRecord>) -> Result<()> {
        let services = self.services();
        let (recording, request) = run
            .recording()
            .ok_or_else(|| Error::Internal("its history is gone".into()))?;
        let mut checked = self
            .check_stored(run.kind, &request)?
            .ok_or_else(|| Error::Internal("its request cannot be read by this version".into()))?;
        let replica = match services.defaults.replica.as_str() {
            "" => "this server".to_owned(),
            name => name.to_owned(),
        };
        let last_seq = run.snapshot().last_seq;
        checked.options.walk = Some(Walk::woken(&recording, replica, last_seq));
        checked.options.limits.run_timeout = run.run_time_left();
        checked.begin_with(&services, run.conversation.get().map(|l| &**l));
        let span = woken_span(&services, run);
        // Its questions are counted waiting again as it asks them.
        for _ in 0..run.start_again() {
            services.quotas.answered(&run.tenant, &run.run_id).await;
        }
        let prepared = launch::prepare_record(&services, run.clone(), span, checked.options);
        let body = checked.body.future(&prepared.run);
        drop(launch::relaunch(prepared, &self.tasks, body));
        Ok(())
    }
}

fn failed(run: &RunRecord, code: tonic::Code, message: String) -> Payload {
    Payload::RunFailed(pb::RunFailed {
        code: code as i32,
        message,
        usage: Some(run.usage()),
        replay: None,
    })
}

/// The span of a woken run: in its trace, a child of its root context's
/// span (from its first event).
fn woken_span(services: &crate::run::shared::Shared, run: &RunRecord) -> Context {
    let root = match run.events_after(0, 1) {
        LogRead::Events(first, _) => first
            .first()
            .and_then(|e| SpanId::from_hex(&e.span_id).ok())
            .filter(|s| *s != SpanId::INVALID),
        _ => None,
    };
    let trace = opentelemetry::trace::TraceId::from_hex(run.trace_id.as_str())
        .unwrap_or(opentelemetry::trace::TraceId::INVALID);
    let parent = SpanContext::new(
        trace,
        root.unwrap_or(SpanId::INVALID),
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    );
    let parent = Context::new().with_remote_span_context(parent);
    let span = services.tracing.tracer().build_with_context(
        SpanBuilder::from_name(format!("run {} (woken)", run.target))
            .with_kind(SpanKind::Server)
            .with_attributes([
                KeyValue::new("baton.run.id", run.run_id.clone()),
                KeyValue::new("baton.run.woken", true),
            ]),
        &parent,
    );
    parent.with_span(span)
}
