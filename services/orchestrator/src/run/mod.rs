//! A run's lifecycle, shared by RunAgent and RunPipeline, whatever its body.
//!
//! - [`launch`]: a run's record, span and [`state::Run`] ([`launch::prepare`]),
//!   then the body beside its sequencer as one tracked task
//!   ([`launch::launch`]).
//! - [`drive`]: `RunStarted`, the body until it ends, the run is cancelled or
//!   `run_timeout` passes, the body's cleanup, then exactly one terminal
//!   event — written once for agents and pipelines.
//! - [`state`]: what every branch of a run shares ([`state::Run`]: the
//!   service's `Shared`, limits, event sink, usage, run context), pending
//!   writes, and the scope a `final` tool output ends.
//! - [`failure`]: [`failure::Failure`], the one error type inside a run
//!   (a gRPC code and a message).
//! - [`events`]: the sequencer (numbers, times, records and filters events)
//!   and [`events::Filter`].
//! - [`durable`]: runs kept in Redis (`runs.store = "redis"`): event logs,
//!   records, journals, the tenants' lists, fenced appends, leases and
//!   claims, the inbox of answers and cancels given on other replicas, and
//!   parking; `durable::sequencer`: the sequencer of a durable run, which
//!   writes each batch to Redis before anyone sees it.
//! - [`recording`]: a run's recording (unit names, the journal, a walk
//!   through it and its pacing) and the three that start from one: a
//!   resumed run, a fork, a replay — with the words each of "journal",
//!   "walk", "replay" and "replayed" means.
//! - [`context`]: a context of the tree and its span (a leaf); [`clock`]:
//!   the wall and monotonic clocks in milliseconds (a leaf).
//! - [`packed`]: events encoded once, as the log keeps them and streams
//!   carry them (a leaf).
//! - [`log`]: a run's event log, in chunks, bounded by
//!   `runs.max_history_bytes`.
//! - [`target`]: an agent or group resolved with its model, once.
//! - [`usage`]: adding usages up, and their journal records (a leaf).
//! - [`view`]: what the core answers about a run, from either record.
//! - [`record`]: a run's record (status, cancellation, log, pending
//!   approvals and inputs); [`stop`]: stopping a run from outside its
//!   body (cancelled, or failed); [`registry`]: the runs of this replica;
//!   [`park`]: a memory-mode run that only waits for people set aside
//!   (its task dropped) and woken.
//!
//! Nothing here knows what an agent or a pipeline is: `crate::agent` and
//! `crate::pipeline` are bodies `drive` runs.

pub mod clock;
pub mod context;
pub mod drive;
pub mod durable;
pub mod events;
pub mod failure;
pub mod guards;
mod history;
pub mod hooks;
pub mod launch;
pub mod log;
pub mod packed;
pub mod park;
mod pending;
pub mod periods;
pub mod quota;
pub mod record;
pub mod recording;
pub mod registry;
pub mod shared;
pub mod state;
pub mod stop;
pub mod target;
pub mod usage;
pub mod view;

/// Runs built without a gRPC server, for the unit tests of the parts that
/// run inside one (planning, people, drive).
#[cfg(test)]
pub(crate) mod testing {
    use std::{sync::Arc, time::Duration};

    use baton_common::ids::TraceId;
    use baton_proto::v1 as pb;
    use baton_store::{Limits as StoreLimits, memory::MemoryStore};
    use tokio::sync::mpsc;
    use tokio_util::sync::CancellationToken;

    use super::shared::Shared;
    use super::{
        events::Draft,
        record::RunRecord,
        state::{Limits, Run, RunOptions},
    };
    use crate::{catalog::Catalog, config::RunDefaults};

    /// Limits of a test run: `max_depth` 3, short deadlines.
    pub fn limits() -> Limits {
        Limits {
            max_depth: 3,
            max_turns: 10,
            run_timeout: Duration::from_secs(5),
            tool_timeout: Duration::from_secs(1),
            model_timeout: Duration::from_secs(1),
            approval_timeout: Duration::from_millis(200),
            budget: Default::default(),
        }
    }

    /// A run of the agents file `yaml` (in memory), and where its events go.
    pub fn run(
        yaml: &str,
        limits: Limits,
        approval_mode: pb::ApprovalMode,
    ) -> (Arc<Run>, mpsc::Receiver<Box<Draft>>) {
        run_with(yaml, limits, approval_mode, None)
    }

    /// [`run`], walking `walk` first when given.
    pub fn run_with(
        yaml: &str,
        limits: Limits,
        approval_mode: pb::ApprovalMode,
        walk: Option<super::recording::Walk>,
    ) -> (Arc<Run>, mpsc::Receiver<Box<Draft>>) {
        let catalog = Arc::new(Catalog::from_yaml(yaml).expect("the test catalog is valid"));
        let store = Arc::new(MemoryStore::new(StoreLimits::default()));
        let services = Shared::new(
            catalog,
            store,
            RunDefaults::default(),
            Shared::untraced(),
            &|_| None,
        )
        .expect("services");
        let record = RunRecord::new(
            None,
            TraceId::random(),
            pb::RunKind::Agent,
            "test".into(),
            String::new(),
            false,
            &CancellationToken::new(),
        );
        let (tx, rx) = mpsc::channel(1024);
        let options = RunOptions {
            limits,
            approval_mode,
            default_model: services.catalog.default_model.clone(),
            run_context: Default::default(),
            filter: Default::default(),
            detach: false,
            walk,
            rerun: None,
            settings: Default::default(),
            shared_budget: None,
            webhooks: Vec::new(),
        };
        let run = Run::new(
            Arc::new(services),
            record,
            opentelemetry::Context::new(),
            options,
            tx,
        );
        (run, rx)
    }

    /// The events sent so far, by kind name.
    pub fn kinds(rx: &mut mpsc::Receiver<Box<Draft>>) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(d) = rx.try_recv() {
            let name = super::events::kind_of(&d.payload).as_str_name();
            out.push(name.trim_start_matches("EVENT_KIND_").to_owned());
        }
        out
    }
}
