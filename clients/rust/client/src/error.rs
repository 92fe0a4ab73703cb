//! The client's error type.

use tonic::Code;

/// What a client call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The endpoint could not be reached or is malformed.
    #[error("cannot connect to {endpoint}: {message}")]
    Connect {
        /// The endpoint.
        endpoint: String,
        /// What went wrong.
        message: String,
    },
    /// The server answered with an error status.
    #[error("{}: {}", baton_proto::code_name(.0.code()), .0.message())]
    Status(tonic::Status),
}

// Not `#[from]`: that would make the status the error's source too, and
// error reports would print its message twice.
impl From<tonic::Status> for Error {
    fn from(s: tonic::Status) -> Self {
        Error::Status(s)
    }
}

impl Error {
    /// The gRPC status code (`Unavailable` for connection errors).
    pub fn code(&self) -> Code {
        match self {
            Error::Connect { .. } => Code::Unavailable,
            Error::Status(s) => s.code(),
        }
    }

    /// The request field the server says is at fault, if any.
    pub fn field(&self) -> Option<&str> {
        self.metadata("baton-field")
    }

    /// On a version mismatch: the slot's current version (absent when the
    /// slot does not exist).
    pub fn current_version(&self) -> Option<u64> {
        self.metadata("baton-current-version")?.parse().ok()
    }

    /// On a batched write's refusal: the index of the entry refused.
    pub fn entry(&self) -> Option<usize> {
        self.metadata("baton-entry")?.parse().ok()
    }

    /// The message the server gave.
    pub fn message(&self) -> String {
        match self {
            Error::Connect { message, .. } => message.clone(),
            Error::Status(s) => s.message().to_owned(),
        }
    }

    fn metadata(&self, key: &str) -> Option<&str> {
        match self {
            Error::Status(s) => s.metadata().get(key)?.to_str().ok(),
            Error::Connect { .. } => None,
        }
    }
}

/// An error and its sources, `transport error: … : Connection refused`,
/// without repeating a source its parent already quotes.
pub fn cause_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}
