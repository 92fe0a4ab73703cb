//! Executing a [`Plan`].
//!
//! Steps start as soon as their dependencies succeeded (and, in sequential
//! mode, the step before them ended, whichever way: list order is the order
//! of execution, not a dependency), up to the plan's concurrency, in list
//! order among the ready ones. A step runs its agent in
//! context `root.{step_id}` (depth 1; its agents' events nest below), with
//! `{{key}}` in its task replaced by that slot's value and its `input_from`
//! slots appended as named inputs (a slot written by an earlier step of this
//! pipeline is handed over from memory, as that step wrote it; seeded and
//! other slots are read from the store); a failed attempt is retried up to
//! `retries` times, each attempt bounded by the step's timeout; the output
//! is written to its `output_to` slot.
//!
//! Outputs are written behind: when a step succeeds its dependents start at
//! once (they get its output from memory) while the write goes on, so a
//! chain of steps does not wait for a store round trip per step. Writes are
//! coalesced: one batch (`PutMany`, up to 1000 outputs) is in flight at a
//! time, and the outputs of steps that end meanwhile wait for the next, so
//! a fan-out of 1,000 steps writes its outputs in a few calls. The seeded
//! slots are one batch, and so is the cleanup (`DeleteMany`). Everything
//! that may read the store inside the run — a tool call, a step reading a
//! slot it did not get from memory, a nested pipeline — first waits until no
//! write is pending, and PipelineCompleted comes after every write, so no
//! reader inside the run can tell. An output larger than the store's value
//! limit fails its attempt before anything is written; a write that fails
//! anyway (the store is down, a quota) fails the run, naming the step and
//! slot — and the outputs before the refused one in its batch are still
//! written ([`write_outputs`]), so batching never changes what is stored.
//!
//! Failure policies: under `fail`, a failed required step cancels every
//! running step (reported as skipped) and the run fails. Under `continue`,
//! steps that need a failed step are skipped, the rest go on, and the run
//! fails with the partial results. `best_effort` is like `continue` but the
//! run succeeds if any step succeeded. A step with `required: false` never
//! fails the run (its dependents are still skipped). In every mode only the
//! steps that need a failed step (`depends_on`, or reading a slot it
//! writes) are skipped. A `final` tool output inside a step ends that
//! attempt successfully with the tool's output (no retry).
//!
//! The whole pipeline is one future: cancelling the run drops every running
//! step and nested agent at once. At the end the pipeline's slots (seeded and
//! written) are deleted unless the request keeps them.

use std::{
    collections::{BTreeMap, BTreeSet},
    pin::Pin,
    sync::Arc,
};

use baton_proto::v1::{self as pb, run_event::Payload};
use baton_store::{Error as StoreError, Key, MAX_BATCH, Put, Selection};
use futures::{StreamExt, stream::FuturesUnordered};
use tonic::Code;

use super::{
    Plan, Policy, Step,
    call::RunStep,
    schedule::{self, Scheduler, Skip, Status},
};
use opentelemetry::{KeyValue, context::FutureExt as _};
use tracing::Instrument as _;

use crate::run::{context::ContextInfo, drive::drive, failure::Failure, state::Run};

fn no_agent() -> Arc<str> {
    Arc::from("")
}

/// The body of a RunPipeline: RunStarted, the seeded slots, the steps,
/// PipelineCompleted, then exactly one terminal event.
pub async fn body(
    rt: Arc<Run>,
    plan: Plan,
    initial: Vec<(String, String)>,
    keep_context: bool,
    run_step: RunStep,
) {
    let root = rt.root_context(if plan.name.is_empty() {
        "pipeline".to_owned()
    } else {
        format!("pipeline {}", plan.name)
    });
    let _end = root.end_on_drop();
    let owned = owned_keys(&plan, &initial);
    let body = async {
        let summary = execute(&rt, &root, &plan, initial, run_step)
            .with_context(root.otel.clone())
            .instrument(rt.log_span(&root))
            .await?;
        if summary.success {
            Ok(summary.output)
        } else {
            Err(Failure::new(Code::Aborted, summary.failure_message()))
        }
    };
    let cleanup = async {
        if !keep_context {
            clear(&rt, &owned).with_context(root.otel.clone()).await;
        }
    };
    drive(
        &rt,
        &root,
        pb::RunStarted {
            kind: pb::RunKind::Pipeline as i32,
            target: plan.name.clone(),
            input: String::new(),
            labels: Default::default(),
            ..Default::default()
        },
        Box::pin(body),
        cleanup,
    )
    .await;
}

