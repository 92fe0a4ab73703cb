//! The A2A operations, whatever the binding: each takes the caller and
//! the agent the call is for, calls the application core, and answers in
//! `lf.a2a.v1` messages. A task is a run of that agent (task id = run id,
//! context id = the run's trace id); every run an A2A caller starts is
//! detached — A2A tasks outlive the call that made them — so a dropped
//! stream or a non-blocking send leaves it running.

use std::time::Duration;

use baton_common::ids::TraceId;
use baton_proto::{
    a2a::v1::{self as lf, stream_response::Payload as Update},
    v1 as pb,
};
use futures::{StreamExt as _, stream::BoxStream};
use opentelemetry::{
    Context,
    trace::{SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceState},
};

use super::{
    error::A2aError,
    task::{Ask, EXTENSION, Task},
};
use crate::{
    app::{Caller, Orchestrator},
    request::{AgentRequest, MAX_RUNS_PAGE, RunsQuery},
    run::{events::Filter, record::ApprovalAnswer, view::RunView},
};

/// A stream of A2A updates; an error ends it.
pub type Updates = BoxStream<'static, std::result::Result<lf::StreamResponse, A2aError>>;

/// The default and largest `ListTasks` page.
pub const DEFAULT_PAGE: usize = 50;
/// The largest `ListTasks` page.
pub const MAX_PAGE: usize = 100;

/// How long a `CancelTask` waits for the run's end before answering.
const CANCEL_WAIT: Duration = Duration::from_secs(10);

/// The A2A operations over the core.
#[derive(Clone)]
pub struct Service {
    core: Orchestrator,
}

type Result<T> = std::result::Result<T, A2aError>;

impl Service {
    /// The operations over `core`.
    pub fn new(core: Orchestrator) -> Self {
        Self { core }
    }

    /// `SendMessage`: a new task, or the answer to what a task asks.
    pub async fn send(
        &self,
        caller: &Caller,
        agent: &str,
        request: lf::SendMessageRequest,
    ) -> Result<lf::SendMessageResponse> {
        let config = request.configuration.clone().unwrap_or_default();
        let history_length = config.history_length;
        let (message, text) = checked_message(request.message)?;
        let task = if message.task_id.is_empty() {
            let started = self.start(caller, agent, &message, text).await?;
            let mut task = Task::new(&started.run_id, &started.trace_id);
            let mut events = started.events;
            if !config.return_immediately {
                while let Some(Ok(event)) = events.next().await {
                    task.apply(&event);
                    if task.interrupted_or_ended() {
                        break;
                    }
                }
            } else {
                task.push_user_message(message);
            }
            task
        } else {
            let answered = self.answer(caller, agent, &message, &text).await?;
            if config.return_immediately {
                self.task_now(caller, &message.task_id).await?
            } else {
                self.until_after(caller, &message.task_id, &answered, false)
                    .await?
            }
        };
        Ok(lf::SendMessageResponse {
            payload: Some(lf::send_message_response::Payload::Task(
                task.to_task(history_length, true),
            )),
        })
    }

    /// `SendStreamingMessage`: the task, then its updates until it ends or
    /// waits for input.
    pub async fn send_streaming(
        &self,
        caller: &Caller,
        agent: &str,
        request: lf::SendMessageRequest,
    ) -> Result<Updates> {
        let (message, text) = checked_message(request.message)?;
        if message.task_id.is_empty() {
            let started = self.start(caller, agent, &message, text).await?;
            let mut task = Task::new(&started.run_id, &started.trace_id);
            task.push_user_message(message);
            let first = task_update(&task);
            Ok(updates(task, started.events, first, true, None))
        } else {
            let answered = self.answer(caller, agent, &message, &text).await?;
            self.follow(caller, &message.task_id, true, Some(answered))
                .await
        }
    }

    /// `GetTask`.
    pub async fn get(
        &self,
        caller: &Caller,
        agent: &str,
        request: &lf::GetTaskRequest,
    ) -> Result<lf::Task> {
        if let Some(n) = request.history_length
            && n < 0
        {
            return Err(A2aError::invalid("historyLength", "must not be negative"));
        }
        self.view_of(caller, agent, &request.id).await?;
        let task = self.task_now(caller, &request.id).await?;
        Ok(task.to_task(request.history_length, true))
    }

