//! Starting a run: its record and span attributes ([`prepare`]), then
//! registering it and running its body beside its sequencer as one tracked
//! task ([`launch`]), which ends the run's span and counts it when both end.

use std::{future::Future, sync::Arc};

use baton_common::ids::TraceId;
use baton_proto::v1 as pb;
use opentelemetry::{
    Context, KeyValue,
    trace::{Status as SpanStatus, TraceContextExt as _},
};
use tokio::sync::mpsc;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use super::shared::Shared;
use super::{
    durable::{
        RunMeta,
        sequencer::{self, DurableLog},
    },
    events::{self, Draft, Filter},
    record::RunRecord,
    registry::Runs,
    state::{Run, RunOptions},
};
use crate::error::Error;

pub use super::durable::now_ms;

pub use super::events::EventStream;

/// A run built but not started: its record, what its branches share, where
/// its events go before the sequencer numbers them, and the caller's filter.
pub struct Prepared {
    /// The run's record.
    pub record: Arc<RunRecord>,
    /// What the run's branches share.
    pub run: Arc<Run>,
    /// The run's span.
    pub span: Context,
    drafts: mpsc::Receiver<Box<Draft>>,
    filter: Filter,
}

/// Builds a run of `kind` on `target` for `tenant` in the span `run_span`
/// of trace `trace_id` (nothing runs yet), with a new id, or `run_id` when
/// one was chosen before. The run is cancelled when `shutdown` is.
#[allow(clippy::too_many_arguments)]
pub fn prepare(
    services: &Arc<Shared>,
    (run_span, trace_id): (Context, TraceId),
    kind: pb::RunKind,
    target: String,
    tenant: String,
    options: RunOptions,
    shutdown: &CancellationToken,
    run_id: Option<String>,
) -> Prepared {
    let record = RunRecord::new(
        run_id,
        trace_id,
        kind,
        target,
        tenant,
        options.detach,
        shutdown,
    );
    record.set_run_timeout(options.limits.run_timeout);
    prepare_record(services, record, run_span, options)
}

/// Builds a run around `record` (a new one, or a resumed one) in the span
/// `run_span` (nothing runs yet).
pub fn prepare_record(
    services: &Arc<Shared>,
    record: Arc<RunRecord>,
    run_span: Context,
    options: RunOptions,
) -> Prepared {
    let mut options = options;
    record.bound_history(services.defaults.max_history_bytes);
    run_span
        .span()
        .set_attribute(KeyValue::new("baton.run.id", record.run_id.clone()));
    let (draft_tx, drafts) = mpsc::channel(events::DRAFT_BUFFER);
    let filter = std::mem::take(&mut options.filter);
    let run = Run::new(
        services.clone(),
        record.clone(),
        run_span.clone(),
        options,
        draft_tx,
    );
    Prepared {
        record,
        run,
        span: run_span,
        drafts,
        filter,
    }
}

/// Records a prepared run in the run store when runs are durable, with the
/// request that started it (`request`, encoded: another replica resumes
/// the run from it); its durable log: where its events go, with the epoch this
/// replica owns it with. `UNAVAILABLE` when Redis does not answer, and
/// nothing starts.
pub async fn register(
    services: &Shared,
    prepared: &Prepared,
    request: Vec<u8>,
) -> Result<Option<DurableLog>, Error> {
    let Some(runs) = &services.durable else {
        return Ok(None);
    };
    let r = &prepared.record;
    let meta = RunMeta {
        run_id: r.run_id.clone(),
        trace_id: r.trace_id.to_string(),
        tenant: r.tenant.clone(),
        kind: r.kind,
        target: r.target.clone(),
        started_ms: now_ms(),
        detached: r.detached,
        status: pb::RunStatus::Running,
        ended_ms: None,
        output: String::new(),
        run_context_json: String::new(),
        usage: pb::Usage::default(),
        error_code: 0,
        error_message: String::new(),
        last_seq: 0,
        waiting_approvals: 0,
        waiting_inputs: 0,
        forked_from: r.forked_from.get().cloned(),
        replay_of: r.replay_of.get().map(|(id, _)| id.clone()),
        experiment: r.experiment.get().cloned(),
        schedule: r.schedule.get().cloned(),
        scores: Vec::new(),
        replay_strict: r.replay_of.get().is_some_and(|(_, strict)| *strict),
        replay_diverged: false,
        conversation: r.conversation.get().map(|l| (**l).clone()),
        conversation_end: None,
    };
    let sent = super::record::mono_ms();
    let epoch = runs
        .create(&meta, &request, prepared.run.limits.run_timeout)
        .await?;
    r.epoch.store(epoch, std::sync::atomic::Ordering::Relaxed);
    r.lease_holds_until(sent + runs.lease().as_millis() as i64);
    Ok(Some(DurableLog {
        runs: runs.clone(),
        epoch,
    }))
}

