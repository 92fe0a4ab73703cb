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

    /// Whether the server refused it as answered before.
    pub fn already_answered(&self) -> bool {
        matches!(self, Self::Refused { message, .. } if message.contains("already answered"))
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
    /// Every event received, every copy, in arrival order.
    pub events: Vec<pb::RunEvent>,
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
    pub fn started(&self, run_id: &str, item: &'static str, expected: Expected) {
        self.with(|s| {
            s.runs.entry(run_id.to_owned()).or_insert_with(|| Tracked {
                run_id: run_id.to_owned(),
                item,
                expected,
                events: Vec::new(),
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

    /// Every run tracked, by id.
    pub fn snapshot(&self) -> Vec<Tracked> {
        self.with(|s| s.runs.values().cloned().collect())
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
