//! What the HTTP providers share: the client, the key, and the meaning of
//! a failure.
//!
//! A 429 or 5xx answer, a timeout or a connection failure may be tried
//! again ([`ModelError::retry`], with the server's `Retry-After`): the model
//! call's retry layer (`model::call::retry`) does, with exponential backoff,
//! each try through the provider's rate limit. A 429 is
//! [`ModelErrorKind::RateLimited`] and the rest
//! [`ModelErrorKind::Unavailable`]. Other statuses are not tried again:
//! 401/403 are [`ModelErrorKind::ProviderKey`] (the message names the
//! variable holding the key), 400/404/422 and the rest
//! [`ModelErrorKind::Rejected`]. The provider's own message (its JSON
//! `error.message`, else the body) and the cause chain of a transport error
//! are kept in the error.

use std::time::Duration;

use serde_json::Value;

use super::error::{ModelError, ModelErrorKind, SetupError};
use crate::catalog::models::{ProviderKind, ProviderSpec};

/// A configured HTTP endpoint.
pub(crate) struct Endpoint {
    /// The entry's name in `providers`.
    pub name: String,
    pub http: reqwest::Client,
    pub base_url: String,
    pub api_key: Option<String>,
    /// Where the key comes from, for messages.
    pub key_env: String,
}

impl Endpoint {
    /// The endpoint of `providers.<name>`, with the key read through `env`.
    pub fn new(
        name: &str,
        spec: &ProviderSpec,
        kind: ProviderKind,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, SetupError> {
        let key_env = spec.api_key_env_or_default(kind);
        let api_key =
            if key_env.is_empty() {
                None
            } else {
                Some(env(&key_env).filter(|k| !k.is_empty()).ok_or_else(|| {
                    SetupError::KeyNotSet {
                        provider: name.to_owned(),
                        variable: key_env.clone(),
                    }
                })?)
            };
        let timeout = spec.timeout.unwrap_or(Duration::from_secs(60));
        let http = reqwest::Client::builder()
            .connect_timeout(timeout)
            .read_timeout(timeout)
            .tcp_nodelay(true)
            .build()
            .map_err(|source| SetupError::HttpClient {
                provider: name.to_owned(),
                source,
            })?;
        Ok(Self {
            name: name.to_owned(),
            http,
            base_url: spec
                .base_url_or_default(kind)
                .trim_end_matches('/')
                .to_owned(),
            api_key,
            key_env,
        })
    }

    /// Sends the request `build` makes, once: a failure worth trying again
    /// says so ([`ModelError::retry`], with the provider's `Retry-After`),
    /// and the model call's retry layer (`model::call::retry`) tries again
    /// — through the rate limit, so each try is counted.
    pub async fn send(
        &self,
        reference: &str,
        build: impl Fn() -> reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, ModelError> {
        match build().send().await {
            Ok(r) if r.status().is_success() => Ok(r),
            Ok(r) => {
                let status = r.status();
                let told = retry_after(&r);
                let body = r.text().await.unwrap_or_default();
                let e = self.status_error(reference, status, &body);
                Err(if retryable(status) {
                    e.retryable(told)
                } else {
                    e
                })
            }
            Err(e) if e.is_connect() || e.is_timeout() => {
                Err(transport_error(reference, &e).retryable(None))
            }
            Err(e) => Err(transport_error(reference, &e)),
        }
    }

    /// The error of a non-success answer.
    fn status_error(&self, reference: &str, status: reqwest::StatusCode, body: &str) -> ModelError {
        let said = provider_message(body);
        let (kind, message) = match status.as_u16() {
            429 => (
                ModelErrorKind::RateLimited,
                format!("rate limited by the provider (HTTP {status}): {said}"),
            ),
            401 | 403 => (
                ModelErrorKind::ProviderKey,
                format!(
                    "provider {:?} refused Baton's key for it (HTTP {status}): check {} (providers.{}.api_key_env); this is not about the caller's credentials: {said}",
                    self.name,
                    if self.key_env.is_empty() {
                        "whether the server needs a key".to_owned()
                    } else {
                        format!("the key in {}", self.key_env)
                    },
                    self.name
                ),
            ),
            400 | 413 | 422 if context_window(&said) => (
                ModelErrorKind::ContextWindow,
                format!(
                    "the request is longer than the model's context window (HTTP {status}): {said}"
                ),
            ),
            s if s >= 500 => (
                ModelErrorKind::Unavailable,
                format!("the provider failed (HTTP {status}): {said}"),
            ),
            _ => (
                ModelErrorKind::Rejected,
                format!("the provider rejected the request (HTTP {status}): {said}"),
            ),
        };
        ModelError::new(reference, kind, status.as_u16().to_string(), message)
    }
}

/// Whether a provider's message says the request is over the model's
/// context window (OpenAI's `context_length_exceeded`, Anthropic's "prompt
/// is too long", vLLM's and LiteLLM's wordings).
fn context_window(said: &str) -> bool {
    let said = said.to_ascii_lowercase();
    [
        "context_length_exceeded",
        "context length",
        "context window",
        "prompt is too long",
        "too many tokens",
    ]
    .iter()
    .any(|p| said.contains(p))
}

fn retryable(status: reqwest::StatusCode) -> bool {
    status.as_u16() == 429 || status.is_server_error()
}

/// The error of a request that got no answer.
pub(super) fn transport_error(reference: &str, e: &reqwest::Error) -> ModelError {
    let error_type = if e.is_timeout() {
        "timeout"
    } else if e.is_connect() {
        "connection"
    } else {
        "transport"
    };
    ModelError::new(
        reference,
        ModelErrorKind::Unavailable,
        error_type,
        format!("request failed: {}", cause_chain(e)),
    )
}

/// An error and its sources, `outer: inner: innermost`.
pub use baton_client::cause_chain;

/// What the provider said: its JSON `error.message` (OpenAI, Anthropic and
/// LiteLLM all write one), else the body, cut to 500 characters.
pub(super) fn provider_message(body: &str) -> String {
    let said = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| {
            let e = v.get("error")?;
            e.get("message")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .or_else(|| e.as_str().map(str::to_owned))
        })
        .unwrap_or_else(|| body.trim().to_owned());
    if said.is_empty() {
        "(no message)".into()
    } else {
        said.chars().take(500).collect()
    }
}

/// How long to wait before retry `attempt` (from 0).
/// How long the provider asked to wait before the next try
/// (`Retry-After`, in seconds, at most 5 minutes), when it said.
fn retry_after(response: &reqwest::Response) -> Option<Duration> {
    response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(|s| Duration::from_secs_f64(s.min(300.0)))
}

/// A failure of the stream after the answer began.
pub(super) fn stream_error(reference: &str, what: String) -> ModelError {
    ModelError::new(reference, ModelErrorKind::Unavailable, "stream", what)
}

/// An answer with neither text nor tool calls, even without streaming.
pub(super) fn empty_answer(reference: &str, finish_reason: &str) -> ModelError {
    ModelError::new(
        reference,
        ModelErrorKind::Rejected,
        "empty",
        format!(
            "the model answered with neither text nor tool calls (finish_reason {finish_reason:?}), streamed or not; check the model's chat template and max_tokens"
        ),
    )
}
