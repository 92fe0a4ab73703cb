//! A replay (ReplayRun): a new run of a recorded run's request against
//! today's agents and models. It runs live — agents, handoffs, pipelines
//! and Baton's own tools run again — except what leaves Baton: a model call
//! whose request is the one recorded ([`Asked`]) is answered with the
//! recorded turn (its text deltas streamed again), a call of a tool server,
//! MCP server or remote A2A agent with the recorded tool and arguments with
//! the recorded result (its progress and questions said again), and a
//! question to a person with the recorded answer. So an unchanged agent
//! replaying an unchanged run reproduces its events, ids and times aside.
//!
//! At the first request that differs, the caller says so (`Diverged`) and
//! the replay diverges: from then on everything is live (a divergence in
//! one context can change what every other one sees, through the run
//! context and the store); a strict replay ends there, failed.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
};

use baton_proto::v1::{self as pb, run_event::Payload};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tonic::Code;

use super::fork::History;

mod tools;
use crate::{model::asked::Asked, run::failure::Failure};

/// What a replay answers a request with.
pub enum Answer<T> {
    /// The recording's answer: the request matched.
    Recorded(T),
    /// Nothing: the replay diverged before, the request goes live.
    Live,
    /// Nothing: the request differs from the recording (how, in short).
    Differs(String),
}

/// A model turn of the recording.
struct Turn {
    /// The turn's record (a `ModelTurn` with what was asked).
    record: Arc<[u8]>,
    /// The text the model streamed, delta by delta.
    deltas: Vec<String>,
}

/// A tool call of the recording.
pub struct Call {
    tool: String,
    arguments: Value,
    /// The call's record (what it returned).
    pub record: Arc<[u8]>,
    /// What the call said while it ran, in its context: progress, options,
    /// questions to people and their answers.
    pub said: Vec<Payload>,
}

/// What a replay takes from the recording of the run it replays, and how
/// it went (see the module docs).
pub struct Rerun {
    /// The run replayed.
    pub origin: String,
    /// Whether the first divergence fails the replay.
    pub strict: bool,
    turns: HashMap<String, Turn>,
    calls: HashMap<String, Call>,
    /// People's answers by question id, as an inbox holds them.
    answers: HashMap<String, Arc<[u8]>>,
    /// Input requests nobody answered in time, by id.
    timed_out: std::collections::HashSet<String>,
    /// The events of remote A2A agents' contexts, by context id: a call
    /// answered from the recording says them again.
    remote: HashMap<String, Vec<(String, Payload)>>,
    diverged: AtomicBool,
    matched: AtomicU64,
    made: AtomicU64,
    failure: Mutex<Option<Failure>>,
    ended: CancellationToken,
    /// An evaluation case's recorded tools ([`Rerun::tools`]), when this
    /// answers only tool calls.
    tools: Option<ToolsOnly>,
}

/// How an evaluation case's recording answers (see [`Rerun::tools`]).
struct ToolsOnly {
    /// A call the recording lacks goes live (else it fails the case).
    unrecorded_live: bool,
    /// The recorded calls' units, in the order they were made.
    order: Vec<String>,
    /// Units answered already (each is answered once before any again).
    used: Mutex<std::collections::HashSet<String>>,
    /// Tools' misbehaviour injected.
    faults: Vec<crate::eval::dataset::Fault>,
}

/// The turn record: a `ModelTurn`'s fields and what was asked (`asked`).
#[derive(serde::Deserialize)]
struct AskedOf {
    asked: Option<Asked>,
}

