//! Rule (e) of the checker, answers: each question a run asked (an
//! `ApprovalRequested` or `InputRequested` in its log) is resolved exactly
//! once, by a person — not its deadline — with the client's answer (the
//! approval's reason names the run, the input is the option chosen). A
//! refusal "already answered" (or "already resolved") is a violation
//! unless an earlier attempt of the client's may have been taken (its
//! outcome unknown — a broken connection, a timeout — or taken, and the
//! question asked again after a resume) and the applied answer is the
//! client's. With a rival (another caller answering the same approval
//! at the same moment on another replica, its own reason), the applied
//! answer is the client's or the rival's, and the other was never told OK:
//! `answer-twice` when both were. `answer-lost`: an
//! answer the server took (Ok), yet the run asked the question again after
//! a resume and it stayed open — the taken answer was not kept.
//! `answer-late`: a second answer the client sent the moment its first was
//! told OK (racing the run going on and ending) was told OK too.
//! `answer-deadline`: on a tight run (see [`super::deadline`]), a question
//! closed by its deadline although an answer to it was told OK; closed by
//! its deadline with no answer told OK is right there (and a refusal that
//! its deadline passed is, like "already answered", a violation only when
//! the client's answer applied with no earlier attempt that could have
//! been taken).

use std::collections::{BTreeMap, HashMap};

use baton_client::pb::{self, run_event::Payload};

use super::{
    calls::{approval_reason, rival_reason},
    history::{Outcome, QuestionKind, Tracked},
    summary::Violation,
};

