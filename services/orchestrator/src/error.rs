//! The orchestrator's one error type for the operations of its application
//! core ([`crate::app`]): bad requests, unknown runs, runs not in a state to
//! take a call, limits, shutdown. Each face maps it to its wire form in one
//! place (`grpc::status` to a `tonic::Status`).
//!
//! The codes are gRPC's canonical codes ([`tonic::Code`]): they are the
//! product's error vocabulary on every face (the HTTP face answers with
//! the HTTP status grpc-gateway uses for each) and in `RunFailed` events.
//!
//! What goes wrong inside a run is reported on the run's stream (RunFailed,
//! tool errors), not here.

use std::borrow::Cow;

use tonic::Code;

/// Result with the orchestrator's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error of a call; the call changed nothing.
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
    /// What the request would create exists already (a conversation id).
    #[error("{field}: {message}")]
    AlreadyExists {
        /// The request field.
        field: &'static str,
        /// What exists.
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
    /// A position past what exists (a fork point past a run's last event).
    #[error("{field}: {message}")]
    OutOfRange {
        /// The request field.
        field: &'static str,
        /// What the range is.
        message: String,
    },
    /// A stream's reader fell too far behind and lost its place.
    #[error("{0}")]
    Aborted(String),
    /// Another call holds what the request needs (a conversation's turn);
    /// `ABORTED`: try again once it ends.
    #[error("{field}: {message}")]
    Busy {
        /// The request field.
        field: &'static str,
        /// What holds it.
        message: String,
    },
    /// The server is draining.
    #[error("server is shutting down")]
    ShuttingDown,
    /// A dependency (the run store's Redis, a peer) did not answer; retry.
    #[error("{0}")]
    Unavailable(String),
    /// Something that cannot happen did (a corrupt record).
    #[error("{0}")]
    Internal(String),
    /// The context store refused or failed (its code and field).
    #[error("{0}")]
    Store(#[from] baton_store::Error),
    /// What another replica answered a forwarded call with, passed on as
    /// it is (its code, message and field).
    #[error("{message}")]
    Peer {
        /// The peer's code.
        code: Code,
        /// The peer's message.
        message: String,
        /// The field it named, if any.
        field: Option<String>,
    },
}

impl Error {
    /// An `InvalidArgument` for `field`.
    pub fn invalid(field: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Self {
        Self::InvalidArgument {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The canonical code of the error.
    pub fn code(&self) -> Code {
        match self {
            Error::InvalidArgument { .. } => Code::InvalidArgument,
            Error::NotFound { .. } => Code::NotFound,
            Error::AlreadyExists { .. } => Code::AlreadyExists,
            Error::Exhausted { .. } => Code::ResourceExhausted,
            Error::FailedPrecondition { .. } => Code::FailedPrecondition,
            Error::OutOfRange { .. } => Code::OutOfRange,
            Error::Aborted(_) | Error::Busy { .. } => Code::Aborted,
            Error::ShuttingDown | Error::Unavailable(_) => Code::Unavailable,
            Error::Internal(_) => Code::Internal,
            Error::Peer { code, .. } => *code,
            Error::Store(e) => e.code(),
        }
    }

    /// The request field the error is about, if any.
    pub fn field(&self) -> Option<&str> {
        match self {
            Error::InvalidArgument { field, .. } | Error::Exhausted { field, .. } => Some(field),
            Error::NotFound { field, .. }
            | Error::AlreadyExists { field, .. }
            | Error::Busy { field, .. }
            | Error::FailedPrecondition { field, .. }
            | Error::OutOfRange { field, .. } => Some(field),
            Error::Peer { field, .. } => field.as_deref(),
            Error::Store(e) => match e.field() {
                Some(std::borrow::Cow::Borrowed(f)) => Some(f),
                _ => None,
            },
            Error::Aborted(_)
            | Error::ShuttingDown
            | Error::Unavailable(_)
            | Error::Internal(_) => None,
        }
    }

    /// The error's message as a wire status carries it: for a peer's, the
    /// peer's own text; otherwise the display form (`field: message`).
    pub fn message(&self) -> String {
        self.to_string()
    }
}