    /// `CancelTask`: cancels the run and everything under it; answers the
    /// task once it has ended (or after [`CANCEL_WAIT`]).
    pub async fn cancel(&self, caller: &Caller, agent: &str, id: &str) -> Result<lf::Task> {
        let view = self.view_of(caller, agent, id).await?;
        if view.status != pb::RunStatus::Running {
            return Err(A2aError::NotCancelable(format!(
                "task {id} has already ended ({}); only a working task can be cancelled",
                view.status.as_str_name().trim_start_matches("RUN_STATUS_")
            )));
        }
        let status = self
            .core
            .cancel(caller, id, "cancelled by the A2A caller")
            .await?;
        if status != pb::RunStatus::Cancelled && status != pb::RunStatus::Running {
            return Err(A2aError::NotCancelable(format!(
                "task {id} ended ({}) before it could be cancelled",
                status.as_str_name().trim_start_matches("RUN_STATUS_")
            )));
        }
        let ended = tokio::time::timeout(CANCEL_WAIT, self.until_end(caller, id)).await;
        match ended {
            Ok(task) => Ok(task?.to_task(None, true)),
            Err(_) => Ok(self.task_now(caller, id).await?.to_task(None, true)),
        }
    }

    /// `SubscribeToTask`: the task now, then its updates until it ends.
    pub async fn subscribe(&self, caller: &Caller, agent: &str, id: &str) -> Result<Updates> {
        let view = self.view_of(caller, agent, id).await?;
        if view.status != pb::RunStatus::Running {
            return Err(A2aError::Unsupported(format!(
                "task {id} has ended ({}); there is nothing to subscribe to (GetTask shows it)",
                view.status.as_str_name().trim_start_matches("RUN_STATUS_")
            )));
        }
        self.follow(caller, id, false, None).await
    }

    /// `ListTasks`: the caller's tenant's tasks of this agent, the most
    /// recently updated first.
    pub async fn list(
        &self,
        caller: &Caller,
        agent: &str,
        request: &lf::ListTasksRequest,
    ) -> Result<lf::ListTasksResponse> {
        let size = match request.page_size {
            None | Some(0) => DEFAULT_PAGE,
            Some(n) if n < 0 || n as usize > MAX_PAGE => {
                return Err(A2aError::invalid(
                    "pageSize",
                    format!("must be between 1 and {MAX_PAGE} (got {n})"),
                ));
            }
            Some(n) => n as usize,
        };
        if let Some(n) = request.history_length
            && n < 0
        {
            return Err(A2aError::invalid("historyLength", "must not be negative"));
        }
        let state = lf::TaskState::try_from(request.status).map_err(|_| {
            A2aError::invalid("status", format!("{} is not a TaskState", request.status))
        })?;
        let after = if request.page_token.is_empty() {
            None
        } else {
            Some(parse_cursor(&request.page_token).ok_or_else(|| {
                A2aError::invalid("pageToken", "is not a token this server gave out")
            })?)
        };
        let since = request
            .status_timestamp_after
            .and_then(|t| std::time::SystemTime::try_from(t).ok());
        // Every run of the tenant, then this agent's, filtered and sorted
        // here: the core keeps runs in start order.
        let mut all = Vec::new();
        let mut query = RunsQuery {
            status: None,
            after: None,
            size: MAX_RUNS_PAGE,
        };
        loop {
            let page = self.core.list(caller, &query).await?;
            let last = page.runs.last().map(|r| r.run_id.clone());
            all.extend(page.runs.into_iter().filter(|r| r.target == agent));
            match (last, page.next_page_token.is_empty()) {
                (Some(last), false) => query.after = Some(last),
                _ => break,
            }
        }
        let mut tasks: Vec<(Cursor, Task)> = all
            .iter()
            .filter(|r| request.context_id.is_empty() || r.trace_id == request.context_id)
            .filter(|r| since.is_none_or(|t| updated(r) > t))
            .map(|r| (cursor(r), Task::of_view(r)))
            .filter(|(_, t)| state == lf::TaskState::Unspecified || t.state() == state)
            .collect();
        let total = tasks.len();
        tasks.sort_by(|a, b| b.0.cmp(&a.0));
        let start = match &after {
            Some(after) => tasks.partition_point(|(c, _)| c >= after),
            None => 0,
        };
        let page: Vec<_> = tasks.iter().skip(start).take(size).collect();
        let more = start + page.len() < tasks.len();
        let next_page_token = match page.last() {
            Some((c, _)) if more => format!("v1.{}.{}", c.0, c.1),
            _ => String::new(),
        };
        let artifacts = request.include_artifacts.unwrap_or(false);
        let history = Some(request.history_length.unwrap_or(0));
        Ok(lf::ListTasksResponse {
            tasks: page
                .iter()
                .map(|(_, t)| t.to_task(history, artifacts))
                .collect(),
            next_page_token,
            page_size: size as i32,
            total_size: total as i32,
        })
    }

