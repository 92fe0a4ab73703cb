//! Planning a fork: from a run's history (its events from seq 1 and its
//! recording) and a fork point, what the fork starts with — the events it
//! replays and the journal it runs with — before anything runs.
//!
//! - The fork point is an event that ends a durable point of the run: a
//!   model turn (`t/`), a tool call (`c/`), a person's decision (`ap/`) or
//!   input (`in/`), a step attempt (`sc/`, `sf/`).
//! - Every point recorded before it is in the fork's journal: the fork takes
//!   it from there and does not do it again (nothing is called again). Store
//!   writes (`sw/`) are left out, so the fork writes its steps' outputs into
//!   its own trace; questions asked but not answered before the point
//!   (`q/`) too, so the fork asks them afresh with deadlines of its own.
//! - The point itself: with an edit, its record is replaced and its event
//!   (edited) ends the replayed part; without one, it is done again, live.
//! - The events before the point are the fork's first events, marked
//!   `replayed` and numbered again from 1 — without those of what was in
//!   flight at the point that the fork does again and sends again (a tool's
//!   progress, a question, a model turn's streamed text that had not
//!   ended). A tool call in flight keeps its `ToolCallStarted` (the fork
//!   makes the call again without announcing it twice).

use std::collections::{HashMap, HashSet};

use baton_proto::v1::{self as pb, run_event::Payload};

use super::{
    events::kind_of,
    log::{PackedChunk, Recorded},
    view::Origin,
};
use crate::error::Error;

/// What replaces the fork point's outcome, with the record the run reads
/// instead of the recorded one (its format is the point's unit's).
pub struct Edit {
    /// The units it may replace: `t/`, `c/`, `ap/`, `in/`, `sc/`+`sf/`.
    pub kind: PointKind,
    /// The field of the request it came from (`edit.tool_result`), for
    /// errors.
    pub field: &'static str,
    /// Edits the point's event (of the point's unit) and gives the unit
    /// and record the fork's journal holds for it.
    #[allow(clippy::type_complexity)]
    pub build: Box<dyn FnOnce(&str, &mut Payload) -> (String, Vec<u8>) + Send>,
}

/// The kinds of fork points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PointKind {
    /// A model turn (`MessageCompleted`).
    ModelTurn,
    /// A tool call (`ToolCallCompleted`).
    ToolCall,
    /// A person's decision (`ApprovalResolved`).
    Approval,
    /// A person's input (`InputReceived`).
    Input,
    /// A pipeline step's attempt (`StepCompleted`, `StepFailed`).
    Step,
    /// Any of them: a run-context edit, the point taken as recorded.
    Any,
}

impl PointKind {
    fn of_unit(unit: &str) -> Option<Self> {
        let (kind, _) = unit.split_once('/')?;
        Some(match kind {
            "t" => Self::ModelTurn,
            "c" => Self::ToolCall,
            "ap" => Self::Approval,
            "in" => Self::Input,
            "sc" | "sf" => Self::Step,
            _ => return None,
        })
    }

    /// What the API calls it.
    pub fn name(self) -> &'static str {
        match self {
            Self::ModelTurn => "a model turn (MessageCompleted)",
            Self::ToolCall => "a tool call's result (ToolCallCompleted)",
            Self::Approval => "a person's decision (ApprovalResolved)",
            Self::Input => "a person's input (InputReceived)",
            Self::Step => "a pipeline step (StepCompleted or StepFailed)",
            Self::Any => "a fork point",
        }
    }

    /// The edit field that fits it.
    pub fn edit_field(self) -> &'static str {
        match self {
            Self::ModelTurn => "edit.model_turn",
            Self::ToolCall => "edit.tool_result",
            Self::Approval => "edit.approval",
            Self::Input => "edit.input",
            Self::Step => "edit.step_output",
            Self::Any => "edit.run_context_json",
        }
    }
}

/// A run's history, as a fork reads it.
#[derive(Default)]
pub struct History {
    /// Its events from seq 1 up to the fork point at least.
    pub events: Vec<pb::RunEvent>,
    /// Its durable points.
    pub recording: Vec<Recorded>,
    /// The first chunks of its log, packed, when they are at hand (memory
    /// mode): the fork's log copies them instead of encoding its first
    /// events again.
    pub packed: Vec<PackedChunk>,
}

