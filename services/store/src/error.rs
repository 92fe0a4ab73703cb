//! The store's one error type, and its one mapping to `tonic::Status`.
//!
//! Every variant says what a client may do about it through its gRPC code
//! ([`Error::code`]): the server answers with it, and the orchestrator's
//! tools and pipelines report a store error to the model or the run with
//! the same code. Redis errors are sorted here once into retryable or not.

use tonic::{Code, Status, metadata::MetadataValue};

/// Result with the context store's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the context store. A call that fails with
/// any of these changed nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A request field is malformed.
    #[error("{field}: {message}")]
    InvalidArgument {
        /// The request field, as named in the proto.
        field: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// The slot does not exist or has expired.
    #[error("key: slot {key:?} does not exist in trace {trace_id}")]
    NotFound {
        /// The trace.
        trace_id: String,
        /// The missing key.
        key: String,
    },
    /// The value is larger than the store accepts.
    #[error("value: {size} bytes is over the limit of {limit} bytes per value")]
    ValueTooLarge {
        /// The value's size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// The write would take the trace over its byte quota.
    #[error(
        "value: writing {size} bytes would put trace {trace_id} at {would_be} bytes, over its quota of {limit} bytes"
    )]
    TraceBytesQuota {
        /// The trace.
        trace_id: String,
        /// The value's size.
        size: u64,
        /// What the trace would use after the write.
        would_be: u64,
        /// The quota.
        limit: u64,
    },
    /// The write would take the trace over its key quota.
    #[error("key: trace {trace_id} already has {used} slots, its quota is {limit}")]
    TraceKeysQuota {
        /// The trace.
        trace_id: String,
        /// Slots the trace has.
        used: u64,
        /// The quota.
        limit: u64,
    },
    /// A compare-and-swap saw another version.
    #[error("expected_version: slot {key:?} is {}, not at version {expected}", match current { Some(v) => format!("at version {v}"), None => "absent".to_owned() })]
    VersionMismatch {
        /// The slot's key.
        key: String,
        /// The version the caller expected (0: absent).
        expected: u64,
        /// The slot's current version, `None` when it does not exist.
        current: Option<u64>,
    },
    /// A watcher fell further behind than the buffer holds.
    #[error("watch fell behind by {missed} changes; re-read the slots and watch again")]
    WatchLagged {
        /// How many changes it missed.
        missed: u64,
    },
    /// A bound on what one client may hold open (watches per trace or per
    /// connection).
    #[error("{field}: {message}")]
    Exhausted {
        /// The request field the bound is about.
        field: &'static str,
        /// Which bound, and its value.
        message: String,
    },
    /// Redis is out of memory (`maxmemory` reached under `noeviction`):
    /// writes are refused until memory is freed.
    #[error(
        "store backend out of memory: Redis reached its maxmemory and evicts nothing; writes are refused until slots expire or are deleted, or maxmemory is raised"
    )]
    OutOfMemory,
    /// The backend cannot be reached; retry later.
    #[error("store backend unavailable: {0}")]
    Unavailable(String),
    /// The server is draining.
    #[error("server is shutting down")]
    ShuttingDown,
    /// A bug or an unexpected backend answer.
    #[error("internal error: {0}")]
    Internal(String),
    /// One entry of a batched write failed; nothing of the batch was written.
    #[error("{}", self.describe_entry())]
    InEntry {
        /// The entry's index in the request.
        index: usize,
        /// Its key.
        key: String,
        /// What is wrong with it.
        source: Box<Error>,
    },
    /// A remote context store refused the call (its message names the
    /// field); the orchestrator's view of the store service's errors that
    /// have no richer variant here.
    #[error("{message}")]
    Remote {
        /// The store service's status code.
        code: Code,
        /// Its message.
        message: String,
    },
}

impl Error {
    /// An `InvalidArgument` for `field`.
    pub fn invalid(field: &'static str, message: impl Into<String>) -> Self {
        Self::InvalidArgument {
            field,
            message: message.into(),
        }
    }

    /// `entries[1].key: appears twice in the batch (key "d")`: the entry's
    /// field first, as every other message names its field.
    fn describe_entry(&self) -> String {
        let Self::InEntry { index, key, source } = self else {
            return self.to_string();
        };
        // A remote store's message names the entry already.
        if let Self::Remote { message, .. } = &**source {
            return message.clone();
        }
        let text = source.to_string();
        match source.field() {
            Some(f) if text.starts_with(&format!("{f}: ")) && !f.starts_with("quotas.") => {
                format!("entries[{index}].{text} (key {key:?})")
            }
            _ => format!("entries[{index}] (key {key:?}): {text}"),
        }
    }

