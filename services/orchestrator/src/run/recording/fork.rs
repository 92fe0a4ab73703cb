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

use std::{collections::HashSet, sync::Arc};

use baton_proto::v1::{self as pb, run_event::Payload};

use super::flight;
use crate::{
    error::Error,
    run::{
        events::kind_of,
        log::{PackedChunk, Recorded},
        view::Origin,
    },
};

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

/// Recorded points from which a plan builds its journal on a thread of
/// its own, beside its scan of what was in flight (a long run's: both take
/// milliseconds, and the fork waits for them before it starts).
const PARALLEL_FROM: usize = 4096;

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

/// A run's history, as a fork reads it: its events from seq 1 (the first
/// in packed chunks of its log, when they are at hand) and its recording.
#[derive(Default)]
pub struct History {
    /// Its first events, in whole packed chunks of its log (memory mode;
    /// shared, not copied): read as a fork needs them, and the fork's log
    /// keeps those it replays unchanged as they are.
    pub packed: Vec<PackedChunk>,
    /// Its events after those, decoded, up to the fork point at least.
    pub events: Vec<pb::RunEvent>,
    /// Its durable points.
    pub recording: Vec<Recorded>,
}

impl History {
    /// Events in [`Self::packed`].
    fn in_packed(&self) -> usize {
        self.packed.iter().map(PackedChunk::len).sum()
    }

    /// Its `i`-th event (from 0), decoded.
    fn event(&self, mut i: usize) -> Option<pb::RunEvent> {
        for chunk in &self.packed {
            if i < chunk.len() {
                return Some(chunk.event(i));
            }
            i -= chunk.len();
        }
        self.events.get(i).cloned()
    }

    /// Every event, decoded (a replay's history), and the recording.
    pub fn into_events(self) -> (Vec<pb::RunEvent>, Vec<Recorded>) {
        let mut events = Vec::with_capacity(self.in_packed() + self.events.len());
        for chunk in &self.packed {
            events.extend(chunk.events());
        }
        events.extend(self.events);
        (events, self.recording)
    }
}

/// What a fork starts with.
#[derive(Debug)]
pub struct Plan {
    /// Its first events in whole packed chunks, ready for its log: its
    /// origin's, shared, read back marked `replayed` (the first with the
    /// fork's `RunStarted`).
    pub packed: Vec<PackedChunk>,
    /// Its first events after those (seqs going on from them, without
    /// ids): replayed, then the edited point's when there is an edit.
    pub events: Vec<pb::RunEvent>,
    /// Its journal, each point with the seq of its event in the fork.
    pub recording: Vec<Recorded>,
    /// The same records by unit, as the fork runs with them.
    pub journal: foldhash::HashMap<Arc<str>, Arc<[u8]>>,
    /// The tool calls in flight at the point (their units) whose
    /// `ToolCallStarted` is among the replayed events.
    pub announced: HashSet<String>,
}