/// What a fork starts with.
#[derive(Debug)]
pub struct Plan {
    /// Its first events (the fork's ids, seqs from 1): replayed, then the
    /// edited point's when there is an edit.
    pub events: Vec<pb::RunEvent>,
    /// Its journal, each point with the seq of its event in the fork.
    pub recording: Vec<Recorded>,
    /// The tool calls in flight at the point (their units) whose
    /// `ToolCallStarted` is among the replayed events.
    pub announced: HashSet<String>,
    /// The origin's packed chunks ([`History::packed`]).
    pub packed: Vec<PackedChunk>,
    /// How many of the first events are the origin's, with the same seqs,
    /// unchanged but for `replayed` (and the first event's fork fields).
    pub same: usize,
}

/// The fork point `at` of run `origin_run` whose history is `history`,
/// edited by `edit`; INVALID_ARGUMENT naming the field when `at` is not a
/// fork point or the edit does not fit it, OUT_OF_RANGE when `at` is past
/// the run's last event. The events come without ids: the caller gives
/// them the fork's where they go out.
pub fn plan(
    history: History,
    at: u64,
    edit: Option<Edit>,
    origin_run: &str,
) -> Result<Plan, Error> {
    let last = history.events.last().map_or(0, |e| e.seq);
    if at == 0 {
        return Err(Error::invalid(
            "at_seq",
            "must be a seq of the run (from 1)",
        ));
    }
    if at > last {
        return Err(Error::OutOfRange {
            field: "at_seq",
            message: format!(
                "run {origin_run} has recorded events up to seq {last}; {at} is past it"
            ),
        });
    }
    let point = history.events.iter().find(|e| e.seq == at);
    let Some(point) = point.cloned() else {
        return Err(Error::invalid(
            "at_seq",
            format!("run {origin_run} has no event {at}"),
        ));
    };
    let event_kind = point.payload.as_ref().map(kind_of);
    let unit = history
        .recording
        .iter()
        .find(|r| r.seq == at && PointKind::of_unit(&r.unit).is_some())
        .map(|r| r.unit.clone());
    let Some(unit) = unit else {
        return Err(Error::invalid(
            "at_seq",
            format!(
                "event {at} of run {origin_run} ({}) is not a fork point: fork at a model turn (MessageCompleted), a tool call's result (ToolCallCompleted), a person's answer (ApprovalResolved, InputReceived) or a pipeline step (StepCompleted, StepFailed)",
                event_kind.map_or("an event", |k| k.as_str_name())
            ),
        ));
    };
    let kind = PointKind::of_unit(&unit).unwrap_or(PointKind::ModelTurn);
    if let Some(e) = &edit
        && e.kind != kind
        && e.kind != PointKind::Any
    {
        return Err(Error::invalid(
            e.field,
            format!(
                "the fork point (seq {at}) is {}: its edit is {}",
                kind.name(),
                kind.edit_field()
            ),
        ));
    }

    // What the point recorded.
    let original = history
        .recording
        .iter()
        .find(|r| r.seq == at && r.unit == unit)
        .map(|r| r.record.clone());
    let History {
        mut events,
        recording,
        packed,
    } = history;
    // The events before the point, less those of what was in flight.
    let first = events.first().map_or(1, |e| e.seq);
    let before = events.iter().take_while(|e| e.seq < at).count();
    events.truncate(before);
    let (dropped, announced) = {
        // The journal: what was recorded before the point.
        let mut units: HashSet<&str> = recording
            .iter()
            .filter(|r| r.seq < at && kept(&r.unit))
            .map(|r| r.unit.as_str())
            .collect();
        if edit.is_some() {
            units.insert(unit.as_str());
        }
        in_flight(&events, &units)
    };
    // Each event's seq in the fork (from 1), or 0 when it is left out; the
    // events are renumbered in place.
    let mut renumbered: Vec<u64> = Vec::with_capacity(events.len());
    let mut same = events.len();
    let mut index = 0;
    let mut seq = 0;
    events.retain_mut(|e| {
        let i = index;
        index += 1;
        if !dropped.is_empty() && dropped.contains(&i) {
            renumbered.push(0);
            same = same.min(i);
            return false;
        }
        seq += 1;
        renumbered.push(seq);
        e.seq = seq;
        // The fork's ids are given where the events go out.
        e.run_id.clear();
        e.trace_id.clear();
        e.replayed = true;
        if let Some(Payload::RunStarted(s)) = &mut e.payload {
            // A fork of a replay is no replay.
            s.replay_of.clear();
            s.strict = false;
            s.forked_from = Some(
                Origin {
                    run_id: origin_run.to_owned(),
                    seq: at,
                }
                .to_pb(),
            );
        }
        true
    });
    if first != 1 {
        same = 0;
    }
    let mut recording: Vec<Recorded> = recording
        .into_iter()
        .filter(|r| r.seq < at && kept(&r.unit))
        .filter_map(|r| {
            let seq = *renumbered.get(usize::try_from(r.seq.checked_sub(first)?).ok()?)?;
            Some(Recorded {
                seq: (seq > 0).then_some(seq)?,
                unit: r.unit,
                record: r.record,
            })
        })
        .collect();
    match edit {
        Some(edit) if edit.kind == PointKind::Any => {
            // The point as recorded, replayed; then its run-context record
            // (`rc/{unit}`), which sets the run context whenever the point is
            // taken from a journal (this fork, its resumes, its forks).
            let mut e = point;
            e.seq = events.len() as u64 + 1;
            e.replayed = true;
            e.run_id.clear();
            e.trace_id.clear();
            recording.push(Recorded {
                seq: e.seq,
                unit: unit.clone(),
                record: original.unwrap_or_default(),
            });
            let mut payload = e
                .payload
                .clone()
                .unwrap_or(Payload::RunStarted(Default::default()));
            let (rc_unit, record) = (edit.build)(&unit, &mut payload);
            recording.push(Recorded {
                seq: e.seq,
                unit: rc_unit,
                record,
            });
            events.push(e);
        }
        Some(edit) => {
            let mut e = point;
            e.seq = events.len() as u64 + 1;
            e.replayed = false;
            e.run_id.clear();
            e.trace_id.clear();
            let mut payload = e
                .payload
                .take()
                .unwrap_or(Payload::RunStarted(Default::default()));
            let (edited, mut record) = (edit.build)(&unit, &mut payload);
            if edited.starts_with("t/")
                && let Some(original) = &original
            {
                record = with_asked(record, original);
            }
            e.payload = Some(payload);
            recording.push(Recorded {
                seq: e.seq,
                unit: edited,
                record,
            });
            events.push(e);
        }
        None => {}
    }
    Ok(Plan {
        events,
        recording,
        announced,
        packed,
        same,
    })
}

