//! A run's lifecycle, shared by RunAgent and RunPipeline, whatever its body.
//!
//! - [`launch`]: a run's record, span and [`state::Run`] ([`launch::prepare`]),
//!   then the body beside its sequencer as one tracked task
//!   ([`launch::launch`]).
//! - [`drive`]: `RunStarted`, the body until it ends, the run is cancelled or
//!   `run_timeout` passes, the body's cleanup, then exactly one terminal
//!   event — written once for agents and pipelines.
//! - [`state`]: what every branch of a run shares ([`state::Run`]: the
//!   service's `Services`, limits, event sink, usage, run context), pending
//!   writes, and the scope a `final` tool output ends.
//! - [`failure`]: [`failure::Failure`], the one error type inside a run
//!   (a gRPC code and a message).
//! - [`events`]: the sequencer (numbers, times, records and filters events)
//!   and [`events::Filter`].
//! - [`context`]: a context of the tree and its span (a leaf).
//! - [`log`]: a run's event log, in fixed chunks (a leaf).
//! - [`record`]: a run's record (status, cancellation, log, pending
//!   approvals and inputs); [`registry`]: the runs of this replica.
//!
//! Nothing here knows what an agent or a pipeline is: `crate::agent` and
//! `crate::pipeline` are bodies `drive` runs.

pub mod context;
pub mod drive;
pub mod events;
pub mod failure;
pub mod launch;
pub mod log;
pub mod record;
pub mod registry;
pub mod state;
