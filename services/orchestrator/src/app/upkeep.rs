//! The leases of durable runs, kept by every replica in the background:
//! every third of `runs.lease` it renews the lease of each run it owns (a
//! run whose epoch moved on — another replica claimed it while this one was
//! paused or cut off — is cancelled here at once, and its writes were
//! fenced already), and it claims runs whose lease lapsed because their
//! replica stopped.
//!
//! A claimed run is resumed here from its journal (see `app::resume`);
//! one that cannot be (its request or journal is unreadable, e.g. written
//! by a version that no longer reads it) is ended, so it still
//! ends with exactly one terminal event and no seq gap — `RunResumed` (this
//! replica, the last logged seq) then `RunFailed` `UNAVAILABLE` naming the
//! replica that stopped.

use std::{
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use baton_proto::v1::{self as pb, run_event::Payload};
use tokio_util::sync::CancellationToken;

use super::{orchestrator::Orchestrator, resume::Claimed};
use crate::{
    error::Error,
    run::{
        durable::{Append, Claim, RedisRuns, RunEnd, now_ms},
        record::{ApprovalAnswer, RunRecord, mono_ms},
        registry::Runs,
    },
};

/// Most lapsed runs claimed in one round.
const CLAIMS_PER_ROUND: usize = 16;

/// Renews, parks runs that only wait for people (quiet for `park_after`)
/// and claims until `stop` and no run is running here any more (runs
/// finishing within the shutdown grace keep their leases; a replica that
/// is stopping claims and parks nothing).
pub async fn keep(
    core: Orchestrator,
    durable: Arc<RedisRuns>,
    stop: CancellationToken,
    park_after: Duration,
) {
    let runs = core.runs.clone();
    let every = durable.lease() / 3;
    loop {
        tokio::time::sleep(every).await;
        renew(&durable, &runs).await;
        if stop.is_cancelled() {
            if runs.running() == 0 {
                return;
            }
            continue;
        }
        park(&durable, &runs, park_after).await;
        claim(&durable, &core).await;
    }
}

/// Parks every run of this replica that only waits for people (see
/// [`RunRecord::parkable`]): it stops here without a terminal event and
/// leaves memory, and its lease is given up until the earliest deadline of
/// its questions; an answer on any replica, or that deadline, resumes it
/// (see `durable::inbox`).
async fn park(durable: &RedisRuns, runs: &Runs, quiet: Duration) {
    for run in runs.running_runs() {
        let epoch = run.epoch.load(Ordering::Relaxed);
        if epoch == 0 {
            continue;
        }
        let Some(wake_ms) = run.parkable(quiet) else {
            continue;
        };
        // Its run_timeout wakes it too (to end it).
        let wake_ms = run.run_deadline_ms().map_or(wake_ms, |d| wake_ms.min(d));
        // Out of reach first: an answer given from now on goes to its
        // inbox, which the park script sees.
        runs.drop_run(&run, "parked: waiting for a person");
        match durable.park(&run.run_id, epoch, wake_ms).await {
            Ok(true) => tracing::debug!(run_id = %run.run_id, wake_ms, "parked a run"),
            Ok(false) => {}
            // Its lease lapses, and a replica resumes it: it waits again.
            Err(e) => tracing::warn!(run_id = %run.run_id, error = %e, "cannot park a run"),
        }
    }
}

/// Hands what a run's inbox holds (answers and a cancel given on other
/// replicas) to the run; drops what can never be delivered (unreadable).
/// An answer stays in the inbox until the run journals it (the append
/// script takes it out then): if this replica stops before that, the
/// replica that resumes the run finds it there.
async fn deliver(durable: &RedisRuns, run: &RunRecord) {
    let inbox = match durable.inbox(&run.run_id).await {
        Ok(inbox) => inbox,
        Err(e) => {
            tracing::warn!(run_id = %run.run_id, error = %e, "cannot read a run's inbox");
            return;
        }
    };
    let mut stale = Vec::new();
    for (id, value) in inbox {
        // A cancel stays too: a replica that resumes the run before its end
        // is journaled cancels it again.
        let delivered = if id == "cancel" {
            run.cancel_by_request(&String::from_utf8_lossy(&value));
            continue;
        } else if id.starts_with("approval:") {
            match serde_json::from_slice::<(bool, String)>(&value) {
                Ok((approved, reason)) => {
                    run.resolve_approval(&id, ApprovalAnswer { approved, reason })
                }
                Err(_) => Err(Error::Internal("an unreadable answer".into())),
            }
        } else if id.starts_with("input:") {
            match serde_json::from_slice::<String>(&value) {
                Ok(input) => run.submit_input(&id, input),
                Err(_) => Err(Error::Internal("an unreadable input".into())),
            }
        } else {
            Err(Error::Internal("not a question".into()))
        };
        // Not asked here yet (a resumed run on its way to it): next round.
        // Answered already (given here too, or a round ago): it leaves the
        // inbox when its answer is journaled.
        if matches!(delivered, Err(Error::Internal(_))) {
            stale.push(id);
        }
    }
    durable.drop_from_inbox(&run.run_id, &stale).await;
}

async fn renew(durable: &RedisRuns, runs: &Runs) {
    let lease = durable.lease().as_millis() as i64;
    for run in runs.running_runs() {
        let epoch = run.epoch.load(Ordering::Relaxed);
        if epoch == 0 {
            continue;
        }
        // The lease runs from when the script is sent, not answered.
        let sent = mono_ms();
        match durable
            .renew(&run.run_id, epoch, Some(run.open_questions()))
            .await
        {
            Ok(Some(inbox)) => {
                run.lease_holds_until(sent + lease);
                if inbox {
                    deliver(durable, &run).await;
                }
            }
            Ok(None) => {
                // Fenced: another replica claimed it (this one was paused or
                // cut off past its lease). It goes on there: nothing ends
                // here (nor its quota), nothing of it is kept here, and
                // reads of it go to the run store.
                tracing::warn!(run_id = %run.run_id, "another replica owns this run now; dropped it here");
                runs.drop_run(&run, "another replica owns this run now");
            }
            // Tried again next round; if the lease lapses meanwhile, another
            // replica claims the run and this one's writes are fenced.
            Err(e) => {
                tracing::warn!(run_id = %run.run_id, error = %e, "cannot renew a run's lease")
            }
        }
    }
}

async fn claim(durable: &RedisRuns, core: &Orchestrator) {
    let lapsed = match durable.lapsed(CLAIMS_PER_ROUND).await {
        Ok(ids) => ids,
        Err(e) => {
            tracing::warn!(error = %e, "cannot look for lapsed leases");
            return;
        }
    };
    for run_id in lapsed {
        let claimed_at = mono_ms();
        match durable.claim(&run_id).await {
            Ok(Claim::Claimed {
                epoch,
                previous_owner,
                last_seq,
                trace_id,
            }) => {
                tracing::warn!(
                    run_id,
                    previous_owner,
                    last_seq,
                    "claimed a run whose replica stopped"
                );
                let claimed = Claimed {
                    run_id: run_id.clone(),
                    epoch,
                    last_seq,
                    claimed_at,
                };
                if !core.resume(claimed).await {
                    end_orphan(
                        durable,
                        &run_id,
                        epoch,
                        &previous_owner,
                        last_seq,
                        &trace_id,
                    )
                    .await;
                }
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(run_id, error = %e, "cannot claim a lapsed run"),
        }
    }
}

/// Ends a claimed run: `RunResumed`, then `RunFailed` `UNAVAILABLE`.
pub async fn end_orphan(
    durable: &RedisRuns,
    run_id: &str,
    epoch: u64,
    previous_owner: &str,
    last_seq: u64,
    trace_id: &str,
) {
    let message = format!(
        "the replica running this run ({previous_owner}) stopped, and the run cannot be resumed from what it recorded"
    );
    // The events are the root context's, in its span (the run's first
    // event, RunStarted, carries it).
    let root_span = match durable.events_after(run_id, 0, 1).await {
        Ok(first) => first.first().map(|e| e.span_id.clone()).unwrap_or_default(),
        Err(_) => String::new(),
    };
    let envelope = |seq: u64, payload: Payload| pb::RunEvent {
        seq,
        trace_id: trace_id.to_owned(),
        run_id: run_id.to_owned(),
        context_id: "root".into(),
        span_id: root_span.clone(),
        time: Some(baton_proto::wkt::Timestamp::from(
            std::time::SystemTime::now(),
        )),
        payload: Some(payload),
        ..Default::default()
    };
    let events = [
        envelope(
            last_seq + 1,
            Payload::RunResumed(pb::RunResumed {
                replica: durable.owner().to_owned(),
                checkpoint_seq: last_seq,
            }),
        ),
        envelope(
            last_seq + 2,
            Payload::RunFailed(pb::RunFailed {
                code: tonic::Code::Unavailable as i32,
                message: message.clone(),
                usage: None,
                replay: None,
            }),
        ),
    ];
    let end = RunEnd {
        status: pb::RunStatus::Failed,
        ended_ms: now_ms(),
        output: String::new(),
        run_context_json: String::new(),
        usage: None,
        error_code: tonic::Code::Unavailable as i32,
        error_message: message,
        replay_diverged: false,
        conversation: None,
    };
    match durable
        .append(
            run_id,
            epoch,
            &events,
            &[],
            Some(&end),
            None,
            &Default::default(),
        )
        .await
    {
        Ok(Append::Done) => durable.forget_lease(run_id).await,
        Ok(Append::Fenced | Append::Gone) => {
            tracing::warn!(
                run_id,
                "another replica claimed the run first, or it is gone"
            )
        }
        Err(e) => {
            tracing::warn!(run_id, error = %e, "cannot end a claimed run; its lease lapses again")
        }
    }
}
