//! The A2A operations, whatever the binding: each takes the caller and
//! the agent the call is for, calls the application core, and answers in
//! `lf.a2a.v1` messages. A task is a run of that agent (task id = run id,
//! context id = the run's trace id); every run an A2A caller starts is
//! detached — A2A tasks outlive the call that made them — so a dropped
//! stream or a non-blocking send leaves it running.

use std::time::Duration;

use baton_proto::{
    a2a::v1::{self as lf, stream_response::Payload as Update},
    v1 as pb,
};
use futures::{StreamExt as _, stream::BoxStream};

use super::{
    error::A2aError,
    message::{Named, approval_answer, checked_message, context_trace, named_ask, trace_parent},
    names::{CONTEXT_LABEL, EXTENSION, IO_LABEL},
    task::{Ask, Task},
};
use crate::{
    app::{Caller, Orchestrator},
    catalog::A2aIo,
    request::AgentRequest,
    run::{events::Filter, view::RunView},
};

/// An agent served over A2A.
#[derive(Debug, Clone)]
pub struct Exposed {
    /// Its name in the agents file.
    pub name: String,
    /// What it does.
    pub description: String,
    /// The tools it may call (its card's skills).
    pub tools: Vec<String>,
    /// What it reads and writes.
    pub io: crate::catalog::A2aIo,
}

/// A stream of A2A updates; an error ends it.
pub type Updates = BoxStream<'static, std::result::Result<lf::StreamResponse, A2aError>>;

/// How long a `CancelTask` waits for the run's end before answering.
const CANCEL_WAIT: Duration = Duration::from_secs(10);

/// The A2A operations over the core.
#[derive(Clone)]
pub struct Service {
    pub(super) core: Orchestrator,
    /// Tasks' push notification configs (see `super::push`).
    pub(super) push: std::sync::Arc<super::push::Configs>,
}

type Result<T> = std::result::Result<T, A2aError>;

impl Service {
    /// The operations over `core`.
    pub fn new(core: Orchestrator) -> Self {
        // Push configs are webhooks whose bodies are the task's updates.
        core.webhooks().register_shape(
            "a2a",
            std::sync::Arc::new(|run: &crate::webhook::RunInfo| {
                let shape: std::sync::Arc<dyn crate::webhook::Shape> =
                    std::sync::Arc::new(super::push::A2aShape::new(run));
                shape
            }),
        );
        let push = std::sync::Arc::new(super::push::Configs::new(
            core.durable().map(|d| d.shared().clone()),
        ));
        Self { core, push }
    }

    /// `SendMessage`: a new task, or the answer to what a task asks.
    pub async fn send(
        &self,
        caller: &Caller,
        agent: &Exposed,
        request: lf::SendMessageRequest,
    ) -> Result<lf::SendMessageResponse> {
        let config = request.configuration.clone().unwrap_or_default();
        let history_length = config.history_length;
        let push = config.task_push_notification_config.clone();
        let (message, text) = checked_message(request.message)?;
        let task = if message.task_id.is_empty() {
            let started = self.start(caller, agent, &message, text, push).await?;
            let mut task = Task::new(&started.run_id, &started.trace_id);
            task.set_context(&message.context_id);
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
            if let Some(c) = push {
                self.create_push(caller, &agent.name, &message.task_id, c)
                    .await?;
            }
            let answered = self.answer(caller, agent, &message, &text).await?;
            if config.return_immediately {
                self.task_now(caller, &message.task_id).await?
            } else {
                self.until_after(caller, &message.task_id, &answered, false)
                    .await?
            }
        };
        // An agent that answers with a message (A2A messages mode) is
        // answered with that message.
        let payload = match task.reply() {
            Some(reply) => lf::send_message_response::Payload::Message(reply.clone()),
            None => lf::send_message_response::Payload::Task(task.to_task(history_length, true)),
        };
        Ok(lf::SendMessageResponse {
            payload: Some(payload),
        })
    }