/// Rule (e) over run `t` whose log is `log`.
pub fn check(t: &Tracked, log: &[pb::RunEvent], out: &mut Vec<Violation>) {
    let id = t.run_id.as_str();
    let mut asked: BTreeMap<String, (QuestionKind, u64)> = BTreeMap::new();
    let mut resolved: HashMap<String, Vec<&pb::RunEvent>> = HashMap::new();
    for e in log {
        match &e.payload {
            Some(Payload::ApprovalRequested(q)) => {
                asked
                    .entry(q.approval_id.clone())
                    .or_insert((QuestionKind::Approval, e.seq));
            }
            Some(Payload::InputRequested(q)) => {
                asked
                    .entry(q.input_id.clone())
                    .or_insert((QuestionKind::Input, e.seq));
            }
            Some(Payload::ApprovalResolved(r)) => {
                resolved.entry(r.approval_id.clone()).or_default().push(e)
            }
            Some(Payload::InputReceived(r)) => {
                resolved.entry(r.input_id.clone()).or_default().push(e)
            }
            Some(Payload::InputTimedOut(r)) => {
                resolved.entry(r.input_id.clone()).or_default().push(e)
            }
            _ => {}
        }
    }
    for (q, (kind, seq)) in &asked {
        let attempts: Vec<_> = t
            .answers
            .iter()
            .filter(|a| &a.question == q && !a.rival && !a.late)
            .collect();
        for late in t
            .answers
            .iter()
            .filter(|a| &a.question == q && a.late && a.outcome == Outcome::Ok)
        {
            out.push(Violation::run(
                id,
                "answer-late",
                format!(
                    "{kind:?} {q}: a second answer, sent to r{} at {:.1?} once the first was told OK, was told OK too",
                    late.replica, late.at
                ),
            ));
        }
        let rivals: Vec<_> = t
            .answers
            .iter()
            .filter(|a| &a.question == q && a.rival)
            .collect();
        let tried = attempts
            .iter()
            .map(|a| {
                format!(
                    "{:.1?} r{}{}: {}",
                    a.at,
                    a.replica,
                    if a.parked { " (parked)" } else { "" },
                    show(&a.outcome)
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        let ours = attempts.first().map(|a| a.value.clone());
        let applied = resolved.get(q).and_then(|r| r.first()).copied();
        let by_deadline = match applied.and_then(|e| e.payload.as_ref()) {
            Some(Payload::ApprovalResolved(r)) => r.source() == pb::ApprovalSource::Deadline,
            Some(Payload::InputTimedOut(_)) => true,
            _ => false,
        };
        if by_deadline && t.tight {
            // Right unless an answer to it was told OK.
            let told: Vec<_> = attempts
                .iter()
                .chain(&rivals)
                .filter(|a| a.outcome == Outcome::Ok)
                .map(|a| {
                    let margin = a.margin_ms.map_or("?".into(), |m| format!("{m} ms"));
                    format!(
                        "r{} at {:.1?}, {margin} before the deadline",
                        a.replica, a.at
                    )
                })
                .collect();
            if !told.is_empty() {
                out.push(Violation::run(
                    id,
                    "answer-deadline",
                    format!(
                        "{kind:?} {q} (asked at seq {seq}) closed by its deadline, yet told OK ({}); attempts: {tried}",
                        told.join("; ")
                    ),
                ));
            }
            continue;
        }
        let ours_applied = match (applied.and_then(|e| e.payload.as_ref()), *kind) {
            (Some(Payload::ApprovalResolved(r)), _)
                if !rivals.is_empty() && r.reason == rival_reason(id) =>
            {
                // The rival's answer applied: it was not refused, and the
                // client was never told OK.
                if rivals
                    .iter()
                    .all(|r| matches!(r.outcome, Outcome::Refused { .. }))
                {
                    let said = rivals.iter().map(|r| show(&r.outcome)).collect::<Vec<_>>();
                    out.push(Violation::run(
                        id,
                        "answer",
                        format!(
                            "approval {q}: the rival's answer applied, though it was refused ({})",
                            said.join("; ")
                        ),
                    ));
                }
                if attempts.iter().any(|a| a.outcome == Outcome::Ok) {
                    out.push(Violation::run(
                        id,
                        "answer-twice",
                        format!("approval {q}: the rival's answer applied, and the client was told OK too; attempts: {tried}"),
                    ));
                }
                // The client's refusals "already answered" are right.
                continue;
            }
            (Some(Payload::ApprovalResolved(r)), _) => {
                let person = r.source() == pb::ApprovalSource::Person;
                if person
                    && r.approved
                    && r.reason == approval_reason(id)
                    && let Some(rival) = rivals.iter().find(|a| a.outcome == Outcome::Ok)
                {
                    out.push(Violation::run(
                        id,
                        "answer-twice",
                        format!(
                            "approval {q}: the client's answer applied, and the rival was told OK too (r{} at {:.1?})",
                            rival.replica, rival.at
                        ),
                    ));
                }
                if !person || !r.approved || r.reason != approval_reason(id) {
                    out.push(Violation::run(
                        id,
                        "answer",
                        format!(
                            "approval {q} (asked at seq {seq}) resolved by {:?}, approved {}, reason {:?}, not the client's answer; attempts: {}",
                            r.source(),
                            r.approved,
                            r.reason,
                            if tried.is_empty() { "none" } else { &tried }
                        ),
                    ));
                }
                person && r.approved && r.reason == approval_reason(id)
            }
            (Some(Payload::InputTimedOut(_)), _) => {
                out.push(Violation::run(
                    id,
                    "answer",
                    format!(
                        "input {q} (asked at seq {seq}) closed by its deadline; attempts: {tried}"
                    ),
                ));
                false
            }
            (Some(Payload::InputReceived(r)), _) => {
                let mine = ours.as_deref() == Some(r.input.as_str());
                if !mine {
                    out.push(Violation::run(
                        id,
                        "answer",
                        format!("input {q} received {:?}, the client answered {ours:?}; attempts: {tried}", r.input),
                    ));
                }
                mine
            }
            _ => {
                out.push(Violation::run(
                    id,
                    "answer",
                    format!(
                        "{kind:?} {q} (asked at seq {seq}) never resolved; attempts: {}",
                        if tried.is_empty() { "none" } else { &tried }
                    ),
                ));
                false
            }
        };
        for (i, a) in attempts.iter().enumerate() {
            if !a.outcome.already_answered() && !a.outcome.too_late() {
                continue;
            }
            let excused =
                ours_applied && attempts[..i].iter().any(|b| b.outcome.may_have_applied());
            if !excused {
                out.push(Violation::run(
                    id,
                    "answer",
                    format!(
                        "{kind:?} {q}: attempt {} on r{} at {:.1?}{} refused as already answered (or too late), with no earlier attempt that could have been taken; attempts: {tried}",
                        i + 1,
                        a.replica,
                        a.at,
                        if a.parked { " (after letting the run park)" } else { "" }
                    ),
                ));
            }
        }
    }
    for (q, seq, what) in &t.asked_again {
        out.push(Violation::run(
            id,
            "answer-lost",
            format!("{q}: {what} (request at seq {seq})"),
        ));
    }
}

fn show(o: &Outcome) -> String {
    match o {
        Outcome::Ok => "ok".into(),
        Outcome::Refused { code, message } => format!("refused {code:?} {message:?}"),
        Outcome::Unknown(why) => format!("unknown ({why})"),
    }
}
