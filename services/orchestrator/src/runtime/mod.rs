//! Running agents.
//!
//! What a run shares is one immutable, `Arc`-shared [`RuntimeConfig`]: the
//! catalog and models, limits, the event sink, usage totals, the store, the
//! approval mode and the run record. What a branch owns is a [`CallFrame`]:
//! its context, active agent, model, messages and child counters. An agent
//! called as a tool runs in a child frame with fresh messages (only the root
//! frame sees the request's history), so concurrent branches share no
//! mutable frame state and siblings never affect each other's depth.
//!
//! A whole run is one future: the calls of a model turn run concurrently
//! inside it (`join_all`), nested agents are awaited inside their caller.
//! Cancelling the run drops that future, which drops every nested agent and
//! tool call at once; nothing of a run can outlive it.

pub mod context;
pub mod events;
pub mod log;
pub mod policy;
pub mod registry;

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant, SystemTime},
};

use baton_common::ids::TraceId;
use baton_context_store::store::ContextStore;
use baton_proto::v1::{self as pb, run_event::Payload};
use futures::future::join_all;
use opentelemetry::{
    Context, KeyValue,
    context::FutureExt as _,
    trace::{Span as _, SpanBuilder, SpanKind, Status, TraceContextExt, Tracer},
};
use opentelemetry_sdk::trace::SdkTracer;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tonic::Code;
use tracing::Instrument as _;

use crate::{
    catalog::{Agent, ApprovalPolicy, Catalog},
    metrics::Metrics,
    model::{
        ChatMessage, DeltaSink, Model, ModelRequest, ModelTurn, Models, Role, ToolCallRequest,
        ToolDef,
    },
    pipeline::{self, PipelineFile, PipelineLimits},
    tools::{Resume, Tool, ToolCtx, ToolOutcome, Toolbox},
};
use events::{ContextInfo, Draft};
use registry::{LiveGuard, RunRecord};

/// The limits of one run, after request values and server defaults merged.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Deepest context (root is 0).
    pub max_depth: u32,
    /// Most model turns per context.
    pub max_turns: u32,
    /// Deadline of the whole run.
    pub run_timeout: Duration,
    /// Deadline of one tool call attempt (waits for people excluded).
    pub tool_timeout: Duration,
    /// Deadline of one model call.
    pub model_timeout: Duration,
    /// How long approvals and input requests wait for a person.
    pub approval_timeout: Duration,
}

#[derive(Default)]
struct UsageCounters {
    input_tokens: AtomicU64,
    output_tokens: AtomicU64,
    model_calls: AtomicU64,
    tool_calls: AtomicU64,
}

/// What every branch of a run shares. Immutable but for the run context and
/// the counters, which are synchronised.
pub struct RuntimeConfig {
    /// The run's record (status, cancellation, pending questions).
    pub record: Arc<RunRecord>,
    /// The run's trace.
    pub trace_id: TraceId,
    /// Agents, groups, scripts.
    pub catalog: Arc<Catalog>,
    /// Model resolution.
    pub models: Arc<Models>,
    /// Built-in and remote tools by name.
    pub tools: Arc<Toolbox>,
    /// The context store of the trace's slots.
    pub store: Arc<dyn ContextStore>,
    /// Limits.
    pub limits: Limits,
    /// Limits on pipelines agents start with `run_pipeline`.
    pub pipeline_limits: PipelineLimits,
    /// How approvals are answered.
    pub approval_mode: pb::ApprovalMode,
    /// The model of agents that name none: the request's, else the server's.
    pub default_model: String,
    /// The run-scoped context (a JSON object), persisting across handoffs.
    pub run_context: Mutex<Map<String, Value>>,
    /// Makes the run's spans.
    pub tracer: SdkTracer,
    /// The run's span: the parent of its root context.
    pub run_span: Context,
    /// The service's metrics.
    pub metrics: Arc<Metrics>,
    /// Pipeline outputs being written behind (tools that may read the store
    /// wait for them).
    pub pending_writes: PendingWrites,
    events: mpsc::Sender<Draft>,
    usage: UsageCounters,
}

/// Store writes of a run that are in flight: a pipeline writes each step's
/// output behind (its dependents get it from memory), and whatever may read
/// the store waits until none is pending, so reads inside the run always
/// see earlier steps' outputs.
#[derive(Default)]
pub struct PendingWrites {
    count: AtomicU64,
    idle: tokio::sync::Notify,
}

impl PendingWrites {
    /// A write started.
    pub fn begin(&self) {
        self.count.fetch_add(1, Ordering::SeqCst);
    }

    /// A write ended (either way).
    pub fn end(&self) {
        if self.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.idle.notify_waiters();
        }
    }

    /// Returns once no write is pending.
    pub async fn settled(&self) {
        loop {
            let idle = self.idle.notified();
            if self.count.load(Ordering::SeqCst) == 0 {
                return;
            }
            idle.await;
        }
    }
}

/// What a `final` tool-output policy ends: a whole RunAgent, or one attempt
/// of a pipeline step. Agents called as tools share their caller's scope (a
/// final output deep down ends the whole RunAgent, or the whole step); a
/// step's attempt, and each step of a pipeline an agent starts, gets its own.
#[derive(Default)]
pub struct FinalScope {
    ended: tokio_util::sync::CancellationToken,
    output: Mutex<Option<String>>,
}