/// The slots a pipeline owns: those it seeds and those its steps write.
pub(super) fn owned_keys(plan: &Plan, initial: &[(String, String)]) -> BTreeSet<String> {
    let mut owned: BTreeSet<String> = initial.iter().map(|(k, _)| k.clone()).collect();
    owned.extend(plan.steps.iter().filter_map(|s| s.output_to.clone()));
    owned
}

/// Deletes the slots, a `DeleteMany` per 1,000 keys. Absent keys (never
/// written, or expired) are fine; a failure is logged (the slots end with
/// their TTL).
pub(super) async fn clear(rt: &Arc<Run>, keys: &BTreeSet<String>) {
    let max_key = rt.services.store.limits().max_key_len;
    let keys: Vec<Key> = keys
        .iter()
        .filter_map(|k| Key::parse("key", k, max_key).ok())
        .collect();
    for chunk in keys.chunks(MAX_BATCH) {
        let selection = Selection::Keys(chunk.to_vec());
        if let Err(e) = rt.services.store.delete_many(&rt.scope, &selection).await {
            tracing::warn!(error = %e, "pipeline slots not deleted; they end with their TTL");
        }
    }
}

/// How a pipeline ended (what PipelineCompleted says, and the output).
pub(super) struct Summary {
    pub(super) success: bool,
    pub(super) succeeded: Vec<String>,
    pub(super) failed: Vec<String>,
    pub(super) skipped: Vec<String>,
    pub(super) outputs: BTreeMap<String, String>,
    /// The last succeeded sink step's output (else the last succeeded
    /// step's).
    pub(super) output: String,
}

impl Summary {
    fn failure_message(&self) -> String {
        format!(
            "pipeline failed: {} succeeded, failed [{}], skipped [{}]",
            self.succeeded.len(),
            self.failed.join(", "),
            self.skipped.join(", ")
        )
    }
}

type StepFuture<'a> = Pin<Box<dyn Future<Output = (usize, Result<String, Failure>)> + Send + 'a>>;
/// A batch of step outputs being written: the steps, and how it went (the
/// refused entry's index in the batch, and why).
type Batch = (Vec<usize>, Result<(), (usize, StoreError)>);
type WriteFuture<'a> = Pin<Box<dyn Future<Output = Batch> + Send + 'a>>;

/// What the executor waits for next.
enum Next {
    Step((usize, Result<String, Failure>)),
    Written(Batch),
}

/// Takes the next batch off `pending`: in order, up to [`MAX_BATCH`]
/// outputs, stopping before a key already in the batch.
fn next_batch(plan: &Plan, pending: &mut Vec<usize>) -> Vec<usize> {
    let mut keys = BTreeSet::new();
    let take = pending
        .iter()
        .take(MAX_BATCH)
        .take_while(|&&i| keys.insert(plan.steps[i].output_to.as_deref()))
        .count();
    pending.drain(..take).collect()
}

/// The write of a step's output to its slot.
fn output_put(rt: &Run, key: &str, output: &str) -> Put {
    // Keys were validated with the plan.
    let key = Key::parse("output_to", key, usize::MAX).unwrap_or_else(|_| {
        unreachable!("output_to {key:?} was validated before the pipeline started")
    });
    let mut put = Put::new(rt.scope.clone(), key, output.as_bytes().to_vec());
    put.content_type = "text/plain; charset=utf-8".into();
    put
}

/// The entry of a batched write the store refused: the one its error
/// names (a backend's `InEntry`; the store service sends the index in its
/// status's metadata, never parsed from the message), else the first (the
/// whole call failed).
fn refused_entry(e: &StoreError) -> usize {
    match e {
        // A remote store says which in its error's metadata (`baton-entry`).
        StoreError::InEntry { index, .. } => *index,
        _ => 0,
    }
}

