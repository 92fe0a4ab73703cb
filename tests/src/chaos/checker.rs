//! The checker: judges each run's history (what its client saw and did)
//! and what every replica said of it after the faults, rule by rule; each
//! broken rule is a [`Violation`] naming the run, the rule and the
//! evidence.
//!
//! The run's *log* is what most replicas returned for WatchRun(0) (a
//! stream that closed after a terminal event): the replicas read it from
//! Redis, while a client may have been shown events that never reached
//! it. A run without one is `not-ended`, and only the client's seqs are
//! judged. The rules:
//!
//! - `seq-gap` (a): the log's seqs are 1, 2, … without a gap, and the
//!   client never saw a seq jump (it re-attaches after the last one seen);
//! - `seq-rewritten` (a): every copy of a seq — the client's, each
//!   replica's WatchRun(0) — is identical;
//! - `terminal` (b): exactly one terminal event, and it is last;
//! - `outcome` (c): the run completed with its item's output;
//! - `redone` (d): an event that ends a durable point (see
//!   [`durable_point`]) appears once per identity — except a tool or model
//!   completion seen again after a `RunResumed` whose checkpoint is below
//!   the first copy (that call was in flight: at least once);
//! - `answer`, `answer-lost`, `answer-late` and `answer-deadline` (e):
//!   see [`answers`] — every question resolved once, by a person, with
//!   the client's answer (or, on a tight run, by its deadline when no
//!   answer was told OK);
//! - `replicas-agree` (f): GetRun on every replica gives the log's status,
//!   last seq and output; `watch-log` (f): WatchRun(0) on every replica
//!   returns exactly the log;
//! - `not-ended`: the run had not ended when the wait after the faults
//!   was over, or no replica returned its log;
//! - `stale-run` (g): once every run ended, no replica counts a run as
//!   active, and no replica logs "another replica owns this run now" more
//!   than twice for one run.
//!
//! The drain rule (h) is the nemesis's (it times each drain); the store
//! rule (i), `store`, reads the context store (see [`super::store`]).

use std::collections::{BTreeMap, HashMap};

use baton_client::pb::{self, run_event::Payload};

use super::{
    answers,
    history::{Seen, Tracked, digest},
    summary::Violation,
    survey::{ReplicaState, ReplicaView},
};
use crate::events::{is_terminal, kind};

/// What the checker learned of one run besides its violations.
#[derive(Debug, Default)]
pub struct Facts {
    /// It completed.
    pub completed: bool,
    /// `RunResumed` events in its log.
    pub resumes: usize,
}

/// Judges one run: its history `t` and what each replica (`names`) said
/// of it (`views`).
pub fn check_run(t: &Tracked, views: &[ReplicaView], names: &[String]) -> (Vec<Violation>, Facts) {
    let mut out = Vec::new();
    let id = t.run_id.as_str();
    client_seqs(t, &mut out);
    let Some(log) = the_log(views) else {
        not_ended(t, views, names, &mut out);
        return (out, Facts::default());
    };
    let facts = Facts {
        completed: matches!(
            log.last().and_then(|e| e.payload.as_ref()),
            Some(Payload::RunCompleted(_))
        ),
        resumes: log
            .iter()
            .filter(|e| matches!(e.payload, Some(Payload::RunResumed(_))))
            .count(),
    };
    copies(t, log, views, names, &mut out);
    terminal(t, log, &mut out);
    redone(id, log, &mut out);
    answers::check(t, log, &mut out);
    agree(id, log, views, names, &mut out);
    (out, facts)
}