impl FinalScope {
    /// Ends the scope with `output` (the first final output wins).
    fn end_with(&self, output: String) {
        self.output
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(output);
        self.ended.cancel();
    }

    /// Whether a final output ended the scope.
    pub fn is_ended(&self) -> bool {
        self.ended.is_cancelled()
    }

    /// Resolves once a final output ended the scope.
    pub async fn ended(&self) {
        self.ended.cancelled().await;
    }

    /// The final output, once the scope ended.
    pub fn output(&self) -> Option<String> {
        self.output
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// Everything a [`RuntimeConfig`] is built from.
pub struct RunSetup {
    /// The run's record.
    pub record: Arc<RunRecord>,
    /// Agents, groups, scripts.
    pub catalog: Arc<Catalog>,
    /// Model resolution.
    pub models: Arc<Models>,
    /// Built-in and remote tools.
    pub tools: Arc<Toolbox>,
    /// The store.
    pub store: Arc<dyn ContextStore>,
    /// Limits.
    pub limits: Limits,
    /// Limits on pipelines agents start.
    pub pipeline_limits: PipelineLimits,
    /// Approval mode.
    pub approval_mode: pb::ApprovalMode,
    /// Default model.
    pub default_model: String,
    /// Initial run context.
    pub run_context: Map<String, Value>,
    /// Makes the run's spans.
    pub tracer: SdkTracer,
    /// The run's span.
    pub run_span: Context,
    /// The service's metrics.
    pub metrics: Arc<Metrics>,
}

impl RuntimeConfig {
    /// Builds the shared config of a run whose events go to `events`.
    pub fn new(setup: RunSetup, events: mpsc::Sender<Draft>) -> Arc<Self> {
        Arc::new(Self {
            trace_id: setup.record.trace_id.clone(),
            record: setup.record,
            catalog: setup.catalog,
            models: setup.models,
            tools: setup.tools,
            store: setup.store,
            limits: setup.limits,
            pipeline_limits: setup.pipeline_limits,
            approval_mode: setup.approval_mode,
            default_model: setup.default_model,
            run_context: Mutex::new(setup.run_context),
            tracer: setup.tracer,
            run_span: setup.run_span,
            metrics: setup.metrics,
            pending_writes: PendingWrites::default(),
            events,
            usage: UsageCounters::default(),
        })
    }

    /// Sends an event of `agent` in `ctx` (waits while the client is slow).
    pub async fn emit(&self, ctx: &Arc<ContextInfo>, agent: &Arc<str>, payload: Payload) {
        // The sequencer outlives every sender; a failed send means the run is
        // being torn down, when events no longer matter.
        let _ = self
            .events
            .send(Draft {
                ctx: ctx.clone(),
                agent: agent.clone(),
                payload,
            })
            .await;
    }

    /// Usage totals so far.
    pub fn usage(&self) -> pb::Usage {
        pb::Usage {
            input_tokens: self.usage.input_tokens.load(Ordering::Relaxed),
            output_tokens: self.usage.output_tokens.load(Ordering::Relaxed),
            model_calls: self.usage.model_calls.load(Ordering::Relaxed),
            tool_calls: self.usage.tool_calls.load(Ordering::Relaxed),
        }
    }

    /// The run context as JSON text.
    pub fn run_context_json(&self) -> String {
        Value::Object(
            self.run_context
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        )
        .to_string()
    }

    fn model_for(&self, agent: &Agent) -> Result<Arc<dyn Model>, String> {
        model_of(&self.models, &self.default_model, agent)
    }

    /// The root context of the run: a span named `name` under the run's.
    pub fn root_context(&self, name: String) -> Arc<ContextInfo> {
        ContextInfo::root(&self.tracer, &self.run_span, name)
    }

    /// A tracing span for log lines inside `ctx`: they carry the run id,
    /// trace id and the context's span id.
    pub fn log_span(&self, ctx: &ContextInfo) -> tracing::Span {
        tracing::info_span!(
            "context",
            run_id = %self.record.run_id,
            trace_id = %self.trace_id,
            span_id = %ctx.span_id,
            context = %ctx.id,
        )
    }
}

/// Checks that `target` (an agent or group) exists and has a model, without
/// starting anything: a request naming one that does not is a bad request.
pub fn check_target(
    catalog: &Catalog,
    models: &Models,
    default_model: &str,
    target: &str,
) -> Result<(), String> {
    let agent = catalog
        .entry(target)
        .ok_or_else(|| format!("unknown agent {target:?}"))?;
    model_of(models, default_model, &agent).map(|_| ())
}

fn model_of(models: &Models, default_model: &str, agent: &Agent) -> Result<Arc<dyn Model>, String> {
    let reference = if agent.spec.model.is_empty() {
        default_model
    } else {
        &agent.spec.model
    };
    if reference.is_empty() {
        return Err(format!(
            "agent {} has no model, and neither the request nor the server names a default",
            agent.name
        ));
    }
    models.resolve(reference)
}

/// Why an agent's context failed.
#[derive(Debug, Clone)]
pub struct AgentFailure {
    /// The gRPC code a root failure is reported with.
    pub code: Code,
    /// What went wrong.
    pub message: String,
}

/// One branch of a run: a context and the agent active in it.
pub struct CallFrame {
    ctx: Arc<ContextInfo>,
    agent: Arc<Agent>,
    agent_name: Arc<str>,
    model: Arc<dyn Model>,
    messages: Vec<ChatMessage>,
    input: String,
    /// When the frame runs an agent group: the agents it may hand off to.
    group_members: Option<Vec<String>>,
    /// Calls of each agent made from this context, for child ids.
    children: HashMap<String, u32>,
    /// The active agent's turns in this context (resets on handoff).
    agent_turns: usize,
    /// Every turn in this context.
    turns: u32,
    /// What this context consumed, its children included.
    usage: pb::Usage,
    /// The per-agent context; a new one when control changes agent.
    agent_context: Arc<Mutex<Map<String, Value>>>,
    /// What a final tool output in this frame (or below) ends.
    scope: Arc<FinalScope>,
}

impl CallFrame {
    /// The root frame of a RunAgent: the target agent (or group root), the
    /// request's history, then the input.
    pub fn root(
        rt: &RuntimeConfig,
        target: &str,
        history: Vec<ChatMessage>,
        input: String,
    ) -> Result<Self, AgentFailure> {
        let ctx = rt.root_context(format!("agent {target}"));
        Self::new(rt, ctx, target, history, input, Arc::default())
    }

    /// What a final tool output in this frame ends.
    pub fn scope(&self) -> &Arc<FinalScope> {
        &self.scope
    }

    /// A frame running `target` (an agent or group) in `ctx` on `input`; a
    /// final tool output in it ends `scope`.
    pub(crate) fn new(
        rt: &RuntimeConfig,
        ctx: Arc<ContextInfo>,
        target: &str,
        history: Vec<ChatMessage>,
        input: String,
        scope: Arc<FinalScope>,
    ) -> Result<Self, AgentFailure> {
        let agent = rt.catalog.entry(target).ok_or_else(|| AgentFailure {
            code: Code::InvalidArgument,
            message: format!("unknown agent {target:?}"),
        })?;
        let model = rt.model_for(&agent).map_err(|message| AgentFailure {
            code: Code::InvalidArgument,
            message,
        })?;
        let mut messages = Vec::with_capacity(history.len() + 2);
        messages.push(ChatMessage::new(
            Role::System,
            agent.spec.instructions.clone(),
        ));
        messages.extend(history);
        if !input.is_empty() {
            messages.push(ChatMessage::new(Role::User, input.clone()));
        }
        Ok(Self {
            ctx,
            agent_name: Arc::from(agent.name.as_str()),
            agent,
            model,
            messages,
            input,
            group_members: rt.catalog.groups.get(target).map(|g| g.members.clone()),
            children: HashMap::new(),
            agent_turns: 0,
            turns: 0,
            usage: pb::Usage::default(),
            agent_context: Arc::default(),
            scope,
        })
    }

    /// The agents this frame's agent may hand off to.
    fn handoffs(&self) -> impl Iterator<Item = &String> {
        self.agent
            .spec
            .handoffs
            .iter()
            .filter(|h| self.group_members.as_ref().is_none_or(|m| m.contains(h)))
    }

    fn tool_defs(&self, catalog: &Catalog, toolbox: &Toolbox) -> Vec<ToolDef> {
        let mut defs = Vec::new();
        for t in &self.agent.spec.tools {
            if t == pipeline::TOOL_NAME {
                defs.push(ToolDef {
                    name: t.clone(),
                    description: "Run a pipeline of agent steps (sequential, parallel or a DAG) \
                                  sharing this request's context; returns each step's output."
                        .into(),
                    parameters: PipelineFile::json_schema(),
                });
            } else if let Some(tool) = toolbox.get(t) {
                let (description, parameters) = tool.describe();
                defs.push(ToolDef {
                    name: t.clone(),
                    description,
                    parameters,
                });
            } else {
                let description = match catalog.agents.get(t) {
                    Some(a) => a.spec.description.clone(),
                    None => catalog
                        .groups
                        .get(t)
                        .map(|g| g.description.clone())
                        .unwrap_or_default(),
                };
                defs.push(ToolDef {
                    name: t.clone(),
                    description,
                    parameters: json!({"type": "object", "properties": {"task": {"type": "string"}}, "required": ["task"]}),
                });
            }
        }
        for h in self.handoffs() {
            defs.push(ToolDef {
                name: format!("transfer_to_{h}"),
                description: format!("Hand the conversation over to {h}."),
                parameters: json!({"type": "object", "properties": {}}),
            });
        }
        defs
    }
}

/// What one call of a turn is, decided before the calls run so that child
/// context ids follow the order of the calls in the model's answer.
enum CallPlan {
    Handoff(String),
    Agent(Arc<ContextInfo>, String),
    Pipeline(Arc<ContextInfo>),
    Tool(Arc<dyn Tool>),
    Refused(String),
}

/// The part of a frame a call reads while the turn's calls run.
struct FrameView {
    ctx: Arc<ContextInfo>,
    agent: Arc<Agent>,
    agent_name: Arc<str>,
    agent_context: Arc<Mutex<Map<String, Value>>>,
    scope: Arc<FinalScope>,
}

struct CallResult {
    output: Result<String, String>,
    handoff: Option<String>,
    child_usage: Option<pb::Usage>,
}

struct FrameSink<'a> {
    rt: &'a RuntimeConfig,
    ctx: &'a Arc<ContextInfo>,
    agent: &'a Arc<str>,
}

#[async_trait::async_trait]
impl DeltaSink for FrameSink<'_> {
    async fn delta(&self, text: String) {
        self.rt
            .emit(
                self.ctx,
                self.agent,
                Payload::TextDelta(pb::TextDelta { text }),
            )
            .await;
    }
}

