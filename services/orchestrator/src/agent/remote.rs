//! A remote A2A agent called as a tool, in its own child context
//! `{parent}.{agent}.{n}` like a local one:
//!
//! - the message is sent (streamed when the card says so); the remote
//!   task's id is journaled with the child context's `AgentStarted`, so a
//!   run resumed on another replica subscribes to that task instead of
//!   sending the message again;
//! - its updates become events of the child context: artifact text and
//!   status messages as `TextDelta` (updates of a Baton agent that carry
//!   Baton's context extension and are not text become `ToolProgress` of
//!   the call instead, and a Baton agent's output artifact, whose text
//!   streamed already, is not sent again);
//! - `TASK_STATE_INPUT_REQUIRED` becomes a question (`InputRequested`) in
//!   the child context; the person's answer is sent back on the same task;
//! - the end: `COMPLETED` is the call's output (the artifacts' text, or the
//!   last message's), `FAILED`, `CANCELED`, `REJECTED` and
//!   `AUTH_REQUIRED` are tool errors the model reads;
//! - cancelling the Baton run (or the call) cancels the remote task, unless
//!   the run was handed over to another replica, which goes on with it.

use std::{
    collections::BTreeMap,
    sync::{Arc, atomic::Ordering},
};

use baton_proto::{
    a2a::v1::{self as lf, stream_response::Payload as Update},
    v1::{self as pb, run_event::Payload},
};
use futures::StreamExt as _;
use serde_json::Value;

use super::{
    frame::{CallOutput, FrameView},
    people,
};
use crate::{
    model::ToolCallRequest,
    run::{context::ContextInfo, state::Run},
    tools::a2a::{Endpoint, RemoteAgent, Updates},
};

/// The key of Baton's context extension in an update's metadata.
const EXTENSION: &str = "https://baton.dev/a2a/extensions/context/v1";

