//! A branch of a run: the `CallFrame` (context, agent, model, messages,
//! child counters) and the helpers its turns and calls share.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use baton_proto::v1::{self as pb, run_event::Payload};
use futures::future::BoxFuture;
use serde_json::{Map, Value, json};
use tonic::Code;

use crate::run::context::ContextInfo;
use crate::run::failure::Failure;
use crate::run::state::{FinalScope, Run};
use crate::run::target::Resolved;
use crate::{
    catalog::{Agent, Catalog},
    model::{ChatMessage, DeltaSink, Model, Role, ToolCallRequest, ToolDef},
    pipeline::{self, PipelineFile},
    run::shared::Shared,
    tools::{ToolEvents, Toolbox},
};

/// Runs a frame until its final answer (the answer and what the frame
/// consumed): `agent::run_frame_boxed`, handed as a value to a turn's calls
/// (an agent called as a tool), so they need not import the turn loop that
/// calls them. Pipelines get [`crate::pipeline::RunStep`] instead.
pub type RunFrame =
    for<'a> fn(&'a Arc<Run>, CallFrame) -> BoxFuture<'a, Result<(String, pb::Usage), Failure>>;

/// What a call gives the model: its output, or the error the model reads.
/// A failed call is not a failed run — the model sees the error and goes
/// on — so it is text, not a [`Failure`].
// A string is the honest error type here: the model reads text, not a type.
pub type CallOutput = Result<String, String>;

/// One branch of a run: a context and the agent active in it.
pub struct CallFrame {
    pub(super) ctx: Arc<ContextInfo>,
    pub(super) agent: Arc<Agent>,
    pub(super) agent_name: Arc<str>,
    pub(super) model: Arc<dyn Model>,
    pub(super) messages: Vec<ChatMessage>,
    pub(super) input: String,
    /// When the frame runs an agent group: the agents it may hand off to.
    pub(super) group_members: Option<Vec<String>>,
    /// Calls of each agent made from this context, for child ids.
    pub(super) children: HashMap<String, u32>,
    /// The active agent's turns in this context (resets on handoff).
    pub(super) agent_turns: usize,
    /// Every turn in this context.
    pub(super) turns: u32,
    /// What this context consumed, its children included.
    pub(super) usage: pb::Usage,
    /// The per-agent context; a new one when control changes agent.
    pub(super) agent_context: Arc<Mutex<Map<String, Value>>>,
    /// What a final tool output in this frame (or below) ends.
    pub(super) scope: Arc<FinalScope>,
    /// Whether the frame's answer is the request's (the root of a RunAgent,
    /// a step of a RunPipeline): the request's `response_format` applies
    /// to it, and to no delegate.
    pub(super) answers_request: bool,
    /// The generation settings of the active agent's model calls.
    pub(super) settings: crate::catalog::settings::Settings,
    /// Answers sent back for not matching `response_format`.
    pub(super) format_retries: u32,
    /// The hash of `messages` so far (what a model turn was asked is
    /// recorded with it).
    pub(super) conversation: crate::model::asked::Conversation,
    /// The budget node its model calls draw from (see
    /// `model::call::budget`).
    pub(super) budget: usize,
    /// A budget ran out and the agent's `on_exhausted` is `finish`: the
    /// next call is its last, without tools.
    pub(super) finishing: bool,
    /// The root frame of a run in a conversation: what the run adds to it
    /// (from message `.1`, the input, on).
    pub(super) transcript: Option<(Arc<crate::conversation::transcript::Transcript>, usize)>,
}

impl CallFrame {
    /// The root frame of a RunAgent: the target agent (or group root),
    /// resolved when the request was validated, the request's history, then
    /// the input.
    pub fn root(rt: &Run, target: Resolved, history: Vec<ChatMessage>, input: String) -> Self {
        let ctx = rt.root_context(crate::run::context::invoke_agent_span_name(&target.target));
        let mut frame = Self::resolved(rt, ctx, target, history, input, Arc::default());
        frame.answer_request(rt);
        if rt
            .record
            .conversation
            .get()
            .is_some_and(|l| !l.id.is_empty())
        {
            let base = frame.messages.len() - usize::from(!frame.input.is_empty());
            let transcript = crate::conversation::transcript::Transcript::new(
                frame.messages.get(base).cloned(),
                &frame.agent.name,
            );
            frame.transcript = Some((Arc::new(transcript), base));
        }
        frame
    }

