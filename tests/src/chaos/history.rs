//! What the clients saw and did, run by run: every copy of every event
//! they received (a re-attach may deliver a seq again; the checker wants
//! each copy), every answer they gave with its outcome, and what each run
//! should end with. The checker judges this history; nothing here judges.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use baton_client::pb;

/// A copy of an event a client received, kept small (a soak sees
/// millions): its seq, a digest of its encoding — two copies are the same
/// event exactly when their digests are equal — and what it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// The event's seq.
    pub seq: u64,
    /// A digest of the whole encoded event (see [`digest`]).
    pub digest: u64,
    /// Its kind (`ToolCallCompleted`, …).
    pub kind: &'static str,
    /// Its context.
    pub context: String,
}

impl Seen {
    /// The copy of `e`.
    pub fn of(e: &pb::RunEvent) -> Self {
        Self {
            seq: e.seq,
            digest: digest(e),
            kind: crate::events::kind(e),
            context: e.context_id.clone(),
        }
    }
}

impl std::fmt::Display for Seen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "seq {} {} in {}", self.seq, self.kind, self.context)
    }
}

/// A digest of `e`'s encoding (the same within one process). Map fields
/// (`RunStarted.labels`, `PipelineCompleted.outputs`) are encoded in hash
/// order, which differs between processes: they are digested sorted.
pub fn digest(e: &pb::RunEvent) -> u64 {
    use pb::run_event::Payload;
    use prost::Message as _;
    use std::hash::{Hash as _, Hasher as _};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let mut e = e.clone();
    let map = match &mut e.payload {
        Some(Payload::RunStarted(r)) => Some(std::mem::take(&mut r.labels)),
        Some(Payload::PipelineCompleted(p)) => Some(std::mem::take(&mut p.outputs)),
        _ => None,
    };
    if let Some(map) = map {
        let mut entries: Vec<_> = map.into_iter().collect();
        entries.sort();
        entries.hash(&mut h);
    }
    e.encode_to_vec().hash(&mut h);
    h.finish()
}

/// What a run must end with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expected {
    /// Exactly this output.
    Exact(String),
    /// An output starting with this.
    Prefix(String),
}

impl Expected {
    /// Whether `output` is what was expected.
    pub fn matches(&self, output: &str) -> bool {
        match self {
            Self::Exact(want) => output == want,
            Self::Prefix(want) => output.starts_with(want.as_str()) && output.len() > want.len(),
        }
    }
}

impl std::fmt::Display for Expected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Exact(want) => write!(f, "{want:?}"),
            Self::Prefix(want) => write!(f, "{want:?}…"),
        }
    }
}

/// Which question an answer was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuestionKind {
    /// ResolveApproval.
    Approval,
    /// SubmitInput.
    Input,
}

/// How an answer attempt ended, as the client saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The server took it.
    Ok,
    /// The server refused it.
    Refused {
        /// The status code.
        code: tonic::Code,
        /// The status message.
        message: String,
    },
    /// Unknown: the connection broke, the call timed out, or the replica
    /// was unavailable — it may or may not have been taken.
    Unknown(String),
}

impl Outcome {
    /// Whether the server may have taken the answer.
    pub fn may_have_applied(&self) -> bool {
        !matches!(self, Self::Refused { .. })
    }

    /// Whether the server refused it as answered before ("already
    /// answered", or "already resolved").
    pub fn already_answered(&self) -> bool {
        matches!(self, Self::Refused { message, .. }
            if message.contains("already answered") || message.contains("already resolved"))
    }

    /// Whether the server refused it as past the question's deadline.
    pub fn too_late(&self) -> bool {
        matches!(self, Self::Refused { message, .. } if message.contains("has passed"))
    }
}

