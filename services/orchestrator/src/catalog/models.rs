//! The file form of models: the `providers` map (named endpoints of a kind,
//! with their generation settings) and the turns of `scripted` models. The
//! providers themselves are in `crate::model`, which reads these; the
//! catalog reads no model.

use std::{collections::BTreeMap, time::Duration};

use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::settings::{InvalidSetting, Settings};

/// The wire protocol of a provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// OpenAI Chat Completions, and every server speaking it (vLLM, Ollama,
    /// llama.cpp, LiteLLM).
    Openai,
    /// Anthropic's Messages API.
    Anthropic,
    /// The scripts of the agents file (`<name>:<script>`), behind a
    /// provider's rate limit and breaker: a model that fails and waits on
    /// cue, for demos and tests.
    Scripted,
}

impl ProviderKind {
    /// Its name in the agents file.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Openai => "openai",
            Self::Anthropic => "anthropic",
            Self::Scripted => "scripted",
        }
    }
}

/// One entry of the `providers` map: `providers.<name>`, behind
/// `<name>:<model>` references.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProviderSpec {
    /// The protocol; may be left out when the entry is named `openai` or
    /// `anthropic` (the form of agents files before named providers).
    pub kind: Option<ProviderKind>,
    /// The API's base URL, up to and including `/v1`; unset: the kind's
    /// public API.
    pub base_url: Option<String>,
    /// The environment variable holding the API key (`<VAR>_FILE` names a
    /// file holding it); `""` sends no key (local servers); unset:
    /// `OPENAI_API_KEY` or `ANTHROPIC_API_KEY`.
    pub api_key_env: Option<String>,
    /// Deadline of the connection and of each wait for the next chunk
    /// (default 60s).
    #[serde(deserialize_with = "opt_duration")]
    pub timeout: Option<Duration>,
    /// Retries of a 429, a 5xx, a timeout or a connection failure
    /// (default 3).
    pub max_retries: Option<u32>,
    /// The first retry's wait when the server gives no `Retry-After`;
    /// doubled per retry (default 500ms).
    #[serde(deserialize_with = "opt_duration")]
    pub backoff: Option<Duration>,
    /// Stream answers (default true); `false` asks for whole answers, for
    /// servers whose streams drop tool calls.
    pub stream: Option<bool>,
    /// Generation settings of every model of the provider.
    pub settings: Settings,
    /// Per-model overrides, by model name.
    pub models: BTreeMap<String, ModelSpec>,
    /// Its circuit breaker (see `model::call::breaker`).
    pub breaker: BreakerSpec,
    /// Its rate limit, shared by every replica (see `model::call::limit`).
    pub rate_limit: Option<RateLimitSpec>,
}

/// `providers.<name>.rate_limit`: at most `requests` calls and `tokens`
/// tokens (input and output) within any `window`, for every replica
/// together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitSpec {
    /// Most calls within a window.
    #[serde(default)]
    pub requests: Option<u64>,
    /// Most tokens within a window (a call counts its input estimate and
    /// its `max_tokens` until it is settled to what it used).
    #[serde(default)]
    pub tokens: Option<u64>,
    /// The window (default 1m).
    #[serde(default = "minute", deserialize_with = "duration")]
    pub window: Duration,
    /// A limit per model of the provider, not one for all.
    #[serde(default)]
    pub per_model: bool,
    /// A limit per tenant, not one for all.
    #[serde(default)]
    pub per_tenant: bool,
    /// When the shared counters (Redis) do not answer, call anyway
    /// (default: the call fails `UNAVAILABLE`).
    #[serde(default)]
    pub fail_open: bool,
}

fn minute() -> Duration {
    Duration::from_secs(60)
}

/// `providers.<name>.breaker`: after `failures` failures (429, 5xx,
/// timeouts, connection failures, after the retries) within `window`,
/// calls skip the provider for `cooldown`, then one call probes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BreakerSpec {
    /// Failures that open it (at least 1).
    pub failures: u32,
    /// Within how long.
    #[serde(deserialize_with = "duration")]
    pub window: Duration,
    /// How long it stays open before a probe.
    #[serde(deserialize_with = "duration")]
    pub cooldown: Duration,
}

impl Default for BreakerSpec {
    fn default() -> Self {
        Self {
            failures: 5,
            window: Duration::from_secs(30),
            cooldown: Duration::from_secs(30),
        }
    }
}

fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = String::deserialize(d)?;
    super::names::parse_delay(&s).map_err(serde::de::Error::custom)
}

/// `providers.<name>.models.<model>`: what differs for one model.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelSpec {
    /// Stream this model's answers (unset: the provider's choice).
    pub stream: Option<bool>,
    /// The most output tokens the model writes in one answer (unset: the
    /// prices file's, else the agents file's `default_max_output_tokens`):
    /// what a budget reserves for a call without `max_tokens`.
    pub max_output_tokens: Option<u32>,
    /// Generation settings over the provider's.
    pub settings: Settings,
}

/// `default_max_output_tokens` when the agents file sets none.
pub const DEFAULT_MAX_OUTPUT_TOKENS: u32 = 4096;

/// Whether references to `provider` name scripts: the built-in `scripted`,
/// or an entry of `providers` of kind `scripted`.
pub fn scripted(providers: &BTreeMap<String, ProviderSpec>, provider: &str) -> bool {
    provider == "scripted"
        || providers
            .get(provider)
            .is_some_and(|p| p.kind == Some(ProviderKind::Scripted))
}

/// Names a provider entry may not take: the built-in `scripted` provider.
pub const RESERVED_PROVIDERS: &[&str] = &["scripted"];

/// Why an entry of `providers` is refused; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// A rate limit setting is wrong.
    #[error("providers.{name}.rate_limit.{field}: {message}")]
    RateLimit {
        /// The entry.
        name: String,
        /// The setting.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A breaker setting is zero.
    #[error("providers.{name}.breaker.{field}: must be more than 0")]
    Breaker {
        /// The entry.
        name: String,
        /// The setting.
        field: &'static str,
    },
    /// The entry takes the name of a built-in provider.
    #[error("providers.{0}: {0:?} is a built-in provider and takes no settings")]
    Reserved(String),
    /// The entry's name is not `[a-z0-9_-]{1,64}`.
    #[error("providers.{0}: provider names match [a-z0-9_-]{{1,64}}")]
    Name(String),
    /// No `kind`, and the name implies none.
    #[error(
        "providers.{0}.kind: missing; add `kind: openai` (any OpenAI-compatible endpoint) or `kind: anthropic`"
    )]
    NoKind(String),
    /// `base_url` (or the kind's default) is not an http(s) URL.
    #[error("providers.{name}.base_url: {url:?} is not an http(s) URL")]
    BaseUrl {
        /// The entry.
        name: String,
        /// The URL.
        url: String,
    },
    /// A generation setting of the entry or of one of its models.
    #[error(transparent)]
    Settings(#[from] InvalidSetting),
}

impl ProviderSpec {
    /// The entry's kind: its own, else the one its name implies.
    pub fn kind_of(&self, name: &str) -> Result<ProviderKind, ProviderError> {
        match (self.kind, name) {
            (Some(k), _) => Ok(k),
            (None, "openai") => Ok(ProviderKind::Openai),
            (None, "anthropic") => Ok(ProviderKind::Anthropic),
            (None, _) => Err(ProviderError::NoKind(name.to_owned())),
        }
    }

    /// The base URL, or the kind's public API.
    pub fn base_url_or_default(&self, kind: ProviderKind) -> String {
        self.base_url.clone().unwrap_or_else(|| {
            match kind {
                ProviderKind::Openai => "https://api.openai.com/v1",
                ProviderKind::Anthropic => "https://api.anthropic.com/v1",
                ProviderKind::Scripted => "",
            }
            .into()
        })
    }

    /// The key variable, or the kind's usual one.
    pub fn api_key_env_or_default(&self, kind: ProviderKind) -> String {
        self.api_key_env.clone().unwrap_or_else(|| {
            match kind {
                ProviderKind::Openai => "OPENAI_API_KEY",
                ProviderKind::Anthropic => "ANTHROPIC_API_KEY",
                ProviderKind::Scripted => "",
            }
            .into()
        })
    }