/// Runs `call` of `agent` in the child context `ctx`.
pub(super) async fn call(
    rt: &Arc<Run>,
    view: &FrameView,
    call: &ToolCallRequest,
    ctx: Arc<ContextInfo>,
    agent: &Arc<RemoteAgent>,
) -> CallOutput {
    let _end = ctx.end_on_drop();
    let name: Arc<str> = Arc::from(agent.name());
    let child = FrameView {
        ctx: ctx.clone(),
        agent: view.agent.clone(),
        agent_name: name.clone(),
        agent_context: view.agent_context.clone(),
        scope: view.scope.clone(),
    };
    let task_text = match call.arguments.get("task").and_then(Value::as_str) {
        Some(t) => t.to_owned(),
        None => call.arguments.to_string(),
    };
    let ep = agent.endpoint().await?;
    let unit = format!("a2a/{}", ctx.id);
    let mut guard = CancelOnDrop {
        rt: rt.clone(),
        agent: agent.clone(),
        ep: ep.clone(),
        task: None,
        done: false,
    };
    let mut updates = match rt.journaled(&unit) {
        Some(task) => {
            // Resumed: the task was sent before; follow it.
            let task = String::from_utf8_lossy(task).into_owned();
            guard.task = Some(task.clone());
            follow(agent, &ep, &task).await?
        }
        None => {
            let message = user_message(None, None, task_text);
            let mut updates = agent.send(&ep, message).await.inspect_err(|_| {
                let agent = agent.clone();
                tokio::spawn(async move { agent.forget_card().await });
            })?;
            // The first update names the task: journal it with the
            // context's start.
            let first = updates.next().await;
            let task_id = match &first {
                Some(Ok(lf::StreamResponse {
                    payload: Some(Update::Task(t)),
                })) => Some(t.id.clone()),
                Some(Ok(lf::StreamResponse {
                    payload: Some(Update::StatusUpdate(s)),
                })) => Some(s.task_id.clone()),
                _ => None,
            };
            let started = Payload::AgentStarted(pb::AgentStarted {
                agent: name.to_string(),
                model: format!("a2a:{}", ep.url),
            });
            match &task_id {
                Some(id) => {
                    guard.task = Some(id.clone());
                    let record = id.clone().into_bytes();
                    rt.emit_point(&ctx, &name, started, unit, || record).await;
                }
                None => rt.emit(&ctx, &name, started).await,
            }
            futures::stream::iter(first).chain(updates).boxed()
        }
    };
    let mut texts = Texts::default();
    let outcome = loop {
        let Some(update) = updates.next().await else {
            // The stream ended before the task did (an interrupted state
            // ends A2A streams, or the connection broke): where is it?
            let Some(task) = guard.task.clone() else {
                break Err(format!(
                    "remote agent {name}: the stream ended before any task"
                ));
            };
            let now = agent.get(&ep, &task).await?;
            match state_of(now.status.as_ref()) {
                lf::TaskState::InputRequired => {
                    updates = answer(rt, &child, call, agent, &ep, &now, &mut texts).await?;
                }
                s if terminal(s) => break end(&name, s, now.status.as_ref(), &mut texts, &now),
                _ => updates = follow(agent, &ep, &task).await?,
            }
            continue;
        };
        let update = update?;
        match update.payload {
            Some(Update::Task(t)) => {
                if guard.task.is_none() {
                    guard.task = Some(t.id.clone());
                }
                texts.take_artifacts(&t.artifacts);
                let s = state_of(t.status.as_ref());
                if terminal(s) {
                    break end(&name, s, t.status.as_ref(), &mut texts, &t);
                }
                if s == lf::TaskState::InputRequired {
                    updates = answer(rt, &child, call, agent, &ep, &t, &mut texts).await?;
                }
            }
            Some(Update::Message(m)) => break Ok(text_of(&m.parts)),
            Some(Update::StatusUpdate(u)) => {
                let s = state_of(u.status.as_ref());
                if let Some(m) = u.status.as_ref().and_then(|s| s.message.as_ref())
                    && !terminal(s)
                    && s != lf::TaskState::InputRequired
                {
                    texts.streamed |=
                        report(rt, view, call, &ctx, &name, m, u.metadata.as_ref()).await;
                    texts.last_message = text_of(&m.parts);
                }
                if terminal(s) {
                    let task = lf::Task {
                        id: u.task_id.clone(),
                        status: u.status.clone(),
                        ..Default::default()
                    };
                    break end(&name, s, u.status.as_ref(), &mut texts, &task);
                }
                if s == lf::TaskState::InputRequired {
                    let task = lf::Task {
                        id: u.task_id.clone(),
                        context_id: u.context_id.clone(),
                        status: u.status.clone(),
                        ..Default::default()
                    };
                    updates = answer(rt, &child, call, agent, &ep, &task, &mut texts).await?;
                }
            }
            Some(Update::ArtifactUpdate(a)) => {
                if let Some(artifact) = &a.artifact {
                    let text = text_of(&artifact.parts);
                    // A Baton agent streams its text as status messages and
                    // then sends its run's output as an artifact: that text
                    // is not new (unless none streamed).
                    let repeated = texts.streamed && baton_kind(a.metadata.as_ref()).is_some();
                    if !text.is_empty() && !repeated {
                        let delta = Payload::TextDelta(pb::TextDelta { text: text.clone() });
                        rt.emit(&ctx, &name, delta).await;
                    }
                    texts.artifact(&artifact.artifact_id, text, a.append);
                }
            }
            None => {}
        }
    };
    guard.done = true;
    let output = outcome?;
    let completed = Payload::AgentCompleted(pb::AgentCompleted {
        output: output.clone(),
        usage: None,
    });
    rt.emit(&ctx, &name, completed).await;
    Ok(output)
}

/// The kind of the Baton event an update of a Baton agent stands for (its
/// context extension's `kind`); `None` for other agents' updates.
fn baton_kind(meta: Option<&baton_proto::json_value::Struct>) -> Option<String> {
    meta.and_then(|s| s.fields.get(EXTENSION))
        .and_then(|v| match &v.kind {
            Some(baton_proto::json_value::value::Kind::StructValue(s)) => s.fields.get("kind"),
            _ => None,
        })
        .and_then(|v| match &v.kind {
            Some(baton_proto::json_value::value::Kind::StringValue(k)) => Some(k.clone()),
            _ => None,
        })
}

