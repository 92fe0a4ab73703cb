//! Models: what turns a conversation into the next assistant turn.
//!
//! A model reference is `provider:model`. Providers: `scripted` (turns
//! written in the agents file; deterministic, used by tests and the demo) and
//! `openai` (any OpenAI-compatible Chat Completions endpoint, configured under
//! `providers.openai` in the agents file). Precedence when resolving
//! an agent's model: the agent's own, else the request's default, else the
//! server's default.

pub mod openai;
pub mod scripted;

use std::sync::Arc;

use serde_json::Value;

use crate::catalog::{Catalog, parse_model_ref};

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
}

/// Receives streamed text as the model produces it.
#[async_trait::async_trait]
pub trait DeltaSink: Send + Sync {
    /// One piece of text.
    async fn delta(&self, text: String);
}

/// A model failure; the agent's context fails with it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("model {model}: {message}")]
pub struct ModelError {
    /// The model reference.
    pub model: String,
    /// What went wrong.
    pub message: String,
}

/// A model provider's model.
#[async_trait::async_trait]
pub trait Model: Send + Sync {
    /// The `provider:model` reference.
    fn reference(&self) -> &str;

    /// Produces the next turn, streaming its text to `sink`.
    async fn turn(
        &self,
        request: ModelRequest<'_>,
        sink: &dyn DeltaSink,
    ) -> Result<ModelTurn, ModelError>;
}

/// Resolves model references to models.
pub struct Models {
    catalog: Arc<Catalog>,
    openai: Option<Arc<openai::OpenAiProvider>>,
}

impl Models {
    /// Resolves against the scripts and providers of `catalog`; provider keys
    /// are read through `env` (the process environment in production).
    pub fn new(
        catalog: Arc<Catalog>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, String> {
        let openai = match &catalog.providers.openai {
            Some(spec) => Some(Arc::new(openai::OpenAiProvider::new(spec, env)?)),
            None => None,
        };
        Ok(Self { catalog, openai })
    }

    /// The model for `reference`.
    pub fn resolve(&self, reference: &str) -> Result<Arc<dyn Model>, String> {
        let (provider, name) = parse_model_ref(reference)?;
        match provider {
            "scripted" => {
                let turns = self
                    .catalog
                    .scripts
                    .get(name)
                    .ok_or_else(|| format!("{reference:?}: no script named {name:?}"))?;
                Ok(Arc::new(scripted::ScriptedModel::new(
                    reference,
                    turns.clone(),
                )))
            }
            "openai" => {
                let provider = self.openai.as_ref().ok_or_else(|| {
                    format!("{reference:?}: the agents file has no providers.openai section")
                })?;
                Ok(Arc::new(openai::OpenAiModel::new(
                    provider.clone(),
                    reference,
                    name,
                )))
            }
            other => Err(format!("{reference:?}: unknown provider {other:?}")),
        }
    }
}