    /// Checks the entry (its name, kind, URL and settings).
    pub fn validate(&self, name: &str) -> Result<(), ProviderError> {
        if RESERVED_PROVIDERS.contains(&name) {
            return Err(ProviderError::Reserved(name.to_owned()));
        }
        if !super::names::valid_name(name) {
            return Err(ProviderError::Name(name.to_owned()));
        }
        let kind = self.kind_of(name)?;
        let url = self.base_url_or_default(kind);
        if kind != ProviderKind::Scripted
            && (!(url.starts_with("http://") || url.starts_with("https://"))
                || reqwest::Url::parse(&url).is_err())
        {
            return Err(ProviderError::BaseUrl {
                name: name.to_owned(),
                url,
            });
        }
        self.settings
            .validate(&format!("providers.{name}.settings"))?;
        let b = &self.breaker;
        for (field, zero) in [
            ("failures", b.failures == 0),
            ("window", b.window.is_zero()),
            ("cooldown", b.cooldown.is_zero()),
        ] {
            if zero {
                return Err(ProviderError::Breaker {
                    name: name.to_owned(),
                    field,
                });
            }
        }
        if let Some(l) = &self.rate_limit {
            let bad = |field: &'static str, message: &str| {
                Err(ProviderError::RateLimit {
                    name: name.to_owned(),
                    field,
                    message: message.to_owned(),
                })
            };
            if l.requests.is_none() && l.tokens.is_none() {
                return bad("requests", "set requests, tokens, or both");
            }
            if l.requests == Some(0) {
                return bad("requests", "must be more than 0");
            }
            if l.tokens == Some(0) {
                return bad("tokens", "must be more than 0");
            }
            if l.window < Duration::from_millis(100) {
                return bad("window", "must be at least 100ms");
            }
        }
        for (model, spec) in &self.models {
            spec.settings
                .validate(&format!("providers.{name}.models.{model}.settings"))?;
            if spec.max_output_tokens == Some(0) {
                return Err(InvalidSetting {
                    field: format!("providers.{name}.models.{model}.max_output_tokens"),
                    message: "must be at least 1".into(),
                }
                .into());
            }
        }
        Ok(())
    }
}

pub(crate) fn opt_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let s: Option<String> = Option::deserialize(d)?;
    s.map(|s| super::names::parse_delay(&s).map_err(serde::de::Error::custom))
        .transpose()
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
    /// Of the prompt tokens, those to report as read from a prompt cache.
    #[serde(default)]
    pub cached_input_tokens: u64,
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
    /// With `fail`: fail as a provider answering this HTTP status would
    /// (429 rate limited, 5xx unavailable, 408 a timeout, 401/403 a refused
    /// key, another 4xx a rejected request; unset: unavailable).
    pub fail_status: Option<u16>,
    /// Use this turn this many times in a row (default 1).
    pub repeat: Option<u32>,
    /// Token counts to report; unset estimates 1 token per 4 characters.
    pub usage: Option<ScriptUsage>,
}

/// Why a scripted turn is refused; the message names the field within the
/// turn.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScriptError {
    /// A call's arguments are not a JSON object.
    #[error("calls: the arguments of {0:?} must be an object")]
    Arguments(String),
    /// `repeat: 0`.
    #[error("repeat must be at least 1")]
    Repeat,
    /// `deltas: 0`.
    #[error("deltas must be at least 1")]
    Deltas,
    /// A `fail` turn that also calls tools or hands off.
    #[error("a failing turn makes no calls")]
    FailingCalls,
    /// `fail_status` without `fail`, or not an error status.
    #[error("fail_status: {0}")]
    FailStatus(String),
}

impl ScriptTurn {
    /// Checks the turn is coherent.
    pub fn validate(&self) -> Result<(), ScriptError> {
        if let Some(c) = self.calls.iter().find(|c| !c.args.is_object()) {
            return Err(ScriptError::Arguments(c.tool.clone()));
        }
        if self.repeat == Some(0) {
            return Err(ScriptError::Repeat);
        }
        if self.deltas == Some(0) {
            return Err(ScriptError::Deltas);
        }
        if self.fail.is_some() && (!self.calls.is_empty() || self.handoff.is_some()) {
            return Err(ScriptError::FailingCalls);
        }
        match (self.fail_status, &self.fail) {
            (Some(_), None) => {
                return Err(ScriptError::FailStatus(
                    "set fail, the message it fails with".into(),
                ));
            }
            (Some(s), Some(_)) if !(400..=599).contains(&s) => {
                return Err(ScriptError::FailStatus(format!(
                    "{s} is not an error status (400 to 599)"
                )));
            }
            _ => {}
        }
        Ok(())
    }
}
