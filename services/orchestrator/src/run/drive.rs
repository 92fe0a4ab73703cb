//! A run's lifecycle, shared by RunAgent and RunPipeline: `RunStarted`,
//! the body until it ends, the run is cancelled, `run_timeout` passes or
//! (durable runs) this replica's lease of it lapses, the body's cleanup,
//! then exactly one terminal event (none when the lease lapsed: the run is
//! another replica's).

use std::sync::Arc;

use baton_proto::v1::{self as pb, run_event::Payload};
use futures::future::BoxFuture;
use tonic::Code;

use super::{context::ContextInfo, failure::Failure, state::Run};

/// Runs `body` as a whole run in `root`: `started` (its kind, target and
/// input), then the body until it ends, the run's token is cancelled or
/// `run_timeout` passes; then `cleanup` (whatever happened); then the one
/// terminal event: `RunCompleted` with the body's output, `RunFailed` with
/// its failure (or the deadline), `RunCancelled` with the reason.
///
/// The body comes boxed: it is the whole tree of the run's futures, and an
/// async fn keeps a by-value argument in its state beside the copy its
/// `select!` moves it into — twice the memory of every running and parked
/// run.
pub async fn drive(
    rt: &Arc<Run>,
    root: &Arc<ContextInfo>,
    started: pb::RunStarted,
    body: BoxFuture<'_, Result<String, Failure>>,
    cleanup: impl Future<Output = ()>,
) {
    let no_agent: Arc<str> = Arc::from("");
    // A resumed run says so instead of starting again.
    match &rt.walk {
        // A fork's RunStarted is among its replayed events.
        Some(walk) if walk.fork => {}
        Some(walk) => {
            let resumed = Payload::RunResumed(pb::RunResumed {
                replica: walk.replica.clone(),
                checkpoint_seq: walk.checkpoint_seq,
            });
            rt.emit(root, &no_agent, resumed).await;
        }
        None => {
            let mut started = started;
            if let Some(rerun) = rt.rerun.as_ref().filter(|r| !r.tools_only()) {
                started.replay_of.clone_from(&rerun.origin);
                started.strict = rerun.strict;
            }
            let started = Payload::RunStarted(started);
            // A point: it records the root context's span id.
            rt.emit_point(root, &no_agent, started, "r".into(), Vec::new)
                .await;
        }
    }
    let token = rt.record.token().clone();
    let outcome = tokio::select! {
        biased;
        _ = token.cancelled() => None,
        // A replica whose lease lapsed (paused, partitioned, Redis away)
        // stops at once, whatever the body waits on — a model call's
        // retries, a rate limit's queue, a step's retry: another replica
        // may run the run now.
        () = rt.record.lease_lost() => {
            rt.record.drop_here("this replica's lease of the run lapsed: another replica may run it");
            None
        }
        // A strict replay ends at its first divergence.
        f = async {
            match &rt.rerun {
                Some(rerun) if rerun.strict => rerun.failed().await,
                _ => std::future::pending().await,
            }
        } => Some(Err(f)),
        r = body => Some(r),
        _ = tokio::time::sleep(rt.limits.run_timeout) => Some(Err(Failure::new(
            Code::DeadlineExceeded,
            format!("the run did not finish within run_timeout ({:?})", rt.limits.run_timeout),
        ))),
        // Parked in memory: the body only waits for people (see `run::park`).
        () = rt.record.park_signal() => None,
    };
    let handed_over = rt
        .record
        .handed_over
        .load(std::sync::atomic::Ordering::SeqCst);
    if outcome.is_none() && (handed_over || (rt.record.is_parked() && !token.is_cancelled())) {
        // Another replica goes on with the run, or it is parked: nothing
        // ends here.
        return;
    }
    cleanup.await;
    // Stopped as failed from outside the body (its history over its bound).
    let outcome = outcome.or_else(|| rt.record.failure().map(Err));
    let replay = rt.rerun.as_ref().map(super::recording::rerun::Rerun::stats);
    let terminal = match outcome {
        Some(Ok(output)) => Payload::RunCompleted(pb::RunCompleted {
            output,
            run_context_json: rt.run_context_json(),
            usage: Some(rt.usage()),
            replay,
        }),
        Some(Err(f)) => {
            root.set_error(f.code, f.message.clone());
            Payload::RunFailed(pb::RunFailed {
                code: f.code as i32,
                message: f.message,
                usage: Some(rt.usage()),
                replay,
            })
        }
        None => Payload::RunCancelled(pb::RunCancelled {
            reason: rt.record.cancel_reason(),
            usage: Some(rt.usage()),
            replay,
        }),
    };
    rt.emit(root, &no_agent, terminal).await;
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use baton_proto::v1 as pb;

    use super::*;
    use crate::run::{state::Limits, testing};

    const AGENTS: &str =
        "default_model: scripted:quiet\nscripts:\n  quiet:\n    - text: ok\nagents:\n  a: {}\n";

    async fn drive_with(
        limits: Limits,
        body: impl Future<Output = Result<String, Failure>> + Send,
        cancel: bool,
    ) -> (Vec<String>, Payload, bool) {
        let (rt, mut events) = testing::run(AGENTS, limits, pb::ApprovalMode::Ask);
        let root = rt.root_context("agent a".into());
        if cancel {
            rt.record.cancel("stop");
        }
        let cleaned = std::sync::atomic::AtomicBool::new(false);
        drive(
            &rt,
            &root,
            pb::RunStarted {
                kind: pb::RunKind::Agent as i32,
                target: "a".into(),
                input: String::new(),
                labels: Default::default(),
                forked_from: None,
                ..Default::default()
            },
            Box::pin(body),
            async {
                cleaned.store(true, std::sync::atomic::Ordering::SeqCst);
            },
        )
        .await;
        let mut drafts = Vec::new();
        while let Ok(d) = events.try_recv() {
            drafts.push(d.payload);
        }
        let kinds = drafts
            .iter()
            .map(|p| {
                let name = crate::run::events::kind_of(p).as_str_name();
                name.trim_start_matches("EVENT_KIND_").to_owned()
            })
            .collect();
        let last = drafts.pop().expect("a terminal event");
        (kinds, last, cleaned.into_inner())
    }

    #[tokio::test]
    async fn a_body_that_ends_completes_the_run_with_its_output() {
        let (kinds, last, cleaned) =
            drive_with(testing::limits(), async { Ok("done".into()) }, false).await;
        assert_eq!(kinds, ["RUN_STARTED", "RUN_COMPLETED"]);
        assert!(matches!(last, Payload::RunCompleted(c) if c.output == "done"));
        assert!(cleaned);
    }

    #[tokio::test]
    async fn a_failing_body_fails_the_run_with_its_code() {
        let body = async { Err(Failure::new(Code::ResourceExhausted, "too many turns")) };
        let (kinds, last, cleaned) = drive_with(testing::limits(), body, false).await;
        assert_eq!(kinds, ["RUN_STARTED", "RUN_FAILED"]);
        assert!(matches!(last, Payload::RunFailed(f)
            if f.code == Code::ResourceExhausted as i32 && f.message == "too many turns"));
        assert!(cleaned);
    }

    #[tokio::test]
    async fn a_cancelled_run_ends_cancelled_and_still_cleans_up() {
        let body = std::future::pending();
        let (kinds, last, cleaned) = drive_with(testing::limits(), body, true).await;
        assert_eq!(kinds, ["RUN_STARTED", "RUN_CANCELLED"]);
        assert!(matches!(last, Payload::RunCancelled(c) if c.reason == "stop"));
        assert!(cleaned);
    }

    #[tokio::test]
    async fn run_timeout_fails_the_run_as_deadline_exceeded() {
        let limits = Limits {
            run_timeout: Duration::from_millis(30),
            ..testing::limits()
        };
        let (kinds, last, cleaned) = drive_with(limits, std::future::pending(), false).await;
        assert_eq!(kinds, ["RUN_STARTED", "RUN_FAILED"]);
        assert!(matches!(last, Payload::RunFailed(f)
            if f.code == Code::DeadlineExceeded as i32 && f.message.contains("run_timeout")));
        assert!(cleaned);
    }
}
