//! Pipelines (`RunPipeline`, and the `run_pipeline` tool agents call): a
//! graph of steps, each an agent run on a task, ordered sequentially, all at
//! once, or by dependencies, sharing the run's trace in the context store.
//!
//! - [`plan`]: [`Plan::validate`] checks the whole spec before anything runs
//!   and turns it into a graph: every problem is `INVALID_ARGUMENT` naming
//!   the field (`pipeline.steps[2].agent`, …). One place, shared by
//!   RunPipeline and the `run_pipeline` tool.
//! - [`schedule`]: the pure scheduler (which step starts next, what a
//!   failure skips, whether the pipeline succeeded, which output is its
//!   output), unit-tested without any I/O.
//! - [`executor`]: the scheduler's decisions carried out: step contexts,
//!   attempts with retries and timeouts, store writes, events; its
//!   [`executor::body`] is the body of a RunPipeline.
//! - `step`: one step's attempts (retries, timeouts, the task filled in;
//!   attempts a resumed run had ended are taken from its journal).
//! - [`tool`]: the `run_pipeline` tool.
//! - [`file`]: the file and tool-argument form of a pipeline.
//!
//! - [`call`]: what a step asks of the turn loop ([`StepCall`]), and the
//!   [`RunStep`] value the executor is handed to run it.
//!
//! The executor runs a step's agent through the [`RunStep`] it is handed,
//! not by importing the turn loop: agents start pipelines and pipelines run
//! agents, so the pipeline sits below the agents and that recursion is a
//! value, not an import cycle.

pub mod call;
pub mod executor;
mod file;
pub mod plan;
pub mod schedule;
mod step;
pub mod tool;

pub use call::{RunStep, StepCall};
pub use file::{PipelineFile, PipelineFileError, StepFile};
pub use plan::*;
