//! The tool interface: a [`Tool`] gets a narrow [`ToolCtx`] (the store,
//! the run's ids, its events) and ends with a [`ToolOutcome`]. Every kind of
//! tool (built-in, remote, MCP) implements it; the toolbox holds them.

use std::sync::{Arc, atomic::AtomicUsize};

use baton_proto::v1::{self as pb, run_event::Payload};
use serde_json::Value;

use baton_store::{ContextStore, Scope};

/// How a tool call ended.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolOutcome {
    /// Success: the output the model sees.
    Ok(String),
    /// Failure: the error the model sees.
    Err(String),
    /// The tool needs a person's answer to go on.
    NeedInput {
        /// What to ask.
        prompt: String,
        /// Suggested answers.
        options: Vec<String>,
        /// Handed back with the answer.
        resume_token: String,
    },
}

/// An answer to a tool's earlier [`ToolOutcome::NeedInput`].
#[derive(Debug, Clone)]
pub struct Resume {
    /// The token the tool gave.
    pub token: String,
    /// The person's answer.
    pub input: String,
}

/// A question a tool asks a person while its call is in progress.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Question {
    /// What to ask.
    pub prompt: String,
    /// Suggested answers.
    pub options: Vec<String>,
    /// The JSON Schema the answer is asked in (an MCP elicitation's
    /// `requestedSchema`), or empty.
    pub schema_json: String,
}

/// Where a running tool's events go: into the run's stream, tagged with
/// the calling agent's context (the runtime implements it).
#[async_trait::async_trait]
pub trait ToolEvents: Send + Sync {
    /// Sends an event of the call.
    async fn emit(&self, payload: Payload);

    /// Asks a person `question` in the call's context and waits for the
    /// answer; the error says why there is none (nobody answered before
    /// the deadline, or nobody can be asked here).
    async fn ask(&self, question: Question) -> Result<String, String> {
        let _ = question;
        Err("nobody can be asked during this tool call".into())
    }
}

/// What a running tool can see and do: the run's store and ids, and its
/// events. Narrow on purpose: a tool cannot reach the run's other parts.
pub struct ToolCtx<'a> {
    /// The context store.
    pub store: &'a Arc<dyn ContextStore>,
    /// The run's tenant and trace: the tool's slots are this trace's, in
    /// that tenant's namespace.
    pub scope: &'a Scope,
    /// The run's id.
    pub run_id: &'a str,
    /// The calling agent's context id.
    pub context_id: &'a str,
    /// That context's depth (root is 0).
    pub depth: u32,
    /// The calling agent.
    pub agent: &'a str,
    /// The call's id.
    pub call_id: &'a str,
    /// The tool's name.
    pub tool: &'a str,
    /// Where the call's events go.
    pub events: &'a dyn ToolEvents,
    /// The run's count of tool calls cancelled while they ran (`sleep`
    /// counts itself; the cancellation tests read it).
    pub cancelled_calls: &'a AtomicUsize,
}

impl ToolCtx<'_> {
    /// Sends an event of the call (waits while the client is slow).
    pub async fn emit(&self, payload: Payload) {
        self.events.emit(payload).await;
    }

    /// Reports progress (percent is clamped to 0–100).
    pub async fn progress(&self, percent: u32, message: impl Into<String>) {
        let payload = Payload::ToolProgress(pb::ToolProgress {
            call_id: self.call_id.to_owned(),
            tool: self.tool.to_owned(),
            percent: percent.min(100),
            message: message.into(),
        });
        self.emit(payload).await;
    }

    /// Asks a person while the call runs (an MCP server's elicitation),
    /// and waits for the answer: an `InputRequested` of the call, answered
    /// like any question; a resumed run takes the answer it had received.
    pub async fn ask(&self, question: Question) -> Result<String, String> {
        self.events.ask(question).await
    }

    /// Offers options.
    pub async fn options(&self, question: impl Into<String>, options: Vec<String>) {
        let payload = Payload::ToolOptions(pb::ToolOptions {
            call_id: self.call_id.to_owned(),
            tool: self.tool.to_owned(),
            question: question.into(),
            options,
        });
        self.emit(payload).await;
    }
}

/// A tool.
#[async_trait::async_trait]
pub trait Tool: Send + Sync {
    /// What the model is told about it: description and argument schema.
    fn describe(&self) -> (String, Value);

    /// Runs one call (again, with `resume`, after it asked for input).
    async fn call(&self, ctx: &ToolCtx<'_>, args: &Value, resume: Option<Resume>) -> ToolOutcome;

    /// Whether a call reaches outside Baton (a tool server, an MCP server):
    /// a replay answers such a call from the recording. Baton's own tools
    /// (the run's context store, `sleep`, `ask_user`) run again.
    fn external(&self) -> bool {
        true
    }
}
