//! How a model call fails: a [`ModelError`] of a [`ModelErrorKind`], which
//! decides the gRPC code the run fails with. And what goes wrong before any
//! call: a provider that cannot be set up at start ([`SetupError`]), a
//! model reference that names no model ([`ResolveError`]).

use crate::catalog::{models::ProviderError, names::ModelRefError};

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
    /// No answer within the model timeout: `DEADLINE_EXCEEDED`.
    Timeout,
    /// The request is longer than the model's context window (a 400 that
    /// says so): `FAILED_PRECONDITION`; a model with a larger window may
    /// take it (`context_window_fallbacks`).
    ContextWindow,
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
    /// The same request may be tried again (a 429, a 5xx, a connection
    /// failure or timeout before an answer): `Some`, with how long the
    /// provider asked to wait (`Retry-After`), when it said.
    pub retry: Option<Option<std::time::Duration>>,
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
            retry: None,
        }
    }

    /// The same request may be tried again, after `after` when the
    /// provider said.
    pub fn retryable(mut self, after: Option<std::time::Duration>) -> Self {
        self.retry = Some(after);
        self
    }

    /// The gRPC code the run fails with.
    pub fn code(&self) -> tonic::Code {
        match self.kind {
            ModelErrorKind::RateLimited => tonic::Code::ResourceExhausted,
            ModelErrorKind::Unavailable => tonic::Code::Unavailable,
            ModelErrorKind::Timeout => tonic::Code::DeadlineExceeded,
            ModelErrorKind::Rejected
            | ModelErrorKind::ProviderKey
            | ModelErrorKind::ContextWindow => tonic::Code::FailedPrecondition,
        }
    }
}

/// Why the providers of the agents file cannot be set up at start; the
/// message names the field.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The entry itself is refused (its kind is missing).
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// The variable holding the provider's key is not set.
    #[error(
        "providers.{provider}.api_key_env: {variable} is not set (set it or {variable}_FILE, or set api_key_env to \"\" for a server without keys)"
    )]
    KeyNotSet {
        /// The entry.
        provider: String,
        /// The variable.
        variable: String,
    },
    /// The HTTP client cannot be built (no TLS backend, say).
    #[error("providers.{provider}: cannot build the HTTP client: {source}")]
    HttpClient {
        /// The entry.
        provider: String,
        /// What reqwest said.
        source: reqwest::Error,
    },
}

/// Why a model reference resolves to no model; the message quotes the
/// reference.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// It is not `provider:model`.
    #[error(transparent)]
    Reference(#[from] ModelRefError),
    /// A `scripted:` reference names no script of the agents file.
    #[error("{reference:?}: no script named {script:?}")]
    NoScript {
        /// The reference.
        reference: String,
        /// The script it names.
        script: String,
    },
    /// It names a provider the agents file does not configure.
    #[error("{reference:?}: unknown provider {provider:?} (known: {known})")]
    UnknownProvider {
        /// The reference.
        reference: String,
        /// The provider it names.
        provider: String,
        /// The providers it may name, comma-separated.
        known: String,
    },
}