fn add_usage(into: &mut pb::Usage, other: &pb::Usage) {
    into.input_tokens += other.input_tokens;
    into.output_tokens += other.output_tokens;
    into.model_calls += other.model_calls;
    into.tool_calls += other.tool_calls;
}

fn pb_call(c: &ToolCallRequest) -> pb::ToolCall {
    pb::ToolCall {
        call_id: c.id.clone(),
        tool: c.name.clone(),
        arguments_json: c.arguments.to_string(),
    }
}

fn duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

fn deadline(after: Duration) -> prost_types::Timestamp {
    prost_types::Timestamp::from(SystemTime::now() + after)
}

/// Runs the frame's agent (and whoever it hands off to) until a final
/// answer. Log lines inside carry the run, trace and span ids.
pub async fn run_frame(
    rt: &Arc<RuntimeConfig>,
    frame: CallFrame,
) -> Result<(String, pb::Usage), AgentFailure> {
    let span = rt.log_span(&frame.ctx);
    run_frame_inner(rt, frame).instrument(span).await
}

async fn run_frame_inner(
    rt: &Arc<RuntimeConfig>,
    mut frame: CallFrame,
) -> Result<(String, pb::Usage), AgentFailure> {
    let _live = LiveGuard::new(&rt.record);
    let started = Payload::AgentStarted(pb::AgentStarted {
        agent: frame.agent.name.clone(),
        model: frame.model.reference().to_owned(),
    });
    rt.emit(&frame.ctx, &frame.agent_name, started).await;
    loop {
        if frame.turns >= rt.limits.max_turns {
            return Err(AgentFailure {
                code: Code::ResourceExhausted,
                message: format!(
                    "context {} reached max_turns ({})",
                    frame.ctx.id, rt.limits.max_turns
                ),
            });
        }
        frame.turns += 1;
        let tools = frame.tool_defs(&rt.catalog, &rt.tools);
        let prefix = format!("{}/{}/", frame.ctx.id, frame.turns);
        let sink = FrameSink {
            rt,
            ctx: &frame.ctx,
            agent: &frame.agent_name,
        };
        let request = ModelRequest {
            messages: &frame.messages,
            tools: &tools,
            turn: frame.agent_turns,
            input: &frame.input,
            call_id_prefix: &prefix,
        };
        let mut chat = chat_span(rt, &frame.ctx, frame.model.reference());
        let began = Instant::now();
        let answered =
            tokio::time::timeout(rt.limits.model_timeout, frame.model.turn(request, &sink)).await;
        let seconds = began.elapsed().as_secs_f64();
        let turn = match answered {
            Ok(Ok(t)) => t,
            Ok(Err(e)) => {
                let message = e.to_string();
                rt.metrics
                    .model_call(frame.model.reference(), false, seconds, 0, 0);
                chat.set_status(Status::error(message.clone()));
                chat.end();
                return Err(AgentFailure {
                    code: Code::Unavailable,
                    message,
                });
            }
            Err(_) => {
                let message = format!(
                    "model {} did not answer within {:?}",
                    frame.model.reference(),
                    rt.limits.model_timeout
                );
                rt.metrics
                    .model_call(frame.model.reference(), false, seconds, 0, 0);
                chat.set_status(Status::error(message.clone()));
                chat.end();
                return Err(AgentFailure {
                    code: Code::DeadlineExceeded,
                    message,
                });
            }
        };
        rt.metrics.model_call(
            frame.model.reference(),
            true,
            seconds,
            turn.usage.input_tokens,
            turn.usage.output_tokens,
        );
        tracing::debug!(
            model = frame.model.reference(),
            input_tokens = turn.usage.input_tokens,
            output_tokens = turn.usage.output_tokens,
            calls = turn.calls.len(),
            ms = seconds * 1000.0,
            "model turn"
        );
        end_chat_span(chat, frame.model.reference(), &turn);
        frame.agent_turns += 1;
        let turn_usage = pb::Usage {
            input_tokens: turn.usage.input_tokens,
            output_tokens: turn.usage.output_tokens,
            model_calls: 1,
            tool_calls: turn.calls.len() as u64,
        };
        rt.usage
            .input_tokens
            .fetch_add(turn_usage.input_tokens, Ordering::Relaxed);
        rt.usage
            .output_tokens
            .fetch_add(turn_usage.output_tokens, Ordering::Relaxed);
        rt.usage.model_calls.fetch_add(1, Ordering::Relaxed);
        rt.usage
            .tool_calls
            .fetch_add(turn_usage.tool_calls, Ordering::Relaxed);
        add_usage(&mut frame.usage, &turn_usage);
        let completed = Payload::MessageCompleted(pb::MessageCompleted {
            text: turn.text.clone(),
            tool_calls: turn.calls.iter().map(pb_call).collect(),
            usage: Some(turn_usage),
            finish_reason: turn.finish_reason.clone(),
        });
        rt.emit(&frame.ctx, &frame.agent_name, completed).await;

        if turn.calls.is_empty() {
            let done = Payload::AgentCompleted(pb::AgentCompleted {
                output: turn.text.clone(),
                usage: Some(frame.usage),
            });
            rt.emit(&frame.ctx, &frame.agent_name, done).await;
            return Ok((turn.text, frame.usage));
        }

        let plans: Vec<CallPlan> = turn.calls.iter().map(|c| plan(rt, &mut frame, c)).collect();
        let view = FrameView {
            ctx: frame.ctx.clone(),
            agent: frame.agent.clone(),
            agent_name: frame.agent_name.clone(),
            agent_context: frame.agent_context.clone(),
            scope: frame.scope.clone(),
        };
        let results = join_all(
            turn.calls
                .iter()
                .zip(plans)
                .map(|(call, plan)| execute(rt, &view, call, plan)),
        )
        .await;
        let failed = results.iter().filter(|r| r.output.is_err()).count() as u32;
        let batch = Payload::ToolBatchCompleted(pb::ToolBatchCompleted {
            calls: results.len() as u32,
            failed,
        });
        rt.emit(&frame.ctx, &frame.agent_name, batch).await;

        let mut assistant = ChatMessage::new(Role::Assistant, turn.text);
        assistant.tool_calls = turn.calls.clone();
        frame.messages.push(assistant);
        let mut handoff = None;
        for (call, r) in turn.calls.iter().zip(results) {
            if let Some(u) = &r.child_usage {
                add_usage(&mut frame.usage, u);
            }
            let content = match r.output {
                Ok(s) => s,
                Err(e) => format!("error: {e}"),
            };
            let mut msg = ChatMessage::new(Role::Tool, content);
            msg.tool_call_id = Some(call.id.clone());
            frame.messages.push(msg);
            handoff = handoff.or(r.handoff);
        }
        if frame.scope.is_ended() {
            // A Final policy ended the scope: no further turns, here or above.
            return Err(AgentFailure {
                code: Code::Ok,
                message: "ended by a final tool output".into(),
            });
        }
        if let Some(to) = handoff {
            switch_agent(rt, &mut frame, &to).await?;
        }
    }
}