    /// `source`, about entry `index` (key `key`) of a batch.
    pub fn in_entry(index: usize, key: &str, source: Error) -> Self {
        Self::InEntry {
            index,
            key: key.to_owned(),
            source: Box::new(source),
        }
    }

    /// The request field the error is about, if any: `entries[3].value`
    /// for an entry of a batch; a tenant quota names itself
    /// (`quotas.bytes`), whatever entry went over it.
    pub fn field(&self) -> Option<std::borrow::Cow<'static, str>> {
        use std::borrow::Cow::Borrowed;
        match self {
            Self::InvalidArgument { field, .. } | Self::Exhausted { field, .. } => {
                Some(Borrowed(field))
            }
            Self::NotFound { .. } | Self::TraceKeysQuota { .. } => Some(Borrowed("key")),
            Self::ValueTooLarge { .. } | Self::TraceBytesQuota { .. } => Some(Borrowed("value")),
            Self::VersionMismatch { .. } => Some(Borrowed("expected_version")),
            Self::InEntry { source, .. } if matches!(**source, Self::Exhausted { .. }) => {
                source.field()
            }
            Self::InEntry { index, source, .. } => source
                .field()
                .map(|f| format!("entries[{index}].{f}").into()),
            _ => None,
        }
    }
}

/// Metadata key naming the request field an error is about.
pub const FIELD_METADATA: &str = "baton-field";
/// Metadata key carrying a slot's current version on a version mismatch.
pub const CURRENT_VERSION_METADATA: &str = "baton-current-version";
/// Metadata key carrying the index of the batch entry an error is about
/// (a batched write's refused entry), whatever its field says (a tenant
/// quota names itself, not the entry).
pub const ENTRY_METADATA: &str = "baton-entry";

impl Error {
    /// The gRPC code this error is reported with.
    pub fn code(&self) -> Code {
        match self {
            Error::InvalidArgument { .. } => Code::InvalidArgument,
            Error::NotFound { .. } => Code::NotFound,
            Error::ValueTooLarge { .. }
            | Error::TraceBytesQuota { .. }
            | Error::TraceKeysQuota { .. }
            | Error::OutOfMemory
            | Error::Exhausted { .. } => Code::ResourceExhausted,
            Error::VersionMismatch { .. } | Error::WatchLagged { .. } => Code::Aborted,
            Error::Unavailable(_) | Error::ShuttingDown => Code::Unavailable,
            Error::Internal(_) => Code::Internal,
            Error::Remote { code, .. } => *code,
            Error::InEntry { source, .. } => source.code(),
        }
    }
}

impl From<Error> for Status {
    fn from(e: Error) -> Self {
        let code = e.code();
        let mut status = Status::new(code, e.to_string());
        if let Some(field) = e.field()
            && let Ok(value) = MetadataValue::try_from(field.as_ref())
        {
            status.metadata_mut().insert(FIELD_METADATA, value);
        }
        let inner = match &e {
            Error::InEntry { index, source, .. } => {
                status
                    .metadata_mut()
                    .insert(ENTRY_METADATA, MetadataValue::from(*index as u64));
                source
            }
            e => e,
        };
        if let Error::VersionMismatch {
            current: Some(v), ..
        } = inner
        {
            status
                .metadata_mut()
                .insert(CURRENT_VERSION_METADATA, MetadataValue::from(*v));
        }
        status
    }
}

impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Self {
        // Connection trouble is retryable; a full Redis is a resource limit;
        // anything else is a bug on our side (a script error, an unexpected
        // reply) and must not be retried blindly.
        if e.code() == Some("OOM") {
            Error::OutOfMemory
        } else if e.is_io_error()
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || e.is_timeout()
            || e.is_cluster_error()
            || matches!(
                e.kind(),
                redis::ErrorKind::Server(redis::ServerErrorKind::BusyLoading)
                    | redis::ErrorKind::Server(redis::ServerErrorKind::TryAgain)
                    | redis::ErrorKind::Server(redis::ServerErrorKind::ClusterDown)
                    | redis::ErrorKind::Server(redis::ServerErrorKind::MasterDown)
                    | redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
                    | redis::ErrorKind::ClusterConnectionNotFound
            )
        {
            Error::Unavailable(e.to_string())
        } else {
            Error::Internal(format!("redis: {e}"))
        }
    }
}
