//! Running agents: the body of a RunAgent, of each pipeline step, and of
//! every agent called as a tool.
//!
//! What a run shares is one `Arc`-shared [`Run`](crate::run::state::Run);
//! what a branch owns is a [`CallFrame`](frame::CallFrame): its context,
//! active agent, model, messages and child counters. An agent called as a
//! tool runs in a child frame with fresh messages (only the root frame sees
//! the request's history), so concurrent branches share no mutable frame
//! state and siblings never affect each other's depth.
//!
//! A whole run is one future: the calls of a model turn run concurrently
//! inside it (`join_all`), nested agents are awaited inside their caller.
//! Cancelling the run drops that future, which drops every nested agent and
//! tool call at once; nothing of a run can outlive it.
//!
//! The boundaries a later checkpoint needs are functions of their own: a
//! model turn (`turn`), a tool call (`dispatch::execute`), a handoff
//! (`turn::switch_agent`), a wait for a person (`people::ask`).
//!
//! - [`frame`]: a branch, and [`frame::RunFrame`], how a turn's calls are
//!   handed the turn loop to run an agent called as a tool (the turn loop
//!   calls them, so the recursion is a value, not an import cycle).
//!   Pipelines sit below the agents: they are handed [`run_step_boxed`] as
//!   a [`RunStep`](crate::pipeline::RunStep), and name the call they need
//!   ([`StepCall`](crate::pipeline::StepCall)) themselves.
//! - `turn`: the turn loop, handoffs, chat spans.
//! - `dispatch`: a turn's calls — planning (child context ids in the
//!   model's order), tool spans, output policies.
//! - `people`: approvals and requests for input, through one `ask`.
//! - tool-output policies are the catalog's ([`crate::catalog::policy`]):
//!   the agents file declares them, a call applies them.

mod ask;
mod call_sink;
mod dispatch;
pub mod frame;
mod people;
mod remote;
mod turn;

use std::sync::Arc;

use baton_proto::v1 as pb;

use crate::run::{drive::drive, state::Run};
pub use dispatch::call_record;
use frame::CallFrame;
pub use turn::{run_frame, run_frame_boxed, run_step_boxed};

/// The body of a RunAgent: RunStarted, the root frame, then exactly one
/// terminal event (completed, failed, or cancelled when the run's token
/// fires or its deadline passes).
pub async fn body(
    rt: Arc<Run>,
    root: CallFrame,
    target: String,
    labels: std::collections::BTreeMap<String, String>,
) {
    let root_ctx = root.ctx.clone();
    let scope = root.scope.clone();
    let link = rt
        .record
        .conversation
        .get()
        .cloned()
        .filter(|l| !l.id.is_empty());
    let transcript = root.transcript();
    if link.is_some() {
        // A run parked in memory drops its frames: its record keeps this.
        *rt.record
            .transcript
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = transcript.clone();
    }
    let started = pb::RunStarted {
        kind: pb::RunKind::Agent as i32,
        target,
        input: root.input.clone(),
        labels: labels.into_iter().collect(),
        conversation_id: link.as_ref().map(|l| l.id.clone()).unwrap_or_default(),
        conversation_messages: link
            .as_ref()
            .map(|l| l.base_count - l.fold + u32::from(l.summary.is_some()))
            .unwrap_or_default(),
        ..Default::default()
    };
    let _end = root_ctx.end_on_drop();
    let agent_name = root.agent_name.clone();
    let body = async {
        // What compaction folded, said once (a resumed run logged it).
        if rt.walk.is_none()
            && let Some(event) = link.as_ref().and_then(|l| l.event())
        {
            let payload = pb::run_event::Payload::HistoryCompacted(event);
            rt.emit(&root_ctx, &agent_name, payload).await;
        }
        let ran = tokio::select! {
            biased;
            () = scope.ended() => Ok(String::new()),
            r = run_frame(&rt, root) => r.map(|(output, _)| output),
        };
        // A final tool output ends the run with that output, whichever
        // branch noticed first.
        match scope.output() {
            Some(output) => {
                // It is the run's answer in its conversation too.
                if let Some(t) = &transcript {
                    t.ended_with(&output);
                }
                Ok(output)
            }
            None => ran,
        }
    };
    let conversation = async {
        if let (Some(link), Some(transcript)) = (&link, &transcript) {
            conversation_end(&rt, link, transcript).await;
        }
    };
    drive(&rt, &root_ctx, started, Box::pin(body), conversation).await;
}

/// Appends what a run in a conversation added, before anyone sees its
/// terminal event (so the next message, sent once a client sees the run
/// end, finds it): here in memory mode; a durable run's is written with
/// its terminal event, fenced by its epoch, then applied (two phases, see
/// `durable::sequencer`). A replica whose lease lapsed leaves it to the
/// one that took the run.
async fn conversation_end(
    rt: &Arc<Run>,
    link: &Arc<crate::conversation::link::Link>,
    transcript: &crate::conversation::transcript::Transcript,
) {
    if rt.record.lease_lapsed() {
        return;
    }
    let added = transcript.added();
    let status = if added.answered {
        pb::RunStatus::Completed
    } else if rt.record.token().is_cancelled() {
        pb::RunStatus::Cancelled
    } else {
        pb::RunStatus::Failed
    };
    let (key, finish) = link.ending(&rt.record.tenant, &rt.record.run_id, added, status);
    let conversations = rt.services.conversations.clone();
    if rt.services.durable.is_some()
        && rt.record.epoch.load(std::sync::atomic::Ordering::Relaxed) > 0
    {
        let encoded = finish.encode(&key);
        let apply = async move { conversations.finish(&key, &finish).await };
        *rt.record
            .conversation_end
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(crate::conversation::link::PendingEnd {
            encoded,
            apply: Box::pin(apply),
        });
    } else if let Err(e) = conversations.finish(&key, &finish).await {
        // Not applied: the turn stays the run's; the next message finds
        // it ended and frees it.
        tracing::warn!(run_id = %rt.record.run_id, conversation = %link.id, error = %e, "a run's messages were not appended to its conversation");
    }
}
