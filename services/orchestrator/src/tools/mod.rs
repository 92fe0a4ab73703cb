//! Tools agents call. A tool gets a [`ToolCtx`] to report progress and
//! options while it runs, and ends with a [`ToolOutcome`]: a result, an error
//! the model sees, or a request for a person's input with a resume token
//! (the runtime asks, then calls the tool again with the token and answer).
//!
//! Built-ins ([`builtin`]): `read_context`, `write_context`, `list_context`
//! over the run's trace in the context store, `ask_user` (asks a person),
//! and `sleep` (waits with progress; it records being cancelled, which the
//! cancellation tests rely on). Remote tools ([`remote`]) run on `ToolHost`
//! servers in any language. Agents and groups are tools too; the runtime runs
//! those in child contexts.

pub mod builtin;
pub mod names;
pub mod remote;

use std::{collections::HashMap, sync::Arc};

use baton_proto::v1::{self as pb, run_event::Payload};
use serde_json::Value;

use crate::runtime::{RuntimeConfig, events::ContextInfo};

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

/// What a running tool can see and do.
pub struct ToolCtx<'a> {
    /// The run.
    pub rt: &'a Arc<RuntimeConfig>,
    /// The calling agent's context.
    pub ctx: &'a Arc<ContextInfo>,
    /// The calling agent.
    pub agent: &'a Arc<str>,
    /// The call's id.
    pub call_id: &'a str,
    /// The tool's name.
    pub tool: &'a str,
}

impl ToolCtx<'_> {
    /// Reports progress (percent is clamped to 0–100).
    pub async fn progress(&self, percent: u32, message: impl Into<String>) {
        let payload = Payload::ToolProgress(pb::ToolProgress {
            call_id: self.call_id.to_owned(),
            tool: self.tool.to_owned(),
            percent: percent.min(100),
            message: message.into(),
        });
        self.rt.emit(self.ctx, self.agent, payload).await;
    }

    /// Offers options.
    pub async fn options(&self, question: impl Into<String>, options: Vec<String>) {
        let payload = Payload::ToolOptions(pb::ToolOptions {
            call_id: self.call_id.to_owned(),
            tool: self.tool.to_owned(),
            question: question.into(),
            options,
        });
        self.rt.emit(self.ctx, self.agent, payload).await;
    }
}

/// A tool.
#[async_trait::async_trait]
pub trait Tool: Send + Sync {
    /// What the model is told about it: description and argument schema.
    fn describe(&self) -> (String, Value);

    /// Runs one call (again, with `resume`, after it asked for input).
    async fn call(&self, ctx: &ToolCtx<'_>, args: &Value, resume: Option<Resume>) -> ToolOutcome;
}

/// Every tool the orchestrator can run by name: the built-ins and the tools
/// of the configured tool servers.
#[derive(Default)]
pub struct Toolbox {
    tools: HashMap<String, Arc<dyn Tool>>,
    servers: Vec<Arc<remote::ToolServer>>,
}

impl Toolbox {
    /// The built-ins plus the remote tools the catalog declares.
    pub fn new(catalog: &crate::catalog::Catalog) -> Result<Self, String> {
        let mut tools: HashMap<String, Arc<dyn Tool>> = builtin::all()
            .into_iter()
            .map(|(n, t)| (n.to_owned(), t))
            .collect();
        let mut servers = Vec::new();
        for (name, spec) in &catalog.tool_servers {
            let server = Arc::new(remote::ToolServer::new(name, spec)?);
            for tool in &spec.tools {
                tools.insert(
                    tool.clone(),
                    Arc::new(remote::RemoteTool::new(server.clone(), tool)),
                );
            }
            servers.push(server);
        }
        Ok(Self { tools, servers })
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// The configured tool servers.
    pub fn servers(&self) -> &[Arc<remote::ToolServer>] {
        &self.servers
    }
}
