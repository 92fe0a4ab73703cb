//! The orchestrator's one error type, and its one mapping to `tonic::Status`.
//!
//! These are errors of RPCs (bad requests, unknown runs). What goes wrong
//! inside a run is reported on the run's stream (RunFailed, tool errors).

use std::borrow::Cow;

use tonic::{Code, Status, metadata::MetadataValue};

/// Result with the orchestrator's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An RPC error; the call changed nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A request field is malformed.
    #[error("{field}: {message}")]
    InvalidArgument {
        /// The request field, as the proto names it (`pipeline.steps[2].agent`).
        field: Cow<'static, str>,
        /// What is wrong.
        message: String,
    },
    /// A run, approval or input request does not exist.
    #[error("{field}: {message}")]
    NotFound {
        /// The request field.
        field: &'static str,
        /// What is missing.
        message: String,
    },
    /// The request is well formed but the run is not in a state to take it.
    #[error("{field}: {message}")]
    FailedPrecondition {
        /// The request field.
        field: &'static str,
        /// Why not.
        message: String,
    },
    /// The request is over a size or count limit of this server.
    #[error("{field}: {message}")]
    Exhausted {
        /// The request field.
        field: Cow<'static, str>,
        /// Which limit.
        message: String,
    },
    /// The server is draining.
    #[error("server is shutting down")]
    ShuttingDown,
    /// A dependency (the run store's Redis) did not answer; retry.
    #[error("{0}")]
    Unavailable(String),
    /// Something that cannot happen did (a corrupt record).
    #[error("{0}")]
    Internal(String),
}

impl Error {
    /// An `InvalidArgument` for `field`.
    pub fn invalid(field: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Self {
        Self::InvalidArgument {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl From<Error> for Status {
    fn from(e: Error) -> Self {
        let (code, field) = match &e {
            Error::InvalidArgument { field, .. } => (Code::InvalidArgument, Some(field.as_ref())),
            Error::NotFound { field, .. } => (Code::NotFound, Some(*field)),
            Error::Exhausted { field, .. } => (Code::ResourceExhausted, Some(field.as_ref())),
            Error::FailedPrecondition { field, .. } => (Code::FailedPrecondition, Some(*field)),
            Error::ShuttingDown | Error::Unavailable(_) => (Code::Unavailable, None),
            Error::Internal(_) => (Code::Internal, None),
        };
        let mut status = Status::new(code, e.to_string());
        if let Some(value) = field.and_then(|f| MetadataValue::try_from(f).ok()) {
            status.metadata_mut().insert("baton-field", value);
        }
        status
    }
}
