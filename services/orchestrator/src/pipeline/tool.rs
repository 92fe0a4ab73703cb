//! The built-in `run_pipeline` tool: an agent builds a pipeline (the same
//! form as the YAML files, as JSON) and runs it in its child context.

use std::{collections::BTreeSet, pin::Pin, sync::Arc};

use opentelemetry::{KeyValue, context::FutureExt as _};
use tracing::Instrument as _;

use super::{
    Plan,
    call::RunStep,
    executor::{clear, execute, owned_keys},
};
use crate::run::{context::ContextInfo, state::Run};

/// What the tool gives the calling model: the summary, or the error it
/// reads (a failed pipeline does not fail the run: the model goes on).
// Strings on both sides are the honest type: the model reads text, and a
// bad pipeline's error is what it reads to fix its arguments.
pub type ToolOutput = Result<String, String>;

/// The `run_pipeline` tool: validates the agent's pipeline (its arguments
/// are a [`PipelineFile`](super::PipelineFile) as JSON) and runs it in
/// `ctx`, the calling agent's child context, so its steps run one level
/// further down (`{ctx}.{step_id}`). Slots already in the trace count as
/// seeded. Returns the summary as JSON; an error (the summary too, or what
/// is wrong with the pipeline, naming the field) when it did not succeed.
/// Its slots are cleared at the end unless it keeps them, as for
/// RunPipeline; a cancelled nested pipeline leaves them to their TTL.
///
/// Boxed as `Send`: the tool runs agents which may call it again, and the
/// compiler cannot infer `Send` through that cycle.
pub fn run_as_tool<'a>(
    rt: &'a Arc<Run>,
    ctx: &'a Arc<ContextInfo>,
    arguments: &'a serde_json::Value,
    run_step: RunStep,
) -> Pin<Box<dyn Future<Output = ToolOutput> + Send + 'a>> {
    Box::pin(tool_body(rt, ctx, arguments, run_step))
}

async fn tool_body(
    rt: &Arc<Run>,
    ctx: &Arc<ContextInfo>,
    arguments: &serde_json::Value,
    run_step: RunStep,
) -> ToolOutput {
    let _end = ctx.end_on_drop();
    let result = tool_run(rt, ctx, arguments, run_step)
        .with_context(ctx.otel.clone())
        .instrument(rt.log_span(ctx))
        .await;
    if let Err(e) = &result {
        ctx.set_error(tonic::Code::Unknown, e.clone());
    }
    result
}

async fn tool_run(
    rt: &Arc<Run>,
    ctx: &Arc<ContextInfo>,
    arguments: &serde_json::Value,
    run_step: RunStep,
) -> ToolOutput {
    let file: super::PipelineFile = serde_json::from_value(arguments.clone())
        .map_err(|e| format!("the arguments are not a pipeline: {e}"))?;
    let request = file.into_request().map_err(|e| e.to_string())?;
    let max_key = rt.services.store.limits().max_key_len;
    let mut initial: Vec<(String, String)> = request.initial_slots.into_iter().collect();
    initial.sort();
    rt.pending_writes.settled().await;
    let existing = rt
        .services
        .store
        .list(&rt.scope, "")
        .await
        .map_err(|e| format!("cannot list the trace's slots: {e}"))?;
    let seeded: BTreeSet<String> = existing
        .slots
        .into_iter()
        .map(|s| s.key)
        .chain(initial.iter().map(|(k, _)| k.clone()))
        .collect();
    let plan = Plan::validate(
        request.pipeline,
        &seeded,
        &rt.services.catalog,
        &rt.services.pipeline_limits,
        max_key,
    )
    .map_err(|e| e.to_string())?;
    if !plan.name.is_empty() {
        ctx.set_attribute(KeyValue::new("baton.pipeline.name", plan.name.clone()));
    }
    for (i, step) in plan.steps.iter().enumerate() {
        rt.resolve(&step.agent)
            .map_err(|e| format!("pipeline.steps[{i}].agent: {e}"))?;
    }
    let owned = owned_keys(&plan, &initial);
    let outcome = execute(rt, ctx, &plan, initial, run_step).await;
    if !request.keep_context {
        clear(rt, &owned).await;
    }
    let summary = outcome.map_err(|f| f.message)?;
    let text = serde_json::json!({
        "success": summary.success,
        "output": summary.output,
        "outputs": summary.outputs,
        "succeeded": summary.succeeded,
        "failed": summary.failed,
        "skipped": summary.skipped,
    })
    .to_string();
    if summary.success { Ok(text) } else { Err(text) }
}
