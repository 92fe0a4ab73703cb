//! One model turn: what a model is asked ([`ModelRequest`]), what it
//! answers ([`ModelTurn`]), where its text streams ([`DeltaSink`]), and
//! [`Model`], the interface every provider implements.

use crate::catalog::settings::Settings;

use super::{
    chat::{ChatMessage, ToolCallRequest, ToolDef},
    error::ModelError,
};

/// Tokens a model call consumed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TokenUsage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// Of the prompt tokens, those the provider read from its prompt
    /// cache (recorded turns from before it read as 0; 0 is not written).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cached_input_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
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
    /// The `provider:model` reference of the fallback that answered (empty:
    /// the agent's own model).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub answered_by: String,
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

    /// The most output tokens the model writes in one answer, as far as
    /// Baton knows (`providers.<p>.models.<m>.max_output_tokens`, the
    /// prices file's `max_output_tokens`, else the agents file's
    /// `default_max_output_tokens`): the worst case a budget reserves for a
    /// call without `max_tokens`. `None`: unknown.
    fn max_output_tokens(&self) -> Option<u32> {
        None
    }

    /// The input tokens of a request of `messages` and `tools` (the agent's
    /// turn `turn`), estimated before the call for budgets and limits: a
    /// character count that errs high (3 characters a token, plus 4 a
    /// message); a model that knows better says so.
    fn estimate_input_tokens(
        &self,
        messages: &[ChatMessage],
        tools: &[ToolDef],
        turn: usize,
    ) -> u64 {
        let _ = turn;
        let chars: usize = messages
            .iter()
            .map(|m| {
                m.content.len()
                    + m.tool_calls
                        .iter()
                        .map(|c| c.name.len() + c.arguments.to_string().len())
                        .sum::<usize>()
            })
            .sum::<usize>()
            + tools
                .iter()
                .map(|t| t.name.len() + t.description.len() + t.parameters.to_string().len())
                .sum::<usize>();
        (chars as u64).div_ceil(3) + 4 * messages.len() as u64
    }

    /// Produces the next turn, streaming its text to `sink`.
    async fn turn(
        &self,
        request: ModelRequest<'_>,
        sink: &dyn DeltaSink,
    ) -> Result<ModelTurn, ModelError>;
}