/// A run the survey found still running, or whose log no replica
/// returned.
fn not_ended(t: &Tracked, views: &[ReplicaView], names: &[String], out: &mut Vec<Violation>) {
    let statuses: Vec<String> = views
        .iter()
        .zip(names)
        .map(|(v, n)| {
            let get = match &v.get {
                Ok(g) => format!("{n} {:?} last_seq {}", g.status(), g.last_seq),
                Err(e) => format!("{n} {e}"),
            };
            match &v.log {
                Some(Err(e)) => format!("{get}, WatchRun(0): {e}"),
                _ => get,
            }
        })
        .collect();
    let last = t.copies.iter().max_by_key(|c| c.seq);
    let asked: Vec<String> = t
        .answers
        .iter()
        .map(|a| format!("{} r{} {:?}", a.question, a.replica, a.outcome))
        .collect();
    out.push(Violation::run(
        &t.run_id,
        "not-ended",
        format!(
            "{} ({}) has no log that ends: the client saw up to {}; replicas: {}; answers: [{}]; client: {}",
            t.item,
            t.expected,
            last.map(ToString::to_string)
                .unwrap_or_else(|| "nothing".into()),
            statuses.join("; "),
            asked.join(", "),
            last_notes(t)
        ),
    ));
}

/// Judges the replicas once every run is checked (`all_ended`: no run is
/// left running).
pub fn check_replicas(states: &[ReplicaState], all_ended: bool) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut moved: BTreeMap<&str, Vec<(&str, usize)>> = BTreeMap::new();
    for s in states {
        match &s.runs_active {
            Ok(n) if all_ended && *n > 0.0 => out.push(Violation::cluster(
                "stale-run",
                format!(
                    "{} reports baton_runs_active {n} after every run ended",
                    s.name
                ),
            )),
            Ok(_) => {}
            Err(e) => out.push(Violation::cluster(
                "stale-run",
                format!("{}: cannot read baton_runs_active: {e}", s.name),
            )),
        }
        match &s.held {
            Ok(held) if all_ended && !held.is_empty() => out.push(Violation::cluster(
                "held-after-end",
                format!("{} still holds {held:?} after every run ended", s.name),
            )),
            Ok(_) => {}
            Err(e) => out.push(Violation::cluster(
                "held-after-end",
                format!("{}: cannot read what it holds: {e}", s.name),
            )),
        }
        for (run, n) in &s.moved {
            moved.entry(run.as_str()).or_default().push((&s.name, *n));
        }
    }
    for (run, lines) in moved {
        let total: usize = lines.iter().map(|(_, n)| n).sum();
        if total > 2 {
            let by: Vec<String> = lines.iter().map(|(r, n)| format!("{r} {n}×")).collect();
            out.push(Violation::run(
                run,
                "stale-run",
                format!(
                    "\"another replica owns this run now\" logged {total} times ({})",
                    by.join(", ")
                ),
            ));
        }
    }
    out
}

/// Judges what the replicas share once every run ended: no run leased, no
/// hold on a tenant's budget, no breaker probing, no conversation's turn
/// held (read in Redis, where every replica keeps them).
pub fn check_redis(redis: &crate::RedisServer) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut held = |what: String| out.push(Violation::cluster("held-after-end", what));
    let cli = |args: &[&str]| {
        redis
            .cli(args)
            .unwrap_or_else(|e| format!("(redis-cli: {e})"))
    };
    let leases = cli(&["ZCARD", "baton:leases"]);
    if leases != "0" {
        held(format!(
            "{leases} run leases in Redis after every run ended"
        ));
    }
    let scan = |pattern: &str| -> Vec<String> {
        cli(&["--scan", "--pattern", pattern])
            .lines()
            .map(str::to_owned)
            .filter(|l| !l.is_empty())
            .collect()
    };
    for key in scan("baton:quota:*:holds") {
        let n = cli(&["ZCARD", &key]);
        if n != "0" {
            held(format!("{n} holds on a tenant's budget in {key}"));
        }
    }
    for key in scan("baton:breaker:*:probe") {
        held(format!("a breaker probe in {key}"));
    }
    for key in scan("baton:conv:*:meta") {
        let running = cli(&["HGET", &key, "running"]);
        if !running.is_empty() {
            held(format!(
                "{key}'s turn held by {running} after every run ended"
            ));
        }
    }
    out
}

