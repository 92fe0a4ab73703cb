//! A run seen as an A2A task: [`Task`] folds the run's events, in order,
//! into the task's state, status message, history and artifacts, and
//! gives, for each event, the stream updates it means. `GetTask`, a
//! blocking `SendMessage`, and the first `Task` of every stream are the
//! fold of the events so far; streams then send the updates of the events
//! that follow. The same fold on every replica, from the run's events, so
//! any replica answers for any task of a durable run.
//!
//! How events become updates (see `docs/a2a.md`):
//! - text as it arrives (`TextDelta`, at any depth): a `WORKING` status
//!   update whose message carries the text;
//! - a sub-agent starting or ending, a tool call starting or ending, tool
//!   progress, a handoff, a pipeline step: a `WORKING` status update with a
//!   line saying what happened;
//! - an approval or a question anywhere in the run: `INPUT_REQUIRED`, its
//!   message what is asked (the stream ends there, as A2A's interrupted
//!   states end streams); the answer (`ApprovalResolved`,
//!   `InputReceived`): back to `WORKING`;
//! - the run's end: its output as the artifact `output`, then
//!   `COMPLETED`; `FAILED` with the code and message; `CANCELED`.
//!
//! Every update's metadata carries, under the [`EXTENSION`] key, where in
//! the run's tree it happened: `contextId`, `parentContextId`, `depth`,
//! `agent`, `kind` (the Baton event's) and `seq` (see `updates`).

use baton_proto::json_value::Struct;
use baton_proto::{
    a2a::v1::{self as lf, stream_response::Payload as Update},
    v1::{self as pb, run_event::Payload},
};

use super::{
    names::{CONTEXT_LABEL, IO_LABEL},
    updates::{
        NativeOutput, extension_meta, failure_text, message, native_output, output_artifact,
        progress_line,
    },
};
use crate::run::view::RunView;

/// What a task waits for from a person.
#[derive(Debug, Clone, PartialEq)]
pub enum Ask {
    /// An approval of a tool call.
    Approval {
        /// The approval.
        approval_id: String,
        /// The tool.
        tool: String,
    },
    /// A question.
    Question {
        /// The request for input.
        input_id: String,
    },
}

/// A run folded into an A2A task (see the module docs).
#[derive(Debug, Clone)]
pub struct Task {
    id: String,
    context_id: String,
    state: lf::TaskState,
    message: Option<lf::Message>,
    time: Option<baton_proto::wkt::Timestamp>,
    history: Vec<lf::Message>,
    artifacts: Vec<lf::Artifact>,
    /// The message an agent in A2A messages mode answered with.
    reply: Option<lf::Message>,
    /// Whether the run's input and output are A2A messages (`a2a_io:
    /// message`).
    native: bool,
    /// What the run waits for, oldest first, with the message that asks it.
    asks: Vec<(Ask, lf::Message)>,
    /// The seq of the last event folded in.
    pub last_seq: u64,
    /// Whether the run has ended.
    pub ended: bool,
}

impl Task {
    /// The task of run `run_id` in trace `trace_id`, before any event.
    pub fn new(run_id: &str, trace_id: &str) -> Self {
        Self {
            id: run_id.to_owned(),
            context_id: trace_id.to_owned(),
            state: lf::TaskState::Submitted,
            message: None,
            time: None,
            history: Vec::new(),
            artifacts: Vec::new(),
            reply: None,
            native: false,
            asks: Vec::new(),
            last_seq: 0,
            ended: false,
        }
    }

    /// The task of a run as its view shows it, without its events: what
    /// `ListTasks` answers (a running task is `WORKING` there; `GetTask`
    /// tells whether it waits for input).
    pub fn of_view(view: &RunView) -> Self {
        Self::of_view_labelled(view, &Default::default())
    }