/// Writes a fork's replayed events and journal (`#{unit}`: the seq each
/// point ended at) to the run store, a batch at a time, before it starts;
/// the lease is renewed on the way (a long history may take longer than
/// it), and the fork is marked started once all of it is written (see
/// `RedisRuns::started`: until then no replica resumes it).
pub async fn write_fork(
    log: &DurableLog,
    record: &RunRecord,
    events: &[pb::RunEvent],
    recording: &[super::log::Recorded],
) -> Result<(), Error> {
    let (run_id, trace_id) = (record.run_id.as_str(), record.trace_id.to_string());
    let mut records: Vec<(String, Vec<u8>)> = Vec::with_capacity(recording.len() * 2);
    for r in recording {
        records.push((format!("#{}", r.unit), r.seq.to_string().into_bytes()));
        records.push((r.unit.to_string(), r.record.to_vec()));
    }
    let mut records = records.chunks(sequencer::MAX_BATCH);
    for batch in events.chunks(sequencer::MAX_BATCH) {
        // The log keeps whole events, the run's ids included.
        let batch: Vec<pb::RunEvent> = batch
            .iter()
            .map(|e| pb::RunEvent {
                run_id: run_id.to_owned(),
                trace_id: trace_id.clone(),
                ..e.clone()
            })
            .collect();
        renew_while_writing(log, record).await?;
        let written = log
            .runs
            .append(
                run_id,
                log.epoch,
                &batch,
                records.next().unwrap_or(&[]),
                None,
                None,
                &Default::default(),
            )
            .await?;
        if written != super::durable::Append::Done {
            return Err(Error::Unavailable(format!(
                "run store: the fork's record was refused ({written:?})"
            )));
        }
    }
    for rest in records {
        renew_while_writing(log, record).await?;
        let written = log
            .runs
            .append(
                run_id,
                log.epoch,
                &[] as &[pb::RunEvent],
                rest,
                None,
                None,
                &Default::default(),
            )
            .await?;
        if written != super::durable::Append::Done {
            return Err(Error::Unavailable(format!(
                "run store: the fork's record was refused ({written:?})"
            )));
        }
    }
    // Recording the start is idempotent: tried again when its reply is
    // lost (the start may have been applied).
    let started = match log.runs.started(run_id, log.epoch).await {
        Ok(started) => started,
        Err(_) => log.runs.started(run_id, log.epoch).await?,
    };
    if !started {
        return Err(Error::Unavailable(
            "run store: another replica took the fork over while its history was written".into(),
        ));
    }
    Ok(())
}

/// Renews a starting fork's lease once a third of it has passed.
async fn renew_while_writing(log: &DurableLog, record: &RunRecord) -> Result<(), Error> {
    let lease = log.runs.lease().as_millis() as i64;
    if record.lease_left() > lease * 2 / 3 {
        return Ok(());
    }
    let sent = super::record::mono_ms();
    match log.runs.renew(&record.run_id, log.epoch, None).await? {
        Some(_) => {
            record.lease_holds_until(sent + lease);
            Ok(())
        }
        None => Err(Error::Unavailable(
            "run store: another replica took the fork over while its history was written".into(),
        )),
    }
}

