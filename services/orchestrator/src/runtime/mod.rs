//! Running agents.
//!
//! What a run shares is one immutable, `Arc`-shared [`RuntimeConfig`]: the
//! catalog and models, limits, the event sink, usage totals, the store, the
//! approval mode and the run record. What a branch owns is a [`CallFrame`]:
//! its context, active agent, model, messages and child counters. An agent
//! called as a tool runs in a child frame with fresh messages (only the root
//! frame sees the request's history), so concurrent branches share no
//! mutable frame state and siblings never affect each other's depth.
//!
//! A whole run is one future: the calls of a model turn run concurrently
//! inside it (`join_all`), nested agents are awaited inside their caller.
//! Cancelling the run drops that future, which drops every nested agent and
//! tool call at once; nothing of a run can outlive it.
//!
//! Files, each owning one thing: `shared` (what a run shares: limits,
//! `RuntimeConfig`, pending writes, the scope a `final` output ends),
//! `frame` (a branch), `turn` (the turn loop, handoffs, chat spans),
//! `dispatch` (a turn's calls: planning, tool spans, output policies),
//! `people` (approvals), [`policy`] (tool-output policies), [`context`] (a
//! context and its span), [`log`] (a run's event log), [`events`] (the
//! sequencer and filters), [`registry`] (the runs of this replica); this
//! file runs a whole RunAgent.

pub mod context;
mod dispatch;
mod drive;
pub mod events;
mod frame;
pub mod log;
mod people;
pub mod policy;
pub mod registry;
mod shared;
mod turn;

use std::sync::Arc;

use baton_proto::v1 as pb;

pub use drive::{Failure, drive};
pub use frame::CallFrame;
pub use shared::{FinalScope, Limits, PendingWrites, RunSetup, RuntimeConfig, check_target};
pub use turn::run_frame;

/// Runs a whole RunAgent: RunStarted, the root frame, then exactly one
/// terminal event (completed, failed, or cancelled when the run's token
/// fires or its deadline passes).
pub async fn run_agent(rt: Arc<RuntimeConfig>, root: CallFrame, target: String) {
    let root_ctx = root.ctx.clone();
    let scope = root.scope.clone();
    let _end = root_ctx.end_on_drop();
    let body = async {
        let ran = tokio::select! {
            biased;
            () = scope.ended() => Ok(String::new()),
            r = run_frame(&rt, root) => r.map(|(output, _)| output),
        };
        // A final tool output ends the run with that output, whichever
        // branch noticed first.
        match scope.output() {
            Some(output) => Ok(output),
            None => ran,
        }
    };
    drive(&rt, &root_ctx, pb::RunKind::Agent, target, body, async {}).await;
}