/// The `chat <model>` span of one model call, with the GenAI semantic
/// conventions' request attributes.
fn chat_span(
    rt: &RuntimeConfig,
    ctx: &ContextInfo,
    reference: &str,
) -> opentelemetry_sdk::trace::Span {
    let (provider, model) = reference.split_once(':').unwrap_or(("", reference));
    rt.tracer.build_with_context(
        SpanBuilder::from_name(format!("chat {model}"))
            .with_kind(SpanKind::Client)
            .with_attributes([
                KeyValue::new("gen_ai.operation.name", "chat"),
                KeyValue::new("gen_ai.provider.name", provider.to_owned()),
                KeyValue::new("gen_ai.system", provider.to_owned()),
                KeyValue::new("gen_ai.request.model", model.to_owned()),
            ]),
        &ctx.otel,
    )
}

/// Ends a chat span with the response attributes.
fn end_chat_span(mut span: opentelemetry_sdk::trace::Span, reference: &str, turn: &ModelTurn) {
    let requested = reference.split_once(':').map_or(reference, |(_, m)| m);
    let model = if turn.model.is_empty() {
        requested.to_owned()
    } else {
        turn.model.clone()
    };
    span.set_attributes([
        KeyValue::new("gen_ai.response.model", model),
        KeyValue::new("gen_ai.usage.input_tokens", turn.usage.input_tokens as i64),
        KeyValue::new(
            "gen_ai.usage.output_tokens",
            turn.usage.output_tokens as i64,
        ),
        KeyValue::new(
            "gen_ai.response.finish_reasons",
            opentelemetry::Value::Array(
                vec![opentelemetry::StringValue::from(turn.finish_reason.clone())].into(),
            ),
        ),
    ]);
    span.end();
}