    /// Starts a run of `agent` for `message` (detached: the task outlives
    /// the call), in the trace `message.contextId` names, if it names one.
    async fn start(
        &self,
        caller: &Caller,
        agent: &str,
        message: &lf::Message,
        text: String,
    ) -> Result<crate::app::Started> {
        let mut caller = caller.clone();
        if !message.context_id.is_empty() {
            caller.trace = trace_of_context(&message.context_id)?;
        }
        let request = pb::RunAgentRequest {
            agent: agent.to_owned(),
            input: text,
            detach: true,
            ..Default::default()
        };
        let request = match AgentRequest::try_from(request) {
            Ok(r) => r,
            Err(e) => return Err(self.core.refused("RunAgent", &caller, e).into()),
        };
        Ok(self.core.start_agent(&caller, request).await?)
    }

    /// Answers what task `message.taskId` asks with `text`; gives what was
    /// answered.
    async fn answer(
        &self,
        caller: &Caller,
        agent: &str,
        message: &lf::Message,
        text: &str,
    ) -> Result<Ask> {
        let id = &message.task_id;
        let view = self.view_of(caller, agent, id).await?;
        if !message.context_id.is_empty() && message.context_id != view.trace_id {
            return Err(A2aError::invalid(
                "message.contextId",
                format!(
                    "task {id} is in context {}, not {}",
                    view.trace_id, message.context_id
                ),
            ));
        }
        if view.status != pb::RunStatus::Running {
            return Err(A2aError::Unsupported(format!(
                "task {id} has ended ({}) and takes no more messages; send a message without taskId to start a new task",
                view.status.as_str_name().trim_start_matches("RUN_STATUS_")
            )));
        }
        let task = self.task_now(caller, id).await?;
        let named = named_ask(message);
        let ask = match named {
            Some(named) => task
                .asks()
                .find(|a| match (a, &named) {
                    (Ask::Approval { approval_id, .. }, Named::Approval(n)) => *approval_id == *n,
                    (Ask::Question { input_id }, Named::Input(n)) => *input_id == *n,
                    _ => false,
                })
                .cloned()
                .ok_or_else(|| {
                    A2aError::invalid(
                        &format!("message.metadata[\"{EXTENSION}\"]"),
                        format!("task {id} is not waiting for that approval or question"),
                    )
                })?,
            None => task.first_ask().cloned().ok_or_else(|| {
                A2aError::Unsupported(format!(
                    "task {id} is working and waits for no input; a message can only answer what a task asks (TASK_STATE_INPUT_REQUIRED)"
                ))
            })?,
        };
        match &ask {
            Ask::Approval { approval_id, .. } => {
                let answer = approval_answer(message, text)?;
                self.core
                    .resolve_approval(caller, id, approval_id.as_str(), answer)
                    .await?;
            }
            Ask::Question { input_id } => {
                self.core
                    .submit_input(caller, id, input_id.as_str(), text.to_owned())
                    .await?;
            }
        }
        Ok(ask)
    }

    /// The run of task `id`, if the caller may see it and it runs `agent`.
    async fn view_of(&self, caller: &Caller, agent: &str, id: &str) -> Result<RunView> {
        if id.is_empty() {
            return Err(A2aError::invalid("id", "must not be empty"));
        }
        match self.core.get(caller, id).await {
            Ok(view) if view.target == agent && view.kind == pb::RunKind::Agent => Ok(view),
            Ok(_) | Err(crate::error::Error::NotFound { .. }) => Err(A2aError::TaskNotFound(
                format!("task {id} not found (for this agent and key)"),
            )),
            Err(e) => Err(e.into()),
        }
    }

    /// Task `id` from its events so far.
    async fn task_now(&self, caller: &Caller, id: &str) -> Result<Task> {
        let view = self.core.get(caller, id).await?;
        let mut task = Task::new(id, &view.trace_id);
        if view.last_seq == 0 {
            return Ok(task);
        }
        let Ok(mut events) = self.core.watch(caller, id, 0, Filter::default()).await else {
            return Ok(Task::of_view(&view));
        };
        while let Some(item) = events.next().await {
            match item {
                Ok(event) => {
                    task.apply(&event);
                    if event.seq >= view.last_seq {
                        break;
                    }
                }
                // The log no longer reaches back (a long finished run in
                // memory): what the run's record says.
                Err(_) => return Ok(Task::of_view(&view)),
            }
        }
        Ok(task)
    }