    /// [`Self::of_view`], with the run's labels (from its `RunStarted`):
    /// the caller's context id, and the output of an agent in A2A messages
    /// mode as its artifacts or message.
    pub fn of_view_labelled(
        view: &RunView,
        labels: &std::collections::HashMap<String, String>,
    ) -> Self {
        let mut task = Self::new(&view.run_id, &view.trace_id);
        if let Some(c) = labels.get(CONTEXT_LABEL) {
            task.context_id = c.clone();
        }
        task.native = labels.get(IO_LABEL).is_some_and(|v| v == "message");
        task.last_seq = view.last_seq;
        task.time = Some(view.ended_at.unwrap_or(view.started_at).into());
        match view.status {
            pb::RunStatus::Completed => {
                task.state = lf::TaskState::Completed;
                match task.native.then(|| native_output(&view.output)).flatten() {
                    Some(NativeOutput::Message(m)) => task.reply = Some(m),
                    Some(NativeOutput::Artifacts(a)) => task.artifacts = a,
                    None => task.artifacts = vec![output_artifact(&view.output)],
                }
                task.ended = true;
            }
            pb::RunStatus::Failed => {
                task.state = lf::TaskState::Failed;
                task.message = Some(task.agent_message(
                    0,
                    failure_text(view.error_code, &view.error_message),
                    None,
                ));
                task.ended = true;
            }
            pb::RunStatus::Cancelled => {
                task.state = lf::TaskState::Canceled;
                task.ended = true;
            }
            pb::RunStatus::Running | pb::RunStatus::Unspecified => {
                task.state = lf::TaskState::Working;
            }
        }
        task
    }

    /// Takes the context id the caller gave (none: the trace id stays).
    pub fn set_context(&mut self, context_id: &str) {
        if !context_id.is_empty() {
            self.context_id = context_id.to_owned();
        }
    }

    /// The message an agent in A2A messages mode answered with.
    pub fn reply(&self) -> Option<&lf::Message> {
        self.reply.as_ref()
    }

    /// The task id (the run id).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The context id (the run's trace id).
    pub fn context_id(&self) -> &str {
        &self.context_id
    }

    /// Its state.
    pub fn state(&self) -> lf::TaskState {
        self.state
    }

    /// What the run waits for, oldest first.
    pub fn asks(&self) -> impl Iterator<Item = &Ask> {
        self.asks.iter().map(|(ask, _)| ask)
    }

    /// What the run waits for first, if anything.
    pub fn first_ask(&self) -> Option<&Ask> {
        self.asks.first().map(|(ask, _)| ask)
    }

    /// Whether a blocking call or a stream stops here: the task ended or
    /// waits for input.
    pub fn interrupted_or_ended(&self) -> bool {
        self.ended || self.state == lf::TaskState::InputRequired
    }

    /// Records the caller's message that started or answered the task, in
    /// its history.
    pub fn push_user_message(&mut self, mut message: lf::Message) {
        message.task_id = self.id.clone();
        message.context_id = self.context_id.clone();
        self.history.push(message);
    }

