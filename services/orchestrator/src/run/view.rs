//! [`RunView`]: what the core answers about a run (GetRun, and each entry
//! of ListRuns), whether it is read from this replica's record or from the
//! run store. Faces convert it to their wire form.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use baton_proto::v1 as pb;

/// A run as the core shows it. Status, kind and usage are the event
/// vocabulary's (`baton.v1`), which the run store keeps as they are.
#[derive(Debug, Clone, PartialEq)]
pub struct RunView {
    /// The run.
    pub run_id: String,
    /// Its trace.
    pub trace_id: String,
    /// Agent or pipeline.
    pub kind: pb::RunKind,
    /// The agent, group or pipeline it runs.
    pub target: String,
    /// Where it is.
    pub status: pb::RunStatus,
    /// When it started.
    pub started_at: SystemTime,
    /// When it ended, once it has.
    pub ended_at: Option<SystemTime>,
    /// The final output (once completed).
    pub output: String,
    /// The run context (JSON text), once ended.
    pub run_context_json: String,
    /// Totals so far.
    pub usage: pb::Usage,
    /// The failure's code (0 unless failed).
    pub error_code: i32,
    /// The failure's or cancellation's message.
    pub error_message: String,
    /// The seq of its last event.
    pub last_seq: u64,
    /// Whether it outlives its caller's stream.
    pub detached: bool,
    /// What a running run waits for a person on (see [`waiting_for`]).
    pub waiting_for: Vec<&'static str>,
    /// For a fork: the run and the seq it was forked from.
    pub forked_from: Option<Origin>,
    /// For a replay: the run it replays.
    pub replay_of: Option<String>,
    /// For a case of an experiment: the experiment.
    pub experiment: Option<String>,
    /// For a run a schedule started: the schedule and the tick (ms).
    pub schedule: Option<(String, i64)>,
    /// Its live scores, once scored.
    pub scores: Vec<baton_proto::v1::Score>,
    /// For a replay that has ended: whether it differed from its recording.
    pub replay_diverged: bool,
    /// Its history (events, recording) was evicted for room: GetRun has
    /// its result, nothing can watch, fork or replay it.
    pub history_gone: bool,
    /// The conversation it belongs to ("" none).
    pub conversation_id: String,
}

/// Where a fork came from: the original run and the seq of its fork point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The original run.
    pub run_id: String,
    /// The seq of the fork point in it.
    pub seq: u64,
    /// The point's outcome was edited (not a retry, not a run-context
    /// edit): the fork's first live event is the point's, edited.
    pub edited: bool,
}

impl Origin {
    /// As the API says it.
    pub fn to_pb(&self) -> pb::RunOrigin {
        pb::RunOrigin {
            run_id: self.run_id.clone(),
            seq: self.seq,
            edited: self.edited,
        }
    }

    /// As the run store keeps it (`{seq} {run_id}`; `edited` is a field of
    /// its own, `fe`, so a replica of an earlier version still reads this
    /// one), and back.
    pub fn to_field(&self) -> String {
        format!("{} {}", self.seq, self.run_id)
    }

    /// See [`Self::to_field`].
    pub fn from_field(field: &str, edited: bool) -> Option<Self> {
        let (seq, run_id) = field.split_once(' ')?;
        Some(Self {
            run_id: run_id.to_owned(),
            seq: seq.parse().ok()?,
            edited,
        })
    }
}

/// What a run waits for a person on, as the API says it: `approval` when
/// an approval is open, `input` when an input request is (in that order).
pub fn waiting_for(approvals: bool, inputs: bool) -> Vec<&'static str> {
    let mut out = Vec::new();
    if approvals {
        out.push("approval");
    }
    if inputs {
        out.push("input");
    }
    out
}

/// A page of runs: the runs, and the token of the next page (empty on the
/// last one).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunPage {
    /// The runs, oldest first.
    pub runs: Vec<RunView>,
    /// Where the next page starts (`v1.{run_id}`), empty when there is none.
    pub next_page_token: String,
}

impl RunPage {
    /// A page of `runs`, with a next page when there are `more`.
    pub fn new(runs: Vec<RunView>, more: bool) -> Self {
        let next_page_token = match runs.last() {
            Some(last) if more => page_token(&last.run_id),
            _ => String::new(),
        };
        Self {
            runs,
            next_page_token,
        }
    }
}

/// The token of the page after the one ending with run `run_id`.
pub fn page_token(run_id: &str) -> String {
    format!("v1.{run_id}")
}

/// The run `after` which a page starts, from its token; `None` when the
/// token is not one [`page_token`] made.
pub fn parse_page_token(token: &str) -> Option<&str> {
    token
        .strip_prefix("v1.")
        .filter(|id| uuid::Uuid::try_parse(id).is_ok())
}

/// A time in ms since the epoch (the run store's form).
pub fn from_ms(ms: i64) -> SystemTime {
    if ms >= 0 {
        UNIX_EPOCH + Duration::from_millis(ms as u64)
    } else {
        UNIX_EPOCH - Duration::from_millis(ms.unsigned_abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_origin_is_kept_and_read_back_whole_and_an_older_field_still_reads() {
        for edited in [false, true] {
            let o = Origin {
                run_id: "01a22588-5c9d-70b2-aa54-9537c20cbc5e".into(),
                seq: 35,
                edited,
            };
            assert_eq!(Origin::from_field(&o.to_field(), edited), Some(o.clone()));
            // A replica of an earlier version reads the same field.
            assert_eq!(o.to_field(), "35 01a22588-5c9d-70b2-aa54-9537c20cbc5e");
        }
        let old = Origin::from_field("35 01a22588", false).expect("reads");
        assert_eq!((old.seq, old.edited), (35, false));
        assert_eq!(Origin::from_field("35x 01a22588", false), None);
    }
}
