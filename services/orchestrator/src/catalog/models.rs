//! The file form of models: the `providers` section (OpenAI-compatible
//! endpoints) and the turns of `scripted` models. The providers themselves
//! are in `crate::model`, which reads these; the catalog reads no model.

use std::time::Duration;

use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// The `providers.openai` section of the agents file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OpenAiSpec {
    /// The API's base URL, up to and including `/v1`.
    pub base_url: String,
    /// The environment variable holding the API key; empty sends no key
    /// (local servers).
    pub api_key_env: String,
    /// Deadline of the connection and of each wait for the next chunk.
    #[serde(with = "baton_common::config::duration")]
    pub timeout: Duration,
    /// Retries of a 429, a 5xx or a connection failure.
    pub max_retries: u32,
    /// The first retry's wait when the server gives no Retry-After; doubled
    /// per retry.
    #[serde(with = "baton_common::config::duration")]
    pub backoff: Duration,
}

impl Default for OpenAiSpec {
    fn default() -> Self {
        Self {
            base_url: "https://api.openai.com/v1".into(),
            api_key_env: "OPENAI_API_KEY".into(),
            timeout: Duration::from_secs(60),
            max_retries: 3,
            backoff: Duration::from_millis(500),
        }
    }
}

/// A scripted tool call.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptCall {
    /// The tool to call.
    pub tool: String,
    /// Its arguments (a JSON object).
    #[serde(default = "empty_object")]
    pub args: Value,
}

pub(crate) fn empty_object() -> Value {
    Value::Object(Default::default())
}

/// Token counts a turn reports.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptUsage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
}

/// One scripted turn.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ScriptTurn {
    /// Text to answer with (streamed).
    pub text: String,
    /// Stream the text as this many deltas (it is repeated to fill them when
    /// shorter); unset streams it word by word.
    pub deltas: Option<u32>,
    /// Tool calls, in order.
    pub calls: Vec<ScriptCall>,
    /// Hand off to this agent (a call to `transfer_to_<agent>`).
    pub handoff: Option<String>,
    /// Wait this long before answering (`50ms`, `2s`).
    #[serde(deserialize_with = "opt_duration")]
    pub delay: Option<Duration>,
    /// Fail the model call with this message.
    pub fail: Option<String>,
    /// Use this turn this many times in a row (default 1).
    pub repeat: Option<u32>,
    /// Token counts to report; unset estimates 1 token per 4 characters.
    pub usage: Option<ScriptUsage>,
}

fn opt_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let s: Option<String> = Option::deserialize(d)?;
    s.map(|s| super::names::parse_delay(&s).map_err(serde::de::Error::custom))
        .transpose()
}

impl ScriptTurn {
    /// Checks the turn is coherent.
    pub fn validate(&self) -> Result<(), String> {
        for c in &self.calls {
            if !c.args.is_object() {
                return Err(format!(
                    "calls: the arguments of {:?} must be an object",
                    c.tool
                ));
            }
        }
        if self.repeat == Some(0) {
            return Err("repeat must be at least 1".into());
        }
        if self.deltas == Some(0) {
            return Err("deltas must be at least 1".into());
        }
        if self.fail.is_some() && (!self.calls.is_empty() || self.handoff.is_some()) {
            return Err("a failing turn makes no calls".into());
        }
        Ok(())
    }
}