    /// Makes the frame's answer the request's: the request's
    /// `response_format` applies to it.
    pub(crate) fn answer_request(&mut self, rt: &Run) {
        self.answers_request = true;
        self.settings = self.settings_for(rt);
    }

    /// The settings of the active agent's model calls: the model's
    /// (provider and model entry), the agent's, the request's.
    pub(super) fn settings_for(&self, rt: &Run) -> crate::catalog::settings::Settings {
        let mut request = rt.settings.clone();
        if !self.answers_request {
            request.response_format = None;
        }
        self.model
            .settings()
            .merged(&self.agent.spec.settings)
            .merged(&request)
    }

    /// What the run adds to its conversation, for the root frame of a run
    /// in one.
    pub fn transcript(&self) -> Option<Arc<crate::conversation::transcript::Transcript>> {
        self.transcript.as_ref().map(|(t, _)| t.clone())
    }

    /// Writes the turns so far to the run's transcript (a root frame in a
    /// conversation).
    pub(super) fn sync_transcript(&self) {
        if let Some((t, base)) = &self.transcript {
            t.sync(&self.messages[*base..], &self.agent.name);
        }
    }

    /// What a final tool output in this frame ends.
    pub fn scope(&self) -> &Arc<FinalScope> {
        &self.scope
    }

    /// A frame running `target` (an agent or group) in `ctx` on `input`; a
    /// final tool output in it ends `scope`.
    pub(crate) fn new(
        rt: &Run,
        ctx: Arc<ContextInfo>,
        target: &str,
        history: Vec<ChatMessage>,
        input: String,
        scope: Arc<FinalScope>,
    ) -> Result<Self, Failure> {
        let resolved = rt.resolve(target).map_err(|e| Failure {
            code: Code::InvalidArgument,
            message: e.to_string(),
        })?;
        Ok(Self::resolved(rt, ctx, resolved, history, input, scope))
    }

    /// A frame running the resolved `target` in `ctx` on `input`.
    fn resolved(
        rt: &Run,
        ctx: Arc<ContextInfo>,
        target: Resolved,
        history: Vec<ChatMessage>,
        input: String,
        scope: Arc<FinalScope>,
    ) -> Self {
        let Resolved {
            agent,
            model,
            group_members,
            ..
        } = target;
        ctx.set_attribute(opentelemetry::KeyValue::new(
            "gen_ai.operation.name",
            "invoke_agent",
        ));
        ctx.set_attribute(opentelemetry::KeyValue::new(
            "gen_ai.agent.name",
            agent.name.clone(),
        ));
        if !agent.spec.description.is_empty() {
            ctx.set_attribute(opentelemetry::KeyValue::new(
                "gen_ai.agent.description",
                agent.spec.description.clone(),
            ));
        }
        let budget = enter_budget(rt, &ctx, &agent);
        let mut messages = Vec::with_capacity(history.len() + 2);
        messages.push(ChatMessage::new(
            Role::System,
            agent.spec.instructions.clone(),
        ));
        messages.extend(history);
        if !input.is_empty() {
            messages.push(ChatMessage::new(Role::User, input.clone()));
        }
        Self {
            ctx,
            agent_name: Arc::from(agent.name.as_str()),
            agent,
            model,
            messages,
            input,
            group_members,
            children: HashMap::new(),
            agent_turns: 0,
            turns: 0,
            usage: pb::Usage::default(),
            agent_context: Arc::default(),
            scope,
            answers_request: false,
            settings: Default::default(),
            format_retries: 0,
            conversation: Default::default(),
            budget,
            finishing: false,
            transcript: None,
        }
        .with_settings(rt)
    }

    /// The agent's and the request's settings, without the model's own
    /// (over a fallback model's).
    pub(super) fn over_settings(&self, rt: &Run) -> crate::catalog::settings::Settings {
        let mut request = rt.settings.clone();
        if !self.answers_request {
            request.response_format = None;
        }
        self.agent.spec.settings.merged(&request)
    }

    fn with_settings(mut self, rt: &Run) -> Self {
        self.settings = self.settings_for(rt);
        self
    }

    /// The part of the frame a turn's calls read while they run.
    pub(super) fn view(&self) -> FrameView {
        FrameView {
            ctx: self.ctx.clone(),
            agent: self.agent.clone(),
            agent_name: self.agent_name.clone(),
            agent_context: self.agent_context.clone(),
            scope: self.scope.clone(),
        }
    }