/// Hands the frame over to `to`: same context and messages, new agent, new
/// model, per-agent state reset.
async fn switch_agent(
    rt: &Arc<RuntimeConfig>,
    frame: &mut CallFrame,
    to: &str,
) -> Result<(), AgentFailure> {
    let next = rt
        .catalog
        .agents
        .get(to)
        .cloned()
        .ok_or_else(|| AgentFailure {
            code: Code::Internal,
            message: format!("handoff to unknown agent {to:?}"),
        })?;
    let model = rt.model_for(&next).map_err(|message| AgentFailure {
        code: Code::InvalidArgument,
        message,
    })?;
    let from = std::mem::replace(&mut frame.agent, next);
    frame.agent_name = Arc::from(frame.agent.name.as_str());
    frame.model = model;
    frame.agent_turns = 0;
    frame.agent_context = Arc::default();
    if let Some(system) = frame
        .messages
        .first_mut()
        .filter(|m| m.role == Role::System)
    {
        system.content = frame.agent.spec.instructions.clone();
    }
    let payload = Payload::Handoff(pb::Handoff {
        from_agent: from.name.clone(),
        to_agent: frame.agent.name.clone(),
    });
    rt.emit(&frame.ctx, &frame.agent_name, payload).await;
    let started = Payload::AgentStarted(pb::AgentStarted {
        agent: frame.agent.name.clone(),
        model: frame.model.reference().to_owned(),
    });
    rt.emit(&frame.ctx, &frame.agent_name, started).await;
    Ok(())
}

