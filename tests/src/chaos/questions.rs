//! The questions a run's events ask and resolve, as the workload's clients
//! read them.

use std::time::{Instant, SystemTime};

use baton_client::pb::{self, run_event::Payload};

use super::history::QuestionKind;

/// A question an event asks.
pub struct Asked {
    /// The approval or input request id.
    pub id: String,
    /// Approval or input.
    pub kind: QuestionKind,
    /// The asking event's seq.
    pub seq: u64,
    /// An input request's options (none for an approval).
    pub options: Vec<String>,
    /// When silence closes it.
    pub deadline: Option<SystemTime>,
}

/// The question `e` asks, if it asks one.
pub fn asked(e: &pb::RunEvent) -> Option<Asked> {
    let (id, kind, options, deadline) = match &e.payload {
        Some(Payload::ApprovalRequested(q)) => (
            &q.approval_id,
            QuestionKind::Approval,
            Vec::new(),
            q.deadline.as_ref(),
        ),
        Some(Payload::InputRequested(q)) => (
            &q.input_id,
            QuestionKind::Input,
            q.options.clone(),
            q.deadline.as_ref(),
        ),
        _ => return None,
    };
    Some(Asked {
        id: id.clone(),
        kind,
        seq: e.seq,
        options,
        deadline: deadline.and_then(|t| SystemTime::try_from(*t).ok()),
    })
}

/// The question `e` resolves (answered, or closed at its deadline).
pub fn resolved(e: &pb::RunEvent) -> Option<&str> {
    match &e.payload {
        Some(Payload::ApprovalResolved(r)) => Some(&r.approval_id),
        Some(Payload::InputReceived(r)) => Some(&r.input_id),
        Some(Payload::InputTimedOut(r)) => Some(&r.input_id),
        _ => None,
    }
}

/// Where a question stands, for the client.
#[derive(Default)]
pub(super) struct QuestionState {
    /// The answer chosen (the same on every attempt).
    pub(super) value: Option<String>,
    /// An attempt was taken (Ok).
    pub(super) taken: bool,
    /// An attempt was refused as already answered.
    pub(super) refused_answered: bool,
    /// Its resolution was seen on a stream.
    pub(super) resolved: bool,
    /// A rival answered it (once, at the client's first answer).
    pub(super) rivalled: bool,
    /// When silence closes it.
    pub(super) deadline: Option<SystemTime>,
}

/// A question asked again after its answer was taken: answer again if it
/// is still open at `due`.
pub(super) struct Reask {
    pub(super) id: String,
    pub(super) kind: QuestionKind,
    pub(super) seq: u64,
    pub(super) due: Instant,
}
