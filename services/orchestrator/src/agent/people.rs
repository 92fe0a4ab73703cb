//! People: approvals before a tool runs, and input a tool asks for. Both
//! are questions through one [`ask`]: registered with the run's record (so
//! ResolveApproval/SubmitInput find them), announced as an event, waited for
//! in a `wait …` span until `approval_timeout`, and closed when nobody
//! answered in time.

use std::sync::Arc;

use baton_proto::v1::{self as pb, run_event::Payload};
use opentelemetry::{
    Context, KeyValue,
    trace::{Span as _, SpanBuilder, Tracer},
};

use std::time::Duration;

use tokio::sync::oneshot;

use super::frame::{CallOutput, FrameView};
use crate::{
    catalog::ApprovalPolicy,
    model::ToolCallRequest,
    run::{durable::now_ms, record::ApprovalAnswer, state::Run},
};

/// A span around a wait for a person, under the current tool call's span.
fn wait_span(
    rt: &Run,
    name: &'static str,
    id_key: &'static str,
    id: &str,
) -> opentelemetry_sdk::trace::Span {
    rt.tracer().build_with_context(
        SpanBuilder::from_name(name).with_attributes([KeyValue::new(id_key, id.to_owned())]),
        &Context::current(),
    )
}

/// Asks for approval when the agent's policy for this tool wants it.
// The error is a string because it is the denial the model reads as the
// call's result (`… was denied: reason`), not an error of Baton's.
pub(super) async fn approve(
    rt: &Arc<Run>,
    view: &FrameView,
    call: &ToolCallRequest,
) -> Result<(), String> {
    let policy = view
        .agent
        .spec
        .approvals
        .get(&call.name)
        .copied()
        .unwrap_or_default();
    let needed = match policy {
        ApprovalPolicy::Never => false,
        ApprovalPolicy::Always => true,
        ApprovalPolicy::Nested => view.ctx.depth >= 1,
    };
    if !needed {
        return Ok(());
    }
    ask_approval(rt, view, call).await
}

/// Asks for approval of `call` as the run's approval mode says (a person,
/// or the mode's own answer); a budget's raise is asked this way too.
pub(super) async fn ask_approval(
    rt: &Arc<Run>,
    view: &FrameView,
    call: &ToolCallRequest,
) -> Result<(), String> {
    let approval_id = format!("approval:{}", call.id);
    let resolved = |approved: bool, reason: &str, source: pb::ApprovalSource| {
        Payload::ApprovalResolved(pb::ApprovalResolved {
            approval_id: approval_id.clone(),
            approved,
            reason: reason.to_owned(),
            source: source as i32,
        })
    };
    match rt.approval_mode {
        pb::ApprovalMode::AutoApprove => {
            rt.emit(
                &view.ctx,
                &view.agent_name,
                resolved(true, "auto_approve", pb::ApprovalSource::Mode),
            )
            .await;
            Ok(())
        }
        pb::ApprovalMode::AutoDeny => {
            rt.emit(
                &view.ctx,
                &view.agent_name,
                resolved(false, "auto_deny", pb::ApprovalSource::Mode),
            )
            .await;
            Err(format!(
                "{} was denied by the run's approval mode",
                call.name
            ))
        }
        pb::ApprovalMode::Ask | pb::ApprovalMode::Unspecified => {
            // A resumed run does not ask again what a person answered.
            let unit = format!("ap/{approval_id}");
            if let Some(answer) = rt
                .journaled(&unit)
                .and_then(|r| serde_json::from_slice::<(bool, String)>(r).ok())
            {
                return match answer {
                    (true, _) => Ok(()),
                    (false, reason) if reason.is_empty() => {
                        Err(format!("{} was denied", call.name))
                    }
                    (false, reason) => Err(format!("{} was denied: {reason}", call.name)),
                };
            }
            replay_asks(rt, view, "approval", call, &approval_id).await;
            let question = Question::new(rt, &approval_id);
            let rx = rt.record.await_approval(&approval_id, question.deadline_ms);
            let requested = Payload::ApprovalRequested(pb::ApprovalRequested {
                approval_id: approval_id.clone(),
                call_id: call.id.clone(),
                tool: call.name.clone(),
                arguments_json: call.arguments.to_string(),
                deadline: Some(question.deadline()),
            });
            let wait = Wait {
                span: "wait approval",
                id_key: "baton.approval.id",
                id: &approval_id,
            };
            // An answer given while the run was away (parked) is taken now.
            let given = rt
                .inbox(&approval_id)
                .and_then(|r| serde_json::from_slice::<(bool, String)>(&r).ok())
                .map(|(approved, reason)| ApprovalAnswer { approved, reason });
            let (answered, _taken) = ask(
                rt,
                view,
                question,
                rx,
                given,
                requested,
                wait,
                |answer: &ApprovalAnswer| {
                    Some(KeyValue::new("baton.approval.approved", answer.approved))
                },
            )
            .await;
            let answered = match answered {
                Some(answer) => Some(answer),
                None => closed(rt, &approval_id)
                    .await
                    .and_then(|r| serde_json::from_slice::<(bool, String)>(&r).ok())
                    .map(|(approved, reason)| ApprovalAnswer { approved, reason }),
            };
            match answered {
                Some(answer) => {
                    let record = (answer.approved, answer.reason.clone());
                    rt.emit_point(
                        &view.ctx,
                        &view.agent_name,
                        resolved(answer.approved, &answer.reason, pb::ApprovalSource::Person),
                        unit,
                        || serde_json::to_vec(&record).unwrap_or_default(),
                    )
                    .await;
                    if answer.approved {
                        Ok(())
                    } else if answer.reason.is_empty() {
                        Err(format!("{} was denied", call.name))
                    } else {
                        Err(format!("{} was denied: {}", call.name, answer.reason))
                    }
                }
                None => {
                    rt.record.close_approval(&approval_id);
                    let reason = "no answer before the deadline";
                    rt.emit_point(
                        &view.ctx,
                        &view.agent_name,
                        resolved(false, reason, pb::ApprovalSource::Deadline),
                        unit,
                        || serde_json::to_vec(&(false, reason)).unwrap_or_default(),
                    )
                    .await;
                    Err(format!("{} was denied: {reason}", call.name))
                }
            }
        }
    }
}