/// Registers a prepared run in `runs` and starts `body` with the run's
/// sequencer (the durable one with a `log`), as one task of `tasks`;
/// returns the caller's stream.
pub fn launch(
    prepared: Prepared,
    log: Option<DurableLog>,
    runs: &Runs,
    tasks: &TaskTracker,
    body: impl Future<Output = ()> + Send + 'static,
) -> EventStream {
    runs.insert(prepared.record.clone());
    let record = &prepared.record;
    prepared
        .run
        .services
        .quotas
        .started(&record.tenant, &record.run_id);
    prepared.run.services.metrics.run_started(kind_of(record));
    let span_id = prepared.span.span().span_context().span_id().to_string();
    tracing::info!(run_id = %record.run_id, trace_id = %record.trace_id, span_id, target = %record.target, kind = kind_of(record), "run started");
    spawn(prepared, log, tasks, body)
}

/// Starts a memory-mode run woken from parking again (see `run::park`):
/// registered, counted and started already, it goes on with `body`.
pub fn relaunch(
    prepared: Prepared,
    tasks: &TaskTracker,
    body: impl Future<Output = ()> + Send + 'static,
) -> EventStream {
    tracing::info!(run_id = %prepared.record.run_id, "run woken");
    spawn(prepared, None, tasks, body)
}

fn kind_of(record: &RunRecord) -> &'static str {
    match record.kind {
        pb::RunKind::Pipeline => "pipeline",
        _ => "agent",
    }
}

/// Runs `body` beside the run's sequencer as one task of `tasks`; at the
/// end, counts the run's end and ends its span — unless it was parked,
/// when it still runs (asleep: see `run::park`).
fn spawn(
    prepared: Prepared,
    log: Option<DurableLog>,
    tasks: &TaskTracker,
    body: impl Future<Output = ()> + Send + 'static,
) -> EventStream {
    let Prepared {
        record,
        run,
        span: run_span,
        drafts,
        filter,
    } = prepared;
    let kind = kind_of(&record);
    let metrics = run.services.metrics.clone();
    let quotas = run.services.quotas.clone();
    // The body holds its own `Arc<Run>`; this one must not keep the draft
    // sender alive past the body, or the sequencer would never end.
    drop(run);
    let span_id = run_span.span().span_context().span_id().to_string();
    let (out_tx, stream) = events::channel();
    tasks.spawn(async move {
        let emitted = metrics.events.clone();
        match log {
            None => {
                let sequencer = events::sequence(drafts, out_tx, filter, record.clone(), emitted);
                tokio::join!(sequencer, body);
            }
            Some(log) => {
                let sequencer =
                    sequencer::sequence(drafts, out_tx, filter, record.clone(), log, emitted);
                tokio::join!(sequencer, body);
            }
        }
        let span = run_span.span();
        if record.settle_park() {
            // Asleep: it still runs, and still counts.
            span.set_attribute(KeyValue::new("baton.run.status", "parked"));
            span.end();
            tracing::debug!(run_id = %record.run_id, "run parked");
            record.pack_history().await;
            return;
        }
        let state = record.snapshot();
        let status = match state.status {
            pb::RunStatus::Completed => "completed",
            pb::RunStatus::Failed => "failed",
            pb::RunStatus::Cancelled => "cancelled",
            _ => "unknown",
        };
        metrics.run_finished(kind, status);
        // A run parked or handed over goes on elsewhere: it still counts.
        let ended = !record.handed_over.load(std::sync::atomic::Ordering::SeqCst);
        quotas.stopped(&record.tenant, &record.run_id, ended).await;
        span.set_attribute(KeyValue::new("baton.run.status", status));
        if state.status != pb::RunStatus::Completed {
            span.set_status(SpanStatus::error(if state.error_message.is_empty() {
                status.to_owned()
            } else {
                state.error_message.clone()
            }));
        }
        span.end();
        tracing::info!(run_id = %record.run_id, trace_id = %record.trace_id, span_id, status, "run ended");
        // Its history, packed now that every account of the run is closed.
        record.pack_history().await;
    });
    stream
}
