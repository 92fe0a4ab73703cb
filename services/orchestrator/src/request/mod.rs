//! What a caller asks the core for, in domain values, whatever the face it
//! came through; and its validation against this server ([`validate`]).
//!
//! A face turns its wire form into these values (`crate::wire`: field by
//! field, every malformed field `INVALID_ARGUMENT` naming it); the core then
//! checks them against the catalog and the server's limits once and hands
//! the run a resolved target, so nothing that runs later can find the
//! request bad. Field names in errors are the proto's (`limits.max_depth`,
//! `pipeline.steps[3].agent`), the same on every face.

pub mod validate;

use std::time::Duration;

use baton_proto::v1 as pb;

use crate::{catalog::settings::Settings, model::ChatMessage, run::events::Filter};

/// A request for an agent run (RunAgent).
pub struct AgentRequest {
    /// The agent or group to run.
    pub agent: String,
    /// Earlier messages of the conversation.
    pub history: Vec<ChatMessage>,
    /// The new user input.
    pub input: String,
    /// What agent and pipeline runs share.
    pub options: RequestOptions,
    /// The request as the run store keeps it (see [`StoredRequest`]).
    pub stored: StoredRequest,
    /// What the face tags the run with, in its `RunStarted` (the A2A face's
    /// context id); none through baton.v1.
    pub labels: std::collections::BTreeMap<String, String>,
    /// The conversation the run continues or starts.
    pub conversation: Option<ConversationAsk>,
}

/// A run asked for in a conversation.
#[derive(Debug, Clone)]
pub struct ConversationAsk {
    /// Its id; empty: a new one Baton makes.
    pub id: String,
    /// Whether the run may start it.
    pub open: crate::conversation::store::Open,
    /// Whether the run waits for a running one.
    pub busy: crate::conversation::Busy,
    /// How long it is kept after this use (none: the server's).
    pub ttl: Option<Duration>,
}

/// A fork asked for (ForkRun), its fields as the request names them.
pub struct ForkRequest {
    /// The run to fork.
    pub run_id: String,
    /// The fork point.
    pub at_seq: u64,
    /// What replaces the point's outcome.
    pub edit: Option<baton_proto::v1::fork_edit::Edit>,
    /// Whether the fork outlives the caller's stream.
    pub detach: bool,
    /// Which events the caller's stream carries.
    pub filter: crate::run::events::Filter,
}

/// A replay asked for (ReplayRun).
pub struct ReplayRequest {
    /// The run to replay.
    pub run_id: String,
    /// Whether the first divergence fails the replay.
    pub strict: bool,
    /// Whether the replay outlives the caller's stream.
    pub detach: bool,
    /// Which events the caller's stream carries.
    pub filter: crate::run::events::Filter,
}

/// A request for a pipeline run (RunPipeline).
pub struct PipelineRequest {
    /// The pipeline, in its `baton.v1.PipelineSpec` form: the pipeline
    /// module validates that form into a plan (the pipeline file format
    /// reads into the same message), so it is not converted twice.
    pub pipeline: Option<pb::PipelineSpec>,
    /// Slots written before the first step, sorted by key.
    pub initial_slots: Vec<(String, String)>,
    /// Whether the slots the run wrote outlive it.
    pub keep_context: bool,
    /// What agent and pipeline runs share.
    pub options: RequestOptions,
    /// The request as the run store keeps it (see [`StoredRequest`]).
    pub stored: StoredRequest,
}

/// The options agent and pipeline runs share, as asked (checked against
/// the server's limits by [`validate`]).
pub struct RequestOptions {
    /// The run context, as JSON text (empty: `{}`).
    pub run_context_json: String,
    /// The model of agents that name none (empty: the server's).
    pub default_model: String,
    /// Limits asked for (none: the server's defaults).
    pub limits: RequestedLimits,
    /// How approvals are answered.
    pub approval_mode: pb::ApprovalMode,
    /// Which events the caller's stream carries.
    pub filter: Filter,
    /// Whether the run outlives its caller's stream.
    pub detach: bool,
    /// Generation settings over every agent's own.
    pub settings: Settings,
    /// The run's own webhooks, as asked (checked by `crate::webhook`).
    pub webhooks: Vec<pb::RunWebhook>,
}

/// Limits a request asks for; `None` (or 0 turns): the server's default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestedLimits {
    /// Deepest context.
    pub max_depth: Option<u32>,
    /// Most model turns per context (0: the default).
    pub max_turns: u32,
    /// Deadline of the whole run.
    pub run_timeout: Option<Duration>,
    /// Deadline of one tool call.
    pub tool_timeout: Option<Duration>,
    /// Deadline of one model call.
    pub model_timeout: Option<Duration>,
    /// How long people are waited for.
    pub approval_timeout: Option<Duration>,
    /// What the run may spend (unset bounds: none).
    pub budget: crate::model::call::budget::Limit,
}

/// A run's request as the run store keeps it, for the replica that resumes
/// the run: the encoded `baton.v1` request. Its wire form on purpose: it is
/// read back by any replica of any later version, and the wire form is the
/// one the API promises to keep compatible. Empty for requests that are
/// not kept.
#[derive(Debug, Clone, Default)]
pub struct StoredRequest(pub Vec<u8>);

/// A page of runs asked for (ListRuns).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunsQuery {
    /// Only runs in this status (none: any).
    pub status: Option<pb::RunStatus>,
    /// Only runs waiting for a person.
    pub waiting: bool,
    /// Only runs a live scorer failed.
    pub failing_scores: bool,
    /// The run after which the page starts (from a page token).
    pub after: Option<String>,
    /// Most runs in the page.
    pub size: usize,
}

/// Most runs in a ListRuns page when the request names no size.
pub const DEFAULT_RUNS_PAGE: usize = 100;
/// Most runs in a ListRuns page.
pub const MAX_RUNS_PAGE: usize = 1000;