fn plan(rt: &RuntimeConfig, frame: &mut CallFrame, call: &ToolCallRequest) -> CallPlan {
    let name = call.name.as_str();
    if let Some(target) = name.strip_prefix("transfer_to_") {
        return if frame.handoffs().any(|h| h == target) {
            CallPlan::Handoff(target.to_owned())
        } else {
            CallPlan::Refused(format!(
                "{} cannot hand off to {target:?}",
                frame.agent.name
            ))
        };
    }
    if !frame.agent.spec.tools.iter().any(|t| t == name) {
        return CallPlan::Refused(format!("{} has no tool {name:?}", frame.agent.name));
    }
    if name == pipeline::TOOL_NAME {
        // The pipeline gets a child context; its steps run one level below.
        let n = frame.children.entry(name.to_owned()).or_insert(0);
        *n += 1;
        let segment = format!("{name}.{n}");
        let steps_depth = frame.ctx.depth + 2;
        if steps_depth > rt.limits.max_depth {
            return CallPlan::Refused(format!(
                "cannot run a pipeline in context {}.{segment}: its steps would be at depth {steps_depth}, over max_depth {}",
                frame.ctx.id, rt.limits.max_depth
            ));
        }
        return CallPlan::Pipeline(frame.ctx.child(&rt.tracer, &segment, "pipeline".into()));
    }
    if let Some(tool) = rt.tools.get(name) {
        return CallPlan::Tool(tool.clone());
    }
    if rt.catalog.is_callable(name) {
        let n = frame.children.entry(name.to_owned()).or_insert(0);
        *n += 1;
        let segment = format!("{name}.{n}");
        let depth = frame.ctx.depth + 1;
        if depth > rt.limits.max_depth {
            return CallPlan::Refused(format!(
                "cannot call agent {name}: context {}.{segment} would be at depth {depth}, over max_depth {}",
                frame.ctx.id, rt.limits.max_depth
            ));
        }
        let child = frame
            .ctx
            .child(&rt.tracer, &segment, format!("agent {name}"));
        return CallPlan::Agent(child, name.to_owned());
    }
    CallPlan::Refused(format!("unknown tool {name:?}"))
}

/// Runs one call of a turn in its `tool <name>` span (the current
/// OpenTelemetry context while it runs, so store and ToolHost calls are its
/// children).
async fn execute(
    rt: &Arc<RuntimeConfig>,
    view: &FrameView,
    call: &ToolCallRequest,
    plan: CallPlan,
) -> CallResult {
    let span = rt.tracer.build_with_context(
        SpanBuilder::from_name(format!("tool {}", call.name)).with_attributes([
            KeyValue::new("gen_ai.operation.name", "execute_tool"),
            KeyValue::new("gen_ai.tool.name", call.name.clone()),
            KeyValue::new("gen_ai.tool.call.id", call.id.clone()),
        ]),
        &view.ctx.otel,
    );
    let cx = view.ctx.otel.with_span(span);
    let began = Instant::now();
    let result = execute_call(rt, view, call, plan)
        .with_context(cx.clone())
        .await;
    let seconds = began.elapsed().as_secs_f64();
    rt.metrics
        .tool_call(&call.name, result.output.is_ok(), seconds);
    tracing::debug!(
        tool = %call.name,
        call_id = %call.id,
        ok = result.output.is_ok(),
        ms = seconds * 1000.0,
        "tool call finished"
    );
    if let Err(e) = &result.output {
        cx.span().set_status(Status::error(e.clone()));
    }
    cx.span().end();
    result
}

