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

/// Most runs scored live at once on a replica (see `app::live_scoring`).
pub const LIVE_AT_ONCE: usize = 16;

/// The orchestrator's application core (see the module docs). Cheap to
/// clone: every clone is the same core.
#[derive(Clone)]
pub struct Orchestrator {
    /// What runs share, swapped whole when the agents file is reloaded:
    /// a run takes the one current when it starts and keeps it to its end
    /// (see [`Self::reload`]).
    services: Arc<std::sync::RwLock<Arc<Shared>>>,
    /// Bumped at each reload of the agents file (faces follow it).
    reloads: tokio::sync::watch::Sender<u64>,
    /// How the last look at the agents file went.
    reload_state: Arc<std::sync::Mutex<ReloadState>>,
    pub(super) runs: Arc<Runs>,
    pub(super) shutdown: CancellationToken,
    /// Cancels every run of this replica: `shutdown_grace` after shutdown
    /// began (see [`Self::finish_runs`]).
    pub(super) runs_stop: CancellationToken,
    pub(super) tasks: TaskTracker,
    /// The other replicas, for run-scoped calls of runs that are not here.
    pub(super) peers: Option<Arc<Peers>>,
    /// Live scoring's runs scored at once (see `app::live_scoring`).
    pub(super) live_scoring: Arc<tokio::sync::Semaphore>,
    /// Experiments' records (see `app::experiment`), kept where runs are.
    pub(super) experiments: Arc<crate::app::experiment_store::Experiments>,
    /// The experiments running here (to cancel them).
    pub(super) experiments_here: Arc<crate::app::experiment_store::Here>,
    /// Webhooks: runs' subscriptions, deliveries and dead letters.
    pub(super) webhooks: Arc<crate::webhook::Webhooks>,
    /// Schedules: runs started at their ticks.
    pub(super) schedules: Arc<crate::schedule::Schedules>,
}

impl Orchestrator {
    /// A core running `services`' agents, its work tracked by `tasks`. Once
    /// `shutdown` is cancelled no run starts; running runs are handed over
    /// or finish within the grace period ([`Self::finish_runs`]).
    pub fn new(services: Shared, shutdown: CancellationToken, tasks: TaskTracker) -> Self {
        let experiments = Arc::new(match &services.durable {
            Some(durable) => {
                crate::app::experiment_store::Experiments::Redis(durable.shared().clone())
            }
            None => crate::app::experiment_store::Experiments::memory(
                services.defaults.finished_retention,
            ),
        });
        let webhooks = crate::webhook::Webhooks::new(&Default::default(), None)
            .expect("the default webhooks section is valid");
        let schedules = crate::schedule::Schedules::new(
            &Default::default(),
            services.durable.as_ref().map(|d| d.shared().clone()),
        );
        Self {
            experiments,
            webhooks,
            schedules,
            experiments_here: Arc::default(),
            live_scoring: Arc::new(tokio::sync::Semaphore::new(LIVE_AT_ONCE)),
            runs: Arc::new(Runs::new(&services.defaults)),
            services: Arc::new(std::sync::RwLock::new(Arc::new(services))),
            reloads: tokio::sync::watch::Sender::new(0),
            reload_state: Arc::default(),
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

    /// Takes `webhooks` (the server's config of them) for runs started
    /// from now on.
    pub fn with_webhooks(mut self, webhooks: Arc<crate::webhook::Webhooks>) -> Self {
        self.webhooks = webhooks;
        self
    }

    /// The schedules.
    pub fn schedules(&self) -> &Arc<crate::schedule::Schedules> {
        &self.schedules
    }

    /// The webhooks.
    pub fn webhooks(&self) -> &Arc<crate::webhook::Webhooks> {
        &self.webhooks
    }

    /// What every run shares: the current one (a run started now gets it).
    pub fn services(&self) -> Arc<Shared> {
        self.services
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The agents and groups runs can name now (ListAgents).
    pub fn catalog(&self) -> Arc<Catalog> {
        self.services().catalog.clone()
    }

    /// Takes `catalog` (an agents file read again) for every run started
    /// from now on: what runs share is built again around it — its models
    /// and tool servers — and swapped in whole, so a run in flight keeps
    /// the catalog it started with (provider keys read through `env`).
    /// Nothing changes when it cannot be built (the error says why). Faces
    /// that expose agents follow ([`Self::reloaded`]).
    pub fn reload(
        &self,
        catalog: Arc<Catalog>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> std::result::Result<(), String> {
        let current = self.services();
        let next = current
            .with_catalog(catalog, env)
            .map_err(|e| e.to_string())?;
        *self.services.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(next);
        self.list_remote_tools();
        self.reloads.send_modify(|n| *n += 1);
        Ok(())
    }

    /// How the last look at the agents file went (`GET /v1/agents/reload`).
    pub fn reload_state(&self) -> ReloadState {
        self.reload_state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Sets [`Self::reload_state`].
    pub fn set_reload_state(&self, state: ReloadState) {
        *self.reload_state.lock().unwrap_or_else(|e| e.into_inner()) = state;
    }

    /// Changes [`Self::reload_state`].
    pub fn update_reload_state(&self, change: impl FnOnce(&mut ReloadState)) {
        change(&mut self.reload_state.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// Changes each time the agents file is reloaded.
    pub fn reloaded(&self) -> tokio::sync::watch::Receiver<u64> {
        self.reloads.subscribe()
    }

    /// The tracer provider.
    pub fn tracing(&self) -> Tracing {
        self.services().tracing.clone()
    }

    /// The metrics.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.services().metrics.clone()
    }

    /// The run store in Redis, when runs are durable.
    pub fn durable(&self) -> Option<Arc<RedisRuns>> {
        self.services().durable.clone()
    }

    /// The runs of this replica (for tests and metrics).
    pub fn runs(&self) -> &Arc<Runs> {
        &self.runs
    }

    /// Fetches every tool server's tool descriptions in the background
    /// (retrying until each answers or shutdown).
    pub fn list_remote_tools(&self) {
        let services = self.services();
        for server in services.tools.servers() {
            let server = server.clone();
            let stop = self.shutdown.clone();
            self.tasks
                .spawn(async move { server.refresh_until_ok(stop).await });
        }
        for server in services.tools.mcp_servers() {
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
            // A replica that did not answer may run it: the caller
            // retries (a durable run's answer or cancel takes the path
            // that needs no peer instead).
            Answer::Missing {
                asked, unanswered, ..
            } if unanswered > 0 => Err(Error::Unavailable(format!(
                "run {run_id:?} is not on this replica and {unanswered} of the {asked} other replicas did not answer; retry"
            ))),
            Answer::Missing { asked, .. } => Err(Error::NotFound {
                field: "run_id",
                message: format!("no run {run_id:?} on any of the {asked} orchestrator replicas"),
            }),
        }
    }
}

/// How the last look at the agents file went (`GET /v1/agents/reload`;
/// see `crate::agents_watch`).
#[derive(Debug, Clone, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReloadState {
    /// The file watched (empty: none is).
    pub file: String,
    /// Reloads taken since the start.
    pub reloads: u64,
    /// Changed files refused since the start.
    pub refused: u64,
    /// Why the last changed file was refused, while it is the file's
    /// content (empty once a valid file was taken).
    pub error: String,
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
