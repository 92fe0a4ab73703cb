//! What a pipeline asks of the turn loop: one agent run for each attempt of
//! a step, described by a [`StepCall`] and run by a [`RunStep`] value.
//!
//! Agents start pipelines (the `run_pipeline` tool) and pipelines run
//! agents. The pipeline sits below the agents: it names the call it needs
//! here, and `crate::agent` hands it the function that makes a frame of it
//! and runs the turn loop, so the recursion is a value, not an import.

use std::sync::Arc;

use baton_proto::v1 as pb;
use futures::future::BoxFuture;

use crate::run::{
    context::ContextInfo,
    failure::Failure,
    state::{FinalScope, Run},
};

/// One attempt of a step's agent: `agent` (an agent or group of the
/// catalog) on `task`, in the step's context `ctx`, with no history.
pub struct StepCall {
    /// The step's context: the agent's frame runs in it.
    pub ctx: Arc<ContextInfo>,
    /// The agent or group to run.
    pub agent: String,
    /// The task, its template filled in: the agent's input.
    pub task: String,
    /// What a final tool output in the agent's frame (or below) ends.
    pub scope: Arc<FinalScope>,
    /// Whether the answer is the request's (a step of a RunPipeline, not of
    /// a `run_pipeline` tool): the request's `response_format` applies.
    pub answers_request: bool,
}

/// Runs a [`StepCall`] until the agent's final answer (the answer and what
/// it consumed); a target that does not resolve fails with
/// `INVALID_ARGUMENT`. `crate::agent::run_step_boxed`, handed as a value.
pub type RunStep =
    for<'a> fn(&'a Arc<Run>, StepCall) -> BoxFuture<'a, Result<(String, pb::Usage), Failure>>;