    /// Folds `event` in and gives the updates it means.
    pub fn apply(&mut self, event: &pb::RunEvent) -> Vec<Update> {
        self.last_seq = event.seq;
        self.time = event.time;
        let Some(payload) = &event.payload else {
            return Vec::new();
        };
        let meta = || Some(extension_meta(event, payload));
        match payload {
            Payload::RunStarted(s) => {
                self.state = lf::TaskState::Working;
                if let Some(c) = s.labels.get(CONTEXT_LABEL) {
                    self.context_id = c.clone();
                }
                self.native = s.labels.get(IO_LABEL).is_some_and(|v| v == "message");
                if !s.input.is_empty() {
                    let m = self.user_message(event.seq, &s.input, meta());
                    self.history.push(m);
                }
                vec![self.status_update(None, meta())]
            }
            Payload::RunResumed(_) => Vec::new(),
            // An agent in A2A messages mode writes its answer as JSON: its
            // own text is the output, not progress (its sub-agents' is).
            Payload::TextDelta(_) if self.native && event.depth == 0 => Vec::new(),
            Payload::TextDelta(d) => {
                let m = self.agent_message(event.seq, d.text.clone(), meta());
                vec![self.status_update(Some(m), meta())]
            }
            Payload::AgentStarted(_)
            | Payload::AgentCompleted(_)
            | Payload::Handoff(_)
            | Payload::ToolCallStarted(_)
            | Payload::ToolProgress(_)
            | Payload::ToolOptions(_)
            | Payload::ToolCallCompleted(_)
            | Payload::StepStarted(_)
            | Payload::StepCompleted(_)
            | Payload::StepFailed(_)
            | Payload::StepSkipped(_)
            | Payload::ModelFallback(_)
            | Payload::BudgetExhausted(_)
            | Payload::RateLimitWait(_)
            | Payload::HistoryCompacted(_)
            | Payload::PipelineCompleted(_) => {
                let Some(line) = progress_line(event, payload) else {
                    return Vec::new();
                };
                let m = self.agent_message(event.seq, line, meta());
                vec![self.status_update(Some(m), meta())]
            }
            Payload::MessageCompleted(_)
            | Payload::Diverged(_)
            | Payload::ToolBatchCompleted(_)
            | Payload::ContextWritten(_) => Vec::new(),
            Payload::ApprovalRequested(a) => {
                let text = format!(
                    "Approve the call of tool `{}` with {} (by {} at depth {})? Answer `approve` or `deny`, optionally followed by a reason.",
                    a.tool,
                    if a.arguments_json.is_empty() {
                        "no arguments"
                    } else {
                        &a.arguments_json
                    },
                    if event.agent.is_empty() {
                        "the run"
                    } else {
                        &event.agent
                    },
                    event.depth
                );
                let m = self.agent_message(event.seq, text, meta());
                let ask = Ask::Approval {
                    approval_id: a.approval_id.clone(),
                    tool: a.tool.clone(),
                };
                self.ask(ask, m, meta())
            }
            Payload::InputRequested(q) => {
                let text = if q.options.is_empty() {
                    q.prompt.clone()
                } else {
                    format!("{} [{}]", q.prompt, q.options.join("/"))
                };
                let m = self.agent_message(event.seq, text, meta());
                let ask = Ask::Question {
                    input_id: q.input_id.clone(),
                };
                self.ask(ask, m, meta())
            }
            Payload::ApprovalResolved(r) => {
                self.asks.retain(|(a, _)| {
                    !matches!(a, Ask::Approval { approval_id, .. } if *approval_id == r.approval_id)
                });
                let verdict = if r.approved { "approved" } else { "denied" };
                let text = if r.reason.is_empty() {
                    verdict.to_owned()
                } else {
                    format!("{verdict}: {}", r.reason)
                };
                let mut m = message(
                    format!("{}-{}", self.id, event.seq),
                    &self.id,
                    &self.context_id,
                    lf::Role::User,
                    text,
                );
                m.metadata = meta();
                self.answered(m, meta())
            }
            Payload::InputReceived(r) => {
                self.asks.retain(
                    |(a, _)| !matches!(a, Ask::Question { input_id } if *input_id == r.input_id),
                );
                let m = self.user_message(event.seq, &r.input, meta());
                self.answered(m, meta())
            }
            // Nobody answered in time: the question is closed, the task
            // works on (the agent says so).
            Payload::InputTimedOut(t) => {
                self.asks.retain(
                    |(a, _)| !matches!(a, Ask::Question { input_id } if *input_id == t.input_id),
                );
                let m = self.agent_message(
                    event.seq,
                    "Nobody answered the question in time; going on without an answer.".into(),
                    meta(),
                );
                self.answered(m, meta())
            }
            Payload::RunCompleted(c) => {
                self.ended = true;
                self.asks.clear();
                self.state = lf::TaskState::Completed;
                self.message = None;
                let mut updates = Vec::new();
                // A direct message answer travels, in a task's stream, as
                // the COMPLETED status's message (a bare Message belongs
                // only to message-only streams, A2A §3.1.2).
                let mut said = None;
                match self.native.then(|| native_output(&c.output)).flatten() {
                    Some(NativeOutput::Message(mut m)) => {
                        m.task_id = self.id.clone();
                        m.context_id = self.context_id.clone();
                        self.reply = Some(m.clone());
                        self.history.push(m.clone());
                        said = Some(m);
                    }
                    Some(NativeOutput::Artifacts(artifacts)) => self.artifacts = artifacts,
                    None => self.artifacts = vec![output_artifact(&c.output)],
                }
                for artifact in &self.artifacts {
                    updates.push(Update::ArtifactUpdate(lf::TaskArtifactUpdateEvent {
                        task_id: self.id.clone(),
                        context_id: self.context_id.clone(),
                        artifact: Some(artifact.clone()),
                        append: false,
                        last_chunk: true,
                        metadata: meta(),
                    }));
                }
                updates.push(self.status_update(said, meta()));
                updates
            }
            Payload::RunFailed(f) => {
                self.ended = true;
                self.asks.clear();
                self.state = lf::TaskState::Failed;
                let m = self.agent_message(event.seq, failure_text(f.code, &f.message), meta());
                vec![self.status_update(Some(m), meta())]
            }
            Payload::RunCancelled(c) => {
                self.ended = true;
                self.asks.clear();
                self.state = lf::TaskState::Canceled;
                let text = if c.reason.is_empty() {
                    "cancelled".to_owned()
                } else {
                    format!("cancelled: {}", c.reason)
                };
                let m = self.agent_message(event.seq, text, meta());
                vec![self.status_update(Some(m), meta())]
            }
        }
    }