/// A status message of the remote task: text as it arrives, or (an update
/// of a Baton agent about something else than text) progress of the call.
/// Whether it was text.
async fn report(
    rt: &Arc<Run>,
    view: &FrameView,
    call: &ToolCallRequest,
    ctx: &Arc<ContextInfo>,
    name: &Arc<str>,
    m: &lf::Message,
    meta: Option<&baton_proto::json_value::Struct>,
) -> bool {
    let text = text_of(&m.parts);
    if text.is_empty() {
        return false;
    }
    match baton_kind(meta).as_deref() {
        None | Some("TEXT_DELTA") => {
            rt.emit(ctx, name, Payload::TextDelta(pb::TextDelta { text }))
                .await;
            true
        }
        Some(_) => {
            let progress = Payload::ToolProgress(pb::ToolProgress {
                call_id: call.id.clone(),
                tool: call.name.clone(),
                percent: 0,
                message: text,
            });
            rt.emit(&view.ctx, &view.agent_name, progress).await;
            false
        }
    }
}

/// Puts what the remote task asks to a person (in the child context) and
/// sends the answer back on the same task; gives the updates that follow.
async fn answer(
    rt: &Arc<Run>,
    child: &FrameView,
    call: &ToolCallRequest,
    agent: &Arc<RemoteAgent>,
    ep: &Endpoint,
    task: &lf::Task,
    texts: &mut Texts,
) -> Result<Updates, String> {
    let status = task.status.as_ref();
    let (prompt, asked_by) = match status.and_then(|s| s.message.as_ref()) {
        Some(m) => (text_of(&m.parts), m.message_id.clone()),
        None => (String::new(), String::new()),
    };
    let prompt = if prompt.is_empty() {
        format!("{} needs input to go on.", agent.name())
    } else {
        prompt
    };
    // One id per question the remote asks (its status message), so a
    // resumed run takes the answer it had for the same question.
    let key = if asked_by.is_empty() {
        status
            .and_then(|s| s.timestamp)
            .map(|t| format!("{}.{}", t.seconds, t.nanos))
            .unwrap_or_default()
    } else {
        asked_by
    };
    let input_id = format!(
        "input:{}:a2a:{:016x}",
        call.id,
        baton_common::ids::fnv1a(0, key.bytes())
    );
    let given =
        people::input_as(rt, child, call, input_id, prompt, Vec::new(), String::new()).await?;
    texts.last_message.clear();
    let message = user_message(Some(&task.id), Some(&task.context_id), given);
    agent.send(ep, message).await
}

/// Follows task `id` from now: its subscription, or, when it has ended
/// (subscriptions refuse ended tasks), the task itself.
async fn follow(agent: &RemoteAgent, ep: &Endpoint, id: &str) -> Result<Updates, String> {
    match agent.subscribe(ep, id).await {
        Ok(updates) => Ok(updates),
        Err(e) => {
            let task = agent.get(ep, id).await.map_err(|_| e)?;
            let one = lf::StreamResponse {
                payload: Some(Update::Task(task)),
            };
            Ok(futures::stream::iter([Ok(one)]).boxed())
        }
    }
}

/// The call's result once the remote task ended in `state`.
fn end(
    name: &str,
    state: lf::TaskState,
    status: Option<&lf::TaskStatus>,
    texts: &mut Texts,
    task: &lf::Task,
) -> CallOutput {
    texts.take_artifacts(&task.artifacts);
    let said = status
        .and_then(|s| s.message.as_ref())
        .map(|m| text_of(&m.parts))
        .filter(|t| !t.is_empty());
    match state {
        lf::TaskState::Completed => Ok(texts.output(said)),
        lf::TaskState::Canceled => Err(format!(
            "remote agent {name}: its task {} was cancelled{}",
            task.id,
            said.map(|s| format!(": {s}")).unwrap_or_default()
        )),
        lf::TaskState::Rejected => Err(format!(
            "remote agent {name} rejected the task{}",
            said.map(|s| format!(": {s}")).unwrap_or_default()
        )),
        lf::TaskState::AuthRequired => Err(format!(
            "remote agent {name} needs authentication this call cannot give{}",
            said.map(|s| format!(": {s}")).unwrap_or_default()
        )),
        _ => Err(format!(
            "remote agent {name} failed{}",
            said.map(|s| format!(": {s}")).unwrap_or_default()
        )),
    }
}

