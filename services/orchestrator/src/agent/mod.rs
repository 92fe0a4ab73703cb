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
    let started = pb::RunStarted {
        kind: pb::RunKind::Agent as i32,
        target,
        input: root.input.clone(),
        labels: labels.into_iter().collect(),
        ..Default::default()
    };
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
    drive(&rt, &root_ctx, started, Box::pin(body), async {}).await;
}
