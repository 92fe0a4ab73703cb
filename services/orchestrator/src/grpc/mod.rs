//! The `baton.v1.Orchestrator` gRPC service: a thin edge. Each handler
//! validates and converts its request once (`convert`), then launches or
//! looks up a run; errors map to `Status` in one place (`crate::error`).
//! Run-scoped calls of runs on another replica are asked of the peers
//! ([`crate::peers`]) — or, when runs are durable, read from Redis;
//! `convert` turns requests into domain values, `answer` domain values into
//! answers, `watch` is the WatchRun producer.

mod answer;
mod calls;
mod convert;
mod drain;
mod inbox;
pub mod resume;
mod stored;
mod watch;

pub use convert::{AgentRun, PipelineRun, agent_run, filter, pipeline_run};

use std::{future::Future, sync::Arc};

use baton_common::{audit, ids::TraceId, otel::Tracing};
use baton_proto::v1::orchestrator_client::OrchestratorClient;
use baton_proto::v1::{self as pb, orchestrator_server::Orchestrator};
use opentelemetry::{
    Context, KeyValue,
    trace::{Span as _, SpanBuilder, SpanKind, TraceContextExt, Tracer},
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tonic::{Request, Response, Status, transport::Channel};

use crate::{
    agent::{self, frame::CallFrame},
    auth::tenant_of,
    error::{Error, Result},
    metrics::Metrics,
    peers::{Answer, Peers},
    pipeline,
    run::{
        events,
        launch::{self, EventStream, Prepared},
        record::RunRecord,
        registry::Runs,
        state::RunOptions,
    },
    services::Services,
};

/// The orchestrator's gRPC face: the [`Services`] every run shares, the
/// runs of this replica, and its peers.
#[derive(Clone)]
pub struct OrchestratorService {
    services: Arc<Services>,
    runs: Arc<Runs>,
    shutdown: CancellationToken,
    /// Cancels every run of this replica: `shutdown_grace` after shutdown
    /// began (see [`Self::finish_runs`]).
    runs_stop: CancellationToken,
    tasks: TaskTracker,
    /// The other replicas, for run-scoped calls of runs that are not here.
    peers: Option<Arc<Peers>>,
}

impl OrchestratorService {
    /// A service running `services`' agents, tracked by `tasks`. Once
    /// `shutdown` is cancelled no run starts; running runs are cancelled by
    /// [`Self::finish_runs`].
    pub fn new(services: Services, shutdown: CancellationToken, tasks: TaskTracker) -> Self {
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

    /// Validates a RunAgent request (see [`agent_run`]).
    pub fn validate_agent(&self, r: pb::RunAgentRequest) -> Result<AgentRun> {
        agent_run(&self.services, r)
    }

    /// Validates a RunPipeline request (see [`pipeline_run`]).
    pub fn validate_pipeline(&self, r: pb::RunPipelineRequest) -> Result<PipelineRun> {
        pipeline_run(&self.services, r)
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
        let shutdown = self.runs_stop.clone();
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
        &self.services.tracing
    }

    /// The service's metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.services.metrics
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

    /// The run store in Redis, when runs are durable.
    pub fn durable(&self) -> Option<Arc<crate::run::durable::RedisRuns>> {
        self.services.durable.clone()
    }

    /// The runs this service started (for tests and metrics).
    pub fn runs(&self) -> &Arc<Runs> {
        &self.runs
    }

    /// Builds a run of the caller (the `traceparent` in `md`, the tenant in
    /// `ext`) whose span is a child of the caller's; nothing runs yet.
    fn prepare(
        &self,
        (md, ext): (&tonic::metadata::MetadataMap, &tonic::Extensions),
        method: &'static str,
        kind: pb::RunKind,
        target: &str,
        options: RunOptions,
    ) -> Prepared {
        let parent = baton_common::otel::extract(md);
        let tenant = tenant_of(ext).to_owned();
        let span = self.run_span(&parent, method, kind, target);
        launch::prepare(
            &self.services,
            span,
            kind,
            target.to_owned(),
            tenant,
            options,
            &self.runs_stop,
        )
    }

    /// Records a prepared run where runs are kept, then starts it; the
    /// caller's stream.
    async fn launch(
        &self,
        prepared: Prepared,
        request: Vec<u8>,
        body: impl Future<Output = ()> + Send + 'static,
    ) -> Result<Launched> {
        let record = prepared.record.clone();
        let deadline = launch::now_ms() + prepared.run.limits.run_timeout.as_millis() as i64;
        let quotas = &self.services.quotas;
        quotas
            .admit(&record.tenant, &record.run_id, deadline)
            .await?;
        let journal = match launch::register(&self.services, &prepared, request).await {
            Ok(journal) => journal,
            Err(e) => {
                quotas.stopped(&record.tenant, &record.run_id, true).await;
                return Err(e);
            }
        };
        let (run_id, trace_id) = (
            prepared.record.run_id.clone(),
            prepared.record.trace_id.to_string(),
        );
        let stream = launch::launch(prepared, journal, &self.runs, &self.tasks, body);
        Ok(Launched {
            response: Response::new(stream),
            run_id,
            trace_id,
        })
    }

    /// RunAgent up to its stream (audited by the caller).
    async fn start_agent(&self, request: Request<pb::RunAgentRequest>) -> Result<Launched> {
        self.check_running()?;
        let (md, ext, r) = request.into_parts();
        let raw = self.raw_request(&r);
        let run = agent_run(&self.services, r)?;
        let prepared = self.prepare(
            (&md, &ext),
            "RunAgent",
            pb::RunKind::Agent,
            &run.agent,
            run.options,
        );
        let root = CallFrame::root(&prepared.run, &run.agent, run.history, run.input)
            .map_err(|f| Error::Internal(f.message))?;
        let body = agent::run_agent(prepared.run.clone(), root, run.agent);
        self.launch(prepared, raw, body).await
    }

    /// RunPipeline up to its stream (audited by the caller).
    async fn start_pipeline(&self, request: Request<pb::RunPipelineRequest>) -> Result<Launched> {
        self.check_running()?;
        let (md, ext, r) = request.into_parts();
        let raw = self.raw_request(&r);
        let run = pipeline_run(&self.services, r)?;
        let target = run.plan.target().to_owned();
        let prepared = self.prepare(
            (&md, &ext),
            "RunPipeline",
            pb::RunKind::Pipeline,
            &target,
            run.options,
        );
        let body = pipeline::run::run_pipeline(
            prepared.run.clone(),
            run.plan,
            run.initial,
            run.keep_context,
            agent::run_frame_boxed,
        );
        self.launch(prepared, raw, body).await
    }

    /// A run's request, encoded, when runs are durable (another replica
    /// resumes the run from it); nothing otherwise.
    fn raw_request(&self, request: &impl prost::Message) -> Vec<u8> {
        if self.services.durable.is_some() {
            request.encode_to_vec()
        } else {
            Vec::new()
        }
    }

    /// A run's span, a child of the caller's `traceparent` when the request
    /// carries one; the run's trace id is that span's.
    fn run_span(
        &self,
        parent: &Context,
        method: &'static str,
        kind: pb::RunKind,
        target: &str,
    ) -> (Context, TraceId) {
        let span = self.services.tracing.tracer().build_with_context(
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

    fn check_running(&self) -> Result<()> {
        if self.shutdown.is_cancelled() {
            Err(Error::ShuttingDown)
        } else {
            Ok(())
        }
    }
}

/// A run started: its caller's stream and its ids (for the audit log).
struct Launched {
    response: Response<EventStream>,
    run_id: String,
    trace_id: String,
}

/// Records a RunAgent or RunPipeline in the audit log: started (with the
/// run's ids) or refused (with the code).
fn audited_start(
    rpc: &'static str,
    tenant: &str,
    started: Result<Launched>,
) -> std::result::Result<Response<EventStream>, Status> {
    match started {
        Ok(l) => {
            audit::record(rpc, tenant, &l.run_id, &l.trace_id, tonic::Code::Ok);
            Ok(l.response)
        }
        Err(e) => {
            let status = Status::from(e);
            audit::record(rpc, tenant, "", "", status.code());
            Err(status)
        }
    }
}

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
        let tenant = tenant_of(request.extensions()).to_owned();
        let started = self.start_agent(request).await;
        audited_start("RunAgent", &tenant, started)
    }

    type RunPipelineStream = EventStream;

    async fn run_pipeline(
        &self,
        request: Request<pb::RunPipelineRequest>,
    ) -> std::result::Result<Response<Self::RunPipelineStream>, Status> {
        let tenant = tenant_of(request.extensions()).to_owned();
        let started = self.start_pipeline(request).await;
        audited_start("RunPipeline", &tenant, started)
    }

    async fn resolve_approval(
        &self,
        request: Request<pb::ResolveApprovalRequest>,
    ) -> std::result::Result<Response<pb::ResolveApprovalResponse>, Status> {
        let tenant = tenant_of(request.extensions()).to_owned();
        // Only a well-formed id is recorded (the field may be anything).
        let run_id = Some(request.get_ref().run_id.as_str())
            .filter(|id| uuid::Uuid::try_parse(id).is_ok())
            .unwrap_or_default()
            .to_owned();
        let answered = self.resolve_approval_here(request).await;
        audit::record(
            "ResolveApproval",
            &tenant,
            &run_id,
            "",
            audit::code(&answered),
        );
        answered
    }

    async fn submit_input(
        &self,
        request: Request<pb::SubmitInputRequest>,
    ) -> std::result::Result<Response<pb::SubmitInputResponse>, Status> {
        let tenant = tenant_of(request.extensions()).to_owned();
        // Only a well-formed id is recorded (the field may be anything).
        let run_id = Some(request.get_ref().run_id.as_str())
            .filter(|id| uuid::Uuid::try_parse(id).is_ok())
            .unwrap_or_default()
            .to_owned();
        let answered = self.submit_input_here(request).await;
        audit::record("SubmitInput", &tenant, &run_id, "", audit::code(&answered));
        answered
    }

    async fn cancel_run(
        &self,
        request: Request<pb::CancelRunRequest>,
    ) -> std::result::Result<Response<pb::CancelRunResponse>, Status> {
        let tenant = tenant_of(request.extensions()).to_owned();
        // Only a well-formed id is recorded (the field may be anything).
        let run_id = Some(request.get_ref().run_id.as_str())
            .filter(|id| uuid::Uuid::try_parse(id).is_ok())
            .unwrap_or_default()
            .to_owned();
        let answered = self.cancel_run_here(request).await;
        audit::record("CancelRun", &tenant, &run_id, "", audit::code(&answered));
        answered
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
        let filter = convert::filter(r.filter.clone(), &self.services.defaults)?;
        if let Some(durable) = self.stored_log(&ext, &r.run_id, r.after_seq).await? {
            let stream = watch::stored(
                durable,
                r.run_id,
                r.after_seq,
                filter,
                &self.runs_stop,
                &self.tasks,
            );
            return Ok(Response::new(stream));
        }
        let located = self
            .locate(&md, &ext, &r.run_id, &r, |mut c, req| async move {
                c.watch_run(req).await
            })
            .await?;
        let run = match located {
            Located::Here(run) => run,
            Located::There(remote) => return Ok(Response::new(self.relay(remote.into_inner()))),
        };
        let stream = watch::stream(
            run,
            r.after_seq,
            filter,
            self.services.defaults.max_watchers_per_run,
            &self.runs_stop,
            &self.tasks,
        )?;
        Ok(Response::new(stream))
    }

    async fn get_run(
        &self,
        request: Request<pb::GetRunRequest>,
    ) -> std::result::Result<Response<pb::GetRunResponse>, Status> {
        let (md, ext, r) = request.into_parts();
        if let Some(stored) = self.stored_run(&ext, &r.run_id).await? {
            return Ok(Response::new(stored.to_response()));
        }
        let located = self
            .locate(&md, &ext, &r.run_id, &r, |mut c, req| async move {
                c.get_run(req).await
            })
            .await?;
        let run = match located {
            Located::Here(run) => run,
            Located::There(answer) => return Ok(answer),
        };
        Ok(Response::new(answer::get_run_response(&run)))
    }

    async fn list_runs(
        &self,
        request: Request<pb::ListRunsRequest>,
    ) -> std::result::Result<Response<pb::ListRunsResponse>, Status> {
        let (status, after, size) = convert::list_runs_page(request.get_ref())?;
        let tenant = tenant_of(request.extensions());
        if let Some(page) = self
            .stored_runs(tenant, status, after.as_deref(), size)
            .await?
        {
            return Ok(Response::new(page));
        }
        let (runs, more) = self.runs.list(tenant, status, after.as_deref(), size);
        Ok(Response::new(answer::runs_page(&runs, more)))
    }

    async fn list_agents(
        &self,
        _: Request<pb::ListAgentsRequest>,
    ) -> std::result::Result<Response<pb::ListAgentsResponse>, Status> {
        Ok(Response::new(answer::list_agents_response(
            &self.services.catalog,
        )))
    }
}