/// The run's log (see the module docs): of the WatchRun(0) streams that
/// closed after a terminal event, the one most replicas returned (the
/// first of them on a tie); `None` when there is none.
pub fn the_log(views: &[ReplicaView]) -> Option<&Vec<pb::RunEvent>> {
    let mut votes: Vec<(&Vec<pb::RunEvent>, usize)> = Vec::new();
    for l in views.iter().filter_map(|v| v.log.as_ref()?.as_ref().ok()) {
        if !l.iter().any(is_terminal) {
            continue;
        }
        match votes.iter_mut().find(|(v, _)| *v == l) {
            Some((_, n)) => *n += 1,
            None => votes.push((l, 1)),
        }
    }
    let mut best: Option<(&Vec<pb::RunEvent>, usize)> = None;
    for (l, n) in votes {
        if best.is_none_or(|(_, m)| n > m) {
            best = Some((l, n));
        }
    }
    best.map(|(l, _)| l)
}

/// `seq 12 ToolCallCompleted in root.summarizer.1`.
fn describe(e: &pb::RunEvent) -> String {
    format!("seq {} {} in {}", e.seq, kind(e), e.context_id)
}

fn last_notes(t: &Tracked) -> String {
    let n = t.notes.len();
    if n == 0 {
        return if t.followed_to_end {
            "followed to its end".into()
        } else {
            "no notes".into()
        };
    }
    let from = n.saturating_sub(3);
    format!("{} notes, last: {}", n, t.notes[from..].join(" | "))
}

/// Rule (a), on what the client saw: it re-attaches after the last seq
/// it saw, so the seqs it saw run from 1 without a hole.
fn client_seqs(t: &Tracked, out: &mut Vec<Violation>) {
    let mut seen: Vec<u64> = t.copies.iter().map(|c| c.seq).collect();
    seen.sort_unstable();
    seen.dedup();
    if let Some(w) = seen.windows(2).find(|w| w[1] != w[0] + 1) {
        out.push(Violation::run(
            &t.run_id,
            "seq-gap",
            format!(
                "the client saw seq {} then {} (it re-attaches after the last seq seen)",
                w[0], w[1]
            ),
        ));
    } else if seen.first().is_some_and(|s| *s != 1) {
        out.push(Violation::run(
            &t.run_id,
            "seq-gap",
            format!("the client's first seq is {}", seen[0]),
        ));
    }
}

/// Rule (a), on the log: its seqs run from 1 without a gap, and every copy
/// of a seq — the client's, each replica's WatchRun(0) — is the log's.
fn copies(
    t: &Tracked,
    log: &[pb::RunEvent],
    views: &[ReplicaView],
    names: &[String],
    out: &mut Vec<Violation>,
) {
    let id = t.run_id.as_str();
    if let Some((i, e)) = log.iter().enumerate().find(|(i, e)| e.seq != *i as u64 + 1) {
        out.push(Violation::run(
            id,
            "seq-gap",
            format!("the log's event {} has seq {}", i + 1, e.seq),
        ));
    }
    let by_seq: HashMap<u64, (u64, &pb::RunEvent)> =
        log.iter().map(|e| (e.seq, (digest(e), e))).collect();
    let against = |copy: &Seen| -> Option<String> {
        match by_seq.get(&copy.seq) {
            Some((d, _)) if *d == copy.digest => None,
            Some((_, e)) => Some(format!("{copy} where the log has {}", describe(e))),
            None => Some(format!("{copy}, which the log does not have")),
        }
    };
    let mut differing: Vec<String> = t
        .copies
        .iter()
        .filter_map(|c| Some(format!("the client saw {}", against(c)?)))
        .collect();
    for (v, name) in views.iter().zip(names) {
        if let Some(Ok(l)) = &v.log {
            differing.extend(l.iter().filter_map(|e| {
                Some(format!(
                    "WatchRun(0) on {name} gave {}",
                    against(&Seen::of(e))?
                ))
            }));
        }
    }
    if let Some(first) = differing.first() {
        out.push(Violation::run(
            id,
            "seq-rewritten",
            format!(
                "{} copies differ from the log; first: {first}",
                differing.len()
            ),
        ));
    }
}