impl Rerun {
    /// The replay of `origin` from its `history` (events from seq 1 and
    /// recording).
    pub fn new(origin: String, strict: bool, history: History) -> Self {
        let (events, recording) = history.into_events();
        let mut points: HashMap<u64, String> = HashMap::new();
        let mut turns = HashMap::new();
        let mut answers = HashMap::new();
        let mut timed_out = std::collections::HashSet::new();
        let mut records = HashMap::new();
        for r in recording {
            // The records are shared with the recording (and the run it
            // replays), not copied.
            if let Some(id) = r.unit.strip_prefix("it/") {
                timed_out.insert(id.to_owned());
                continue;
            }
            if let Some(id) = r.unit.strip_prefix("ap/") {
                answers.insert(id.to_owned(), r.record);
            } else if let Some(id) = r.unit.strip_prefix("in/") {
                let text = String::from_utf8_lossy(&r.record).into_owned();
                let answer = serde_json::to_vec(&text).unwrap_or_default();
                answers.insert(id.to_owned(), answer.into());
            } else if r.unit.starts_with("t/") {
                points.insert(r.seq, r.unit.to_string());
                turns.insert(
                    r.unit.to_string(),
                    Turn {
                        record: r.record,
                        deltas: Vec::new(),
                    },
                );
            } else if r.unit.starts_with("c/") {
                records.insert(r.unit.to_string(), r.record);
            }
        }
        let mut deltas: HashMap<String, Vec<String>> = HashMap::new();
        let mut calls = HashMap::new();
        let mut asking: HashMap<String, String> = HashMap::new();
        let mut remote: HashMap<String, Vec<(String, Payload)>> = HashMap::new();
        for e in events {
            let Some(payload) = e.payload else { continue };
            let ctx = e.context_id;
            if let Some(said) = remote.get_mut(&ctx) {
                said.push((e.agent, payload));
                continue;
            }
            let of_call = match &payload {
                Payload::TextDelta(d) => {
                    deltas.entry(ctx).or_default().push(d.text.clone());
                    continue;
                }
                Payload::MessageCompleted(_) => {
                    let said = deltas.remove(&ctx).unwrap_or_default();
                    if let Some(turn) = points.get(&e.seq).and_then(|u| turns.get_mut(u)) {
                        turn.deltas = said;
                    }
                    continue;
                }
                Payload::AgentStarted(a) if a.model.starts_with("a2a:") => {
                    remote.insert(ctx, vec![(e.agent, payload)]);
                    continue;
                }
                Payload::ToolCallStarted(s) => {
                    let unit = format!("c/{ctx}/{}", s.call_id);
                    let Some(record) = records.remove(&unit) else {
                        continue;
                    };
                    let arguments = serde_json::from_str(&s.arguments_json).unwrap_or(Value::Null);
                    let call = Call {
                        tool: s.tool.clone(),
                        arguments,
                        record,
                        said: Vec::new(),
                    };
                    calls.insert(unit, call);
                    continue;
                }
                Payload::ToolProgress(p) => p.call_id.clone(),
                Payload::ToolOptions(o) => o.call_id.clone(),
                Payload::InputRequested(q) => {
                    asking.insert(q.input_id.clone(), q.call_id.clone());
                    q.call_id.clone()
                }
                Payload::InputReceived(a) => match asking.get(&a.input_id) {
                    Some(call) => call.clone(),
                    None => continue,
                },
                Payload::InputTimedOut(a) => match asking.get(&a.input_id) {
                    Some(call) => call.clone(),
                    None => continue,
                },
                _ => continue,
            };
            if let Some(call) = calls.get_mut(&format!("c/{ctx}/{of_call}")) {
                call.said.push(payload);
            }
        }
        Self {
            origin,
            strict,
            turns,
            calls,
            answers,
            timed_out,
            remote,
            diverged: AtomicBool::new(false),
            matched: AtomicU64::new(0),
            made: AtomicU64::new(0),
            failure: Mutex::new(None),
            ended: CancellationToken::new(),
            tools: None,
        }
    }

    /// The failure a strict replay (or a case whose recording lacks a
    /// call) ends with when `diverged` in `context`.
    pub fn strict_failure(&self, context: &str, diverged: &pb::Diverged) -> Failure {
        if self.tools.is_some() {
            return Failure::new(
                Code::FailedPrecondition,
                format!(
                    "tool call {} in {context} is not in the case's recording: {}",
                    diverged.call_id, diverged.diff
                ),
            );
        }
        strict_failure(&self.origin, context, diverged)
    }

    /// The replay resumed on another replica with its own `journal` (the
    /// run store's: each point's record and `#{unit}`, the seq it ended
    /// at): how far it got is taken from there. Every model turn and call
    /// of a tool outside Baton it made is a call; those before its
    /// divergence (`dv`), all of them if none, matched.
    pub fn resumed(self, journal: &HashMap<String, Vec<u8>>) -> Self {
        let seq = |unit: &str| -> Option<u64> {
            std::str::from_utf8(journal.get(&format!("#{unit}"))?)
                .ok()?
                .parse()
                .ok()
        };
        let diverged_at = journal.contains_key("dv").then(|| seq("dv").unwrap_or(0));
        let (mut made, mut matched) = (0, 0);
        for (unit, record) in journal {
            let external = |r: &[u8]| {
                serde_json::from_slice::<Value>(r)
                    .is_ok_and(|v| v.get("x") == Some(&Value::Bool(true)))
            };
            let call = unit.starts_with("t/") || (unit.starts_with("c/") && external(record));
            if !call {
                continue;
            }
            made += 1;
            if diverged_at.is_none_or(|at| seq(unit).is_some_and(|s| s < at)) {
                matched += 1;
            }
        }
        self.made.store(made, Ordering::Relaxed);
        self.matched.store(matched, Ordering::Relaxed);
        self.diverged.store(diverged_at.is_some(), Ordering::SeqCst);
        // A strict replay that had diverged (and told it: `dv` holds the
        // failure) ends as soon as it starts again.
        if self.strict
            && let Some(said) = journal.get("dv")
        {
            let message = String::from_utf8_lossy(said).into_owned();
            self.end(Failure::new(Code::FailedPrecondition, message));
        }
        self
    }