    /// The agents this frame's agent may hand off to.
    pub(super) fn handoffs(&self) -> impl Iterator<Item = &String> {
        self.agent
            .spec
            .handoffs
            .iter()
            .filter(|h| self.group_members.as_ref().is_none_or(|m| m.contains(h)))
    }

    /// What the model is told about the frame's tools and handoffs, shared
    /// by every frame of the same agent (in the same group).
    pub(super) fn tools(&self, services: &Shared) -> Arc<[ToolDef]> {
        let key = match &self.group_members {
            Some(members) => format!("{}@{}", self.agent.name, members.join(",")),
            None => self.agent.name.clone(),
        };
        services.tool_defs(&key, || self.tool_defs(&services.catalog, &services.tools))
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
                    None => match catalog.groups.get(t) {
                        Some(g) => g.description.clone(),
                        None => catalog
                            .remote_agents
                            .get(t)
                            .map(|r| r.description.clone())
                            .unwrap_or_default(),
                    },
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

/// Agent `agent` takes over context `ctx`: the budget node its calls draw
/// from (a node of its own when it has a budget).
pub(super) fn enter_budget(rt: &Run, ctx: &ContextInfo, agent: &Agent) -> usize {
    use crate::model::call::{budget::Limit, lock};
    let limit = agent
        .spec
        .budget
        .as_ref()
        .map_or(Limit::default(), |b| Limit {
            tokens: b.tokens,
            cost_nanos: b.cost.map(crate::catalog::budget::cost_nanos),
        });
    lock(&rt.budgets).enter(&ctx.id, &ctx.parent, &agent.name, limit)
}

/// The part of a frame a call reads while the turn's calls run.
pub(super) struct FrameView {
    pub(super) ctx: Arc<ContextInfo>,
    pub(super) agent: Arc<Agent>,
    pub(super) agent_name: Arc<str>,
    pub(super) agent_context: Arc<Mutex<Map<String, Value>>>,
    pub(super) scope: Arc<FinalScope>,
}

pub(super) struct CallResult {
    pub(super) output: CallOutput,
    pub(super) handoff: Option<String>,
    pub(super) child_usage: Option<pb::Usage>,
}

impl Default for CallResult {
    /// Nothing returned yet: an empty output, no handoff, no child usage.
    fn default() -> Self {
        Self {
            output: Ok(String::new()),
            handoff: None,
            child_usage: None,
        }
    }
}

pub(super) struct FrameSink<'a> {
    pub(super) rt: &'a Run,
    pub(super) ctx: &'a Arc<ContextInfo>,
    pub(super) agent: &'a Arc<str>,
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

#[async_trait::async_trait]
impl crate::model::call::CallSink for FrameSink<'_> {
    async fn fell_back(
        &self,
        from: &str,
        to: &str,
        why: &crate::model::call::Skipped,
        discarded: bool,
    ) {
        self.rt.services.metrics.fallback(from, to, why.reason);
        let event = Payload::ModelFallback(pb::ModelFallback {
            from_model: from.to_owned(),
            to_model: to.to_owned(),
            reason: why.reason.into(),
            error: why.message.clone(),
            discarded_text: discarded,
        });
        self.rt.emit(self.ctx, self.agent, event).await;
    }

    async fn waiting(&self, provider: &str, model: &str, wait: Duration, ahead: usize) {
        let event = Payload::RateLimitWait(pb::RateLimitWait {
            provider: provider.to_owned(),
            model: model.to_owned(),
            wait: Some(duration(wait)),
            ahead: ahead as u32,
        });
        self.rt.emit(self.ctx, self.agent, event).await;
    }
}

#[async_trait::async_trait]
impl ToolEvents for FrameSink<'_> {
    async fn emit(&self, payload: Payload) {
        self.rt.emit(self.ctx, self.agent, payload).await;
    }
}

pub(super) fn pb_call(c: &ToolCallRequest) -> pb::ToolCall {
    pb::ToolCall {
        call_id: c.id.clone(),
        tool: c.name.clone(),
        arguments_json: c.arguments.to_string(),
    }
}

pub(super) fn duration(d: Duration) -> baton_proto::wkt::Duration {
    baton_proto::wkt::Duration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}