/// Rules (b) and (c).
fn terminal(t: &Tracked, log: &[pb::RunEvent], out: &mut Vec<Violation>) {
    let id = t.run_id.as_str();
    let ends: Vec<String> = log
        .iter()
        .filter(|e| is_terminal(e))
        .map(describe)
        .collect();
    if ends.len() != 1 {
        out.push(Violation::run(
            id,
            "terminal",
            format!("{} terminal events: {}", ends.len(), ends.join(", ")),
        ));
    }
    match log.last().and_then(|e| e.payload.as_ref()) {
        Some(Payload::RunCompleted(c)) if t.expected.matches(&c.output) => {}
        Some(Payload::RunCompleted(c)) => out.push(Violation::run(
            id,
            "outcome",
            format!(
                "{} completed with {:?}, expected {}",
                t.item, c.output, t.expected
            ),
        )),
        Some(Payload::RunFailed(f)) => out.push(Violation::run(
            id,
            "outcome",
            format!("{} failed (code {}): {}", t.item, f.code, f.message),
        )),
        Some(Payload::RunCancelled(c)) => out.push(Violation::run(
            id,
            "outcome",
            format!("{} cancelled: {}", t.item, c.reason),
        )),
        _ => {}
    }
}

/// The identity of the durable point an event ends, and whether a second
/// copy may follow a resume (a model or tool call in flight is done again).
pub fn durable_point(e: &pb::RunEvent) -> Option<(String, bool)> {
    let c = &e.context_id;
    Some(match e.payload.as_ref()? {
        Payload::RunStarted(_) => ("RunStarted".into(), false),
        Payload::AgentStarted(a) => (format!("AgentStarted {} in {c}", a.agent), false),
        Payload::Handoff(h) => (
            format!("Handoff {}→{} in {c}", h.from_agent, h.to_agent),
            false,
        ),
        Payload::MessageCompleted(m) => {
            let calls: Vec<&str> = m.tool_calls.iter().map(|t| t.call_id.as_str()).collect();
            (
                format!(
                    "MessageCompleted of {} in {c}: {:?} calls {calls:?}",
                    e.agent, m.text
                ),
                true,
            )
        }
        Payload::AgentCompleted(_) => (format!("AgentCompleted of {} in {c}", e.agent), false),
        Payload::ToolCallCompleted(t) => (format!("ToolCallCompleted {} in {c}", t.call_id), true),
        Payload::ApprovalResolved(r) => (format!("ApprovalResolved {}", r.approval_id), false),
        Payload::InputReceived(r) => (format!("InputReceived {}", r.input_id), false),
        Payload::StepStarted(s) => (
            format!("StepStarted {} attempt {} in {c}", s.step_id, s.attempt),
            false,
        ),
        Payload::StepCompleted(s) => (format!("StepCompleted {} in {c}", s.step_id), false),
        Payload::StepFailed(s) => (
            format!("StepFailed {} attempt {} in {c}", s.step_id, s.attempt),
            false,
        ),
        Payload::StepSkipped(s) => (format!("StepSkipped {} in {c}", s.step_id), false),
        Payload::PipelineCompleted(_) => (format!("PipelineCompleted in {c}"), false),
        _ => return None,
    })
}

/// Rule (d).
fn redone(id: &str, log: &[pb::RunEvent], out: &mut Vec<Violation>) {
    let resumes: Vec<(u64, u64)> = log
        .iter()
        .filter_map(|e| match &e.payload {
            Some(Payload::RunResumed(r)) => Some((e.seq, r.checkpoint_seq)),
            _ => None,
        })
        .collect();
    let mut first: HashMap<String, u64> = HashMap::new();
    for e in log {
        let Some((point, may_redo)) = durable_point(e) else {
            continue;
        };
        let Some(&s1) = first.get(&point) else {
            first.insert(point, e.seq);
            continue;
        };
        let in_flight = may_redo
            && resumes
                .iter()
                .any(|&(at, checkpoint)| s1 < at && at < e.seq && checkpoint < s1);
        if !in_flight {
            out.push(Violation::run(
                id,
                "redone",
                format!(
                    "{point} at seq {s1} and again at seq {} (resumes [seq, checkpoint]: {resumes:?})",
                    e.seq
                ),
            ));
        }
    }
}