    /// Task `id` once the run has moved past `answered` and then ended or
    /// waits for input again (`only_end`: once it ended).
    async fn until_after(
        &self,
        caller: &Caller,
        id: &str,
        answered: &Ask,
        only_end: bool,
    ) -> Result<Task> {
        let view = self.core.get(caller, id).await?;
        let mut task = Task::new(id, &view.trace_id);
        let mut events = self.core.watch(caller, id, 0, Filter::default()).await?;
        let mut past = false;
        while let Some(item) = events.next().await {
            task.apply(&item?);
            past = past || !task.asks().any(|a| a == answered);
            if past && (task.ended || (!only_end && task.interrupted_or_ended())) {
                break;
            }
        }
        Ok(task)
    }

    /// Task `id` once its run has ended.
    async fn until_end(&self, caller: &Caller, id: &str) -> Result<Task> {
        let view = self.core.get(caller, id).await?;
        let mut task = Task::new(id, &view.trace_id);
        let mut events = self.core.watch(caller, id, 0, Filter::default()).await?;
        while let Some(item) = events.next().await {
            task.apply(&item?);
            if task.ended {
                break;
            }
        }
        Ok(task)
    }

    /// The task now, then its updates: until it ends or waits for input
    /// (`stop_at_input`), after `answered` has been taken in.
    async fn follow(
        &self,
        caller: &Caller,
        id: &str,
        stop_at_input: bool,
        answered: Option<Ask>,
    ) -> Result<Updates> {
        let view = self.core.get(caller, id).await?;
        let mut task = Task::new(id, &view.trace_id);
        let mut events = self.core.watch(caller, id, 0, Filter::default()).await?;
        // Catch up silently to the present.
        if view.last_seq > 0 {
            while let Some(item) = events.next().await {
                let event = item?;
                task.apply(&event);
                if event.seq >= view.last_seq {
                    break;
                }
            }
        }
        let first = task_update(&task);
        Ok(updates(task, events, first, stop_at_input, answered))
    }
}

/// The first item of a stream: the task as it is.
fn task_update(task: &Task) -> lf::StreamResponse {
    lf::StreamResponse {
        payload: Some(Update::Task(task.to_task(None, true))),
    }
}

/// `first`, then the updates of `events` folded into `task`, until the
/// task ends, or (`stop_at_input`) waits for input once past `answered`.
fn updates(
    task: Task,
    events: crate::run::events::EventStream,
    first: lf::StreamResponse,
    stop_at_input: bool,
    answered: Option<Ask>,
) -> Updates {
    let state = (task, events, answered, false);
    let rest = futures::stream::unfold(Some(state), move |state| async move {
        let (mut task, mut events, answered, done) = state?;
        if done {
            return None;
        }
        loop {
            let event = match events.next().await {
                None => return None,
                Some(Err(e)) => return Some((vec![Err(A2aError::from(e))], None)),
                Some(Ok(event)) => event,
            };
            let out = task.apply(&event);
            let past = answered
                .as_ref()
                .is_none_or(|a| !task.asks().any(|x| x == a));
            let stop = task.ended || (stop_at_input && past && task.interrupted_or_ended());
            // Updates that an answer already resolved are not news.
            if !past && !task.ended {
                continue;
            }
            if out.is_empty() && !stop {
                continue;
            }
            let items = out
                .into_iter()
                .map(|payload| {
                    Ok(lf::StreamResponse {
                        payload: Some(payload),
                    })
                })
                .collect::<Vec<_>>();
            return Some((items, Some((task, events, answered, stop))));
        }
    })
    .flat_map(futures::stream::iter);
    futures::stream::once(async move { Ok(first) })
        .chain(rest)
        .boxed()
}

/// Which approval or question a message names in the extension's
/// metadata.
enum Named {
    Approval(String),
    Input(String),
}

fn named_ask(message: &lf::Message) -> Option<Named> {
    use pbjson_types::value::Kind;
    let meta = message.metadata.as_ref()?.fields.get(EXTENSION)?;
    let Some(Kind::StructValue(s)) = &meta.kind else {
        return None;
    };
    let text = |k: &str| match s.fields.get(k).and_then(|v| v.kind.as_ref()) {
        Some(Kind::StringValue(v)) if !v.is_empty() => Some(v.clone()),
        _ => None,
    };
    text("approvalId")
        .map(Named::Approval)
        .or_else(|| text("inputId").map(Named::Input))
}

