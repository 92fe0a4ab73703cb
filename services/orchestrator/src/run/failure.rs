//! Why something inside a run failed: one type for every error a run's
//! parts hand each other (a frame, a step, a tool the run itself refuses),
//! carrying the gRPC code a root failure is reported with.

use tonic::Code;

/// Why something inside a run failed: the gRPC code a root failure is
/// reported with (`RunFailed.code`) and what went wrong.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The code.
    pub code: Code,
    /// What went wrong.
    pub message: String,
}

impl Failure {
    /// A failure with `code`.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}
