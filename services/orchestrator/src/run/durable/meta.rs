//! A durable run's record as Redis keeps it: how it started
//! ([`RunMeta`]), how it ended ([`RunEnd`]), and the decoding of hashes and
//! stream entries.

use std::collections::HashMap;

use baton_proto::v1 as pb;
use prost::Message as _;
use redis::Value;

use crate::error::Error;
use crate::run::view::{Origin, RunView, from_ms, waiting_for};

/// How a run started, as its metadata keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunMeta {
    /// The run's id.
    pub run_id: String,
    /// Its trace.
    pub trace_id: String,
    /// The tenant that started it.
    pub tenant: String,
    /// What started it.
    pub kind: pb::RunKind,
    /// Agent, group or pipeline name.
    pub target: String,
    /// When it started (ms since the epoch).
    pub started_ms: i64,
    /// Whether it outlives its caller.
    pub detached: bool,
    /// Where it is.
    pub status: pb::RunStatus,
    /// When it ended (ms since the epoch), once ended.
    pub ended_ms: Option<i64>,
    /// The final output, once completed.
    pub output: String,
    /// The run context, once ended.
    pub run_context_json: String,
    /// Totals, once ended.
    pub usage: pb::Usage,
    /// The failure's code, once failed.
    pub error_code: i32,
    /// The failure's or cancellation's message.
    pub error_message: String,
    /// The seq of its last logged event.
    pub last_seq: u64,
    /// Approvals waiting for a person.
    pub waiting_approvals: u32,
    /// Input requests waiting for a person.
    pub waiting_inputs: u32,
    /// For a fork: the run and seq it was forked from (field `ff`).
    pub forked_from: Option<Origin>,
    /// For a replay: the run it replays (field `ro`).
    pub replay_of: Option<String>,
    /// For a case of an experiment: the experiment (field `ex`).
    pub experiment: Option<String>,
    /// For a run a schedule started: the schedule and the tick (fields
    /// `sd`, `st`).
    pub schedule: Option<(String, i64)>,
    /// Its live scores, once scored (field `sc`: a `LiveScores`).
    pub scores: Vec<pb::Score>,
    /// For a replay: whether it is strict (field `rs`).
    pub replay_strict: bool,
    /// For a replay that has ended: whether it diverged (field `rd`).
    pub replay_diverged: bool,
    /// For a run in a conversation (field `cv`).
    pub conversation: Option<crate::conversation::link::Link>,
    /// For an ended run in a conversation: its append, encoded (field
    /// `cv_end`; see `durable::sequencer`).
    pub conversation_end: Option<Vec<u8>>,
}

impl RunMeta {
    /// What the core answers about the run (GetRun, ListRuns).
    pub fn to_view(&self) -> RunView {
        RunView {
            run_id: self.run_id.clone(),
            trace_id: self.trace_id.clone(),
            kind: self.kind,
            target: self.target.clone(),
            status: self.status,
            started_at: from_ms(self.started_ms),
            ended_at: self.ended_ms.map(from_ms),
            output: self.output.clone(),
            run_context_json: self.run_context_json.clone(),
            usage: self.usage.clone(),
            error_code: self.error_code,
            error_message: self.error_message.clone(),
            last_seq: self.last_seq,
            detached: self.detached,
            waiting_for: if self.waits() {
                waiting_for(self.waiting_approvals > 0, self.waiting_inputs > 0)
            } else {
                Vec::new()
            },
            forked_from: self.forked_from.clone(),
            replay_of: self.replay_of.clone(),
            experiment: self.experiment.clone(),
            schedule: self.schedule.clone(),
            scores: self.scores.clone(),
            replay_diverged: self.replay_diverged,
            history_gone: false,
            conversation_id: self
                .conversation
                .as_ref()
                .map(|l| l.id.clone())
                .unwrap_or_default(),
        }
    }

    /// Whether the run is running and waits for a person.
    pub fn waits(&self) -> bool {
        self.status == pb::RunStatus::Running
            && (self.waiting_approvals > 0 || self.waiting_inputs > 0)
    }
}

