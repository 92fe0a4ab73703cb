//! The HTTP face's routes, declared once: the router (`super::router`)
//! and the OpenAPI document (`super::openapi`) are both built from
//! [`ROUTES`], so they cannot drift; each route names the `baton.v1` RPC it
//! is and the messages it reads and answers, so it cannot drift from the
//! gRPC API either.

/// What a route does: the `baton.v1.Orchestrator` RPC it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rpc {
    /// `RunAgent`: attached (SSE) or detached.
    RunAgent,
    /// `RunPipeline`: attached (SSE) or detached.
    RunPipeline,
    /// `ForkRun`: attached (SSE) or detached.
    ForkRun,
    /// `ReplayRun`: attached (SSE) or detached.
    ReplayRun,
    /// `ListRuns`.
    ListRuns,
    /// `GetRun`.
    GetRun,
    /// `WatchRun` (SSE).
    WatchRun,
    /// `CancelRun`.
    CancelRun,
    /// `ResolveApproval`.
    ResolveApproval,
    /// `SubmitInput`.
    SubmitInput,
    /// `ListAgents`.
    ListAgents,
    /// `GetConversation`.
    GetConversation,
    /// `ListConversations`.
    ListConversations,
    /// `UpdateConversation`.
    UpdateConversation,
    /// `DeleteConversation`.
    DeleteConversation,
    /// `RunExperiment`: attached (SSE) or detached.
    RunExperiment,
    /// `GetExperiment`.
    GetExperiment,
    /// `CancelExperiment`.
    CancelExperiment,
    /// `ListExperiments`.
    ListExperiments,
    /// `CompareExperiments`.
    CompareExperiments,
    /// `SaveCase`.
    SaveCase,
    /// `CreateWebhook`.
    CreateWebhook,
    /// `ListWebhooks`.
    ListWebhooks,
    /// `GetWebhook`.
    GetWebhook,
    /// `DeleteWebhook`.
    DeleteWebhook,
    /// `RotateWebhookSecret`.
    RotateWebhookSecret,
    /// `ListDeadLetters`.
    ListDeadLetters,
    /// `RedeliverDeadLetter`.
    RedeliverDeadLetter,
    /// `CreateSchedule`.
    CreateSchedule,
    /// `ListSchedules`.
    ListSchedules,
    /// `GetSchedule`.
    GetSchedule,
    /// `PauseSchedule`.
    PauseSchedule,
    /// `ResumeSchedule`.
    ResumeSchedule,
    /// `DeleteSchedule`.
    DeleteSchedule,
    /// The context store's `List` of a trace's slots (metadata only).
    ListSlots,
    /// The context store's `Watch` of a trace's slots (SSE).
    WatchSlots,
}

/// One route of the HTTP face.
#[derive(Debug, Clone, Copy)]
pub struct Route {
    /// The HTTP method.
    pub method: &'static str,
    /// The path, with `{name}` parameters (OpenAPI's form).
    pub path: &'static str,
    /// The RPC it is.
    pub rpc: Rpc,
    /// The message its JSON body is, if it has one (full `baton.v1` name).
    pub body: Option<&'static str>,
    /// The message it answers with (for a stream: each event's).
    pub answer: &'static str,
    /// Whether it can answer with an SSE stream.
    pub stream: bool,
    /// What it does.
    pub summary: &'static str,
}