/// What the remote agent said, by artifact, and its last status message.
#[derive(Default)]
struct Texts {
    artifacts: BTreeMap<String, String>,
    order: Vec<String>,
    last_message: String,
    /// Whether status messages brought text (a Baton agent's way).
    streamed: bool,
}

impl Texts {
    fn artifact(&mut self, id: &str, text: String, append: bool) {
        if !self.artifacts.contains_key(id) {
            self.order.push(id.to_owned());
        }
        let entry = self.artifacts.entry(id.to_owned()).or_default();
        if append {
            entry.push_str(&text);
        } else {
            *entry = text;
        }
    }

    /// A task's artifacts, as they are (a snapshot replaces what the
    /// updates had built).
    fn take_artifacts(&mut self, artifacts: &[lf::Artifact]) {
        for a in artifacts {
            self.artifact(&a.artifact_id, text_of(&a.parts), false);
        }
    }

    /// The call's output: the artifacts' text, or what the agent said
    /// last.
    fn output(&self, said: Option<String>) -> String {
        let artifacts: Vec<&str> = self
            .order
            .iter()
            .filter_map(|id| self.artifacts.get(id).map(String::as_str))
            .filter(|t| !t.is_empty())
            .collect();
        if !artifacts.is_empty() {
            return artifacts.join("\n");
        }
        said.unwrap_or_else(|| self.last_message.clone())
    }
}

/// Cancels the remote task when the call is dropped before it ended (the
/// run was cancelled), unless the run went to another replica.
struct CancelOnDrop {
    rt: Arc<Run>,
    agent: Arc<RemoteAgent>,
    ep: Arc<Endpoint>,
    task: Option<String>,
    done: bool,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if self.done || self.rt.record.handed_over.load(Ordering::SeqCst) {
            return;
        }
        let Some(task) = self.task.take() else {
            return;
        };
        let (agent, ep) = (self.agent.clone(), self.ep.clone());
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let cancelled = tokio::time::timeout(
                    std::time::Duration::from_secs(10),
                    agent.cancel(&ep, &task),
                )
                .await;
                match cancelled {
                    Ok(Ok(())) => tracing::info!(agent = agent.name(), task, "remote task cancelled"),
                    Ok(Err(e)) => tracing::warn!(agent = agent.name(), task, error = %e, "remote task not cancelled"),
                    Err(_) => tracing::warn!(agent = agent.name(), task, "remote task cancel timed out"),
                }
            });
        }
    }
}

fn state_of(status: Option<&lf::TaskStatus>) -> lf::TaskState {
    status
        .and_then(|s| lf::TaskState::try_from(s.state).ok())
        .unwrap_or(lf::TaskState::Unspecified)
}

fn terminal(s: lf::TaskState) -> bool {
    matches!(
        s,
        lf::TaskState::Completed
            | lf::TaskState::Failed
            | lf::TaskState::Canceled
            | lf::TaskState::Rejected
            | lf::TaskState::AuthRequired
    )
}

/// The text of some parts: text parts as they are, data parts as JSON.
fn text_of(parts: &[lf::Part]) -> String {
    parts
        .iter()
        .filter_map(|p| match &p.content {
            Some(lf::part::Content::Text(t)) => Some(t.clone()),
            Some(lf::part::Content::Data(v)) => serde_json::to_string(v).ok(),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("")
}

/// A caller's message: new, or (with a task) an answer on that task.
fn user_message(task: Option<&str>, context: Option<&str>, text: String) -> lf::Message {
    lf::Message {
        message_id: uuid::Uuid::new_v4().to_string(),
        context_id: context.unwrap_or_default().to_owned(),
        task_id: task.unwrap_or_default().to_owned(),
        role: lf::Role::User as i32,
        parts: vec![lf::Part {
            content: Some(lf::part::Content::Text(text)),
            ..Default::default()
        }],
        ..Default::default()
    }
}