    /// `SendStreamingMessage`: the task, then its updates until it ends or
    /// waits for input.
    pub async fn send_streaming(
        &self,
        caller: &Caller,
        agent: &Exposed,
        request: lf::SendMessageRequest,
    ) -> Result<Updates> {
        let push = request
            .configuration
            .and_then(|c| c.task_push_notification_config);
        let (message, text) = checked_message(request.message)?;
        if message.task_id.is_empty() {
            let started = self.start(caller, agent, &message, text, push).await?;
            let mut task = Task::new(&started.run_id, &started.trace_id);
            task.set_context(&message.context_id);
            task.push_user_message(message);
            let first = task_update(&task);
            Ok(updates(task, started.events, first, true, None))
        } else {
            if let Some(c) = push {
                self.create_push(caller, &agent.name, &message.task_id, c)
                    .await?;
            }
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

    /// Starts a run of `agent` for `message` (detached: the task outlives
    /// the call), in the trace `message.contextId` names, if it names one.
    async fn start(
        &self,
        caller: &Caller,
        agent: &Exposed,
        message: &lf::Message,
        text: String,
        push: Option<lf::TaskPushNotificationConfig>,
    ) -> Result<crate::app::Started> {
        // A push config with the message: a webhook of the run from its
        // first event (its task id is the run's, known once it starts).
        let push = match push {
            Some(mut c) => {
                c.task_id.clear();
                Some(
                    self.checked_config("", c)
                        .map_err(|e| e.within("configuration.taskPushNotificationConfig"))?,
                )
            }
            None => None,
        };
        let mut caller = caller.clone();
        let mut labels = std::collections::BTreeMap::new();
        // A context is a conversation (A2A §3.4.1: the same contextId is
        // the same session): its id is the context's trace id, so a
        // follow-up in the context continues it; a message in no context
        // starts one, whose id the task gives back as its contextId.
        let (trace, open) = if message.context_id.is_empty() {
            (
                baton_common::ids::TraceId::random().as_str().to_owned(),
                crate::conversation::store::Open::New,
            )
        } else {
            let trace = context_trace(&caller.tenant, &message.context_id);
            if trace != message.context_id {
                labels.insert(CONTEXT_LABEL.to_owned(), message.context_id.clone());
            }
            (trace, crate::conversation::store::Open::Either)
        };
        caller.trace = trace_parent(&trace);
        let input = match agent.io {
            A2aIo::Text => text,
            A2aIo::Message => {
                labels.insert(IO_LABEL.to_owned(), "message".to_owned());
                serde_json::to_string(message).unwrap_or_default()
            }
        };
        let request = pb::RunAgentRequest {
            agent: agent.name.clone(),
            input,
            detach: true,
            webhooks: push.iter().map(super::push::as_webhook).collect(),
            ..Default::default()
        };
        let mut request = match AgentRequest::try_from(request) {
            Ok(r) => r,
            Err(e) => return Err(self.core.refused("RunAgent", &caller, e).into()),
        };
        request.labels = labels;
        request.conversation = Some(crate::request::ConversationAsk {
            id: trace,
            open,
            busy: crate::conversation::Busy::Wait,
            ttl: None,
        });
        let started = self.core.start_agent(&caller, request).await?;
        if let Some(mut c) = push {
            c.task_id.clone_from(&started.run_id);
            // Kept for Get and List (it is delivered to already).
            if let Err(e) = self.push.put(&caller.tenant, &c).await {
                tracing::warn!(task_id = %started.run_id, error = ?e, "a task's push config could not be kept for GetTaskPushNotificationConfig");
            }
        }
        Ok(started)
    }

    /// Answers what task `message.taskId` asks with `text`; gives what was
    /// answered.
    async fn answer(
        &self,
        caller: &Caller,
        agent: &Exposed,
        message: &lf::Message,
        text: &str,
    ) -> Result<Ask> {
        let id = &message.task_id;
        let view = self.view_of(caller, &agent.name, id).await?;
        if !message.context_id.is_empty()
            && context_trace(&caller.tenant, &message.context_id) != view.trace_id
        {
            return Err(A2aError::invalid(
                "message.contextId",
                format!(
                    "task {id} is in another context than {}",
                    message.context_id
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
                let input = match agent.io {
                    A2aIo::Text => text.to_owned(),
                    A2aIo::Message => serde_json::to_string(message).unwrap_or_default(),
                };
                self.core
                    .submit_input(caller, id, input_id.as_str(), input)
                    .await?;
            }
        }
        Ok(ask)
    }

    /// The run of task `id`, if the caller may see it and it runs `agent`.
    pub(super) async fn view_of(&self, caller: &Caller, agent: &str, id: &str) -> Result<RunView> {
        if id.is_empty() {
            return Err(A2aError::invalid("id", "must not be empty"));
        }
        // Task ids are run ids (UUIDs): anything else names no task.
        if uuid::Uuid::try_parse(id).is_err() {
            return Err(A2aError::TaskNotFound(format!(
                "task {id} not found (for this agent and key)"
            )));
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
        // The events are replayed from the start: the answered ask is only
        // behind us once it has been asked and then taken off the list.
        let (mut asked, mut past) = (false, false);
        while let Some(item) = events.next().await {
            task.apply(&item?);
            let open = task.asks().any(|a| a == answered);
            asked = asked || open;
            past = past || (asked && !open);
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