type Notice<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// Writes a batch of step outputs (`puts`, for the steps `batch` in the
/// contexts `ctxs`) and emits a ContextWritten for each written one.
///
/// A batched write is all or nothing, but writing behind must not change
/// what is stored: when the store refuses entry N (a quota, a size), the
/// entries before it — which one write per step would have stored, in
/// this order — are written again without it, and only the refused slot
/// and those after it (never written once the run fails) are missing.
/// The refused entry's index and the store's error otherwise.
async fn write_outputs(
    rt: &Run,
    plan: &Plan,
    batch: &[usize],
    ctxs: &[Arc<ContextInfo>],
    puts: Vec<Put>,
    sizes: &[u64],
) -> Result<(), (usize, StoreError)> {
    // A fenced replica writes nothing more (see `Run::hold_lease`).
    rt.hold_lease().await;
    let (written, refused) = match rt.services.store.put_many(&rt.scope, puts.clone()).await {
        Ok(written) => (written, None),
        Err(e) => {
            let at = refused_entry(&e).min(batch.len());
            if at == 0 {
                return Err((0, e));
            }
            match rt
                .services
                .store
                .put_many(&rt.scope, puts[..at].to_vec())
                .await
            {
                Ok(written) => (written, Some((at, e))),
                Err(again) => return Err((refused_entry(&again).min(at - 1), again)),
            }
        }
    };
    for ((&i, ctx), (w, size)) in batch.iter().zip(ctxs).zip(written.iter().zip(sizes)) {
        let written = Payload::ContextWritten(pb::ContextWritten {
            key: plan.steps[i].output_to.clone().unwrap_or_default(),
            version: w.version,
            size_bytes: *size,
        });
        let unit = format!("sw/{}", ctx.id);
        rt.emit_point(ctx, &no_agent(), written, unit, Vec::new)
            .await;
    }
    match refused {
        None => Ok(()),
        Some(refused) => Err(refused),
    }
}

/// Cancels every running step (dropping them cancels their nested agents)
/// and skips everything not started, because of `why`; the StepSkipped
/// events (the cancelled steps first) go to `notices`.
fn abort<'a>(
    rt: &'a Run,
    plan: &'a Plan,
    contexts: &[Arc<ContextInfo>],
    schedule: &mut Scheduler,
    running: &mut FuturesUnordered<StepFuture<'_>>,
    notices: &mut FuturesUnordered<Notice<'a>>,
    why: &str,
) {
    *running = FuturesUnordered::new();
    let (cancelled, not_started) = schedule.abort();
    for (steps, what) in [(cancelled, "cancelled"), (not_started, "not started")] {
        for j in steps {
            let reason = format!("{what}: {why}");
            let (ctx, step) = (contexts[j].clone(), &plan.steps[j]);
            notices.push(Box::pin(async move { skip(rt, &ctx, step, reason).await }));
        }
    }
}

