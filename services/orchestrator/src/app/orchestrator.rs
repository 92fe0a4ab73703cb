//! [`Orchestrator`], the application core's state, and what its
//! operations share: who calls ([`Caller`]), where a run is, the audit log.

use std::sync::Arc;

use baton_common::otel::Tracing;
use opentelemetry::Context;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::{
    catalog::Catalog,
    error::{Error, Result},
    metrics::Metrics,
    peers::{Answer, Forward, Peers},
    run::shared::Shared,
    run::{durable::RedisRuns, record::RunRecord, registry::Runs},
};

/// Who asks: the tenant its key names, the trace it calls from, and what a
/// call forwarded to a peer must carry of it.
#[derive(Debug, Clone, Default)]
pub struct Caller {
    /// The caller's tenant (`""` without authentication).
    pub tenant: String,
    /// The caller's trace context (a run's span is its child).
    pub trace: Context,
    /// What a forwarded call carries of the caller.
    pub forward: Forward,
}

/// The orchestrator's application core (see the module docs). Cheap to
/// clone: every clone is the same core.
#[derive(Clone)]
pub struct Orchestrator {
    pub(super) services: Arc<Shared>,
    pub(super) runs: Arc<Runs>,
    pub(super) shutdown: CancellationToken,
    /// Cancels every run of this replica: `shutdown_grace` after shutdown
    /// began (see [`Self::finish_runs`]).
    pub(super) runs_stop: CancellationToken,
    pub(super) tasks: TaskTracker,
    /// The other replicas, for run-scoped calls of runs that are not here.
    pub(super) peers: Option<Arc<Peers>>,
}

impl Orchestrator {
    /// A core running `services`' agents, its work tracked by `tasks`. Once
    /// `shutdown` is cancelled no run starts; running runs are handed over
    /// or finish within the grace period ([`Self::finish_runs`]).
    pub fn new(services: Shared, shutdown: CancellationToken, tasks: TaskTracker) -> Self {
        Self {
            runs: Arc::new(Runs::new(&services.defaults)),
            services: Arc::new(services),
            shutdown,
            runs_stop: CancellationToken::new(),
            tasks,
            peers: None,
        }
    }

    /// Forwards run-scoped calls of runs that are not here to `peers` (see
    /// [`crate::peers`]).
    pub fn with_peers(mut self, peers: Option<Arc<Peers>>) -> Self {
        self.peers = peers;
        self
    }

    /// What every run shares.
    pub fn services(&self) -> &Arc<Shared> {
        &self.services
    }

    /// The agents and groups runs can name (ListAgents).
    pub fn catalog(&self) -> &Catalog {
        &self.services.catalog
    }

    /// The tracer provider.
    pub fn tracing(&self) -> &Tracing {
        &self.services.tracing
    }

    /// The metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.services.metrics
    }

    /// The run store in Redis, when runs are durable.
    pub fn durable(&self) -> Option<Arc<RedisRuns>> {
        self.services.durable.clone()
    }

    /// The runs of this replica (for tests and metrics).
    pub fn runs(&self) -> &Arc<Runs> {
        &self.runs
    }

    /// Fetches every tool server's tool descriptions in the background
    /// (retrying until each answers or shutdown).
    pub fn list_remote_tools(&self) {
        for server in self.services.tools.servers() {
            let server = server.clone();
            let stop = self.shutdown.clone();
            self.tasks
                .spawn(async move { server.refresh_until_ok(stop).await });
        }
        for server in self.services.tools.mcp_servers() {
            let server = server.clone();
            let stop = self.shutdown.clone();
            self.tasks
                .spawn(async move { server.connect_until_ok(stop).await });
        }
    }

    /// `UNAVAILABLE` once shutdown began.
    pub(super) fn check_running(&self) -> Result<()> {
        if self.shutdown.is_cancelled() {
            Err(Error::ShuttingDown)
        } else {
            Ok(())
        }
    }

    /// The run `run_id` if it is here, this replica's to answer about (see
    /// [`RunRecord::is_ours`]: a durable run whose lease this replica may
    /// have lost is read from the run store instead) and the caller's
    /// tenant's; another tenant's run is `NOT_FOUND`, exactly like a
    /// missing one.
    pub(super) fn run_of(&self, caller: &Caller, run_id: &str) -> Result<Arc<RunRecord>> {
        let run = self.runs.get(run_id)?;
        if run.tenant != caller.tenant || !run.is_ours() {
            return Err(not_found(run_id, "on this orchestrator"));
        }
        Ok(run)
    }

    /// Where the run of a run-scoped call is when it is not here: the
    /// answer of the replica that has it, or `NOT_FOUND` (see
    /// [`crate::peers`]). A call a peer forwarded is answered from this
    /// replica's runs only. `missing` is why it is not here.
    pub(super) async fn on_peer<T, F>(
        &self,
        caller: &Caller,
        run_id: &str,
        missing: Error,
        ask: F,
    ) -> Result<T>
    where
        F: AsyncFnOnce(&Peers, &Forward) -> Answer<T>,
    {
        let Some(peers) = &self.peers else {
            return Err(missing);
        };
        if !matches!(missing, Error::NotFound { .. }) || caller.forward.forwarded {
            return Err(missing);
        }
        match ask(peers, &caller.forward).await {
            Answer::Found(answer) => answer,
            Answer::Missing { asked, unanswered } => {
                let mut message =
                    format!("no run {run_id:?} on any of the {asked} orchestrator replicas");
                if unanswered > 0 {
                    message.push_str(&format!(" ({unanswered} did not answer)"));
                }
                Err(Error::NotFound {
                    field: "run_id",
                    message,
                })
            }
        }
    }
}

/// `NOT_FOUND` for run `run_id` (`where_`: e.g. "on this orchestrator").
pub(super) fn not_found(run_id: &str, where_: &str) -> Error {
    let message = if where_.is_empty() {
        format!("no run {run_id:?}")
    } else {
        format!("no run {run_id:?} {where_}")
    };
    Error::NotFound {
        field: "run_id",
        message,
    }
}

/// Records a call in the audit log: the method, the caller's tenant, the
/// run's ids when known, and the outcome.
pub(super) fn audit<T>(
    method: &'static str,
    caller: &Caller,
    run_id: &str,
    trace_id: &str,
    r: &Result<T>,
) {
    let code = match r {
        Ok(_) => tonic::Code::Ok,
        Err(e) => e.code(),
    };
    baton_common::audit::record(method, &caller.tenant, run_id, trace_id, code);
}

/// A run id as the audit log records it: only a well-formed one (the field
/// may hold anything).
pub(super) fn audited_id(run_id: &str) -> &str {
    if uuid::Uuid::try_parse(run_id).is_ok() {
        run_id
    } else {
        ""
    }
}