/// One answer attempt.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The approval or input request id.
    pub question: String,
    /// What was answered: `approved` for approvals, the text for input.
    pub value: String,
    /// The replica asked (its index).
    pub replica: usize,
    /// When, since the chaos run began.
    pub at: Duration,
    /// How it ended.
    pub outcome: Outcome,
    /// Whether the client let the run park first (answered after
    /// `park_after` with no watcher attached).
    pub parked: bool,
    /// A rival's: another caller answering the same approval at the same
    /// moment on another replica, with its own reason (one call, no
    /// retry). Of the two, exactly one may be told OK.
    pub rival: bool,
    /// A second answer of the client's, sent to another replica the moment
    /// its first was told OK (one call, no retry): it races the run going
    /// on past the question and ending, and must never be told OK.
    pub late: bool,
    /// On a tight run (see [`super::deadline`]): the milliseconds left
    /// before the question's deadline when the answer was sent (negative
    /// once it passed).
    pub margin_ms: Option<i64>,
}

/// Everything known of one run the workload started.
#[derive(Debug, Clone)]
pub struct Tracked {
    /// The run's id.
    pub run_id: String,
    /// The workload item (`assistant`, `pipeline`, …).
    pub item: &'static str,
    /// What it must end with.
    pub expected: Expected,
    /// Started with a short deadline for its questions, answered near it
    /// (see [`super::deadline`]).
    pub tight: bool,
    /// Every event received, every copy, in arrival order.
    pub copies: Vec<Seen>,
    /// Every answer attempt, in order.
    pub answers: Vec<Answer>,
    /// Questions asked again after a RunResumed although an answer to them
    /// had been taken (Ok), which were still open a while later: the
    /// question, the seq of the repeated request and what happened.
    pub asked_again: Vec<(String, u64, String)>,
    /// Whether the client followed the run to its terminal event.
    pub followed_to_end: bool,
    /// The client's notes on following it (errors, re-attaches given up).
    pub notes: Vec<String>,
}

/// The history of a chaos run, shared by its clients.
#[derive(Debug, Clone, Default)]
pub struct History(Arc<Mutex<State>>);

#[derive(Debug, Default)]
struct State {
    runs: BTreeMap<String, Tracked>,
    failed_starts: Vec<String>,
}

impl History {
    /// Starts tracking `run_id`.
    pub fn started(&self, run_id: &str, item: &'static str, expected: Expected, tight: bool) {
        self.with(|s| {
            s.runs.entry(run_id.to_owned()).or_insert_with(|| Tracked {
                run_id: run_id.to_owned(),
                item,
                expected,
                tight,
                copies: Vec::new(),
                answers: Vec::new(),
                asked_again: Vec::new(),
                followed_to_end: false,
                notes: Vec::new(),
            });
        });
    }

    /// Changes `run_id`'s tracking record.
    pub fn update(&self, run_id: &str, f: impl FnOnce(&mut Tracked)) {
        self.with(|s| {
            if let Some(t) = s.runs.get_mut(run_id) {
                f(t);
            }
        });
    }

    /// Every run tracked, by id, taken out of the history (once the
    /// clients are done).
    pub fn take(&self) -> Vec<Tracked> {
        self.with(|s| std::mem::take(&mut s.runs).into_values().collect())
    }

    /// Records a start that failed on every replica tried (no run id
    /// learned): the item and the last error.
    pub fn start_failed(&self, what: String) {
        self.with(|s| s.failed_starts.push(what));
    }

    /// The starts that failed.
    pub fn failed_starts(&self) -> Vec<String> {
        self.with(|s| s.failed_starts.clone())
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut state = self.0.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pb::run_event::Payload;

    fn outputs(keys: impl Iterator<Item = u32>) -> pb::RunEvent {
        pb::RunEvent {
            seq: 7,
            payload: Some(Payload::PipelineCompleted(pb::PipelineCompleted {
                success: true,
                outputs: keys
                    .map(|k| (format!("step{k}"), format!("out{k}")))
                    .collect(),
                ..Default::default()
            })),
            ..Default::default()
        }
    }

    #[test]
    fn equal_events_have_equal_digests_whatever_their_maps_order() {
        let a = outputs(0..32);
        let b = outputs((0..32).rev());
        assert_eq!(a, b);
        // The premise: two maps of one content encode in different orders.
        use prost::Message as _;
        assert_ne!(a.encode_to_vec(), b.encode_to_vec());
        assert_eq!(digest(&a), digest(&b));
        assert_ne!(digest(&a), digest(&outputs(0..31)));
    }
}
