//! How a model call fails: a [`ModelError`] of a [`ModelErrorKind`], which
//! decides the gRPC code the run fails with.

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
