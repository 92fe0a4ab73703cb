//! One step of a pipeline: its attempts (retries, each bounded by the
//! step's timeout, its task filled in from slots), and, when the run is
//! resumed, the attempts that had ended taken from the run's journal.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::Instant,
};

use baton_proto::v1::{self as pb, run_event::Payload};
use baton_store::Key;
use opentelemetry::{KeyValue, trace::TraceContextExt as _};
use tonic::Code;

use super::{
    Step,
    call::{RunStep, StepCall},
};
use crate::run::{
    context::ContextInfo,
    failure::Failure,
    state::{FinalScope, Run},
};

fn no_agent() -> Arc<str> {
    Arc::from("")
}

/// Runs one step with its retries; returns its output or the last error.
pub(super) async fn run_step(
    rt: &Arc<Run>,
    ctx: Arc<ContextInfo>,
    step: &Step,
    known: BTreeMap<String, String>,
    run_step: RunStep,
) -> Result<String, Failure> {
    let _end = ctx.end_on_drop();
    let attempts = step.retries + 1;
    let mut last_error = Failure::new(Code::Internal, "the step made no attempt");
    for attempt in 1..=attempts {
        // A resumed pipeline takes the attempts that had ended from its
        // journal: they are not run again.
        let (done, failed) = (
            format!("sc/{}/{attempt}", ctx.id),
            format!("sf/{}/{attempt}", ctx.id),
        );
        if let Some(output) = rt.journaled(&done) {
            let output = String::from_utf8_lossy(output).into_owned();
            // What it spent goes back into the run's totals, budgets and
            // its caller's usage (a fork's origin spent it: not a fork's).
            if !rt.walk.as_ref().is_some_and(|w| w.fork)
                && let Some(u) = finished_usage(rt, &ctx.id)
            {
                rt.add_usage(&u);
                let mut book = crate::model::call::lock(&rt.budgets);
                let node = book.node_of(&ctx.parent);
                book.spend(node, u.input_tokens + u.output_tokens, u.cost_nanos);
                drop(book);
                rt.add_step_usage(&ctx.parent, &u);
            }
            rt.pace().await;
            return Ok(output);
        }
        if let Some(record) = rt.journaled(&failed) {
            last_error = serde_json::from_slice::<(i32, String)>(record)
                .map(|(code, message)| Failure::new(Code::from_i32(code), message))
                .unwrap_or_else(|e| {
                    Failure::new(Code::Internal, format!("the record of {failed}: {e}"))
                });
            if attempt == attempts {
                ctx.set_error(last_error.code, last_error.message.clone());
            }
            continue;
        }
        ctx.set_attribute(KeyValue::new("baton.step.attempt", i64::from(attempt)));
        ctx.otel.span().add_event(
            "attempt",
            vec![KeyValue::new("baton.step.attempt", i64::from(attempt))],
        );
        let started = Payload::StepStarted(pb::StepStarted {
            step_id: step.id.clone(),
            agent: step.agent.clone(),
            attempt,
            depends_on: step.waits_for.clone(),
        });
        let unit = format!("ss/{}/{attempt}", ctx.id);
        rt.emit_point(&ctx, &no_agent(), started, unit, Vec::new)
            .await;
        let began = Instant::now();
        let result = match tokio::time::timeout(
            step.timeout,
            attempt_once(rt, &ctx, step, &known, run_step),
        )
        .await
        {
            Ok(r) => r,
            Err(_) => Err(Failure::new(
                Code::DeadlineExceeded,
                format!("attempt timed out after {:?}", step.timeout),
            )),
        };
        match result {
            Ok(output) => {
                let done = Payload::StepCompleted(pb::StepCompleted {
                    step_id: step.id.clone(),
                    attempt,
                    output: output.clone(),
                    duration: Some(baton_proto::wkt::Duration {
                        seconds: began.elapsed().as_secs() as i64,
                        nanos: began.elapsed().subsec_nanos() as i32,
                    }),
                });
                let record = output.clone().into_bytes();
                rt.emit_point(
                    &ctx,
                    &no_agent(),
                    done,
                    format!("sc/{}/{attempt}", ctx.id),
                    || record,
                )
                .await;
                return Ok(output);
            }
            Err(error) => {
                let will_retry = attempt < attempts;
                let failed = Payload::StepFailed(pb::StepFailed {
                    step_id: step.id.clone(),
                    attempt,
                    error: error.message.clone(),
                    will_retry,
                });
                let record = (error.code as i32, error.message.clone());
                rt.emit_point(
                    &ctx,
                    &no_agent(),
                    failed,
                    format!("sf/{}/{attempt}", ctx.id),
                    || serde_json::to_vec(&record).unwrap_or_default(),
                )
                .await;
                if !will_retry {
                    ctx.set_error(error.code, error.message.clone());
                }
                last_error = error;
            }
        }
    }
    Err(last_error)
}