/// Asks a person for the input a tool needs (the `n`-th question of the
/// call); the answer, or why there is none.
pub(super) async fn input(
    rt: &Arc<Run>,
    view: &FrameView,
    call: &ToolCallRequest,
    n: u32,
    prompt: String,
    options: Vec<String>,
) -> CallOutput {
    let input_id = format!("input:{}:{n}", call.id);
    input_as(rt, view, call, input_id, prompt, options, String::new()).await
}

/// Asks a person for input for `call` under the id `input_id` (unique in
/// the run), in `view`'s context; a resumed run takes the answer it had
/// received. `schema_json` is the JSON Schema the answer is asked in, if
/// any (an MCP server's elicitation).
pub(super) async fn input_as(
    rt: &Arc<Run>,
    view: &FrameView,
    call: &ToolCallRequest,
    input_id: String,
    prompt: String,
    options: Vec<String>,
    schema_json: String,
) -> CallOutput {
    // A resumed run does not ask again for input it received, nor a
    // question nobody answered in time.
    let unit = format!("in/{input_id}");
    if let Some(input) = rt.journaled(&unit) {
        return Ok(String::from_utf8_lossy(input).into_owned());
    }
    let timed_out = format!("it/{input_id}");
    if rt.journaled(&timed_out).is_some() {
        return Err(no_answer(rt));
    }
    // A replay of a question nobody answered in time: nobody answers it.
    let unanswered = rt.rerun.as_ref().is_some_and(|r| r.timed_out(&input_id));
    if !unanswered {
        replay_asks(rt, view, "input", call, &input_id).await;
    }
    let question = Question::new(rt, &input_id);
    let deadline = question.deadline();
    let rx = rt.record.await_input(&input_id, question.deadline_ms);
    let requested = Payload::InputRequested(pb::InputRequested {
        input_id: input_id.clone(),
        call_id: call.id.clone(),
        tool: call.name.clone(),
        prompt,
        options,
        deadline: Some(question.deadline()),
        schema_json,
    });
    let wait = Wait {
        span: "wait input",
        id_key: "baton.input.id",
        id: &input_id,
    };
    let given = rt
        .inbox(&input_id)
        .and_then(|r| serde_json::from_slice::<String>(&r).ok());
    let rx = match unanswered {
        // Its deadline has passed: the wait ends at once, unanswered.
        true => tokio::sync::oneshot::channel().1,
        false => rx,
    };
    let question = match unanswered {
        true => Question {
            deadline_ms: 0,
            ..question
        },
        false => question,
    };
    let (answered, _taken) = ask(
        rt,
        view,
        question,
        rx,
        given,
        requested,
        wait,
        |_: &String| None,
    )
    .await;
    let answered = match answered {
        Some(input) => Some(input),
        None if unanswered => None,
        None => closed(rt, &input_id)
            .await
            .and_then(|r| serde_json::from_slice::<String>(&r).ok()),
    };
    match answered {
        Some(input) => {
            let received = Payload::InputReceived(pb::InputReceived {
                input_id,
                input: input.clone(),
            });
            let record = input.clone().into_bytes();
            rt.emit_point(&view.ctx, &view.agent_name, received, unit, || record)
                .await;
            Ok(input)
        }
        None => {
            rt.record.close_input(&input_id);
            // Said in the context that asked, and a durable point: a
            // resumed run does not ask again.
            let timed_out_event = Payload::InputTimedOut(pb::InputTimedOut {
                input_id,
                deadline: Some(deadline),
            });
            rt.emit_point(
                &view.ctx,
                &view.agent_name,
                timed_out_event,
                timed_out,
                Vec::new,
            )
            .await;
            Err(no_answer(rt))
        }
    }
}

