//! The `baton.v1.Orchestrator` gRPC service.
//!
//! Requests are validated here, before anything starts: a bad field is
//! `INVALID_ARGUMENT` naming it, and no run, event or store write happens.
//! Domain code below this module sees validated values only.

use std::{future::Future, sync::Arc, time::Duration};

use baton_common::{ids::TraceId, otel::Tracing};
use baton_context_store::store::ContextStore;
use baton_proto::v1::orchestrator_client::OrchestratorClient;
use baton_proto::v1::{self as pb, orchestrator_server::Orchestrator};
use opentelemetry::{
    Context, KeyValue,
    trace::{Span as _, SpanBuilder, SpanKind, Status as SpanStatus, TraceContextExt, Tracer},
};
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tonic::{Request, Response, Status, transport::Channel};

use crate::{
    agents::{Catalog, parse_model_ref, valid_name},
    auth::tenant_of,
    config::RunDefaults,
    error::{Error, Result},
    metrics::Metrics,
    model::{ChatMessage, Models, Role, ToolCallRequest},
    peers::{Answer, Peers},
    pipeline::{self, PipelineLimits, Plan},
    runtime::{
        self, CallFrame, Limits, RunSetup, RuntimeConfig, check_target,
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

    /// Validates the options RunAgent and RunPipeline share.
    fn options(
        &self,
        run_context_json: &str,
        default_model: &str,
        limits: Option<pb::RunLimits>,
        mode: i32,
        events: Option<pb::EventFilter>,
    ) -> Result<RunOptions> {
        let max_context = self.defaults.max_run_context_bytes;
        if run_context_json.len() > max_context {
            return Err(Error::Exhausted {
                field: "run_context_json".into(),
                message: format!(
                    "{} bytes is over this server's limit of {max_context} bytes (runs.max_run_context_bytes)",
                    run_context_json.len()
                ),
            });
        }
        Ok(RunOptions {
            run_context: run_context(run_context_json)?,
            default_model: self.default_model(default_model)?,
            limits: self.limits(limits)?,
            approval_mode: approval_mode(mode)?,
            filter: filter(events, &self.defaults)?,
        })
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

    /// Validates a RunAgent request (nothing starts): every problem is
    /// `INVALID_ARGUMENT` (or `RESOURCE_EXHAUSTED` for a size) naming the
    /// field. Pure: the handler and the fuzz targets call it.
    pub fn validate_agent(&self, r: pb::RunAgentRequest) -> Result<AgentRun> {
        if r.agent.is_empty() {
            return Err(Error::invalid("agent", "must name an agent or group"));
        }
        if !self.catalog.is_callable(&r.agent) {
            return Err(Error::invalid(
                "agent",
                format!("unknown agent or group {:?}", r.agent),
            ));
        }
        if r.input.is_empty() && r.history.is_empty() {
            return Err(Error::invalid(
                "input",
                "must not be empty when there is no history",
            ));
        }
        let history = history(r.history)?;
        let options = self.options(
            &r.run_context_json,
            &r.default_model,
            r.limits,
            r.approval_mode,
            r.filter,
        )?;
        // An agent without any model is a bad request, not a failed run.
        check_target(
            &self.catalog,
            &self.models,
            &options.default_model,
            &r.agent,
        )
        .map_err(|e| Error::invalid("default_model", e))?;
        Ok(AgentRun {
            agent: r.agent,
            history,
            input: r.input,
            options,
        })
    }

    /// Validates a RunPipeline request (nothing starts), as
    /// [`Self::validate_agent`] does.
    pub fn validate_pipeline(&self, r: pb::RunPipelineRequest) -> Result<PipelineRun> {
        let key_max = self.store.limits().max_key_len;
        let mut initial: Vec<(String, String)> = r.initial_slots.into_iter().collect();
        initial.sort();
        for (k, v) in &initial {
            baton_context_store::store::Key::parse("initial_slots", k, key_max).map_err(|e| {
                Error::invalid(
                    "initial_slots",
                    e.to_string()
                        .trim_start_matches("initial_slots: ")
                        .to_owned(),
                )
            })?;
            if v.len() as u64 > self.store.limits().max_value_bytes {
                return Err(Error::invalid(
                    "initial_slots",
                    format!(
                        "the value of {k:?} is over the store's limit of {} bytes",
                        self.store.limits().max_value_bytes
                    ),
                ));
            }
        }
        let seeded = initial.iter().map(|(k, _)| k.clone()).collect();
        let plan = Plan::validate(
            r.pipeline,
            &seeded,
            &self.catalog,
            &self.pipeline_limits(),
            key_max,
        )?;
        let options = self.options(
            &r.run_context_json,
            &r.default_model,
            r.limits,
            r.approval_mode,
            r.filter,
        )?;
        // Every step's agent must have a model, checked before anything runs.
        for (i, step) in plan.steps.iter().enumerate() {
            check_target(
                &self.catalog,
                &self.models,
                &options.default_model,
                &step.agent,
            )
            .map_err(|e| Error::invalid(format!("pipeline.steps[{i}].agent"), e))?;
        }
        Ok(PipelineRun {
            plan,
            initial,
            keep_context: r.keep_context,
            options,
        })
    }

    fn pipeline_limits(&self) -> PipelineLimits {
        let d = &self.defaults;
        PipelineLimits {
            max_steps: d.max_pipeline_steps,
            default_concurrency: d.pipeline_concurrency,
            max_concurrency: d.max_pipeline_concurrency,
            max_retries: d.max_step_retries,
            max_step_timeout: d.max_timeout,
        }
    }

    fn check_running(&self) -> Result<()> {
        if self.shutdown.is_cancelled() {
            Err(Error::ShuttingDown)
        } else {
            Ok(())
        }
    }

    fn limits(&self, l: Option<pb::RunLimits>) -> Result<Limits> {
        let d = &self.defaults;
        let l = l.unwrap_or_default();
        let max_depth = match l.max_depth {
            None => d.max_depth,
            Some(v) if v > d.max_depth_limit => {
                return Err(Error::invalid(
                    "limits.max_depth",
                    format!("{v} is over this server's maximum of {}", d.max_depth_limit),
                ));
            }
            Some(v) => v,
        };
        let max_turns = match l.max_turns {
            0 => d.max_turns,
            v if v > d.max_turns_limit => {
                return Err(Error::invalid(
                    "limits.max_turns",
                    format!("{v} is over this server's maximum of {}", d.max_turns_limit),
                ));
            }
            v => v,
        };
        let timeout = |field: &'static str,
                       v: Option<prost_types::Duration>,
                       default: Duration|
         -> Result<Duration> {
            let Some(v) = v else { return Ok(default) };
            if v.seconds < 0 || v.nanos < 0 || v.nanos >= 1_000_000_000 {
                return Err(Error::invalid(field, "must be a positive duration"));
            }
            let t = Duration::new(v.seconds as u64, v.nanos as u32);
            if t.is_zero() {
                return Ok(default);
            }
            if t > d.max_timeout {
                return Err(Error::invalid(
                    field,
                    format!("{t:?} is over this server's maximum of {:?}", d.max_timeout),
                ));
            }
            Ok(t)
        };
        Ok(Limits {
            max_depth,
            max_turns,
            run_timeout: timeout("limits.run_timeout", l.run_timeout, d.run_timeout)?,
            tool_timeout: timeout("limits.tool_timeout", l.tool_timeout, d.tool_timeout)?,
            model_timeout: timeout("limits.model_timeout", l.model_timeout, d.model_timeout)?,
            approval_timeout: timeout(
                "limits.approval_timeout",
                l.approval_timeout,
                d.approval_timeout,
            )?,
        })
    }

    fn default_model(&self, requested: &str) -> Result<String> {
        if requested.is_empty() {
            return Ok(self.catalog.default_model.clone());
        }
        parse_model_ref(requested).map_err(|e| Error::invalid("default_model", e))?;
        self.models
            .resolve(requested)
            .map_err(|e| Error::invalid("default_model", e))?;
        Ok(requested.to_owned())
    }
}

/// Events a watcher takes from its run's log at a time: watchers share the
/// log and hold at most this many (plus the stream's buffer) each.
const WATCH_BATCH: usize = 128;

/// One open WatchRun stream of a run, counted until dropped.
struct Watching(Arc<RunRecord>);

impl Watching {
    /// Counts a watcher of `run` unless it has `max` already.
    fn new(run: &Arc<RunRecord>, max: usize) -> Result<Self> {
        let open = run
            .watchers
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if open >= max {
            run.watchers
                .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            return Err(Error::Exhausted {
                field: "run_id".into(),
                message: format!(
                    "run {} already has {open} open WatchRun streams on this replica, the limit (runs.max_watchers_per_run)",
                    run.run_id
                ),
            });
        }
        Ok(Self(run.clone()))
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        self.0
            .watchers
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A validated RunAgent request.
pub struct AgentRun {
    agent: String,
    history: Vec<ChatMessage>,
    input: String,
    options: RunOptions,
}

/// A validated RunPipeline request.
pub struct PipelineRun {
    plan: Plan,
    initial: Vec<(String, String)>,
    keep_context: bool,
    options: RunOptions,
}

/// The options RunAgent and RunPipeline share, validated.
struct RunOptions {
    run_context: Map<String, Value>,
    default_model: String,
    limits: Limits,
    approval_mode: pb::ApprovalMode,
    filter: Filter,
}

/// Parses the request's run context: empty is `{}`, otherwise a JSON object.
fn run_context(s: &str) -> Result<Map<String, Value>> {
    if s.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(s) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(other) => Err(Error::invalid(
            "run_context_json",
            format!(
                "must be a JSON object, got {}",
                match other {
                    Value::Array(_) => "an array",
                    Value::String(_) => "a string",
                    Value::Number(_) => "a number",
                    Value::Bool(_) => "a boolean",
                    _ => "null",
                }
            ),
        )),
        Err(e) => Err(Error::invalid(
            "run_context_json",
            format!("is not valid JSON: {e}"),
        )),
    }
}

/// Whether `s` is a context id: `root` then `.`-separated name segments.
fn valid_context_id(s: &str) -> bool {
    let mut parts = s.split('.');
    parts.next() == Some("root") && parts.all(valid_name)
}

/// Validates an event filter (the request's `filter`).
pub fn filter(f: Option<pb::EventFilter>, limits: &RunDefaults) -> Result<Filter> {
    let Some(f) = f else {
        return Ok(Filter::default());
    };
    for (field, n) in [
        ("filter.context_prefixes", f.context_prefixes.len()),
        ("filter.kinds", f.kinds.len()),
    ] {
        if n > limits.max_filter_entries {
            return Err(Error::Exhausted {
                field: field.into(),
                message: format!(
                    "{n} entries is over this server's limit of {} (runs.max_filter_entries)",
                    limits.max_filter_entries
                ),
            });
        }
    }
    if let Some(p) = f
        .context_prefixes
        .iter()
        .find(|p| p.len() > limits.max_filter_prefix_len)
    {
        return Err(Error::Exhausted {
            field: "filter.context_prefixes".into(),
            message: format!(
                "a prefix of {} characters is over this server's limit of {} (runs.max_filter_prefix_len)",
                p.len(),
                limits.max_filter_prefix_len
            ),
        });
    }
    for p in &f.context_prefixes {
        if !valid_context_id(p) {
            return Err(Error::invalid(
                "filter.context_prefixes",
                format!("{p:?} is not a context id (root, root.agent.1, …)"),
            ));
        }
    }
    let mut kinds = std::collections::HashSet::new();
    for k in &f.kinds {
        match pb::EventKind::try_from(*k) {
            Ok(pb::EventKind::Unspecified) => {}
            Ok(kind) => {
                kinds.insert(kind as i32);
            }
            Err(_) => {
                return Err(Error::invalid(
                    "filter.kinds",
                    format!("{k} is not an EventKind"),
                ));
            }
        }
    }
    Ok(Filter {
        max_depth: f.max_depth,
        prefixes: f.context_prefixes,
        kinds,
    })
}

fn approval_mode(v: i32) -> Result<pb::ApprovalMode> {
    pb::ApprovalMode::try_from(v)
        .map_err(|_| Error::invalid("approval_mode", format!("{v} is not an ApprovalMode")))
}

fn history(messages: Vec<pb::Message>) -> Result<Vec<ChatMessage>> {
    messages
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            let role = match pb::Role::try_from(m.role) {
                Ok(pb::Role::System) => Role::System,
                Ok(pb::Role::User) => Role::User,
                Ok(pb::Role::Assistant) => Role::Assistant,
                Ok(pb::Role::Tool) => Role::Tool,
                _ => {
                    return Err(Error::invalid(
                        "history",
                        format!("message {i} has no valid role"),
                    ));
                }
            };
            let tool_calls = m
                .tool_calls
                .into_iter()
                .map(|c| {
                    let arguments = serde_json::from_str(&c.arguments_json).map_err(|e| {
                        Error::invalid(
                            "history",
                            format!("message {i}: arguments of {} are not JSON: {e}", c.call_id),
                        )
                    })?;
                    Ok(ToolCallRequest {
                        id: c.call_id,
                        name: c.tool,
                        arguments,
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            Ok(ChatMessage {
                role,
                content: m.content,
                tool_calls,
                tool_call_id: (!m.tool_call_id.is_empty()).then_some(m.tool_call_id),
            })
        })
        .collect()
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
        let filter = filter(r.filter.clone(), &self.defaults)?;
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
        let watching = Watching::new(&run, self.defaults.max_watchers_per_run)?;
        let (tx, rx) = mpsc::channel(events::CLIENT_BUFFER);
        let shutdown = self.shutdown.clone();
        self.tasks.spawn(async move {
            let _watching = watching;
            let mut cursor = r.after_seq;
            loop {
                let next = run.next_logged();
                let (batch, ended) = match run.events_after(cursor, WATCH_BATCH) {
                    LogRead::Events(batch, ended) => (batch, ended),
                    LogRead::Expired => return,
                    LogRead::Gone(oldest) => {
                        let status = Status::aborted(format!(
                            "the watcher fell behind: events after {cursor} are gone (oldest kept: {oldest})"
                        ));
                        let _ = tx.send(Err(status)).await;
                        return;
                    }
                };
                let full = batch.len() == WATCH_BATCH;
                for event in batch {
                    cursor = event.seq;
                    let terminal = event.payload.as_ref().is_some_and(events::is_terminal);
                    let passes = event.payload.as_ref().is_some_and(|p| {
                        filter.passes_at(&event.context_id, event.depth, p)
                    });
                    if passes && tx.send(Ok(event)).await.is_err() {
                        return;
                    }
                    if terminal {
                        return;
                    }
                }
                if ended {
                    return;
                }
                if full {
                    continue;
                }
                tokio::select! {
                    _ = next => {}
                    _ = tx.closed() => return,
                    _ = shutdown.cancelled() => {
                        let _ = tx.send(Err(Error::ShuttingDown.into())).await;
                        return;
                    }
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_ids_and_run_contexts() {
        assert!(valid_context_id("root"));
        assert!(valid_context_id("root.researcher.1"));
        assert!(!valid_context_id("root."));
        assert!(!valid_context_id("Root"));
        assert!(!valid_context_id("root.a b"));
        assert!(!valid_context_id(""));
        assert!(run_context("").expect("empty").is_empty());
        assert_eq!(run_context(r#"{"a":1}"#).expect("object").len(), 1);
        assert!(
            run_context("[1]")
                .expect_err("array")
                .to_string()
                .contains("an array")
        );
        assert!(
            run_context("{")
                .expect_err("bad")
                .to_string()
                .starts_with("run_context_json")
        );
    }
}