impl Plan {
    /// How many first events it has: the seq of its last.
    pub fn checkpoint(&self) -> u64 {
        (self.packed.iter().map(PackedChunk::len).sum::<usize>() + self.events.len()) as u64
    }
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
    let in_packed = history.in_packed();
    // Packed events are numbered from 1 (a log read from its first).
    let first = if in_packed > 0 {
        1
    } else {
        history.events.first().map_or(1, |e| e.seq)
    };
    let last = history.events.last().map_or(in_packed as u64, |e| e.seq);
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
    // The point's index among the events: as many come before it.
    let point_at = match usize::try_from(at - 1) {
        Ok(i) if i < in_packed => Some(i),
        _ => history
            .events
            .iter()
            .position(|e| e.seq == at)
            .map(|i| i + in_packed),
    };
    let Some(point) = point_at.and_then(|i| history.event(i)) else {
        return Err(Error::invalid(
            "at_seq",
            format!("run {origin_run} has no event {at}"),
        ));
    };
    let before = point_at.unwrap_or(0);
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
    // The journal (what was recorded before the point, by unit, the
    // records shared), and what was in flight: on two threads when the run
    // is long.
    let before_point = |r: &Recorded| r.seq < at && kept(&r.unit);
    let journal_of = || -> foldhash::HashMap<Arc<str>, Arc<[u8]>> {
        // Sized once: most points come before the point.
        let mut journal = foldhash::HashMap::with_capacity_and_hasher(
            history.recording.len(),
            Default::default(),
        );
        journal.extend(
            history
                .recording
                .iter()
                .filter(|r| before_point(r))
                .map(|r| (r.unit.clone(), r.record.clone())),
        );
        journal
    };
    // The edited point counts as journaled: the edit answers it (a call
    // whose result is edited is not in flight).
    let edited = |u: &str| edit.is_some() && u == &*unit;
    let (mut journal, (dropped, announced)) = if history.recording.len() >= PARALLEL_FROM {
        std::thread::scope(|s| {
            let journal = s.spawn(journal_of);
            let units: foldhash::HashSet<&str> = history
                .recording
                .iter()
                .filter(|r| before_point(r))
                .map(|r| &*r.unit)
                .collect();
            let flight = flight::in_flight(&history.packed, &history.events, before, &|u| {
                units.contains(u) || edited(u)
            });
            let journal = journal
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p));
            (journal, flight)
        })
    } else {
        let journal = journal_of();
        let flight = flight::in_flight(&history.packed, &history.events, before, &|u| {
            journal.contains_key(u) || edited(u)
        });
        (journal, flight)
    };
    // The first events that are the origin's unchanged (but for `replayed`
    // and the first's fork fields): those packed are kept as they are,
    // their chunks shared (the last one cut short where they end).
    let same = if first == 1 {
        dropped.iter().copied().min().unwrap_or(before)
    } else {
        0
    };
    let mut packed: Vec<PackedChunk> = Vec::new();
    let mut from = 0;
    for chunk in &history.packed {
        if from >= same {
            break;
        }
        let take = chunk.len().min(same - from);
        let kept = if take == chunk.len() {
            chunk.replayed()
        } else {
            chunk.truncated(take).replayed()
        };
        packed.push(kept);
        from += take;
    }
    let outcome_edited = edit.as_ref().is_some_and(|e| e.kind != PointKind::Any);
    let fork_fields = |e: &mut pb::RunEvent| {
        if let Some(Payload::RunStarted(s)) = &mut e.payload {
            // A fork of a replay is no replay.
            s.replay_of.clear();
            s.strict = false;
            s.forked_from = Some(
                Origin {
                    run_id: origin_run.to_owned(),
                    seq: at,
                    edited: outcome_edited,
                }
                .to_pb(),
            );
        }
    };
    if let Some(chunk) = packed.first_mut() {
        let mut started = chunk.event(0);
        fork_fields(&mut started);
        *chunk = chunk.replayed_with_first(&started);
    }
    // The events after those, decoded and numbered again from `from + 1`;
    // `renumbered[i - from]` is the fork's seq of the `i`-th (0 when it is
    // left out).
    let History {
        packed: origin_chunks,
        events: decoded,
        recording,
    } = history;
    let wanted = before - from;
    let mut events: Vec<pb::RunEvent> = Vec::with_capacity(wanted);
    let mut skip = from;
    for chunk in &origin_chunks {
        if skip >= chunk.len() {
            skip -= chunk.len();
            continue;
        }
        let take = (chunk.len() - skip).min(wanted - events.len());
        events.extend((skip..skip + take).map(|i| chunk.event(i)));
        skip = 0;
    }
    events.extend(decoded.into_iter().take(wanted - events.len()));
    let mut renumbered: Vec<u64> = Vec::with_capacity(events.len());
    let mut index = from;
    let mut seq = from as u64;
    events.retain_mut(|e| {
        let i = index;
        index += 1;
        if dropped.contains(&i) {
            renumbered.push(0);
            return false;
        }
        seq += 1;
        renumbered.push(seq);
        e.seq = seq;
        // The fork's ids are given where the events go out.
        e.run_id.clear();
        e.trace_id.clear();
        e.replayed = true;
        fork_fields(e);
        true
    });
    let mut kept_points = Vec::with_capacity(journal.len());
    for r in recording.into_iter().filter(|r| before_point(r)) {
        let i = r
            .seq
            .checked_sub(first)
            .and_then(|i| usize::try_from(i).ok());
        let seq = match i {
            Some(i) if i < from => Some(r.seq),
            Some(i) => renumbered.get(i - from).copied(),
            None => None,
        };
        match seq {
            Some(seq) if seq > 0 => kept_points.push(Recorded {
                seq,
                unit: r.unit,
                record: r.record,
            }),
            // Its event is not among the fork's: neither is the point.
            _ => {
                journal.remove(&r.unit);
            }
        }
    }
    let mut recording = kept_points;
    let next = seq + 1;
    match edit {
        Some(edit) if edit.kind == PointKind::Any => {
            // The point as recorded, replayed; then its run-context record
            // (`rc/{unit}`), which sets the run context whenever the point is
            // taken from a journal (this fork, its resumes, its forks).
            let mut e = point;
            e.seq = next;
            e.replayed = true;
            e.run_id.clear();
            e.trace_id.clear();
            let original = original.unwrap_or_default();
            journal.insert(unit.clone(), original.clone());
            recording.push(Recorded {
                seq: e.seq,
                unit: unit.clone(),
                record: original,
            });
            let mut payload = e
                .payload
                .clone()
                .unwrap_or(Payload::RunStarted(Default::default()));
            let (rc_unit, record) = (edit.build)(&unit, &mut payload);
            let (rc_unit, record): (Arc<str>, Arc<[u8]>) = (rc_unit.into(), record.into());
            journal.insert(rc_unit.clone(), record.clone());
            recording.push(Recorded {
                seq: e.seq,
                unit: rc_unit,
                record,
            });
            events.push(e);
        }
        Some(edit) => {
            let mut e = point;
            e.seq = next;
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
            let (edited, record): (Arc<str>, Arc<[u8]>) = (edited.into(), record.into());
            journal.insert(edited.clone(), record.clone());
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
        packed,
        events,
        recording,
        journal,
        announced,
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use baton_proto::v1::{self as pb, run_event::Payload};

    use super::{Edit, History, PackedChunk, Plan, PointKind, plan};
    use crate::run::log::LOG_CHUNK;
    use crate::run::{
        context::ContextInfo,
        log::{Chunked, Logged, Recorded},
    };

    /// A run of `total` events in context `root`: `RunStarted`, then tool
    /// calls `c{i}` started and completed (each recorded), between them
    /// streamed text or a model turn's end;
    /// call `slow` starts at event 10 and reports progress at `progress`,
    /// never ending. Its log, packed, and its recording.
    fn origin(total: usize, progress: usize) -> (Chunked, Vec<Recorded>) {
        let ctx = Arc::new(ContextInfo {
            id: "root".into(),
            parent: String::new(),
            depth: 0,
            span_id: "00f067aa0ba902b7".into(),
            otel: opentelemetry::Context::new(),
            span_recorded: Default::default(),
        });
        let mut log = Chunked::default();
        let mut recording = Vec::new();
        for i in 0..total {
            let seq = i as u64 + 1;
            let call = format!("c{}", i / 3);
            let payload = match (i, i % 3) {
                (0, _) => Payload::RunStarted(pb::RunStarted {
                    target: "loop".into(),
                    ..Default::default()
                }),
                (10, _) => Payload::ToolCallStarted(pb::ToolCallStarted {
                    call_id: "slow".into(),
                    ..Default::default()
                }),
                (i, _) if i == progress => Payload::ToolProgress(pb::ToolProgress {
                    call_id: "slow".into(),
                    ..Default::default()
                }),
                (i, 0) if i % 2 == 0 => Payload::TextDelta(pb::TextDelta {
                    text: format!("word {i}"),
                }),
                (_, 0) => Payload::MessageCompleted(Default::default()),
                (_, 1) => Payload::ToolCallStarted(pb::ToolCallStarted {
                    call_id: call.clone(),
                    ..Default::default()
                }),
                _ => {
                    recording.push(Recorded {
                        seq,
                        unit: format!("c/root/{call}").into(),
                        record: call.clone().into_bytes().into(),
                    });
                    Payload::ToolCallCompleted(pb::ToolCallCompleted {
                        call_id: call,
                        result: format!("result {i}"),
                        ..Default::default()
                    })
                }
            };
            let event = Logged {
                seq,
                time: Default::default(),
                ctx: ctx.clone(),
                agent: Arc::from("loop"),
                payload,
                replayed: false,
            };
            log.push_back(seq, event.encode());
        }
        while log.pack_one(true) {}
        (log, recording)
    }

    fn edit() -> Edit {
        Edit {
            kind: PointKind::ToolCall,
            field: "edit.tool_result",
            build: Box::new(|unit, _| (unit.to_owned(), b"edited".to_vec())),
        }
    }

    /// A plan's first events, decoded, as the fork's log reads them.
    fn first_events(plan: &Plan) -> Vec<pb::RunEvent> {
        let mut events: Vec<pb::RunEvent> = plan.packed.iter().flat_map(|c| c.events()).collect();
        events.extend(plan.events.iter().cloned());
        events
    }

    #[test]
    fn a_plan_from_packed_chunks_is_the_plan_from_decoded_events() {
        // The progress of the call in flight in the second chunk, in the
        // third, or none (nothing left out: every whole chunk is kept); a
        // run long enough that the journal is built on a thread of its
        // own.
        let short = LOG_CHUNK * 3 + 60;
        let long = super::PARALLEL_FROM * 3 + 100;
        for (total, progress) in [
            (short, LOG_CHUNK + 7),
            (short, LOG_CHUNK * 2 + 100),
            (short, usize::MAX),
            (long, LOG_CHUNK * 5 + 3),
        ] {
            let (log, recording) = origin(total, progress);
            // A tool result near the end.
            let at = recording
                .iter()
                .rev()
                .nth(3)
                .map(|r| r.seq)
                .expect("a tool result");
            let chunks = log.packed_prefix(at as usize);
            let in_packed: usize = chunks.iter().map(PackedChunk::len).sum();
            let packed = History {
                packed: chunks,
                events: log.read(in_packed, at as usize - in_packed, "", ""),
                recording: recording.clone(),
            };
            assert!(!packed.packed.is_empty());
            let decoded = History {
                packed: Vec::new(),
                events: log.read(0, at as usize, "", ""),
                recording,
            };
            let a = plan(packed, at, Some(edit()), "origin").expect("a plan");
            let b = plan(decoded, at, Some(edit()), "origin").expect("a plan");
            assert!(b.packed.is_empty());
            let events = first_events(&a);
            assert_eq!(events, first_events(&b), "progress at {progress}");
            assert_eq!(a.recording, b.recording);
            assert_eq!(a.journal, b.journal);
            let by_unit: foldhash::HashMap<std::sync::Arc<str>, std::sync::Arc<[u8]>> = a
                .recording
                .iter()
                .map(|r| (r.unit.clone(), r.record.clone()))
                .collect();
            assert_eq!(a.journal, by_unit);
            assert_eq!(a.journal.get("c/root/c1").map(|r| &r[..]), Some(&b"c1"[..]));
            assert_eq!(a.announced, b.announced);
            assert_eq!(a.checkpoint(), events.len() as u64);
            // Numbered from 1, the progress of the call in flight left
            // out, its start kept (and announced); the edited point last.
            assert!(
                events
                    .iter()
                    .enumerate()
                    .all(|(i, e)| e.seq == i as u64 + 1)
            );
            // The text streamed since the last model turn ended is left out
            // too (the fork streams it again).
            let before = log.read(0, at as usize - 1, "", "");
            let streaming = before
                .iter()
                .rev()
                .take_while(|e| !matches!(e.payload, Some(Payload::MessageCompleted(_))))
                .filter(|e| matches!(e.payload, Some(Payload::TextDelta(_))))
                .count();
            let dropped = usize::from(progress < total) + streaming;
            assert_eq!(events.len() as u64, at - dropped as u64);
            assert!(a.announced.contains("c/root/slow"));
            assert!(
                !events
                    .iter()
                    .any(|e| matches!(e.payload, Some(Payload::ToolProgress(_))))
            );
            assert!(events[..events.len() - 1].iter().all(|e| e.replayed));
            let Some(Payload::RunStarted(s)) = &events[0].payload else {
                panic!("RunStarted first");
            };
            assert_eq!(s.forked_from.as_ref().map(|f| f.seq), Some(at));
            // Kept as they are, their chunks shared: the events before the
            // first one left out (the last chunk cut short there).
            let last_turn = before
                .iter()
                .rposition(|e| matches!(e.payload, Some(Payload::MessageCompleted(_))))
                .map_or(0, |i| i + 1);
            let first_delta = before[last_turn..]
                .iter()
                .position(|e| matches!(e.payload, Some(Payload::TextDelta(_))))
                .map(|i| i + last_turn);
            let same = [Some(progress).filter(|&p| p < before.len()), first_delta]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(before.len());
            let kept: usize = a.packed.iter().map(PackedChunk::len).sum();
            assert_eq!(kept, same.min(in_packed), "progress at {progress}");
            assert_eq!(
                a.packed.len(),
                same.div_ceil(LOG_CHUNK),
                "progress at {progress}"
            );
            // Nothing before those is decoded again.
            assert_eq!(a.events.len(), events.len() - kept);
        }
    }
}