    /// Whether the replay diverged already (everything is live).
    fn live(&self) -> bool {
        self.diverged.load(Ordering::SeqCst)
    }

    /// What a request made after the divergence gets: live, counted as a
    /// call; in a strict replay, which ends at its divergence, nothing —
    /// a branch running beside the one that diverged waits for the end
    /// instead of calling anything live.
    fn after_divergence<T>(&self) -> Option<Answer<T>> {
        if !self.live() {
            return None;
        }
        if self.strict {
            return Some(Answer::Differs("after the strict replay diverged".into()));
        }
        self.made.fetch_add(1, Ordering::Relaxed);
        Some(Answer::Live)
    }

    /// Model turn `unit` asked `now`: the recorded turn's record and
    /// deltas when the recording asked the same.
    pub fn turn(
        &self,
        unit: &str,
        now: &Asked,
        messages: &[crate::model::ChatMessage],
    ) -> Answer<(&[u8], &[String])> {
        if self.tools.is_some() {
            return Answer::Live;
        }
        if let Some(after) = self.after_divergence() {
            return after;
        }
        self.made.fetch_add(1, Ordering::Relaxed);
        let Some(turn) = self.turns.get(unit) else {
            return Answer::Differs("the recording has no such model turn here".into());
        };
        let asked = serde_json::from_slice::<AskedOf>(&turn.record)
            .ok()
            .and_then(|a| a.asked);
        let Some(asked) = asked else {
            return Answer::Differs(
                "the recording does not say what this turn was asked (recorded before requests were, or edited in a fork)".into(),
            );
        };
        let diff = asked.diff(now, messages);
        if diff.is_empty() {
            self.matched.fetch_add(1, Ordering::Relaxed);
            Answer::Recorded((&turn.record[..], &turn.deltas))
        } else {
            Answer::Differs(diff)
        }
    }

    /// Call `unit` of `tool` with `arguments`, of a tool outside Baton: the
    /// recorded call when the recording made the same.
    pub fn call(&self, unit: &str, tool: &str, arguments: &Value) -> Answer<&Call> {
        if let Some(t) = &self.tools {
            if self.strict && self.live() {
                return Answer::Differs("after the case's recording lacked a call".into());
            }
            return self.recorded_tool(t, unit, tool, arguments);
        }
        if let Some(after) = self.after_divergence() {
            return after;
        }
        self.made.fetch_add(1, Ordering::Relaxed);
        let Some(call) = self.calls.get(unit) else {
            return Answer::Differs(format!("the recording has no call of {tool} here"));
        };
        if call.tool != tool {
            return Answer::Differs(format!("tool: {} → {tool}", call.tool));
        }
        if call.arguments != *arguments {
            return Answer::Differs(format!(
                "arguments: {} → {}",
                short(&call.arguments.to_string()),
                short(&arguments.to_string())
            ));
        }
        self.matched.fetch_add(1, Ordering::Relaxed);
        Answer::Recorded(call)
    }

    /// The events a remote A2A agent's context `ctx` had.
    pub fn remote_events(&self, ctx: &str) -> &[(String, Payload)] {
        self.remote.get(ctx).map_or(&[], Vec::as_slice)
    }

    /// A person's recorded answer to question `id`, as an inbox holds it,
    /// until the replay diverges.
    pub fn answer(&self, id: &str) -> Option<&[u8]> {
        if self.live() {
            return None;
        }
        self.answers.get(id).map(|a| &a[..])
    }

    /// Whether the recording's input request `id` was not answered in
    /// time (the replay does not ask it either, until it diverged).
    pub fn timed_out(&self, id: &str) -> bool {
        !self.live() && self.timed_out.contains(id)
    }