/// A checked message and its text: what the run's input is.
fn checked_message(message: Option<lf::Message>) -> Result<(lf::Message, String)> {
    use lf::part::Content;
    let message = message.ok_or_else(|| A2aError::invalid("message", "is required"))?;
    if message.message_id.is_empty() {
        return Err(A2aError::invalid("message.messageId", "is required"));
    }
    match lf::Role::try_from(message.role) {
        Ok(lf::Role::User) => {}
        _ => {
            return Err(A2aError::invalid(
                "message.role",
                "must be ROLE_USER (a caller's message)",
            ));
        }
    }
    if message.parts.is_empty() {
        return Err(A2aError::invalid(
            "message.parts",
            "at least one part is required",
        ));
    }
    let mut texts = Vec::with_capacity(message.parts.len());
    for (i, part) in message.parts.iter().enumerate() {
        match &part.content {
            Some(Content::Text(t)) => texts.push(t.clone()),
            Some(Content::Data(v)) => texts.push(serde_json::to_string(v).unwrap_or_default()),
            Some(Content::Raw(_) | Content::Url(_)) => {
                return Err(A2aError::ContentType {
                    field: format!("message.parts[{i}]"),
                    message: format!(
                        "message.parts[{i}]: files are not supported; Baton agents take text (text/plain) and JSON data (application/json) parts"
                    ),
                });
            }
            None => {
                return Err(A2aError::invalid(
                    &format!("message.parts[{i}]"),
                    "has no content (text, data, raw or url)",
                ));
            }
        }
    }
    let text = texts.join("\n");
    if text.trim().is_empty() {
        return Err(A2aError::invalid("message.parts", "hold no text"));
    }
    Ok((message, text))
}

/// The approval a message gives: `approve`/`deny` (or yes/no) first, a
/// reason after; or a data part `{"approved": bool, "reason": "..."}`.
fn approval_answer(message: &lf::Message, text: &str) -> Result<ApprovalAnswer> {
    use lf::part::Content;
    for part in &message.parts {
        if let Some(Content::Data(v)) = &part.content
            && let Ok(serde_json::Value::Object(o)) = serde_json::to_value(v)
            && let Some(approved) = o.get("approved").and_then(|v| v.as_bool())
        {
            let reason = o.get("reason").and_then(|v| v.as_str()).unwrap_or_default();
            return Ok(ApprovalAnswer {
                approved,
                reason: reason.to_owned(),
            });
        }
    }
    let text = text.trim();
    let (word, rest) = text
        .split_once(|c: char| c.is_whitespace() || c == ':' || c == ',')
        .unwrap_or((text, ""));
    let approved = match word.to_ascii_lowercase().as_str() {
        "approve" | "approved" | "yes" | "y" | "ok" | "allow" => true,
        "deny" | "denied" | "no" | "n" | "reject" => false,
        _ => {
            return Err(A2aError::invalid(
                "message.parts",
                "the task waits for an approval: answer `approve` or `deny` (a reason may follow), or a data part {\"approved\": true|false, \"reason\": \"...\"}",
            ));
        }
    };
    Ok(ApprovalAnswer {
        approved,
        reason: rest.trim().to_owned(),
    })
}

/// The trace a context id names: Baton's context ids are trace ids.
fn trace_of_context(context_id: &str) -> Result<Context> {
    let trace = TraceId::parse(context_id).map_err(|_| {
        A2aError::invalid(
            "message.contextId",
            "is not a context id of this server (they are 32 lowercase hex digits, the trace id of an earlier task); leave it out to start a new context",
        )
    })?;
    let trace_id = opentelemetry::trace::TraceId::from_hex(trace.as_str())
        .map_err(|_| A2aError::invalid("message.contextId", "is not a trace id"))?;
    let span_id = SpanId::from_bytes(rand_span());
    let parent = SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    );
    Ok(Context::new().with_remote_span_context(parent))
}

fn rand_span() -> [u8; 8] {
    let id = uuid::Uuid::new_v4();
    let mut out = [0u8; 8];
    out.copy_from_slice(&id.as_bytes()[..8]);
    out[0] |= 1;
    out
}

/// When a run was last updated (its end, or its start).
fn updated(view: &RunView) -> std::time::SystemTime {
    view.ended_at.unwrap_or(view.started_at)
}

/// Where a task sorts in `ListTasks`: last update (ms), then id.
type Cursor = (i64, String);

fn cursor(view: &RunView) -> Cursor {
    let ms = updated(view)
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    (ms, view.run_id.clone())
}

fn parse_cursor(token: &str) -> Option<Cursor> {
    let rest = token.strip_prefix("v1.")?;
    let (ms, id) = rest.split_once('.')?;
    Some((ms.parse().ok()?, id.to_owned()))
}