async fn execute_call(
    rt: &Arc<RuntimeConfig>,
    view: &FrameView,
    call: &ToolCallRequest,
    plan: CallPlan,
) -> CallResult {
    let _live = LiveGuard::new(&rt.record);
    let started = Instant::now();
    let begin = Payload::ToolCallStarted(pb::ToolCallStarted {
        call_id: call.id.clone(),
        tool: call.name.clone(),
        arguments_json: call.arguments.to_string(),
    });
    rt.emit(&view.ctx, &view.agent_name, begin).await;

    let mut result = CallResult {
        output: Ok(String::new()),
        handoff: None,
        child_usage: None,
    };
    result.output = match approve(rt, view, call).await {
        Err(denied) => Err(denied),
        Ok(()) => match plan {
            CallPlan::Refused(why) => Err(why),
            CallPlan::Handoff(to) => {
                result.handoff = Some(to.clone());
                Ok(format!("transferred to {to}"))
            }
            CallPlan::Tool(tool) => {
                // Any tool may read the store (remote ones through the
                // store service): let written-behind outputs land first.
                rt.pending_writes.settled().await;
                run_tool(rt, view, call, tool.as_ref()).await
            }
            CallPlan::Pipeline(child_ctx) => {
                pipeline::run_as_tool(rt, &child_ctx, &call.arguments).await
            }
            CallPlan::Agent(child_ctx, target) => {
                let _end = child_ctx.end_on_drop();
                let task = match call.arguments.get("task").and_then(Value::as_str) {
                    Some(t) => t.to_owned(),
                    None => call.arguments.to_string(),
                };
                let scope = view.scope.clone();
                match CallFrame::new(rt, child_ctx.clone(), &target, Vec::new(), task, scope) {
                    Err(f) => Err(f.message),
                    Ok(child) => match Box::pin(run_frame(rt, child)).await {
                        Ok((output, usage)) => {
                            result.child_usage = Some(usage);
                            Ok(output)
                        }
                        Err(f) => {
                            child_ctx.set_error(f.message.clone());
                            Err(format!("agent {target} failed: {}", f.message))
                        }
                    },
                }
            }
        },
    };
    // Tool-output policies: run-scoped first, then the agent's.
    let mut policies = Vec::new();
    let (mut text, is_error) = match &result.output {
        Ok(s) => (s.clone(), false),
        Err(e) => (e.clone(), true),
    };
    let mut ends_run = {
        let mut run_context = rt.run_context.lock().unwrap_or_else(|p| p.into_inner());
        policy::apply_all(
            &rt.catalog.run_policies,
            "run",
            &call.name,
            &mut text,
            &mut run_context,
            &mut policies,
        )
    };
    if !ends_run {
        let mut agent_context = view.agent_context.lock().unwrap_or_else(|p| p.into_inner());
        ends_run = policy::apply_all(
            &view.agent.policies,
            "agent",
            &call.name,
            &mut text,
            &mut agent_context,
            &mut policies,
        );
    }
    result.output = if is_error { Err(text) } else { Ok(text) };
    let (output, error) = match &result.output {
        Ok(s) => (s.clone(), String::new()),
        Err(e) => (String::new(), e.clone()),
    };
    let final_text = ends_run.then(|| {
        if is_error {
            error.clone()
        } else {
            output.clone()
        }
    });
    let done = Payload::ToolCallCompleted(pb::ToolCallCompleted {
        call_id: call.id.clone(),
        tool: call.name.clone(),
        result: output,
        error,
        duration: Some(duration(started.elapsed())),
        policies,
    });
    rt.emit(&view.ctx, &view.agent_name, done).await;
    if let Some(text) = final_text {
        // The first Final wins; the scope ends with its output.
        view.scope.end_with(text);
    }
    result
}

/// Runs a tool until it ends, asking a person whenever it needs input.
async fn run_tool(
    rt: &Arc<RuntimeConfig>,
    view: &FrameView,
    call: &ToolCallRequest,
    tool: &dyn Tool,
) -> Result<String, String> {
    let ctx = ToolCtx {
        rt,
        ctx: &view.ctx,
        agent: &view.agent_name,
        call_id: &call.id,
        tool: &call.name,
    };
    let mut resume = None;
    let mut asked = 0u32;
    loop {
        let outcome = tokio::time::timeout(
            rt.limits.tool_timeout,
            tool.call(&ctx, &call.arguments, resume.take()),
        )
        .await
        .map_err(|_| {
            format!(
                "tool {} timed out after {:?}",
                call.name, rt.limits.tool_timeout
            )
        })?;
        match outcome {
            ToolOutcome::Ok(s) => return Ok(s),
            ToolOutcome::Err(e) => return Err(e),
            ToolOutcome::NeedInput {
                prompt,
                options,
                resume_token,
            } => {
                asked += 1;
                let input_id = format!("input:{}:{asked}", call.id);
                let rx = rt.record.await_input(&input_id);
                let requested = Payload::InputRequested(pb::InputRequested {
                    input_id: input_id.clone(),
                    call_id: call.id.clone(),
                    tool: call.name.clone(),
                    prompt,
                    options,
                    deadline: Some(deadline(rt.limits.approval_timeout)),
                });
                rt.emit(&view.ctx, &view.agent_name, requested).await;
                let mut wait = wait_span(rt, "wait input", "baton.input.id", &input_id);
                let answered = tokio::time::timeout(rt.limits.approval_timeout, rx).await;
                wait.set_attribute(KeyValue::new(
                    "baton.wait.answered",
                    matches!(answered, Ok(Ok(_))),
                ));
                wait.end();
                match answered {
                    Ok(Ok(input)) => {
                        let received = Payload::InputReceived(pb::InputReceived {
                            input_id,
                            input: input.clone(),
                        });
                        rt.emit(&view.ctx, &view.agent_name, received).await;
                        resume = Some(Resume {
                            token: resume_token,
                            input,
                        });
                    }
                    _ => {
                        rt.record.close_input(&input_id);
                        return Err(format!(
                            "no input arrived within {:?}",
                            rt.limits.approval_timeout
                        ));
                    }
                }
            }
        }
    }
}

/// A span around a wait for a person, under the current tool call's span.
fn wait_span(
    rt: &RuntimeConfig,
    name: &'static str,
    id_key: &'static str,
    id: &str,
) -> opentelemetry_sdk::trace::Span {
    rt.tracer.build_with_context(
        SpanBuilder::from_name(name).with_attributes([KeyValue::new(id_key, id.to_owned())]),
        &Context::current(),
    )
}