    /// The replay diverged: true for the first divergence only, which is
    /// the one to tell (then [`Self::end`] a strict replay).
    pub fn diverge(&self) -> bool {
        !self.diverged.swap(true, Ordering::SeqCst)
    }

    /// Ends a strict replay with `failure` (its divergence, told).
    pub fn end(&self, failure: Failure) {
        *self.failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(failure);
        self.ended.cancel();
    }

    /// Resolves with the failure a strict replay ended with.
    pub async fn failed(&self) -> Failure {
        self.ended.cancelled().await;
        self.failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_else(|| Failure::new(Code::FailedPrecondition, "the replay diverged"))
    }

    /// How the replay's calls went.
    pub fn stats(&self) -> pb::ReplayStats {
        pb::ReplayStats {
            run_id: self.origin.clone(),
            matched_calls: self.matched.load(Ordering::Relaxed),
            calls: self.made.load(Ordering::Relaxed),
            diverged: self.live(),
        }
    }
}

/// `text` in at most 120 characters.
fn short(text: &str) -> String {
    let mut s: String = text.chars().take(120).collect();
    if s.len() < text.len() {
        s.push('…');
    }
    s
}

/// The failure a strict replay ends with when `diverged` (in `context`).
pub fn strict_failure(origin: &str, context: &str, diverged: &pb::Diverged) -> Failure {
    let at = match diverged.point.as_str() {
        "model_turn" => format!("model turn {}", diverged.turn),
        point => format!("{} {}", point.replace('_', " "), diverged.call_id),
    };
    Failure::new(
        Code::FailedPrecondition,
        format!(
            "strict replay of run {origin} diverged in {context} at {at}: {}",
            diverged.diff
        ),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::{
        catalog::settings::Settings,
        model::{
            ChatMessage, Role,
            asked::{Asked, Conversation},
        },
        run::log::Recorded,
    };

    fn event(seq: u64, ctx: &str, payload: Payload) -> pb::RunEvent {
        pb::RunEvent {
            seq,
            context_id: ctx.into(),
            payload: Some(payload),
            ..Default::default()
        }
    }

    fn asked(text: &str) -> (Asked, Vec<ChatMessage>) {
        let messages = vec![ChatMessage::new(Role::User, text)];
        let a = Asked::of(
            "scripted:a",
            &messages,
            &std::sync::Arc::from(Vec::new()),
            &Settings::default(),
            &mut Conversation::default(),
            true,
        );
        (a, messages)
    }

    /// A run whose root turn streamed two deltas and called `search`,
    /// which reported progress.
    fn rerun(strict: bool) -> Rerun {
        let (was, _) = asked("hi");
        let turn = json!({"text": "ab", "calls": [], "usage": {"input_tokens": 1, "output_tokens": 1},
            "finish_reason": "stop", "model": "", "asked": was});
        let delta = |t: &str| Payload::TextDelta(pb::TextDelta { text: t.into() });
        let events = vec![
            event(1, "root", delta("a")),
            event(2, "root", delta("b")),
            event(3, "root", Payload::MessageCompleted(Default::default())),
            event(
                4,
                "root",
                Payload::ToolCallStarted(pb::ToolCallStarted {
                    call_id: "c1".into(),
                    tool: "search".into(),
                    arguments_json: r#"{"q":1}"#.into(),
                }),
            ),
            event(
                5,
                "root",
                Payload::ToolProgress(pb::ToolProgress {
                    call_id: "c1".into(),
                    percent: 50,
                    ..Default::default()
                }),
            ),
            event(6, "root", Payload::ToolCallCompleted(Default::default())),
        ];
        let recording = vec![
            Recorded {
                seq: 3,
                unit: "t/root/1".into(),
                record: serde_json::to_vec(&turn).unwrap_or_default().into(),
            },
            Recorded {
                seq: 6,
                unit: "c/root/c1".into(),
                record: br#"{"ok":true,"text":"found","x":true}"#.to_vec().into(),
            },
            Recorded {
                seq: 7,
                unit: "ap/approval:c1".into(),
                record: br#"[true,"fine"]"#.to_vec().into(),
            },
        ];
        Rerun::new(
            "origin".into(),
            strict,
            History {
                packed: Vec::new(),
                events,
                recording,
            },
        )
    }

    #[test]
    fn a_request_asked_as_recorded_is_answered_with_its_record_and_deltas() {
        let r = rerun(false);
        let (now, messages) = asked("hi");
        let Answer::Recorded((record, deltas)) = r.turn("t/root/1", &now, &messages) else {
            panic!("matched");
        };
        assert!(serde_json::from_slice::<Value>(record).is_ok());
        assert_eq!(deltas, ["a", "b"]);
        let Answer::Recorded(call) = r.call("c/root/c1", "search", &json!({"q": 1})) else {
            panic!("matched");
        };
        assert_eq!(call.said.len(), 1, "its progress");
        assert_eq!(r.answer("approval:c1"), Some(&br#"[true,"fine"]"#[..]));
        let s = r.stats();
        assert_eq!((s.matched_calls, s.calls, s.diverged), (2, 2, false));
    }

    #[test]
    fn a_request_that_differs_says_how_and_after_the_divergence_all_is_live() {
        let r = rerun(false);
        let (now, messages) = asked("hello");
        let Answer::Differs(diff) = r.turn("t/root/1", &now, &messages) else {
            panic!("differs");
        };
        assert_eq!(diff, r#"message 1 (user) differs: now "hello""#);
        let Answer::Differs(diff) = r.call("c/root/c1", "search", &json!({"q": 2})) else {
            panic!("differs");
        };
        assert_eq!(diff, r#"arguments: {"q":1} → {"q":2}"#);
        assert!(matches!(
            r.call("c/root/c9", "search", &json!({})),
            Answer::Differs(_)
        ));
        assert!(r.diverge());
        assert!(!r.diverge(), "told once");
        let (now, messages) = asked("hi");
        assert!(matches!(r.turn("t/root/1", &now, &messages), Answer::Live));
        assert_eq!(r.answer("approval:c1"), None, "people are asked live");
        let s = r.stats();
        assert_eq!((s.matched_calls, s.calls, s.diverged), (0, 4, true));
    }

    #[tokio::test]
    async fn a_strict_replay_fails_with_the_divergence() {
        let r = rerun(true);
        assert!(r.diverge());
        r.end(Failure::new(Code::FailedPrecondition, "diverged here"));
        let failure = tokio::time::timeout(std::time::Duration::from_secs(1), r.failed())
            .await
            .expect("failed at once");
        assert_eq!(failure.message, "diverged here");
        // A branch beside the one that diverged calls nothing live: it is
        // told to wait for the end (`Run::diverged` never returns).
        let (now, messages) = asked("hi");
        assert!(matches!(
            r.turn("t/root/1", &now, &messages),
            Answer::Differs(_)
        ));
        assert!(matches!(
            r.call("c/root/c1", "search", &json!({"q": 1})),
            Answer::Differs(_)
        ));
        assert_eq!(r.stats().calls, 0);
    }

    #[tokio::test]
    async fn a_strict_replay_that_had_diverged_ends_when_resumed() {
        let journal: HashMap<String, Vec<u8>> = [
            ("dv".to_owned(), b"diverged before".to_vec()),
            ("#dv".to_owned(), b"4".to_vec()),
        ]
        .into_iter()
        .collect();
        let r = rerun(true).resumed(&journal);
        let failure = tokio::time::timeout(std::time::Duration::from_secs(1), r.failed())
            .await
            .expect("ended at once");
        assert_eq!(failure.message, "diverged before");
    }

    #[test]
    fn a_resumed_replay_counts_the_calls_its_journal_holds() {
        let journal: HashMap<String, Vec<u8>> = [
            ("t/root/1", "{}", 3),
            ("c/root/c1", r#"{"ok":true,"text":"","x":true}"#, 6),
            ("c/root/c2", r#"{"ok":true,"text":""}"#, 8),
            ("dv", "", 9),
            ("t/root/2", "{}", 10),
        ]
        .into_iter()
        .flat_map(|(unit, record, seq)| {
            [
                (unit.to_owned(), record.as_bytes().to_vec()),
                (format!("#{unit}"), seq.to_string().into_bytes()),
            ]
        })
        .collect();
        let s = rerun(false).resumed(&journal).stats();
        // Two model turns and one call of a tool outside Baton; the turn
        // after the divergence went live.
        assert_eq!((s.matched_calls, s.calls, s.diverged), (2, 3, true));
        let (now, messages) = asked("hi");
        let r = rerun(false).resumed(&HashMap::new());
        assert!(matches!(
            r.turn("t/root/1", &now, &messages),
            Answer::Recorded(_)
        ));
    }
}