    /// A person is asked something: the task waits for input.
    fn ask(&mut self, ask: Ask, m: lf::Message, meta: Option<Struct>) -> Vec<Update> {
        self.history.push(m.clone());
        self.asks.push((ask, m.clone()));
        self.state = lf::TaskState::InputRequired;
        vec![self.status_update(Some(m), meta)]
    }

    /// A caller's message the run took in (its input, an answer): in A2A
    /// messages mode the message itself, as the caller sent it.
    fn user_message(&self, seq: u64, input: &str, meta: Option<Struct>) -> lf::Message {
        if self.native
            && let Ok(mut m) = serde_json::from_str::<lf::Message>(input)
        {
            m.task_id = self.id.clone();
            m.context_id = self.context_id.clone();
            return m;
        }
        let mut m = message(
            format!("{}-{seq}", self.id),
            &self.id,
            &self.context_id,
            lf::Role::User,
            input.to_owned(),
        );
        m.metadata = meta;
        m
    }

    /// A person's answer (`m`) arrived: the next question, or back to work.
    fn answered(&mut self, m: lf::Message, meta: Option<Struct>) -> Vec<Update> {
        self.history.push(m);
        match self.asks.first() {
            Some((_, next)) => {
                let next = next.clone();
                vec![self.status_update(Some(next), meta)]
            }
            None => {
                self.state = lf::TaskState::Working;
                vec![self.status_update(None, meta)]
            }
        }
    }

    /// A status update of the current state, remembering `m` as the
    /// status message.
    fn status_update(&mut self, m: Option<lf::Message>, meta: Option<Struct>) -> Update {
        self.message = m;
        Update::StatusUpdate(lf::TaskStatusUpdateEvent {
            task_id: self.id.clone(),
            context_id: self.context_id.clone(),
            status: Some(self.status()),
            metadata: meta,
        })
    }

    fn status(&self) -> lf::TaskStatus {
        let message = match (self.state, &self.message) {
            // A waiting task's status says what it waits for.
            (lf::TaskState::InputRequired, _) => self.asks.first().map(|(_, m)| m.clone()),
            (_, m) => m.clone(),
        };
        lf::TaskStatus {
            state: self.state as i32,
            message,
            timestamp: self.time,
        }
    }

    fn agent_message(&self, seq: u64, text: String, meta: Option<Struct>) -> lf::Message {
        let mut m = message(
            format!("{}-{seq}", self.id),
            &self.id,
            &self.context_id,
            lf::Role::Agent,
            text,
        );
        m.metadata = meta;
        m
    }

    /// The task as A2A shows it, with at most `history_length` messages
    /// of history (none: all) and, unless `artifacts` is false, its
    /// artifacts.
    pub fn to_task(&self, history_length: Option<i32>, artifacts: bool) -> lf::Task {
        let history = match history_length {
            Some(n) if n <= 0 => Vec::new(),
            Some(n) => {
                let skip = self.history.len().saturating_sub(n as usize);
                self.history[skip..].to_vec()
            }
            None => self.history.clone(),
        };
        lf::Task {
            id: self.id.clone(),
            context_id: self.context_id.clone(),
            status: Some(self.status()),
            artifacts: if artifacts {
                self.artifacts.clone()
            } else {
                Vec::new()
            },
            history,
            metadata: None,
        }
    }
}
