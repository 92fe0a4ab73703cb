//! The `baton.v1.Orchestrator` gRPC service: a thin edge. Each handler
//! validates and converts its request once (`convert`), then launches or
//! looks up a run; errors map to `Status` in one place (`crate::error`).
//! Run-scoped calls of runs on another replica are asked of the peers
//! ([`crate::peers`]); `watch` is the WatchRun producer.

mod convert;
mod watch;

use convert::RunOptions;
pub use convert::{AgentRun, PipelineRun, filter};

use std::{future::Future, sync::Arc};

use baton_common::{ids::TraceId, otel::Tracing};
use baton_context_store::store::ContextStore;
use baton_proto::v1::orchestrator_client::OrchestratorClient;
use baton_proto::v1::{self as pb, orchestrator_server::Orchestrator};
use opentelemetry::{
    Context, KeyValue,
    trace::{Span as _, SpanBuilder, SpanKind, Status as SpanStatus, TraceContextExt, Tracer},
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tonic::{Request, Response, Status, transport::Channel};

use crate::{
    auth::tenant_of,
    catalog::Catalog,
    config::RunDefaults,
    error::{Error, Result},
    metrics::Metrics,
    model::Models,
    peers::{Answer, Peers},
    pipeline,
    runtime::{
        self, CallFrame, RunSetup, RuntimeConfig,
        events::{self, Filter},
        registry::{ApprovalAnswer, LOG_CAPACITY, LOG_RETENTION, LogRead, RunRecord, Runs},
    },
    tools::Toolbox,
};

/// The orchestrator's shared state and its gRPC face.
#[derive(Clone)]
pub struct OrchestratorService {
    catalog: Arc<Catalog>,
    models: Arc<Models>,
    tools: Arc<Toolbox>,
    store: Arc<dyn ContextStore>,
    runs: Arc<Runs>,
    defaults: RunDefaults,
    shutdown: CancellationToken,
    tasks: TaskTracker,
    tracing: Tracing,
    metrics: Arc<Metrics>,
    /// The other replicas, for run-scoped calls of runs that are not here.
    peers: Option<Arc<Peers>>,
}

impl OrchestratorService {
    /// A service running `catalog`'s agents on `store`. Runs are cancelled
    /// when `shutdown` is, and tracked by `tasks`. Provider keys are read
    /// through `env`.
    pub fn new(
        catalog: Arc<Catalog>,
        store: Arc<dyn ContextStore>,
        defaults: RunDefaults,
        shutdown: CancellationToken,
        tasks: TaskTracker,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, String> {
        Ok(Self {
            models: Arc::new(Models::new(catalog.clone(), env)?),
            tools: Arc::new(Toolbox::new(&catalog)?),
            metrics: Arc::new(Metrics::with_catalog(&catalog)),
            catalog,
            store,
            runs: Arc::new(Runs::new(&defaults)),
            defaults,
            shutdown,
            tasks,
            tracing: Tracing::with_env(&Default::default(), "baton-orchestrator", |_| None)?,
            peers: None,
        })
    }

    /// Makes spans with `tracing` (by default spans are made but not
    /// exported).
    pub fn with_tracing(mut self, tracing: Tracing) -> Self {
        self.tracing = tracing;
        self
    }

    /// Forwards run-scoped calls of runs that are not here to `peers` (see
    /// [`crate::peers`]).
    pub fn with_peers(mut self, peers: Option<Arc<Peers>>) -> Self {
        self.peers = peers;
        self
    }

    /// The run `run_id` if it is here and belongs to the caller's tenant;
    /// another tenant's run is `NOT_FOUND`, exactly like a missing one.
    fn run_of(&self, ext: &tonic::Extensions, run_id: &str) -> Result<Arc<RunRecord>> {
        let run = self.runs.get(run_id)?;
        if run.tenant != tenant_of(ext) {
            return Err(Error::NotFound {
                field: "run_id",
                message: format!("no run {run_id:?} on this orchestrator"),
            });
        }
        Ok(run)
    }

    /// Relays a peer's WatchRun stream to this replica's caller; ends when
    /// either side does, or at shutdown.
    fn relay(&self, mut remote: tonic::Streaming<pb::RunEvent>) -> EventStream {
        use futures::StreamExt as _;
        let (tx, rx) = mpsc::channel(events::CLIENT_BUFFER);
        let shutdown = self.shutdown.clone();
        self.tasks.spawn(async move {
            loop {
                tokio::select! {
                    item = remote.next() => match item {
                        Some(item) => {
                            if tx.send(item).await.is_err() {
                                return;
                            }
                        }
                        None => return,
                    },
                    _ = tx.closed() => return,
                    _ = shutdown.cancelled() => {
                        let _ = tx.send(Err(Error::ShuttingDown.into())).await;
                        return;
                    }
                }
            }
        });
        ReceiverStream::new(rx)
    }

    /// Where the run of a run-scoped call is: here (and the caller's
    /// tenant's), or, when it is not and forwarding is on, the answer of the
    /// replica that has it (see [`crate::peers`]). A call a peer forwarded is
    /// answered from this replica's runs only.
    async fn locate<M, T, F, Fut>(
        &self,
        incoming: &tonic::metadata::MetadataMap,
        ext: &tonic::Extensions,
        run_id: &str,
        message: &M,
        call: F,
    ) -> std::result::Result<Located<T>, Status>
    where
        M: Clone,
        F: Fn(OrchestratorClient<Channel>, Request<M>) -> Fut,
        Fut: Future<Output = std::result::Result<Response<T>, Status>>,
    {
        let missing = match self.run_of(ext, run_id) {
            Ok(run) => return Ok(Located::Here(run)),
            Err(e) => e,
        };
        let Some(peers) = &self.peers else {
            return Err(missing.into());
        };
        if !matches!(missing, Error::NotFound { .. }) || Peers::is_forwarded(incoming) {
            return Err(missing.into());
        }
        match peers.ask(incoming, message.clone(), call).await {
            Answer::Found(answer) => answer.map(Located::There),
            Answer::Missing { asked, unanswered } => {
                let mut message =
                    format!("no run {run_id:?} on any of the {asked} orchestrator replicas");
                if unanswered > 0 {
                    message.push_str(&format!(" ({unanswered} did not answer)"));
                }
                Err(Error::NotFound {
                    field: "run_id",
                    message,
                }
                .into())
            }
        }
    }

    /// The service's tracer provider.
    pub fn tracing(&self) -> &Tracing {
        &self.tracing
    }

    /// The service's metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Starts a run's span, a child of the caller's `traceparent` when the
    /// request carries one; the run's trace id is that span's.
    fn run_span(
        &self,
        parent: &Context,
        method: &'static str,
        kind: pb::RunKind,
        target: &str,
    ) -> (Context, TraceId) {
        let span = self.tracing.tracer().build_with_context(
            SpanBuilder::from_name(format!("run {target}"))
                .with_kind(SpanKind::Server)
                .with_attributes([
                    KeyValue::new("rpc.system", "grpc"),
                    KeyValue::new("rpc.service", "baton.v1.Orchestrator"),
                    KeyValue::new("rpc.method", method),
                    KeyValue::new("baton.run.kind", kind.as_str_name()),
                    KeyValue::new("baton.run.target", target.to_owned()),
                ]),
            parent,
        );
        let trace = span.span_context().trace_id().to_string();
        let cx = parent.with_span(span);
        // An OTel trace id is 32 lowercase hex and never all zeros, which is
        // what a TraceId is.
        let trace_id = TraceId::parse(&trace).unwrap_or_else(|_| TraceId::random());
        (cx, trace_id)
    }

    /// Fetches every tool server's tool descriptions in the background
    /// (retrying until each answers or shutdown).
    pub fn list_remote_tools(&self) {
        for server in self.tools.servers() {
            let server = server.clone();
            let stop = self.shutdown.clone();
            self.tasks
                .spawn(async move { server.refresh_until_ok(stop).await });
        }
    }

    /// The runs this service started (for tests and metrics).
    pub fn runs(&self) -> &Arc<Runs> {
        &self.runs
    }

    /// Builds a run's record and shared config (nothing runs yet).
    fn prepare(
        &self,
        (run_span, trace_id): (Context, TraceId),
        kind: pb::RunKind,
        target: String,
        tenant: String,
        options: RunOptions,
    ) -> (
        Arc<RunRecord>,
        Arc<RuntimeConfig>,
        mpsc::Receiver<events::Draft>,
        Filter,
    ) {
        let record = RunRecord::new(trace_id, kind, target, tenant, &self.shutdown);
        run_span
            .span()
            .set_attribute(KeyValue::new("baton.run.id", record.run_id.clone()));
        let (draft_tx, draft_rx) = mpsc::channel(events::DRAFT_BUFFER);
        let setup = RunSetup {
            record: record.clone(),
            catalog: self.catalog.clone(),
            models: self.models.clone(),
            tools: self.tools.clone(),
            store: self.store.clone(),
            limits: options.limits,
            pipeline_limits: self.pipeline_limits(),
            approval_mode: options.approval_mode,
            default_model: options.default_model,
            run_context: options.run_context,
            tracer: self.tracing.tracer().clone(),
            run_span,
            metrics: self.metrics.clone(),
        };
        (
            record,
            RuntimeConfig::new(setup, draft_tx),
            draft_rx,
            options.filter,
        )
    }

    /// Registers a prepared run and starts it with its sequencer, as one
    /// tracked task; returns the client's stream.
    fn launch(
        &self,
        record: Arc<RunRecord>,
        draft_rx: mpsc::Receiver<events::Draft>,
        filter: Filter,
        run_span: Context,
        body: impl Future<Output = ()> + Send + 'static,
    ) -> Response<EventStream> {
        self.runs.insert(record.clone());
        let kind = match record.kind {
            pb::RunKind::Pipeline => "pipeline",
            _ => "agent",
        };
        self.metrics.run_started(kind);
        let span_id = run_span.span().span_context().span_id().to_string();
        tracing::info!(run_id = %record.run_id, trace_id = %record.trace_id, span_id, target = %record.target, kind, "run started");
        let (out_tx, out_rx) = mpsc::channel(events::CLIENT_BUFFER);
        let metrics = self.metrics.clone();
        self.tasks.spawn(async move {
            let sequencer = events::sequence(
                draft_rx,
                out_tx,
                filter,
                record.clone(),
                metrics.events.clone(),
            );
            tokio::join!(sequencer, body);
            let state = record.state();
            let status = match state.status {
                pb::RunStatus::Completed => "completed",
                pb::RunStatus::Failed => "failed",
                pb::RunStatus::Cancelled => "cancelled",
                _ => "unknown",
            };
            metrics.run_finished(kind, status);
            let span = run_span.span();
            span.set_attribute(KeyValue::new("baton.run.status", status));
            if state.status != pb::RunStatus::Completed {
                span.set_status(SpanStatus::error(if state.error_message.is_empty() {
                    status.to_owned()
                } else {
                    state.error_message.clone()
                }));
            }
            span.end();
            tracing::info!(run_id = %record.run_id, trace_id = %record.trace_id, span_id, status, "run ended");
        });
        Response::new(ReceiverStream::new(out_rx))
    }

    fn check_running(&self) -> Result<()> {
        if self.shutdown.is_cancelled() {
            Err(Error::ShuttingDown)
        } else {
            Ok(())
        }
    }
}

type EventStream = ReceiverStream<std::result::Result<pb::RunEvent, Status>>;

/// Where a run-scoped call's run is (see [`OrchestratorService::locate`]).
enum Located<T> {
    /// On this replica.
    Here(Arc<RunRecord>),
    /// On a peer, which answered.
    There(Response<T>),
}

#[tonic::async_trait]
impl Orchestrator for OrchestratorService {
    type RunAgentStream = EventStream;

    async fn run_agent(
        &self,
        request: Request<pb::RunAgentRequest>,
    ) -> std::result::Result<Response<Self::RunAgentStream>, Status> {
        self.check_running()?;
        let parent = baton_common::otel::extract(request.metadata());
        let tenant = tenant_of(request.extensions()).to_owned();
        let run = self.validate_agent(request.into_inner())?;
        let span = self.run_span(&parent, "RunAgent", pb::RunKind::Agent, &run.agent);
        let (record, rt, draft_rx, filter) = self.prepare(
            span,
            pb::RunKind::Agent,
            run.agent.clone(),
            tenant,
            run.options,
        );
        let root = CallFrame::root(&rt, &run.agent, run.history, run.input)
            .map_err(|f| Status::internal(f.message))?;
        let run_span = rt.run_span.clone();
        Ok(self.launch(
            record,
            draft_rx,
            filter,
            run_span,
            runtime::run_agent(rt, root, run.agent),
        ))
    }

    type RunPipelineStream = EventStream;

    async fn run_pipeline(
        &self,
        request: Request<pb::RunPipelineRequest>,
    ) -> std::result::Result<Response<Self::RunPipelineStream>, Status> {
        self.check_running()?;
        let parent = baton_common::otel::extract(request.metadata());
        let tenant = tenant_of(request.extensions()).to_owned();
        let run = self.validate_pipeline(request.into_inner())?;
        let target = if run.plan.name.is_empty() {
            "pipeline".to_owned()
        } else {
            run.plan.name.clone()
        };
        let span = self.run_span(&parent, "RunPipeline", pb::RunKind::Pipeline, &target);
        let (record, rt, draft_rx, filter) =
            self.prepare(span, pb::RunKind::Pipeline, target, tenant, run.options);
        let run_span = rt.run_span.clone();
        Ok(self.launch(
            record,
            draft_rx,
            filter,
            run_span,
            pipeline::run_pipeline(rt, run.plan, run.initial, run.keep_context),
        ))
    }

    async fn resolve_approval(
        &self,
        request: Request<pb::ResolveApprovalRequest>,
    ) -> std::result::Result<Response<pb::ResolveApprovalResponse>, Status> {
        let (md, ext, r) = request.into_parts();
        if r.approval_id.is_empty() {
            return Err(Error::invalid("approval_id", "must not be empty").into());
        }
        let located = self
            .locate(&md, &ext, &r.run_id, &r, |mut c, req| async move {
                c.resolve_approval(req).await
            })
            .await?;
        let run = match located {
            Located::Here(run) => run,
            Located::There(answer) => return Ok(answer),
        };
        run.resolve_approval(
            &r.approval_id,
            ApprovalAnswer {
                approved: r.approved,
                reason: r.reason,
            },
        )?;
        Ok(Response::new(pb::ResolveApprovalResponse {}))
    }

    async fn submit_input(
        &self,
        request: Request<pb::SubmitInputRequest>,
    ) -> std::result::Result<Response<pb::SubmitInputResponse>, Status> {
        let (md, ext, r) = request.into_parts();
        if r.input_id.is_empty() {
            return Err(Error::invalid("input_id", "must not be empty").into());
        }
        let located = self
            .locate(&md, &ext, &r.run_id, &r, |mut c, req| async move {
                c.submit_input(req).await
            })
            .await?;
        let run = match located {
            Located::Here(run) => run,
            Located::There(answer) => return Ok(answer),
        };
        run.submit_input(&r.input_id, r.input)?;
        Ok(Response::new(pb::SubmitInputResponse {}))
    }

    async fn cancel_run(
        &self,
        request: Request<pb::CancelRunRequest>,
    ) -> std::result::Result<Response<pb::CancelRunResponse>, Status> {
        let (md, ext, r) = request.into_parts();
        let located = self
            .locate(&md, &ext, &r.run_id, &r, |mut c, req| async move {
                c.cancel_run(req).await
            })
            .await?;
        let run = match located {
            Located::Here(run) => run,
            Located::There(answer) => return Ok(answer),
        };
        let status = run.state().status;
        if status != pb::RunStatus::Running {
            return Ok(Response::new(pb::CancelRunResponse {
                status: status as i32,
            }));
        }
        let reason = if r.reason.is_empty() {
            "cancelled by request".to_owned()
        } else {
            format!("cancelled by request: {}", r.reason)
        };
        run.cancel(&reason);
        Ok(Response::new(pb::CancelRunResponse {
            status: pb::RunStatus::Cancelled as i32,
        }))
    }

    type WatchRunStream = EventStream;

    async fn watch_run(
        &self,
        request: Request<pb::WatchRunRequest>,
    ) -> std::result::Result<Response<Self::WatchRunStream>, Status> {
        self.check_running()?;
        let (md, ext, r) = request.into_parts();
        if r.run_id.is_empty() {
            return Err(Error::invalid("run_id", "must not be empty").into());
        }
        let filter = convert::filter(r.filter.clone(), &self.defaults)?;
        let located = self
            .locate(&md, &ext, &r.run_id, &r, |mut c, req| async move {
                c.watch_run(req).await
            })
            .await?;
        let run = match located {
            Located::Here(run) => run,
            Located::There(remote) => return Ok(Response::new(self.relay(remote.into_inner()))),
        };
        match run.events_after(r.after_seq, 0) {
            LogRead::Gone(oldest) => {
                return Err(Error::FailedPrecondition {
                    field: "after_seq",
                    message: format!(
                        "this replica keeps the last {LOG_CAPACITY} events of a run; the oldest kept is {oldest}"
                    ),
                }
                .into());
            }
            LogRead::Expired => {
                return Err(Error::FailedPrecondition {
                    field: "run_id",
                    message: format!(
                        "the run ended more than {LOG_RETENTION:?} ago; its events are no longer kept (GetRun has its result)"
                    ),
                }
                .into());
            }
            LogRead::Events(..) => {}
        }
        let stream = watch::stream(
            run,
            r.after_seq,
            filter,
            self.defaults.max_watchers_per_run,
            &self.shutdown,
            &self.tasks,
        )?;
        Ok(Response::new(stream))
    }

    async fn get_run(
        &self,
        request: Request<pb::GetRunRequest>,
    ) -> std::result::Result<Response<pb::GetRunResponse>, Status> {
        let (md, ext, r) = request.into_parts();
        let located = self
            .locate(&md, &ext, &r.run_id, &r, |mut c, req| async move {
                c.get_run(req).await
            })
            .await?;
        let run = match located {
            Located::Here(run) => run,
            Located::There(answer) => return Ok(answer),
        };
        let s = run.state();
        Ok(Response::new(pb::GetRunResponse {
            run_id: run.run_id.clone(),
            trace_id: run.trace_id.to_string(),
            kind: run.kind as i32,
            target: run.target.clone(),
            status: s.status as i32,
            started_at: Some(run.started_at.into()),
            ended_at: s.ended_at.map(Into::into),
            output: s.output,
            run_context_json: s.run_context_json,
            usage: Some(s.usage),
            error_code: s.error_code,
            error_message: s.error_message,
            last_seq: s.last_seq,
        }))
    }

    async fn list_agents(
        &self,
        _: Request<pb::ListAgentsRequest>,
    ) -> std::result::Result<Response<pb::ListAgentsResponse>, Status> {
        let agents = self
            .catalog
            .agents
            .values()
            .map(|a| pb::AgentInfo {
                name: a.name.clone(),
                description: a.spec.description.clone(),
                model: a.spec.model.clone(),
                tools: a.spec.tools.clone(),
                handoffs: a.spec.handoffs.clone(),
            })
            .collect();
        let groups = self
            .catalog
            .groups
            .iter()
            .map(|(name, g)| pb::AgentGroupInfo {
                name: name.clone(),
                description: g.description.clone(),
                root: g.root.clone(),
                members: g.members.clone(),
            })
            .collect();
        Ok(Response::new(pb::ListAgentsResponse { agents, groups }))
    }
}
