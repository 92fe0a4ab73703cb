//! The application core: [`Orchestrator`] owns what the orchestrator runs —
//! the shared [`Shared`], this replica's runs, their tasks, the peers and
//! shutdown — and offers the operations every face needs, in domain values,
//! with one error type ([`crate::error::Error`]):
//!
//! | operation | file |
//! |---|---|
//! | start an agent run, a pipeline run; resume a claimed run | `start.rs`, `resume.rs` |
//! | watch a run from a seq, get one, list a tenant's | `read.rs` (producers in `watch.rs`) |
//! | cancel a run, answer an approval, answer an input | `calls.rs` |
//! | a trace's slots, and a watch of them | `slots.rs` |
//! | fork a run at a point; replay a run against today's agents | `fork.rs`, `replay.rs` |
//! | a run entering its conversation (its compaction summary: `summary.rs`); get, list, update one | `conversations.rs` |
//! | delete a conversation, its branches and every run of them or made from them | `forget.rs` |
//! | schedules: make, list, pause, delete; start a tick's run | `schedules.rs` |
//! | drain at shutdown | `drain.rs` |
//! | keep durable runs: renew leases, deliver answers, park, claim | `upkeep.rs` |
//! | park memory-mode runs that only wait for people, and wake them | `park.rs` |
//!
//! A face (`crate::grpc`; HTTP, A2A and MCP beside it) converts its wire
//! form into these values, calls the core and converts the answer back;
//! nothing here, nor in `run`, `agent` or `pipeline`, knows which face a
//! run came from. Every operation is audited here, once, under its
//! `baton.v1` method name, whatever the face.
//!
//! Where a run is: here (this replica's [`Runs`]), on a peer (asked through
//! [`Peers`] when forwarding is on), or in the run store (durable runs:
//! any replica answers from Redis).

mod calls;
mod conversations;
mod drain;
mod experiment;
pub mod experiment_store;
mod forget;
mod fork;
mod live_scoring;
mod orchestrator;
pub mod park;
mod read;
mod replay;
mod resume;
pub mod schedules;
mod slots;
pub(crate) mod start;
mod summary;
pub mod upkeep;
mod watch;
mod webhooks;

pub use orchestrator::{Caller, Orchestrator, ReloadState};
pub use resume::Claimed;
pub use start::Started;