/// Seeds the slots, runs the steps in `root`'s child contexts, emits
/// PipelineCompleted in `root`; returns how it ended, or why it could not
/// run.
pub(super) async fn execute(
    rt: &Arc<Run>,
    root: &Arc<ContextInfo>,
    plan: &Plan,
    initial: Vec<(String, String)>,
    run_step: RunStep,
) -> Result<Summary, Failure> {
    // One batch; a resumed pipeline does not seed again what it had seeded
    // (a step may have written the slot since).
    let max_key = rt.services.store.limits().max_key_len;
    let mut seeds = Vec::new();
    for (k, v) in initial {
        let unit = format!("sd/{}/{k}", root.id);
        if rt.journaled(&unit).is_some() {
            continue;
        }
        let key = Key::parse("key", &k, max_key)
            .map_err(|e| Failure::new(Code::InvalidArgument, e.to_string()))?;
        let mut put = Put::new(rt.scope.clone(), key, v.into_bytes());
        put.content_type = "text/plain; charset=utf-8".into();
        seeds.push((unit, put));
    }
    for chunk in seeds.chunks(MAX_BATCH) {
        let puts: Vec<Put> = chunk.iter().map(|(_, p)| p.clone()).collect();
        let written = rt
            .services
            .store
            .put_many(&rt.scope, puts)
            .await
            .map_err(|e| Failure::new(e.code(), format!("cannot seed the slots: {e}")))?;
        for ((unit, put), w) in chunk.iter().zip(written) {
            let written = Payload::ContextWritten(pb::ContextWritten {
                key: put.key.as_str().to_owned(),
                version: w.version,
                size_bytes: put.value.len() as u64,
            });
            rt.emit_point(root, &no_agent(), written, unit.clone(), Vec::new)
                .await;
        }
    }

    let n = plan.steps.len();
    let contexts: Vec<Arc<ContextInfo>> = plan
        .steps
        .iter()
        .map(|s| {
            let ctx = rt.child_context(
                root,
                &s.id,
                crate::run::context::invoke_agent_span_name(&s.agent),
            );
            ctx.set_attribute(KeyValue::new("baton.step.id", s.id.clone()));
            ctx.set_attribute(KeyValue::new("baton.step.agent", s.agent.clone()));
            ctx
        })
        .collect();
    // Every step's span ends when its step ends, at the latest here.
    let _ends: Vec<_> = contexts.iter().map(|c| c.end_on_drop()).collect();
    let mut schedule = Scheduler::new(&plan.steps);
    // Each succeeded step's output.
    let mut outputs: Vec<Option<String>> = vec![None; n];
    let mut running: FuturesUnordered<StepFuture<'_>> = FuturesUnordered::new();
    let mut writes: FuturesUnordered<WriteFuture<'_>> = FuturesUnordered::new();
    // Succeeded steps whose outputs wait for the next batch.
    let mut pending: Vec<usize> = Vec::new();
    // Events this loop has to send while steps run. They are polled with
    // the steps, never awaited alone: the event channel is fair, so a send
    // awaited here would queue behind sends of steps that only this loop
    // polls, and wait forever.
    let mut notices: FuturesUnordered<Notice<'_>> = FuturesUnordered::new();
    let mut write_failure: Option<Failure> = None;
    let mut aborted = false;
    // Steps the scheduler skipped since the loop last looked.
    let mut skips: Vec<Skip> = Vec::new();
    loop {
        for Skip { step: j, because } in skips.drain(..) {
            let reason = format!(
                "needs step {:?}, which did not succeed",
                plan.steps[because].id
            );
            let (ctx, step) = (contexts[j].clone(), &plan.steps[j]);
            notices.push(Box::pin(async move { skip(rt, &ctx, step, reason).await }));
        }
        if !aborted {
            while running.len() < plan.concurrency {
                let Some(i) = schedule.start_next() else {
                    break;
                };
                {
                    let ctx = contexts[i].clone();
                    let step = &plan.steps[i];
                    // What the step's predecessors wrote, handed over
                    // without a store round trip.
                    let known: BTreeMap<String, String> = step
                        .deps
                        .iter()
                        .filter_map(|&d| match (&plan.steps[d].output_to, &outputs[d]) {
                            (Some(key), Some(out)) => Some((key.clone(), out.clone())),
                            _ => None,
                        })
                        .collect();
                    let otel = ctx.otel.clone();
                    let log = rt.log_span(&ctx);
                    running.push(Box::pin(
                        async move {
                            (
                                i,
                                super::step::run_step(rt, ctx, step, known, run_step).await,
                            )
                        }
                        .with_context(otel)
                        .instrument(log),
                    ));
                }
            }
        }
        if writes.is_empty() && !pending.is_empty() {
            let batch = next_batch(plan, &mut pending);
            let puts: Vec<Put> = batch
                .iter()
                .map(|&i| {
                    let key = plan.steps[i].output_to.as_deref().unwrap_or_default();
                    output_put(rt, key, outputs[i].as_deref().unwrap_or_default())
                })
                .collect();
            let sizes: Vec<u64> = puts.iter().map(|p| p.value.len() as u64).collect();
            let ctxs: Vec<Arc<ContextInfo>> = batch.iter().map(|&i| contexts[i].clone()).collect();
            let otel = root.otel.clone();
            writes.push(Box::pin(
                async move {
                    let result = write_outputs(rt, plan, &batch, &ctxs, puts, &sizes).await;
                    for _ in &batch {
                        rt.pending_writes.end();
                    }
                    (batch, result)
                }
                .with_context(otel),
            ));
        }
        if running.is_empty() && writes.is_empty() && notices.is_empty() {
            break;
        }
        let next = tokio::select! {
            Some(done) = running.next(), if !running.is_empty() => Next::Step(done),
            Some(written) = writes.next(), if !writes.is_empty() => Next::Written(written),
            Some(()) = notices.next(), if !notices.is_empty() => continue,
        };
        match next {
            Next::Step((i, Ok(output))) => {
                // A resumed pipeline does not write again an output it had
                // written.
                let unit = format!("sw/{}", contexts[i].id);
                let written_before = rt.journaled(&unit).is_some();
                if plan.steps[i].output_to.is_some() && !written_before {
                    // Written behind: dependents already have the output
                    // from memory; readers of the store wait for it.
                    rt.pending_writes.begin();
                    pending.push(i);
                }
                outputs[i] = Some(output);
                skips = schedule.succeeded(i);
            }
            Next::Step((i, Err(_))) => {
                if plan.policy == Policy::Fail && plan.steps[i].required && !aborted {
                    // Everything else ends now, its dependents included.
                    schedule.failed_alone(i);
                    aborted = true;
                    let why = format!("required step {:?} failed", plan.steps[i].id);
                    abort(
                        rt,
                        plan,
                        &contexts,
                        &mut schedule,
                        &mut running,
                        &mut notices,
                        &why,
                    );
                } else {
                    skips = schedule.failed(i);
                }
            }
            Next::Written((batch, result)) => {
                let Err((refused, e)) = result else { continue };
                if write_failure.is_some() {
                    continue;
                }
                let i = batch[refused.min(batch.len() - 1)];
                let key = plan.steps[i].output_to.clone().unwrap_or_default();
                let message = format!(
                    "step {:?} succeeded but its output could not be written to slot {key}: {e}",
                    plan.steps[i].id
                );
                contexts[i].set_error(e.code(), message.clone());
                write_failure = Some(Failure::new(e.code(), message));
                // Nothing more is written: the run fails.
                for _ in pending.drain(..) {
                    rt.pending_writes.end();
                }
                if !aborted {
                    aborted = true;
                    let why = format!("the output of step {:?} was lost", plan.steps[i].id);
                    abort(
                        rt,
                        plan,
                        &contexts,
                        &mut schedule,
                        &mut running,
                        &mut notices,
                        &why,
                    );
                }
            }
        }
    }
    if let Some(failure) = write_failure {
        return Err(failure);
    }

    let status = schedule.statuses();
    let ids = |want: Status| -> Vec<String> {
        plan.steps
            .iter()
            .zip(status)
            .filter(|(_, s)| **s == want)
            .map(|(st, _)| st.id.clone())
            .collect()
    };
    let succeeded = ids(Status::Succeeded);
    let failed = ids(Status::Failed);
    let skipped = ids(Status::Skipped);
    let outputs: BTreeMap<String, String> = plan
        .steps
        .iter()
        .zip(&outputs)
        .filter_map(|(st, o)| o.as_ref().map(|o| (st.id.clone(), o.clone())))
        .collect();
    let success = schedule::success(plan.policy, &plan.steps, status);
    let last_output = schedule::output_step(&plan.steps, status)
        .and_then(|i| outputs.get(&plan.steps[i].id).cloned());
    let completed = Payload::PipelineCompleted(pb::PipelineCompleted {
        success,
        succeeded: succeeded.clone(),
        failed: failed.clone(),
        skipped: skipped.clone(),
        outputs: outputs.clone().into_iter().collect(),
    });
    let unit = format!("pc/{}", root.id);
    rt.emit_point(root, &no_agent(), completed, unit, Vec::new)
        .await;
    Ok(Summary {
        success,
        succeeded,
        failed,
        skipped,
        outputs,
        output: last_output.unwrap_or_default(),
    })
}

async fn skip(rt: &Run, ctx: &Arc<ContextInfo>, step: &Step, reason: String) {
    ctx.set_attribute(KeyValue::new("baton.step.skipped", reason.clone()));
    drop(ctx.end_on_drop());
    let skipped = Payload::StepSkipped(pb::StepSkipped {
        step_id: step.id.clone(),
        reason,
    });
    let unit = format!("sk/{}", ctx.id);
    rt.emit_point(ctx, &no_agent(), skipped, unit, Vec::new)
        .await;
}
