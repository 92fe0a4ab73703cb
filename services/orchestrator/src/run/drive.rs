//! A run's lifecycle, shared by RunAgent and RunPipeline: `RunStarted`,
//! the body until it ends, the run is cancelled or `run_timeout` passes,
//! the body's cleanup, then exactly one terminal event.

use std::sync::Arc;

use baton_proto::v1::{self as pb, run_event::Payload};
use tonic::Code;

use super::{context::ContextInfo, failure::Failure, state::Run};

/// Runs `body` as a whole run in `root`: `RunStarted` (of `kind`, naming
/// `target`), then the body until it ends, the run's token is cancelled or
/// `run_timeout` passes; then `cleanup` (whatever happened); then the one
/// terminal event: `RunCompleted` with the body's output, `RunFailed` with
/// its failure (or the deadline), `RunCancelled` with the reason.
pub async fn drive(
    rt: &Arc<Run>,
    root: &Arc<ContextInfo>,
    kind: pb::RunKind,
    target: String,
    body: impl Future<Output = Result<String, Failure>>,
    cleanup: impl Future<Output = ()>,
) {
    let no_agent: Arc<str> = Arc::from("");
    let started = Payload::RunStarted(pb::RunStarted {
        kind: kind as i32,
        target,
    });
    rt.emit(root, &no_agent, started).await;
    let token = rt.record.token().clone();
    let outcome = tokio::select! {
        biased;
        _ = token.cancelled() => None,
        r = body => Some(r),
        _ = tokio::time::sleep(rt.limits.run_timeout) => Some(Err(Failure::new(
            Code::DeadlineExceeded,
            format!("the run did not finish within run_timeout ({:?})", rt.limits.run_timeout),
        ))),
    };
    cleanup.await;
    let terminal = match outcome {
        Some(Ok(output)) => Payload::RunCompleted(pb::RunCompleted {
            output,
            run_context_json: rt.run_context_json(),
            usage: Some(rt.usage()),
        }),
        Some(Err(f)) => {
            root.set_error(f.message.clone());
            Payload::RunFailed(pb::RunFailed {
                code: f.code as i32,
                message: f.message,
                usage: Some(rt.usage()),
            })
        }
        None => Payload::RunCancelled(pb::RunCancelled {
            reason: rt.record.cancel_reason(),
            usage: Some(rt.usage()),
        }),
    };
    rt.emit(root, &no_agent, terminal).await;
}