/// How a run ended, written with its terminal event.
#[derive(Debug, Clone)]
pub struct RunEnd {
    /// Completed, failed or cancelled.
    pub status: pb::RunStatus,
    /// When (ms since the epoch).
    pub ended_ms: i64,
    /// The final output.
    pub output: String,
    /// The run context.
    pub run_context_json: String,
    /// Totals; `None` leaves those the run wrote as it ran (a run ended
    /// for its replica, which knows nothing of what it spent).
    pub usage: Option<pb::Usage>,
    /// The failure's code.
    pub error_code: i32,
    /// The failure's or cancellation's message.
    pub error_message: String,
    /// For a replay: whether it diverged.
    pub replay_diverged: bool,
    /// For a run in a conversation: its append, encoded (`cv_end`),
    /// applied after this write (see `durable::sequencer`).
    pub conversation: Option<Vec<u8>>,
}

impl RunEnd {
    pub(super) fn fields(&self) -> Vec<(&'static str, Vec<u8>)> {
        let mut fields = vec![
            ("status", (self.status as i32).to_string().into_bytes()),
            ("ended_ms", self.ended_ms.to_string().into_bytes()),
            ("output", self.output.clone().into_bytes()),
            (
                "run_context_json",
                self.run_context_json.clone().into_bytes(),
            ),
            ("error_code", self.error_code.to_string().into_bytes()),
            ("error_message", self.error_message.clone().into_bytes()),
            (
                "rd",
                u8::from(self.replay_diverged).to_string().into_bytes(),
            ),
        ];
        if let Some(usage) = &self.usage {
            fields.push(("usage", usage.encode_to_vec()));
        }
        if let Some(end) = &self.conversation {
            fields.push(("cv_end", end.clone()));
        }
        fields
    }
}

pub(super) fn decode_meta(run_id: &str, f: &HashMap<String, Vec<u8>>) -> Option<RunMeta> {
    if !f.contains_key("epoch") {
        return None;
    }
    let text = |k: &str| {
        f.get(k)
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .unwrap_or_default()
    };
    let num = |k: &str| text(k).parse::<i64>().unwrap_or(0);
    Some(RunMeta {
        run_id: run_id.to_owned(),
        trace_id: text("trace_id"),
        tenant: text("tenant"),
        kind: pb::RunKind::try_from(num("kind") as i32).unwrap_or(pb::RunKind::Unspecified),
        target: text("target"),
        started_ms: num("started_ms"),
        detached: num("detached") == 1,
        status: pb::RunStatus::try_from(num("status") as i32).unwrap_or(pb::RunStatus::Unspecified),
        ended_ms: f.contains_key("ended_ms").then(|| num("ended_ms")),
        output: text("output"),
        run_context_json: text("run_context_json"),
        usage: f
            .get("usage")
            .and_then(|u| pb::Usage::decode(u.as_slice()).ok())
            .unwrap_or_default(),
        error_code: num("error_code") as i32,
        error_message: text("error_message"),
        last_seq: num("last_seq").max(0) as u64,
        waiting_approvals: num("wait_ap").clamp(0, i64::from(u32::MAX)) as u32,
        waiting_inputs: num("wait_in").clamp(0, i64::from(u32::MAX)) as u32,
        forked_from: Origin::from_field(&text("ff"), text("fe") == "1"),
        replay_of: Some(text("ro")).filter(|r| !r.is_empty()),
        experiment: Some(text("ex")).filter(|r| !r.is_empty()),
        schedule: Some(text("sd"))
            .filter(|r| !r.is_empty())
            .map(|s| (s, num("st"))),
        scores: f
            .get("sc")
            .and_then(|b| pb::LiveScores::decode(b.as_slice()).ok())
            .map(|l| l.scores)
            .unwrap_or_default(),
        replay_strict: num("rs") == 1,
        replay_diverged: num("rd") == 1,
        conversation: crate::conversation::link::Link::from_field(&text("cv")),
        conversation_end: f.get("cv_end").cloned(),
    })
}

/// Events of `XRANGE`/`XREAD` entries: `[[id, [field, value, …]], …]`.
pub(super) fn decode_entries(reply: &Value) -> Result<Vec<pb::RunEvent>, Error> {
    let Value::Array(entries) = reply else {
        return Ok(Vec::new());
    };
    let mut out = Vec::with_capacity(entries.len());
    for entry in entries {
        let Value::Array(parts) = entry else { continue };
        let Some(Value::Array(fields)) = parts.get(1) else {
            continue;
        };
        if let Some(Value::BulkString(bytes)) = fields.get(1) {
            let event = pb::RunEvent::decode(bytes.as_slice())
                .map_err(|e| Error::Internal(format!("run store: a logged event: {e}")))?;
            out.push(event);
        }
    }
    Ok(out)
}