/// What the finished step in context `ctx` spent, as its agent's end
/// recorded it (`None`: a record from before usage was recorded).
fn finished_usage(rt: &Run, ctx: &str) -> Option<pb::Usage> {
    (1..=rt.limits.max_turns).rev().find_map(|n| {
        let record = rt.journaled(&crate::run::recording::unit::numbered("d", ctx, n))?;
        let (r, currency) = serde_json::from_slice::<(Vec<u64>, Option<String>)>(record).ok()?;
        Some(crate::run::usage::from_record(&r, currency))
    })
}

/// One attempt: fill in the task, run the agent in the step's context,
/// write the output.
async fn attempt_once(
    rt: &Arc<Run>,
    ctx: &Arc<ContextInfo>,
    step: &Step,
    known: &BTreeMap<String, String>,
    run_step: RunStep,
) -> Result<String, Failure> {
    let max_key = rt.services.store.limits().max_key_len;
    let read = |k: String| async move {
        let key = Key::parse("key", &k, max_key)
            .map_err(|e| Failure::new(Code::InvalidArgument, e.to_string()))?;
        let slot = rt
            .services
            .store
            .get(&rt.scope, &key)
            .await
            .map_err(|e| Failure::new(e.code(), format!("cannot read slot {k}: {e}")))?;
        Ok::<_, Failure>((k, String::from_utf8_lossy(&slot.value).into_owned()))
    };
    // Every slot the step needs, read concurrently (one pipeline on Redis).
    let template = super::template_keys(&step.task);
    let wanted: BTreeSet<String> = template
        .iter()
        .chain(&step.input_from)
        .filter(|k| !known.contains_key(*k))
        .cloned()
        .collect();
    if !wanted.is_empty() {
        // Outputs of earlier steps are written behind; the store has them
        // once no write is pending.
        rt.pending_writes.settled().await;
    }
    let mut values: BTreeMap<String, String> =
        futures::future::try_join_all(wanted.into_iter().map(read))
            .await?
            .into_iter()
            .collect();
    values.extend(known.iter().map(|(k, v)| (k.clone(), v.clone())));
    let mut task = step.task.clone();
    for k in &template {
        task = task.replace(&format!("{{{{{k}}}}}"), &values[k]);
    }
    if !step.input_from.is_empty() {
        task.push_str("\n\nInputs:");
        for k in &step.input_from {
            task.push_str(&format!("\n[{k}]\n{}", values[k]));
        }
    }
    // A final tool output ends this attempt successfully with that output.
    let scope = Arc::new(FinalScope::default());
    let call = StepCall {
        ctx: ctx.clone(),
        agent: step.agent.clone(),
        task,
        scope: scope.clone(),
        // The steps of a RunPipeline (depth 1; a `run_pipeline` tool's
        // steps are deeper) answer the request: its response_format applies.
        answers_request: ctx.depth == 1,
    };
    let ran = tokio::select! {
        biased;
        () = scope.ended() => Ok(String::new()),
        r = run_step(rt, call) => r.map(|(output, usage)| {
            // What the step spent, for the agent that ran the pipeline as
            // a tool (the run's totals and budgets counted it already).
            rt.add_step_usage(&ctx.parent, &usage);
            output
        }),
    };
    let output = match (scope.output(), ran) {
        (Some(final_output), _) => final_output,
        (None, ran) => ran?,
    };
    // Checked here, not at the (later) write: an output the store cannot
    // take fails the attempt like any other failure of the step.
    let limit = rt.services.store.limits().max_value_bytes;
    if step.output_to.is_some() && output.len() as u64 > limit {
        return Err(Failure::new(
            Code::ResourceExhausted,
            format!(
                "the output is {} bytes, over the store's value limit of {limit} bytes",
                output.len()
            ),
        ));
    }
    Ok(output)
}