/// Nobody answered question `id` in time as far as this replica knows.
/// With durable runs the run store decides (see `durable::inbox`): an
/// answer given on another replica before the deadline reaches the owner
/// only at its next renewal, so the owner asks for it here, and the store
/// closes the question for good otherwise. The answer taken, if any. A
/// replica that is not the run's owner any more (fenced), or whose lease
/// lapsed while the store did not answer, stops the run here: the replica
/// that resumes it closes the question then.
async fn closed(rt: &Run, id: &str) -> Option<Vec<u8>> {
    use crate::run::durable::inbox::Closed;
    let epoch = rt.record.epoch.load(std::sync::atomic::Ordering::Relaxed);
    let durable = rt.services.durable.as_ref().filter(|_| epoch > 0)?;
    let mut pause = Duration::from_millis(50);
    loop {
        match durable.close(&rt.record.run_id, epoch, id).await {
            Ok(Closed::Answer(answer)) => return Some(answer),
            Ok(Closed::Unanswered) => return None,
            Ok(Closed::Fenced) => match rt.stop_here("another replica owns this run now").await {},
            Err(e) if rt.record.lease_lapsed() => {
                let reason =
                    format!("the run store did not close {id} before the lease lapsed: {e}");
                match rt.stop_here(&reason).await {}
            }
            Err(e) => {
                tracing::warn!(run_id = %rt.record.run_id, question = id, error = %e, "cannot close a question at its deadline; trying again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        }
    }
}

/// A replay asks a person only once it diverged: a question the recording
/// has no answer to is where it diverges (and a strict replay ends there,
/// asking nobody; this never returns then).
async fn replay_asks(
    rt: &Arc<Run>,
    view: &FrameView,
    point: &str,
    call: &ToolCallRequest,
    id: &str,
) {
    // A case's recording (evaluations) answers tool calls only: people
    // are asked live.
    if rt.rerun.as_ref().is_none_or(|r| r.tools_only()) || rt.inbox(id).is_some() {
        return;
    }
    let diverged = pb::Diverged {
        point: point.into(),
        call_id: call.id.clone(),
        diff: format!("the recording has no answer to {id}"),
        ..Default::default()
    };
    rt.diverged(&view.ctx, &view.agent_name, diverged).await;
}

/// What the model reads when nobody answered a question in time: that no
/// answer came, never something that reads as the person's answer.
fn no_answer(rt: &Run) -> String {
    format!(
        "no answer: nobody answered the question within {:?} (runs.approval_timeout); decide without it",
        rt.limits.approval_timeout
    )
}

/// A question's deadline, and whether a resumed run had asked it before
/// (its `q/{id}` record holds the deadline it was asked with).
struct Question {
    unit: String,
    deadline_ms: i64,
    asked_before: bool,
}

impl Question {
    fn new(rt: &Run, id: &str) -> Self {
        let unit = format!("q/{id}");
        let before = rt
            .journaled(&unit)
            .and_then(|r| std::str::from_utf8(r).ok()?.parse::<i64>().ok());
        Self {
            unit,
            deadline_ms: before
                .unwrap_or_else(|| now_ms() + rt.limits.approval_timeout.as_millis() as i64),
            asked_before: before.is_some(),
        }
    }

    fn deadline(&self) -> baton_proto::wkt::Timestamp {
        baton_proto::wkt::Timestamp {
            seconds: self.deadline_ms.div_euclid(1000),
            nanos: (self.deadline_ms.rem_euclid(1000) * 1_000_000) as i32,
        }
    }
}

/// The span a wait for a person is recorded in.
struct Wait<'a> {
    span: &'static str,
    id_key: &'static str,
    id: &'a str,
}

/// Announces a question (`requested`, registered with the run's record as
/// `rx`) and waits for its answer until its deadline, in its `wait` span
/// (with what `describe` says of the answer); `None` when nobody answered
/// in time (the caller closes the question). The question is a durable
/// point (`q/{id}`, its deadline): a resumed run announces it again after
/// `RunResumed` with the same id and deadline, and an answer `given` while
/// the run was away is the answer at once. An answer taken from the run's
/// record comes with a guard that counts it working until dropped (after
/// it is journaled: a run is never parked with it in hand).
#[allow(clippy::too_many_arguments)]
async fn ask<'r, T>(
    rt: &'r Run,
    view: &FrameView,
    question: Question,
    rx: oneshot::Receiver<T>,
    given: Option<T>,
    requested: Payload,
    wait: Wait<'_>,
    describe: impl Fn(&T) -> Option<KeyValue>,
) -> (Option<T>, Option<crate::run::record::Working<'r>>) {
    if question.asked_before {
        rt.emit(&view.ctx, &view.agent_name, requested).await;
    } else {
        let deadline = question.deadline_ms.to_string().into_bytes();
        rt.emit_point(
            &view.ctx,
            &view.agent_name,
            requested,
            question.unit,
            || deadline,
        )
        .await;
    }
    let mut span = wait_span(rt, wait.span, wait.id_key, wait.id);
    let mut taken = None;
    let answered = match given {
        Some(answer) => Some(answer),
        None => {
            // Counted as waiting for a person (quota `parked_runs`) until
            // answered; if the run stops here first (parked), it still
            // waits, and its end releases the count.
            let (quotas, tenant, run_id) =
                (&rt.services.quotas, &rt.record.tenant, &rt.record.run_id);
            quotas.asking(tenant, run_id, question.deadline_ms).await;
            let left = (question.deadline_ms - now_ms()).max(0) as u64;
            let mut rx = rx;
            let answer = match tokio::time::timeout(Duration::from_millis(left), &mut rx).await {
                Ok(answer) => answer.ok(),
                // An answer handed over as the deadline passed is taken:
                // its caller was told OK.
                Err(_) => {
                    rx.close();
                    rx.try_recv().ok()
                }
            };
            if answer.is_some() {
                taken = Some(rt.record.answer_taken());
            }
            quotas.answered(tenant, run_id).await;
            answer
        }
    };
    if let Some(kv) = answered.as_ref().and_then(&describe) {
        span.set_attribute(kv);
    }
    span.set_attribute(KeyValue::new("baton.wait.answered", answered.is_some()));
    span.end();
    (answered, taken)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::{
        agent::frame::CallFrame,
        run::{record::ApprovalAnswer, testing},
    };

    const AGENTS: &str = r#"
default_model: scripted:quiet
scripts:
  quiet:
    - text: ok
agents:
  careful:
    tools: [sleep, read_context]
    approvals:
      sleep: always
      read_context: nested
"#;

    fn call(name: &str) -> ToolCallRequest {
        ToolCallRequest {
            id: "c1".into(),
            name: name.into(),
            arguments: json!({}),
        }
    }

    async fn approve_in(mode: pb::ApprovalMode, tool: &str) -> (Result<(), String>, Vec<String>) {
        let (rt, mut events) = testing::run(AGENTS, testing::limits(), mode);
        let frame = CallFrame::root(
            &rt,
            rt.resolve("careful").expect("resolves"),
            Vec::new(),
            "go".into(),
        );
        let answer = approve(&rt, &frame.view(), &call(tool)).await;
        (answer, testing::kinds(&mut events))
    }

    #[tokio::test]
    async fn the_run_mode_answers_without_asking_anyone() {
        let (answer, kinds) = approve_in(pb::ApprovalMode::AutoApprove, "sleep").await;
        assert_eq!(answer, Ok(()));
        assert_eq!(kinds, ["APPROVAL_RESOLVED"]);
        let (answer, kinds) = approve_in(pb::ApprovalMode::AutoDeny, "sleep").await;
        assert_eq!(
            answer,
            Err("sleep was denied by the run's approval mode".into())
        );
        assert_eq!(kinds, ["APPROVAL_RESOLVED"]);
    }

    #[tokio::test]
    async fn tools_without_a_policy_and_nested_ones_at_the_root_need_nobody() {
        let (answer, kinds) = approve_in(pb::ApprovalMode::Ask, "read_context").await;
        assert_eq!(answer, Ok(()));
        assert!(kinds.is_empty(), "{kinds:?}");
    }

    #[tokio::test]
    async fn nobody_answering_before_the_deadline_denies_and_closes_the_question() {
        let (answer, kinds) = approve_in(pb::ApprovalMode::Ask, "sleep").await;
        assert_eq!(
            answer,
            Err("sleep was denied: no answer before the deadline".into())
        );
        assert_eq!(kinds, ["APPROVAL_REQUESTED", "APPROVAL_RESOLVED"]);
    }

    #[tokio::test]
    async fn a_persons_answer_is_the_answer() {
        let (rt, mut events) = testing::run(AGENTS, testing::limits(), pb::ApprovalMode::Ask);
        let frame = CallFrame::root(
            &rt,
            rt.resolve("careful").expect("resolves"),
            Vec::new(),
            "go".into(),
        );
        let view = frame.view();
        let call = call("sleep");
        let asking = approve(&rt, &view, &call);
        let answering = async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            rt.record.resolve_approval(
                "approval:c1",
                ApprovalAnswer {
                    approved: false,
                    reason: "not now".into(),
                },
            )
        };
        let (answer, resolved) = tokio::join!(asking, answering);
        resolved.expect("the question was open");
        assert_eq!(answer, Err("sleep was denied: not now".into()));
        assert_eq!(
            testing::kinds(&mut events),
            ["APPROVAL_REQUESTED", "APPROVAL_RESOLVED"]
        );
        // Answered once: a second answer finds nothing to answer.
        assert!(
            rt.record
                .resolve_approval(
                    "approval:c1",
                    ApprovalAnswer {
                        approved: true,
                        reason: String::new(),
                    },
                )
                .is_err()
        );
    }

    #[tokio::test]
    async fn input_is_asked_and_received_or_times_out() {
        let (rt, mut events) = testing::run(AGENTS, testing::limits(), pb::ApprovalMode::Ask);
        let frame = CallFrame::root(
            &rt,
            rt.resolve("careful").expect("resolves"),
            Vec::new(),
            "go".into(),
        );
        let view = frame.view();
        let call = call("sleep");
        let asking = input(&rt, &view, &call, 1, "city?".into(), vec!["Paris".into()]);
        let answering = async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            rt.record.submit_input("input:c1:1", "Paris".into())
        };
        let (answer, submitted) = tokio::join!(asking, answering);
        submitted.expect("the question was open");
        assert_eq!(answer, Ok("Paris".into()));
        assert_eq!(
            testing::kinds(&mut events),
            ["INPUT_REQUESTED", "INPUT_RECEIVED"]
        );
        // Nobody answers: InputTimedOut, and the model reads that no
        // answer came.
        let late = input(&rt, &view, &call, 2, "again?".into(), Vec::new()).await;
        assert_eq!(
            late,
            Err(
                "no answer: nobody answered the question within 200ms (runs.approval_timeout); decide without it"
                    .into()
            )
        );
        assert_eq!(
            testing::kinds(&mut events),
            ["INPUT_REQUESTED", "INPUT_TIMED_OUT"]
        );
        assert!(rt.record.submit_input("input:c1:2", "x".into()).is_err());
    }
}
