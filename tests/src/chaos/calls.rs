//! What the workload's clients send with their answers, and how one
//! answer sent once ends: shared by the clients (`workload`) and the rule
//! that checks answers (`answers`). A leaf but for `history`'s outcome.

use std::time::Duration;

use tonic::Code;

use super::history::Outcome;

/// The deadline of one call of a client (a start, a WatchRun's first
/// answer, an answer).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(3);

/// The outcome of an answer sent once, with no retry (a rival's, a late
/// second answer): refused for the codes that say nothing was done,
/// unknown for any other error or no answer within [`CALL_TIMEOUT`].
pub async fn once(call: impl Future<Output = Result<(), baton_client::Error>>) -> Outcome {
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(Ok(())) => Outcome::Ok,
        Ok(Err(e)) => match e.code() {
            Code::FailedPrecondition | Code::NotFound | Code::InvalidArgument => Outcome::Refused {
                code: e.code(),
                message: e.message(),
            },
            code => Outcome::Unknown(format!("{code:?}: {}", e.message())),
        },
        Err(_) => Outcome::Unknown(format!("no answer within {CALL_TIMEOUT:?}")),
    }
}

/// The reason sent with every approval of run `run_id` (so the checker
/// can tell the applied answer is the client's).
pub fn approval_reason(run_id: &str) -> String {
    format!("approved by the chaos client of {run_id}")
}

/// The reason a rival approves run `run_id` with (see [`Answer::rival`]).
pub fn rival_reason(run_id: &str) -> String {
    format!("approved by a rival of the chaos client of {run_id}")
}
