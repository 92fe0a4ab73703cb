//! Models: what turns a conversation into the next assistant turn.
//!
//! A model reference is `provider:model`. `provider` is `scripted` (turns
//! written in the agents file; deterministic, used by tests and the demo)
//! or the name of an entry of the agents file's `providers` map, whose
//! `kind` is `openai` (any OpenAI-compatible Chat Completions endpoint) or
//! `anthropic` (the Messages API). Precedence when resolving an agent's
//! model: the agent's own, else the request's default, else the server's
//! default. Generation settings: see [`settings`].

pub mod anthropic;
pub mod http;
pub mod openai;
pub mod scripted;
pub mod settings;

use std::{collections::BTreeMap, sync::Arc};

use serde_json::Value;

use crate::catalog::{Catalog, models::ProviderKind, parse_model_ref};
use settings::Settings;

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Instructions.
    System,
    /// The person, or the delegating agent.
    User,
    /// The model.
    Assistant,
    /// A tool's result.
    Tool,
}

/// One tool call a model asked for.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ToolCallRequest {
    /// Unique within the run.
    pub id: String,
    /// The tool.
    pub name: String,
    /// The arguments (a JSON object).
    pub arguments: Value,
}

/// A conversation message.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatMessage {
    /// Who wrote it.
    pub role: Role,
    /// Its text.
    pub content: String,
    /// For assistant messages: the calls it asked for.
    pub tool_calls: Vec<ToolCallRequest>,
    /// For tool messages: the call answered.
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    /// A plain message.
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }
}

/// A tool as the model sees it.
#[derive(Debug, Clone)]
pub struct ToolDef {
    /// Its name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON Schema of its arguments.
    pub parameters: Value,
}

/// Tokens a model call consumed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TokenUsage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
}

/// What a model answered.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct ModelTurn {
    /// The text (also streamed as deltas).
    pub text: String,
    /// The tool calls, in the model's order.
    pub calls: Vec<ToolCallRequest>,
    /// Tokens used.
    pub usage: TokenUsage,
    /// Why it stopped: `stop` or `tool_calls`.
    pub finish_reason: String,
    /// The model that answered, as the provider reports it (empty: the
    /// one asked for).
    pub model: String,
}

/// What a model is asked.
pub struct ModelRequest<'a> {
    /// The conversation so far.
    pub messages: &'a [ChatMessage],
    /// The tools it may call.
    pub tools: &'a [ToolDef],
    /// How many turns this agent already took in this context.
    pub turn: usize,
    /// The task this context was given (the user's input at the root).
    pub input: &'a str,
    /// Prefix for tool-call ids, unique within the run.
    pub call_id_prefix: &'a str,
    /// The generation settings: the model's own, the agent's and the
    /// request's, merged.
    pub settings: &'a Settings,
}

/// Receives streamed text as the model produces it.
#[async_trait::async_trait]
pub trait DeltaSink: Send + Sync {
    /// One piece of text.
    async fn delta(&self, text: String);
}

/// What kind of failure a model call ended with; it decides the gRPC code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelErrorKind {
    /// 429 after the retries: `RESOURCE_EXHAUSTED`.
    RateLimited,
    /// 5xx, timeout, connection or a broken stream, after the retries:
    /// `UNAVAILABLE`.
    Unavailable,
    /// The provider rejected the request (400, 404, 422, other 4xx), or
    /// answered nothing usable: `FAILED_PRECONDITION`; retrying the same
    /// request will not help.
    Rejected,
    /// The provider refused Baton's own key for it (401, 403):
    /// `FAILED_PRECONDITION`, with a message pointing at the provider's key.
    ProviderKey,
}

/// A model failure; the agent's context fails with it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("model {model}: {message}")]
pub struct ModelError {
    /// The model reference.
    pub model: String,
    /// What went wrong: the provider's own message and the cause chain.
    pub message: String,
    /// Its kind.
    pub kind: ModelErrorKind,
    /// A low-cardinality name of the failure for spans' `error.type`: the
    /// HTTP status (`429`), or `timeout`, `connection`, `stream`, `empty`.
    pub error_type: String,
}