/// Every route of the HTTP face.
pub const ROUTES: &[Route] = &[
    Route {
        method: "POST",
        path: "/v1/webhooks",
        rpc: Rpc::CreateWebhook,
        body: Some("baton.v1.CreateWebhookRequest"),
        answer: "baton.v1.CreateWebhookResponse",
        stream: false,
        summary: "Subscribe a URL to what happens to the caller's tenant's runs (`url`, `events`, `description`, optional `secret`); the answer holds its signing secret, shown this once.",
    },
    Route {
        method: "GET",
        path: "/v1/webhooks",
        rpc: Rpc::ListWebhooks,
        body: None,
        answer: "baton.v1.ListWebhooksResponse",
        stream: false,
        summary: "The caller's tenant's webhooks (without their secrets), the config's first.",
    },
    Route {
        method: "GET",
        path: "/v1/webhooks/{webhook_id}",
        rpc: Rpc::GetWebhook,
        body: None,
        answer: "baton.v1.Webhook",
        stream: false,
        summary: "One of the caller's tenant's webhooks (without its secret).",
    },
    Route {
        method: "DELETE",
        path: "/v1/webhooks/{webhook_id}",
        rpc: Rpc::DeleteWebhook,
        body: None,
        answer: "baton.v1.DeleteWebhookResponse",
        stream: false,
        summary: "Delete a webhook: nothing more is delivered to it.",
    },
    Route {
        method: "POST",
        path: "/v1/webhooks/{webhook_id}:rotateSecret",
        rpc: Rpc::RotateWebhookSecret,
        body: Some("baton.v1.RotateWebhookSecretRequest"),
        answer: "baton.v1.RotateWebhookSecretResponse",
        stream: false,
        summary: "Give a webhook a new secret; the previous one signs too for `previousValidFor` (default `webhooks.rotation_overlap`).",
    },
    Route {
        method: "GET",
        path: "/v1/dead-letters",
        rpc: Rpc::ListDeadLetters,
        body: None,
        answer: "baton.v1.ListDeadLettersResponse",
        stream: false,
        summary: "Deliveries of the caller's tenant that kept failing for `webhooks.retry_for`, newest first (`page_size`).",
    },
    Route {
        method: "POST",
        path: "/v1/dead-letters/{delivery_id}:redeliver",
        rpc: Rpc::RedeliverDeadLetter,
        body: None,
        answer: "baton.v1.RedeliverDeadLetterResponse",
        stream: false,
        summary: "Deliver a dead letter again, with the same `webhook-id`, tried from the first try's schedule.",
    },
    Route {
        method: "POST",
        path: "/v1/schedules",
        rpc: Rpc::CreateSchedule,
        body: Some("baton.v1.CreateScheduleRequest"),
        answer: "baton.v1.Schedule",
        stream: false,
        summary: "Make a schedule: a detached run (`agent`: a RunAgent request, or `pipeline`: a RunPipeline request) at each tick of `cron` in `timeZone`, or every `interval`, until `endAt`; `overlap` and `missed` say what a tick does while the previous run runs and after downtime.",
    },
    Route {
        method: "GET",
        path: "/v1/schedules",
        rpc: Rpc::ListSchedules,
        body: None,
        answer: "baton.v1.ListSchedulesResponse",
        stream: false,
        summary: "The caller's tenant's schedules, the agents file's first, each with its next fire times and recent ticks.",
    },
    Route {
        method: "GET",
        path: "/v1/schedules/{schedule_id}",
        rpc: Rpc::GetSchedule,
        body: None,
        answer: "baton.v1.Schedule",
        stream: false,
        summary: "One of the caller's tenant's schedules, with its next fire times and recent ticks (and their runs' status).",
    },
    Route {
        method: "POST",
        path: "/v1/schedules/{schedule_id}:pause",
        rpc: Rpc::PauseSchedule,
        body: None,
        answer: "baton.v1.Schedule",
        stream: false,
        summary: "Pause a schedule: nothing fires until it is resumed.",
    },
    Route {
        method: "POST",
        path: "/v1/schedules/{schedule_id}:resume",
        rpc: Rpc::ResumeSchedule,
        body: None,
        answer: "baton.v1.Schedule",
        stream: false,
        summary: "Resume a schedule: it fires from its next tick (the ticks while it was paused are not fired).",
    },
    Route {
        method: "DELETE",
        path: "/v1/schedules/{schedule_id}",
        rpc: Rpc::DeleteSchedule,
        body: None,
        answer: "baton.v1.DeleteScheduleResponse",
        stream: false,
        summary: "Delete a schedule; the runs it started go on.",
    },
    Route {
        method: "POST",
        path: "/v1/experiments",
        rpc: Rpc::RunExperiment,
        body: Some("baton.v1.RunExperimentRequest"),
        answer: "baton.v1.ExperimentEvent",
        stream: true,
        summary: "Run a dataset's cases as an experiment (`dataset` is the file's text, `datasetName` its name). With `Accept: text/event-stream` the answer is its events (`started`, `caseScored` a case, `ended`; the experiment is cancelled when the caller goes, keeping the cases that finished); otherwise it runs on and the answer is `{experimentId, name}`: follow it with `GET /v1/experiments/{experiment}`.",
    },
    Route {
        method: "GET",
        path: "/v1/experiments",
        rpc: Rpc::ListExperiments,
        body: None,
        answer: "baton.v1.ListExperimentsResponse",
        stream: false,
        summary: "The caller's tenant's experiments, newest first, without their cases (`page_size`, `page_token`).",
    },
    Route {
        method: "GET",
        path: "/v1/experiments/{experiment}",
        rpc: Rpc::GetExperiment,
        body: None,
        answer: "baton.v1.Experiment",
        stream: false,
        summary: "An experiment (by id or name) with its cases, scores and reasons.",
    },
    Route {
        method: "POST",
        path: "/v1/experiments/{experiment}:cancel",
        rpc: Rpc::CancelExperiment,
        body: None,
        answer: "baton.v1.Experiment",
        stream: false,
        summary: "Stop a running experiment (by id or name) on whichever replica runs it: its runs still going are cancelled, the cases that finished are kept; the answer is its record once CANCELLED (as it stands after 10 s when its replica is slow to say so).",
    },
    Route {
        method: "GET",
        path: "/v1/experiments/{experiment}:compare",
        rpc: Rpc::CompareExperiments,
        body: None,
        answer: "baton.v1.ExperimentComparison",
        stream: false,
        summary: "Two experiments compared case by case (`candidate`, and `alpha`, in the query): regressions beyond noise first.",
    },
    Route {
        method: "POST",
        path: "/v1/runs/{run_id}:saveCase",
        rpc: Rpc::SaveCase,
        body: Some("baton.v1.SaveCaseRequest"),
        answer: "baton.v1.SaveCaseResponse",
        stream: false,
        summary: "A dataset case (one JSON Lines line) made of an ended run: its input, answer, tool calls and recording (body `{inlineRecording}`, optional).",
    },
    Route {
        method: "POST",
        path: "/v1/runs",
        rpc: Rpc::RunAgent,
        body: Some("baton.v1.RunAgentRequest"),
        answer: "baton.v1.RunEvent",
        stream: true,
        summary: "Start an agent run. With `Accept: text/event-stream` the answer is its event stream (the run is cancelled when the caller goes, unless `detach`); otherwise it starts detached and the answer is `{runId, traceId}`.",
    },
    Route {
        method: "POST",
        path: "/v1/pipelines:run",
        rpc: Rpc::RunPipeline,
        body: Some("baton.v1.RunPipelineRequest"),
        answer: "baton.v1.RunEvent",
        stream: true,
        summary: "Start a pipeline run; answers as `POST /v1/runs` does.",
    },
    Route {
        method: "GET",
        path: "/v1/runs",
        rpc: Rpc::ListRuns,
        body: None,
        answer: "baton.v1.ListRunsResponse",
        stream: false,
        summary: "The caller's tenant's runs, newest first, a page at a time (`status`, `waiting`, `page_size`, `page_token`).",
    },
    Route {
        method: "GET",
        path: "/v1/runs/{run_id}",
        rpc: Rpc::GetRun,
        body: None,
        answer: "baton.v1.GetRunResponse",
        stream: false,
        summary: "A run: status, output, usage, error, last seq.",
    },
    Route {
        method: "GET",
        path: "/v1/runs/{run_id}/events",
        rpc: Rpc::WatchRun,
        body: None,
        answer: "baton.v1.RunEvent",
        stream: true,
        summary: "A run's events as Server-Sent Events from `after_seq` (or `Last-Event-ID`), filtered by `max_depth`, `context_prefixes` and `kinds`, until its terminal event.",
    },
    Route {
        method: "POST",
        path: "/v1/runs/{run_id}:cancel",
        rpc: Rpc::CancelRun,
        body: Some("baton.v1.CancelRunRequest"),
        answer: "baton.v1.CancelRunResponse",
        stream: false,
        summary: "Cancel a run and everything under it (body: `{reason}`, optional).",
    },
    Route {
        method: "POST",
        path: "/v1/runs/{run_id}:fork",
        rpc: Rpc::ForkRun,
        body: Some("baton.v1.ForkRunRequest"),
        answer: "baton.v1.RunEvent",
        stream: true,
        summary: "Fork a run at `atSeq`, optionally with an `edit` of that point (the run id is the path's). Everything before the point is replayed from the run's recording, nothing is called again; the fork goes live from there. Answers as `POST /v1/runs` does.",
    },
    Route {
        method: "POST",
        path: "/v1/runs/{run_id}:replay",
        rpc: Rpc::ReplayRun,
        body: Some("baton.v1.ReplayRunRequest"),
        answer: "baton.v1.RunEvent",
        stream: true,
        summary: "Replay an ended run against today's agents (the run id is the path's; body `{strict}`, optional). Model calls and calls of tools outside Baton whose request matches the recording are answered from it; at the first that differs a `diverged` event says where and what, then a strict replay fails and the default goes live. The terminal event's `replay` counts the calls that matched. Answers as `POST /v1/runs` does.",
    },
    Route {
        method: "POST",
        path: "/v1/runs/{run_id}/approvals/{approval_id}",
        rpc: Rpc::ResolveApproval,
        body: Some("baton.v1.ResolveApprovalRequest"),
        answer: "baton.v1.ResolveApprovalResponse",
        stream: false,
        summary: "Answer an approval: `{approved, reason}`.",
    },
    Route {
        method: "POST",
        path: "/v1/runs/{run_id}/inputs/{input_id}",
        rpc: Rpc::SubmitInput,
        body: Some("baton.v1.SubmitInputRequest"),
        answer: "baton.v1.SubmitInputResponse",
        stream: false,
        summary: "Answer a request for input: `{text}` (or `{input}`, the gRPC field's name).",
    },
    Route {
        method: "GET",
        path: "/v1/agents",
        rpc: Rpc::ListAgents,
        body: None,
        answer: "baton.v1.ListAgentsResponse",
        stream: false,
        summary: "The agents and groups runs can name.",
    },
    Route {
        method: "GET",
        path: "/v1/conversations",
        rpc: Rpc::ListConversations,
        body: None,
        answer: "baton.v1.ListConversationsResponse",
        stream: false,
        summary: "The caller's tenant's conversations, most recently used first, a page at a time (`page_size`, `page_token`), without their messages.",
    },
    Route {
        method: "GET",
        path: "/v1/conversations/{conversation_id}",
        rpc: Rpc::GetConversation,
        body: None,
        answer: "baton.v1.Conversation",
        stream: false,
        summary: "A conversation: a page of its messages (`page_size`, `page_token`, or `last` for the newest), and its runs. A run continues it with `POST /v1/runs` and `conversationId`.",
    },
    Route {
        method: "PATCH",
        path: "/v1/conversations/{conversation_id}",
        rpc: Rpc::UpdateConversation,
        body: Some("baton.v1.UpdateConversationRequest"),
        answer: "baton.v1.Conversation",
        stream: false,
        summary: "Set a conversation's `title` and `labels` (an empty value removes a label).",
    },
    Route {
        method: "DELETE",
        path: "/v1/conversations/{conversation_id}",
        rpc: Rpc::DeleteConversation,
        body: None,
        answer: "baton.v1.DeleteConversationResponse",
        stream: false,
        summary: "Delete a conversation: its messages and its runs' histories (a run of it still going is cancelled first).",
    },
    Route {
        method: "GET",
        path: "/v1/traces/{trace_id}/slots",
        rpc: Rpc::ListSlots,
        body: None,
        answer: "baton.v1.ListResponse",
        stream: false,
        summary: "The slots of a trace in the caller's tenant (metadata, not values), a page at a time (`page_size`, `page_token`).",
    },
    Route {
        method: "GET",
        path: "/v1/traces/{trace_id}/slots:watch",
        rpc: Rpc::WatchSlots,
        body: None,
        answer: "baton.v1.WatchResponse",
        stream: true,
        summary: "The changes of a trace's slots from now on, as Server-Sent Events (`event: change`).",
    },
];