/// An edited model turn's record with what the original turn was asked
/// (the edit changes the answer, not the request): a replay of the fork
/// matches the turn and takes the edited answer.
fn with_asked(edited: Vec<u8>, original: &[u8]) -> Vec<u8> {
    let asked = serde_json::from_slice::<serde_json::Value>(original)
        .ok()
        .and_then(|mut o| o.get_mut("asked").map(serde_json::Value::take));
    match (asked, serde_json::from_slice::<serde_json::Value>(&edited)) {
        (Some(asked), Ok(serde_json::Value::Object(mut turn))) => {
            turn.insert("asked".into(), asked);
            serde_json::to_vec(&turn).unwrap_or(edited)
        }
        _ => edited,
    }
}

/// Whether a recorded point goes into a fork's journal (see the module
/// docs).
fn kept(unit: &str) -> bool {
    !(unit.starts_with("sw/") || unit.starts_with("q/") || unit.starts_with('#'))
}

/// The indexes of the events of what was in flight before the fork point
/// that the fork sends again (see the module docs): the progress and
/// options of tool calls whose point is not in the journal, questions not
/// answered, and the streamed text of each context's model turn that had
/// not ended; and the units of the calls in flight, whose start stays.
fn in_flight(before: &[pb::RunEvent], units: &HashSet<&str>) -> (HashSet<usize>, HashSet<String>) {
    let mut dropped = HashSet::new();
    let mut announced = HashSet::new();
    let has = |u: String| units.contains(u.as_str());
    // Per context, the text deltas since its last model turn ended.
    let mut deltas: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, e) in before.iter().enumerate() {
        let ctx = e.context_id.as_str();
        let call = |id: &str| has(format!("c/{ctx}/{id}"));
        match &e.payload {
            Some(Payload::ToolCallStarted(c)) if !call(&c.call_id) => {
                announced.insert(format!("c/{ctx}/{}", c.call_id));
            }
            Some(Payload::ToolProgress(c)) if !call(&c.call_id) => {
                dropped.insert(i);
            }
            Some(Payload::ToolOptions(c)) if !call(&c.call_id) => {
                dropped.insert(i);
            }
            Some(Payload::ApprovalRequested(a)) if !has(format!("ap/{}", a.approval_id)) => {
                dropped.insert(i);
            }
            Some(Payload::InputRequested(q))
                if !has(format!("in/{}", q.input_id)) && !has(format!("it/{}", q.input_id)) =>
            {
                dropped.insert(i);
            }
            Some(Payload::TextDelta(_)) => deltas.entry(ctx).or_default().push(i),
            Some(Payload::MessageCompleted(_)) => {
                deltas.remove(ctx);
            }
            _ => {}
        }
    }
    dropped.extend(deltas.into_values().flatten());
    (dropped, announced)
}