impl ModelError {
    /// A failure of `model`.
    pub fn new(
        model: &str,
        kind: ModelErrorKind,
        error_type: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            model: model.to_owned(),
            message: message.into(),
            kind,
            error_type: error_type.into(),
        }
    }

    /// The gRPC code the run fails with.
    pub fn code(&self) -> tonic::Code {
        match self.kind {
            ModelErrorKind::RateLimited => tonic::Code::ResourceExhausted,
            ModelErrorKind::Unavailable => tonic::Code::Unavailable,
            ModelErrorKind::Rejected | ModelErrorKind::ProviderKey => {
                tonic::Code::FailedPrecondition
            }
        }
    }
}

/// A model provider's model.
#[async_trait::async_trait]
pub trait Model: Send + Sync {
    /// The `provider:model` reference.
    fn reference(&self) -> &str;

    /// The provider's system name for telemetry (`gen_ai.provider.name`):
    /// `openai`, `anthropic`, or the configured name of a scripted model.
    fn system(&self) -> &str {
        self.reference()
            .split_once(':')
            .map_or(self.reference(), |(p, _)| p)
    }

    /// The settings of the provider and its model entry, under the
    /// agent's and the request's.
    fn settings(&self) -> &Settings {
        static NONE: std::sync::OnceLock<Settings> = std::sync::OnceLock::new();
        NONE.get_or_init(Settings::default)
    }

    /// Produces the next turn, streaming its text to `sink`.
    async fn turn(
        &self,
        request: ModelRequest<'_>,
        sink: &dyn DeltaSink,
    ) -> Result<ModelTurn, ModelError>;
}

/// A configured provider entry.
enum Provider {
    OpenAi(Arc<openai::OpenAiProvider>),
    Anthropic(Arc<anthropic::AnthropicProvider>),
}

/// Resolves model references to models.
pub struct Models {
    catalog: Arc<Catalog>,
    providers: BTreeMap<String, Provider>,
}

impl Models {
    /// Resolves against the scripts and providers of `catalog`; provider keys
    /// are read through `env` (the process environment in production).
    pub fn new(
        catalog: Arc<Catalog>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, String> {
        let mut providers = BTreeMap::new();
        for (name, spec) in &catalog.providers {
            let provider = match spec.kind_of(name)? {
                ProviderKind::Openai => {
                    Provider::OpenAi(Arc::new(openai::OpenAiProvider::new(name, spec, env)?))
                }
                ProviderKind::Anthropic => Provider::Anthropic(Arc::new(
                    anthropic::AnthropicProvider::new(name, spec, env)?,
                )),
            };
            providers.insert(name.clone(), provider);
        }
        Ok(Self { catalog, providers })
    }

    /// The model for `reference`.
    pub fn resolve(&self, reference: &str) -> Result<Arc<dyn Model>, String> {
        let (provider, name) = parse_model_ref(reference)?;
        if provider == "scripted" {
            let turns = self
                .catalog
                .scripts
                .get(name)
                .ok_or_else(|| format!("{reference:?}: no script named {name:?}"))?;
            return Ok(Arc::new(scripted::ScriptedModel::new(
                reference,
                turns.clone(),
            )));
        }
        let spec = self.catalog.providers.get(provider);
        let (Some(spec), Some(p)) = (spec, self.providers.get(provider)) else {
            return Err(format!(
                "{reference:?}: unknown provider {provider:?} (known: {})",
                self.catalog.known_providers()
            ));
        };
        let entry = spec.models.get(name);
        let settings = match entry {
            Some(m) => spec.settings.merged(&m.settings),
            None => spec.settings.clone(),
        };
        let stream = entry.and_then(|m| m.stream).or(spec.stream).unwrap_or(true);
        Ok(match p {
            Provider::OpenAi(p) => Arc::new(openai::OpenAiModel::new(
                p.clone(),
                reference,
                name,
                settings,
                stream,
            )),
            Provider::Anthropic(p) => Arc::new(anthropic::AnthropicModel::new(
                p.clone(),
                reference,
                name,
                settings,
                stream,
            )),
        })
    }
}