/// Asks for approval when the agent's policy for this tool wants it.
async fn approve(
    rt: &Arc<RuntimeConfig>,
    view: &FrameView,
    call: &ToolCallRequest,
) -> Result<(), String> {
    let policy = view
        .agent
        .spec
        .approvals
        .get(&call.name)
        .copied()
        .unwrap_or_default();
    let needed = match policy {
        ApprovalPolicy::Never => false,
        ApprovalPolicy::Always => true,
        ApprovalPolicy::Nested => view.ctx.depth >= 1,
    };
    if !needed {
        return Ok(());
    }
    let approval_id = format!("approval:{}", call.id);
    let resolved = |approved: bool, reason: &str, source: pb::ApprovalSource| {
        Payload::ApprovalResolved(pb::ApprovalResolved {
            approval_id: approval_id.clone(),
            approved,
            reason: reason.to_owned(),
            source: source as i32,
        })
    };
    match rt.approval_mode {
        pb::ApprovalMode::AutoApprove => {
            rt.emit(
                &view.ctx,
                &view.agent_name,
                resolved(true, "auto_approve", pb::ApprovalSource::Mode),
            )
            .await;
            Ok(())
        }
        pb::ApprovalMode::AutoDeny => {
            rt.emit(
                &view.ctx,
                &view.agent_name,
                resolved(false, "auto_deny", pb::ApprovalSource::Mode),
            )
            .await;
            Err(format!(
                "{} was denied by the run's approval mode",
                call.name
            ))
        }
        pb::ApprovalMode::Ask | pb::ApprovalMode::Unspecified => {
            let rx = rt.record.await_approval(&approval_id);
            let requested = Payload::ApprovalRequested(pb::ApprovalRequested {
                approval_id: approval_id.clone(),
                call_id: call.id.clone(),
                tool: call.name.clone(),
                arguments_json: call.arguments.to_string(),
                deadline: Some(deadline(rt.limits.approval_timeout)),
            });
            rt.emit(&view.ctx, &view.agent_name, requested).await;
            let mut wait = wait_span(rt, "wait approval", "baton.approval.id", &approval_id);
            let answered = tokio::time::timeout(rt.limits.approval_timeout, rx).await;
            if let Ok(Ok(answer)) = &answered {
                wait.set_attribute(KeyValue::new("baton.approval.approved", answer.approved));
            }
            wait.set_attribute(KeyValue::new(
                "baton.wait.answered",
                matches!(answered, Ok(Ok(_))),
            ));
            wait.end();
            match answered {
                Ok(Ok(answer)) => {
                    rt.emit(
                        &view.ctx,
                        &view.agent_name,
                        resolved(answer.approved, &answer.reason, pb::ApprovalSource::Person),
                    )
                    .await;
                    if answer.approved {
                        Ok(())
                    } else if answer.reason.is_empty() {
                        Err(format!("{} was denied", call.name))
                    } else {
                        Err(format!("{} was denied: {}", call.name, answer.reason))
                    }
                }
                _ => {
                    rt.record.close_approval(&approval_id);
                    let reason = "no answer before the deadline";
                    rt.emit(
                        &view.ctx,
                        &view.agent_name,
                        resolved(false, reason, pb::ApprovalSource::Deadline),
                    )
                    .await;
                    Err(format!("{} was denied: {reason}", call.name))
                }
            }
        }
    }
}

/// Runs a whole RunAgent: RunStarted, the root frame, then exactly one
/// terminal event (completed, failed, or cancelled when the run's token
/// fires or its deadline passes).
pub async fn run_agent(rt: Arc<RuntimeConfig>, root: CallFrame, target: String) {
    let root_ctx = root.ctx.clone();
    let scope = root.scope.clone();
    let _end = root_ctx.end_on_drop();
    let no_agent: Arc<str> = Arc::from("");
    let started = Payload::RunStarted(pb::RunStarted {
        kind: pb::RunKind::Agent as i32,
        target,
    });
    rt.emit(&root_ctx, &no_agent, started).await;
    let token = rt.record.token().clone();
    let outcome = tokio::select! {
        biased;
        _ = token.cancelled() => None,
        _ = scope.ended() => Some(Ok((String::new(), pb::Usage::default()))),
        r = run_frame(&rt, root) => Some(r),
        _ = tokio::time::sleep(rt.limits.run_timeout) => Some(Err(AgentFailure {
            code: Code::DeadlineExceeded,
            message: format!("the run did not finish within run_timeout ({:?})", rt.limits.run_timeout),
        })),
    };
    // A Final tool output ends the run with that output, whichever branch
    // noticed first.
    let outcome = match scope.output() {
        Some(output) if outcome.is_some() => Some(Ok((output, pb::Usage::default()))),
        _ => outcome,
    };
    let terminal = match outcome {
        Some(Ok((output, _))) => Payload::RunCompleted(pb::RunCompleted {
            output,
            run_context_json: rt.run_context_json(),
            usage: Some(rt.usage()),
        }),
        Some(Err(f)) => {
            root_ctx.set_error(f.message.clone());
            Payload::RunFailed(pb::RunFailed {
                code: f.code as i32,
                message: f.message,
                usage: Some(rt.usage()),
            })
        }
        None => Payload::RunCancelled(pb::RunCancelled {
            reason: rt.record.cancel_reason(),
            usage: Some(rt.usage()),
        }),
    };
    rt.emit(&root_ctx, &no_agent, terminal).await;
}