/// Rule (f).
fn agree(
    id: &str,
    log: &[pb::RunEvent],
    views: &[ReplicaView],
    names: &[String],
    out: &mut Vec<Violation>,
) {
    let last = log.last().map(|e| e.seq).unwrap_or_default();
    let (status, output) = match log.last().and_then(|e| e.payload.as_ref()) {
        Some(Payload::RunCompleted(c)) => (pb::RunStatus::Completed, c.output.as_str()),
        Some(Payload::RunFailed(_)) => (pb::RunStatus::Failed, ""),
        Some(Payload::RunCancelled(_)) => (pb::RunStatus::Cancelled, ""),
        _ => return,
    };
    for (v, name) in views.iter().zip(names) {
        match &v.get {
            Ok(g) => {
                let same_output = status != pb::RunStatus::Completed || g.output == output;
                if g.status() != status || g.last_seq != last || !same_output {
                    out.push(Violation::run(
                        id,
                        "replicas-agree",
                        format!(
                            "GetRun on {name}: {:?}, last_seq {}, output {:?}; the log: {status:?}, last seq {last}, output {output:?}",
                            g.status(),
                            g.last_seq,
                            g.output
                        ),
                    ));
                }
            }
            Err(e) => out.push(Violation::run(
                id,
                "replicas-agree",
                format!("GetRun on {name}: {e}"),
            )),
        }
        match &v.log {
            Some(Ok(l)) if l.as_slice() == log => {}
            Some(Ok(l)) => {
                let differ = l
                    .iter()
                    .zip(log)
                    .find(|(a, b)| a != b)
                    .map(|(a, b)| {
                        format!(
                            "; first difference: {} where the log has {}",
                            describe(a),
                            describe(b)
                        )
                    })
                    .unwrap_or_default();
                out.push(Violation::run(
                    id,
                    "watch-log",
                    format!(
                        "WatchRun(0) on {name} returned {} events ending at {}; the log has {last}{differ}",
                        l.len(),
                        l.last().map(describe).unwrap_or_else(|| "nothing".into())
                    ),
                ));
            }
            Some(Err(e)) => out.push(Violation::run(
                id,
                "watch-log",
                format!("WatchRun(0) on {name}: {e}"),
            )),
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chaos::{
        calls::approval_reason,
        history::{Answer, Expected, Outcome, Seen},
        survey::ReplicaView,
    };

    const RUN: &str = "run-1";

    fn ev(seq: u64, context: &str, payload: Payload) -> pb::RunEvent {
        pb::RunEvent {
            seq,
            run_id: RUN.into(),
            context_id: context.into(),
            agent: "billing".into(),
            payload: Some(payload),
            ..Default::default()
        }
    }

    fn tool_done(seq: u64, call: &str) -> pb::RunEvent {
        ev(
            seq,
            "root",
            Payload::ToolCallCompleted(pb::ToolCallCompleted {
                call_id: call.into(),
                tool: "write_context".into(),
                ..Default::default()
            }),
        )
    }

    fn resumed(seq: u64, checkpoint: u64) -> pb::RunEvent {
        ev(
            seq,
            "root",
            Payload::RunResumed(pb::RunResumed {
                replica: "r1".into(),
                checkpoint_seq: checkpoint,
            }),
        )
    }

    fn asked(seq: u64) -> pb::RunEvent {
        ev(
            seq,
            "root",
            Payload::ApprovalRequested(pb::ApprovalRequested {
                approval_id: "approval:c1".into(),
                call_id: "c1".into(),
                ..Default::default()
            }),
        )
    }

    fn approved(seq: u64) -> pb::RunEvent {
        ev(
            seq,
            "root",
            Payload::ApprovalResolved(pb::ApprovalResolved {
                approval_id: "approval:c1".into(),
                approved: true,
                reason: approval_reason(RUN),
                source: pb::ApprovalSource::Person as i32,
            }),
        )
    }

    fn completed(seq: u64, output: &str) -> pb::RunEvent {
        ev(
            seq,
            "root",
            Payload::RunCompleted(pb::RunCompleted {
                output: output.into(),
                ..Default::default()
            }),
        )
    }

    fn started() -> pb::RunEvent {
        ev(1, "root", Payload::RunStarted(pb::RunStarted::default()))
    }

    fn tracked(events: &[pb::RunEvent], answers: Vec<Answer>) -> Tracked {
        Tracked {
            run_id: RUN.into(),
            item: "billing",
            expected: Expected::Prefix("Done. ".into()),
            tight: false,
            copies: events.iter().map(Seen::of).collect(),
            answers,
            asked_again: Vec::new(),
            followed_to_end: true,
            notes: Vec::new(),
        }
    }

    /// A replica that agrees with `log`.
    fn view_of(log: &[pb::RunEvent]) -> ReplicaView {
        let (status, output) = match log.last().and_then(|e| e.payload.clone()) {
            Some(Payload::RunCompleted(c)) => (pb::RunStatus::Completed, c.output),
            _ => (pb::RunStatus::Running, String::new()),
        };
        ReplicaView {
            get: Ok(pb::GetRunResponse {
                status: status as i32,
                last_seq: log.last().map(|e| e.seq).unwrap_or_default(),
                output,
                ..Default::default()
            }),
            log: Some(Ok(log.to_vec())),
        }
    }

    /// The rules `log`, seen whole by the client and returned by one
    /// replica, breaks.
    fn rules_of(log: &[pb::RunEvent], answers: Vec<Answer>) -> Vec<&'static str> {
        rules(&tracked(log, answers), &[view_of(log)])
    }

    fn attempt(outcome: Outcome) -> Answer {
        Answer {
            question: "approval:c1".into(),
            value: "approved".into(),
            replica: 1,
            at: std::time::Duration::from_secs(1),
            outcome,
            parked: false,
            rival: false,
            late: false,
            margin_ms: None,
        }
    }

    fn rules(t: &Tracked, views: &[ReplicaView]) -> Vec<&'static str> {
        let names = ["r0".to_owned(), "r1".to_owned(), "r2".to_owned()];
        let (found, _) = check_run(t, views, &names[..views.len()]);
        let mut rules: Vec<&str> = found.iter().map(|v| v.rule).collect();
        rules.sort_unstable();
        rules
    }

    fn already_answered() -> Outcome {
        Outcome::Refused {
            code: tonic::Code::FailedPrecondition,
            message: "approval_id: approval \"approval:c1\" was already answered".into(),
        }
    }

    /// A rival answered the same approval at the same moment: exactly one
    /// of the two may be told OK, and the applied answer is that one's.
    #[test]
    fn of_two_competing_answers_exactly_one_is_told_ok() {
        let rival = |outcome| Answer {
            rival: true,
            replica: 2,
            ..attempt(outcome)
        };
        let by_rival = |seq| {
            let mut e = approved(seq);
            if let Some(Payload::ApprovalResolved(r)) = &mut e.payload {
                r.reason = crate::chaos::calls::rival_reason(RUN);
            }
            e
        };
        let ours = [started(), asked(2), approved(3), completed(4, "Done. ok")];
        let theirs = [started(), asked(2), by_rival(3), completed(4, "Done. ok")];
        // Right: one told OK, the other refused, the OK one applied.
        assert!(rules_of(&ours, vec![attempt(Outcome::Ok), rival(already_answered())]).is_empty());
        assert!(
            rules_of(
                &theirs,
                vec![attempt(already_answered()), rival(Outcome::Ok)]
            )
            .is_empty()
        );
        // Both told OK: whichever applied, the other caller was misled.
        assert_eq!(
            rules_of(&ours, vec![attempt(Outcome::Ok), rival(Outcome::Ok)]),
            ["answer-twice"]
        );
        assert_eq!(
            rules_of(&theirs, vec![attempt(Outcome::Ok), rival(Outcome::Ok)]),
            ["answer-twice"]
        );
        // A rival asked twice, taken once: fine.
        assert!(
            rules_of(
                &theirs,
                vec![
                    attempt(already_answered()),
                    rival(Outcome::Ok),
                    rival(already_answered())
                ]
            )
            .is_empty()
        );
        // A refused answer applied.
        assert_eq!(
            rules_of(
                &theirs,
                vec![attempt(Outcome::Ok), rival(already_answered())]
            ),
            ["answer", "answer-twice"]
        );
    }

    /// The client answered again at once on another replica, once its
    /// first answer was told OK: that one is refused (the question is
    /// taken, or the run has ended), never told OK.
    #[test]
    fn a_late_second_answer_is_never_told_ok() {
        let late = |outcome| Answer {
            late: true,
            replica: 2,
            ..attempt(outcome)
        };
        let ours = [started(), asked(2), approved(3), completed(4, "Done. ok")];
        let ended = Outcome::Refused {
            code: tonic::Code::FailedPrecondition,
            message: "run has ended: nobody can answer its approval".into(),
        };
        for refused in [already_answered(), ended] {
            assert!(rules_of(&ours, vec![attempt(Outcome::Ok), late(refused)]).is_empty());
        }
        assert!(
            rules_of(
                &ours,
                vec![
                    attempt(Outcome::Ok),
                    late(Outcome::Unknown("timeout".into()))
                ]
            )
            .is_empty()
        );
        assert_eq!(
            rules_of(&ours, vec![attempt(Outcome::Ok), late(Outcome::Ok)]),
            ["answer-late"]
        );
    }

    /// On a tight run the client answers near the deadline: closed by its
    /// deadline is right when no answer was told OK, a violation when one
    /// was; on any other run a deadline close is a violation.
    #[test]
    fn a_question_closed_by_its_deadline_was_told_ok_to_nobody() {
        let denied = ev(
            3,
            "root",
            Payload::ApprovalResolved(pb::ApprovalResolved {
                approval_id: "approval:c1".into(),
                approved: false,
                reason: "no answer before the deadline".into(),
                source: pb::ApprovalSource::Deadline as i32,
            }),
        );
        let closed = [started(), asked(2), denied, completed(4, "Done. denied")];
        let near = |outcome, margin| Answer {
            margin_ms: Some(margin),
            ..attempt(outcome)
        };
        let too_late = Outcome::Refused {
            code: tonic::Code::FailedPrecondition,
            message: "the deadline of approval \"approval:c1\" has passed".into(),
        };
        let tight = |answers| {
            let mut t = tracked(&closed, answers);
            t.tight = true;
            rules(&t, &[view_of(&closed)])
        };
        assert!(tight(vec![near(too_late.clone(), -40)]).is_empty());
        assert!(tight(vec![near(already_answered(), -5)]).is_empty());
        assert!(tight(vec![near(Outcome::Unknown("timeout".into()), 80)]).is_empty());
        assert_eq!(tight(vec![near(Outcome::Ok, 120)]), ["answer-deadline"]);
        // A rival told OK counts too.
        let rival = Answer {
            rival: true,
            ..near(Outcome::Ok, 130)
        };
        assert_eq!(
            tight(vec![near(too_late.clone(), -10), rival]),
            ["answer-deadline"]
        );
        // Not tight: nobody answers near a deadline there (the close and
        // the refusal are each named).
        assert_eq!(
            rules_of(&closed, vec![attempt(too_late.clone())]),
            ["answer", "answer"]
        );
        // The client's answer applied, though its only attempt was told it
        // came too late: an error that changed something.
        let ours = [started(), asked(2), approved(3), completed(4, "Done. ok")];
        let mut t = tracked(&ours, vec![near(too_late, -20)]);
        t.tight = true;
        assert_eq!(rules(&t, &[view_of(&ours)]), ["answer"]);
    }

    #[test]
    fn a_clean_run_breaks_no_rule() {
        let log = [
            started(),
            asked(2),
            approved(3),
            tool_done(4, "c1"),
            completed(5, "Done. ok"),
        ];
        assert_eq!(
            rules_of(&log, vec![attempt(Outcome::Ok)]),
            Vec::<&str>::new()
        );
    }

    #[test]
    fn gaps_rewrites_and_wrong_outputs_are_caught() {
        let gap = [started(), tool_done(3, "c1"), completed(4, "nope")];
        assert_eq!(rules_of(&gap, vec![]), ["outcome", "seq-gap", "seq-gap"]);
        let log = [started(), tool_done(2, "c1"), completed(3, "Done. ok")];
        let shown = [started(), tool_done(2, "c2"), completed(3, "Done. ok")];
        assert_eq!(
            rules(&tracked(&shown, vec![]), &[view_of(&log)]),
            ["seq-rewritten"]
        );
        let (found, _) = check_run(&tracked(&shown, vec![]), &[], &[]);
        assert_eq!(
            found.iter().map(|v| v.rule).collect::<Vec<_>>(),
            ["not-ended"]
        );
    }

    #[test]
    fn a_completion_done_again_is_fine_only_after_a_resume_from_before_it() {
        let redone = [
            started(),
            tool_done(2, "c1"),
            tool_done(3, "c1"),
            completed(4, "Done. ok"),
        ];
        assert_eq!(rules_of(&redone, vec![]), ["redone"]);
        let in_flight = [
            started(),
            tool_done(2, "c1"),
            resumed(3, 1),
            tool_done(4, "c1"),
            completed(5, "Done. ok"),
        ];
        assert!(rules_of(&in_flight, vec![]).is_empty());
        let after_checkpoint = [
            started(),
            tool_done(2, "c1"),
            resumed(3, 2),
            tool_done(4, "c1"),
            completed(5, "Done. ok"),
        ];
        assert_eq!(rules_of(&after_checkpoint, vec![]), ["redone"]);
    }

    #[test]
    fn already_answered_is_a_violation_unless_an_earlier_attempt_may_have_been_taken() {
        let log = [started(), asked(2), approved(3), completed(4, "Done. ok")];
        assert_eq!(
            rules_of(&log, vec![attempt(already_answered())]),
            ["answer"]
        );
        let after_unknown = vec![
            attempt(Outcome::Unknown("timeout".into())),
            attempt(already_answered()),
        ];
        assert!(rules_of(&log, after_unknown).is_empty());
        let by_deadline = [
            started(),
            asked(2),
            ev(
                3,
                "root",
                Payload::ApprovalResolved(pb::ApprovalResolved {
                    approval_id: "approval:c1".into(),
                    source: pb::ApprovalSource::Deadline as i32,
                    ..Default::default()
                }),
            ),
            completed(4, "Done. denied"),
        ];
        assert_eq!(
            rules_of(&by_deadline, vec![attempt(Outcome::Ok)]),
            ["answer"]
        );
    }

    #[test]
    fn a_replica_that_disagrees_is_named() {
        let log = [started(), completed(2, "Done. ok")];
        let stale = ReplicaView {
            get: Ok(pb::GetRunResponse {
                status: pb::RunStatus::Running as i32,
                last_seq: 1,
                ..Default::default()
            }),
            log: Some(Err("did not close within 5s: 1 events".into())),
        };
        let found = rules(&tracked(&log, vec![]), &[view_of(&log), stale]);
        assert_eq!(found, ["replicas-agree", "watch-log"]);
    }
}
